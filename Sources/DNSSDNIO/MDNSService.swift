// The public face of discovery: advertise and browse DNS-SD services over multicast DNS.
//
// Design: `MDNSService` owns one pure `MDNSEngine` (module DNSSD) and the sockets around it (`MDNSSockets`),
// all confined to one NIO event loop. Every public call hops onto that loop; the engine's actions (packets,
// timers, events) are carried out there. One responder per process serves every registration
// (RFC 6762 §15: one responder per host is the model; we share port 5353 with avahi-daemon via
// SO_REUSEADDR/SO_REUSEPORT).
//
// The responder follows the machine's network (MDNSSockets.swift): interfaces and addresses that appear,
// disappear or change are noticed through netlink; records are announced again on an interface gained, the
// addresses we lost are withdrawn (TTL 0), and services learnt through an interface that went away are
// reported lost. A send that fails is reported once through `log`, never closes anything, and the interfaces
// are enumerated again. Starting with no usable interface is not an error: the service waits for one.
//
// Threading contract: every method may be called from any thread. Event callbacks run on the service's
// event-loop thread, one at a time, in order; they must not block. Sockets open lazily on the first
// `register` or `browse`; if port 5353 cannot be opened the handle's callback gets `.failed(.socketUnavailable)`.
import DNSSD
import NIOCore

/// Validation of Bonjour service types; see `DNSSD.BonjourServiceType`.
public typealias BonjourServiceType = DNSSD.BonjourServiceType

/// Errors reported through `RegistrationEvent.failed` and `BrowseEvent.failed`.
public enum MDNSError: Error, Equatable, Sendable, CustomStringConvertible {
    /// UDP port 5353 could not be bound in any family. `reason` says why.
    case socketUnavailable(reason: String)
    /// The service type is not `_name._tcp` / `_name._udp` with a valid name.
    case invalidServiceType(String)
    /// The instance name is empty or longer than 63 bytes of UTF-8 (RFC 6763 §4.1.1).
    case invalidInstanceName(String)
    /// A TXT entry is longer than 255 bytes, or a key is empty or contains '=' (RFC 6763 §6).
    case invalidTXT(String)
    /// The name was taken and renaming ran out of attempts.
    case nameConflict(String)
    /// The service was shut down.
    case shutDown

    public var description: String {
        switch self {
        case .socketUnavailable(let reason): return "mDNS port 5353 unavailable: \(reason)"
        case .invalidServiceType(let t): return "invalid service type '\(t)'"
        case .invalidInstanceName(let n): return "invalid instance name '\(n)'"
        case .invalidTXT(let why): return "invalid TXT record: \(why)"
        case .nameConflict(let n): return "name conflict for '\(n)'"
        case .shutDown: return "mDNS service shut down"
        }
    }
}

/// What happens to a registration.
public enum RegistrationEvent: Sendable, Equatable {
    /// Probing succeeded; the service is announced under `name` (the instance name).
    case registered(name: String)
    /// Another host held the name; we now use `to` (RFC 6762 §9, "Name (2)").
    case renamed(from: String, to: String)
    /// The registration could not be made or kept.
    case failed(MDNSError)
}

/// A resolved service instance.
public struct DiscoveredService: Sendable, Hashable {
    /// The instance label, e.g. `"1tvdkfvihbru6"` or `"My Printer"`.
    public var instanceName: String
    /// The service type as registered, e.g. `"_foo._tcp"`.
    public var serviceType: String
    /// Always `"local."` for mDNS.
    public var domain: String
    /// TXT entries; a key without value maps to `""`. Keys keep the sender's case; lookups should lower-case.
    public var txt: [String: String]
    /// The SRV target, e.g. `"6F1C…-….local."`.
    public var hostName: String
    /// The SRV port.
    public var port: UInt16
    /// Textual addresses of `hostName` (IPv4 dotted, IPv6 with `%scope` for link-local).
    public var addresses: [String]
    /// The same addresses with `port`, ready to connect to.
    public var socketAddresses: [SocketAddress]

    public init(
        instanceName: String, serviceType: String, domain: String = "local.", txt: [String: String],
        hostName: String, port: UInt16, addresses: [String], socketAddresses: [SocketAddress]
    ) {
        self.instanceName = instanceName
        self.serviceType = serviceType
        self.domain = domain
        self.txt = txt
        self.hostName = hostName
        self.port = port
        self.addresses = addresses
        self.socketAddresses = socketAddresses
    }
}

/// What a browse sees.
public enum BrowseEvent: Sendable, Equatable {
    /// A new instance, resolved (SRV, TXT and at least one address known).
    case found(DiscoveredService)
    /// A known instance changed its TXT, port, host or addresses.
    case updated(DiscoveredService)
    /// The instance said goodbye or its records expired.
    case lost(instanceName: String)
    /// Browsing could not start (typically `.socketUnavailable`).
    case failed(MDNSError)
}

/// A live registration. `cancel()` sends goodbyes (TTL 0) and withdraws the records.
public final class MDNSRegistration: Sendable {
    let cancelAction: @Sendable () -> Void
    init(cancel: @escaping @Sendable () -> Void) { self.cancelAction = cancel }
    /// Withdraws the service: goodbye packets go out at once (RFC 6762 §10.1). Idempotent.
    public func cancel() { cancelAction() }
}

/// A live browse. `cancel()` stops querying; no more events are delivered.
public final class MDNSBrowse: Sendable {
    let cancelAction: @Sendable () -> Void
    init(cancel: @escaping @Sendable () -> Void) { self.cancelAction = cancel }
    /// Stops the browse. Idempotent.
    public func cancel() { cancelAction() }
}

/// The process's mDNS responder and querier.
public final class MDNSService: Sendable {
    /// The process-wide instance, on every suitable interface, IPv4 and IPv6.
    public static let shared = MDNSService()

    let core: MDNSCore

    /// A service limited to the named interfaces (all suitable ones when nil), for tests and tools.
    /// - Parameters:
    ///   - interfaces: interface names such as `["veth0"]`; nil means every up, multicast-capable, non-loopback
    ///     interface, or loopback when it is the only one.
    ///   - ipv4: join 224.0.0.251.
    ///   - ipv6: join ff02::fb.
    ///   - hostName: our host name; default `<uuid>.local.`.
    ///   - log: where diagnostic lines go (malformed packets, name conflicts, socket errors); by default swift-log,
    ///     label `opencorebluetooth.mdns`, level `notice`.
    public init(
        interfaces: [String]? = nil, ipv4: Bool = true, ipv6: Bool = true, hostName: String? = nil,
        log: (@Sendable (String) -> Void)? = nil
    ) {
        self.core = MDNSCore(interfaces: interfaces, ipv4: ipv4, ipv6: ipv6, hostName: hostName, log: log)
    }

    /// Our host name, e.g. `"6F1C…-….local."`.
    public var hostName: String { core.hostNameString }

    /// Advertises `instanceName._foo._tcp.local.` on `port` with `txt`.
    /// Events arrive on the service's thread; the first is `.registered`, `.renamed` or `.failed`.
    /// - Parameters:
    ///   - serviceType: `"_foo._tcp"` or `"_foo._udp"` (a trailing `.local.` is accepted).
    ///   - instanceName: the name to claim; a conflict renames it (`.renamed`).
    ///   - port: the service's port.
    ///   - txt: the TXT record's keys and values.
    ///   - onEvent: called with each registration event.
    public func register(
        serviceType: String, instanceName: String, port: UInt16, txt: [String: String],
        onEvent: @escaping @Sendable (RegistrationEvent) -> Void
    ) -> MDNSRegistration {
        core.register(serviceType: serviceType, instanceName: instanceName, port: port, txt: txt, onEvent: onEvent)
    }

    /// Browses for `serviceType` (`"_foo._tcp"`), resolving each instance before reporting it.
    public func browse(serviceType: String, onEvent: @escaping @Sendable (BrowseEvent) -> Void) -> MDNSBrowse {
        core.browse(serviceType: serviceType, onEvent: onEvent)
    }

    /// Opens the sockets now rather than on first use; throws `.socketUnavailable` when port 5353 cannot be used.
    public func start() throws(MDNSError) {
        try core.start()
    }

    /// Sends goodbyes for every registration, closes the sockets and stops the event loop. Further calls fail
    /// with `.shutDown`. Blocks until done; do not call from an event callback.
    public func shutdown() {
        core.shutdown()
    }
}
