// Inputs, outputs and small value types of the mDNS engine.
//
// The engine never reads a clock or draws randomness by itself: every input carries `now`, and random
// delays come from a `SplitMix64` seeded by the caller. It answers each input with a list of `MDNSAction`s
// that the socket edge (DNSSDNIO) or a test harness carries out.

/// A point on the engine's clock, in milliseconds since an arbitrary origin.
public struct MDNSInstant: Comparable, Hashable, Sendable, CustomStringConvertible {
    public var milliseconds: Int64
    public init(milliseconds: Int64) { self.milliseconds = milliseconds }
    public static func < (a: MDNSInstant, b: MDNSInstant) -> Bool { a.milliseconds < b.milliseconds }
    public static func + (a: MDNSInstant, ms: Int64) -> MDNSInstant { MDNSInstant(milliseconds: a.milliseconds + ms) }
    public static func - (a: MDNSInstant, b: MDNSInstant) -> Int64 { a.milliseconds - b.milliseconds }
    public var description: String { "t=\(milliseconds)ms" }
}

/// An IPv4 or IPv6 address, as bytes.
public enum IPAddress: Hashable, Sendable, CustomStringConvertible {
    case v4([UInt8])
    case v6([UInt8])

    public var description: String {
        switch self {
        case .v4(let b): return b.map(String.init).joined(separator: ".")
        case .v6(let b):
            var groups: [UInt16] = []
            for i in stride(from: 0, to: 16, by: 2) { groups.append(UInt16(b[i]) << 8 | UInt16(b[i + 1])) }
            // RFC 5952: compress the longest run (≥ 2) of zero groups.
            var bestStart = -1, bestLen = 0, i = 0
            while i < 8 {
                if groups[i] == 0 {
                    var j = i
                    while j < 8 && groups[j] == 0 { j += 1 }
                    if j - i > bestLen && j - i >= 2 { bestStart = i; bestLen = j - i }
                    i = j
                } else {
                    i += 1
                }
            }
            func hex(_ r: ArraySlice<UInt16>) -> String { r.map { String($0, radix: 16) }.joined(separator: ":") }
            if bestStart < 0 { return hex(groups[...]) }
            return hex(groups[..<bestStart]) + "::" + hex(groups[(bestStart + bestLen)...])
        }
    }

    var rdata: RData {
        switch self {
        case .v4(let b): return .a(b);
        case .v6(let b): return .aaaa(b)
        }
    }
    var type: RRType {
        switch self {
        case .v4: return .a;
        case .v6: return .aaaa
        }
    }
}

/// Where a packet came from: address, UDP port, IPv6 scope, and the interface it arrived on (interface
/// indexes; 0 when unknown).
public struct MDNSPeer: Hashable, Sendable {
    public var address: IPAddress
    public var port: UInt16
    public var scopeID: UInt32
    /// The interface the packet arrived on (IP_PKTINFO / IPV6_PKTINFO); records learnt from it are
    /// forgotten when that interface goes away.
    public var interface: UInt32
    public init(address: IPAddress, port: UInt16 = 5353, scopeID: UInt32 = 0, interface: UInt32 = 0) {
        self.address = address; self.port = port; self.scopeID = scopeID; self.interface = interface
    }
}

/// Where to send a packet.
public enum MDNSDestination: Hashable, Sendable {
    /// 224.0.0.251 / ff02::fb port 5353 on every joined interface.
    case multicast
    /// Straight back to a querier (QU questions, RFC 6762 §5.4; legacy queries, §6.7).
    case unicast(MDNSPeer)
}

/// Handle of a registration inside one engine.
public struct RegistrationID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int
    public var description: String { "reg#\(rawValue)" }
}

/// Handle of a browse inside one engine.
public struct BrowseID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int
    public var description: String { "browse#\(rawValue)" }
}

/// A service instance with everything needed to connect (RFC 6763 §4–§6).
public struct ResolvedService: Hashable, Sendable {
    /// The full instance name, `<instance>.<type>.local.`.
    public var instance: DNSName
    public var txt: TXTRecord
    public var host: DNSName
    public var port: UInt16
    public var addresses: [IPAddress]
    /// The interface each address was learnt on (for IPv6 link-local addresses, their scope); 0 when unknown.
    public var interfaces: [IPAddress: UInt32] = [:]
    /// The instance label as text.
    public var instanceName: String { instance.firstLabel }
}

/// Something the caller should know.
public enum MDNSEvent: Hashable, Sendable {
    /// Probing finished; the name is ours and announced (RFC 6762 §8.3).
    case registered(RegistrationID, name: String)
    /// A conflict forced a new name (RFC 6762 §9); sent just before `.registered` with the new name.
    case renamed(RegistrationID, from: String, to: String)
    /// The registration gave up (too many conflicts).
    case registrationFailed(RegistrationID, reason: String)
    case found(BrowseID, ResolvedService)
    case updated(BrowseID, ResolvedService)
    case lost(BrowseID, instanceName: String)
}

/// What the edge must do.
public enum MDNSAction: Hashable, Sendable {
    /// Send these bytes (≤ `MDNSEngine.maxPayload`).
    case send([UInt8], to: MDNSDestination)
    /// Call `timerFired(now:)` at (or soon after) this instant; replaces any earlier request.
    case wakeUp(at: MDNSInstant)
    case event(MDNSEvent)
    /// A diagnostic line (malformed packet, dropped input).
    case log(String)
}

/// A small, fast, seedable generator (SplitMix64) so tests replay exactly.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Record identity for rate limiting and known-answer matching: name, type and canonical RDATA.
struct RecordKey: Hashable {
    let name: DNSName
    let type: RRType
    let rdata: [UInt8]
    init(_ rr: DNSRecord) { name = rr.name; type = rr.type; rdata = rr.rdata.canonicalBytes }
}
