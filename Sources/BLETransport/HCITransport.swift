// The boundary below the host: something that carries HCI packets to and from a controller.
//
// Threading contract: `send` may be called from the host's loop only. A transport delivers controller
// packets to its sink on any thread, but never synchronously from inside `send` (no re-entrancy), and in
// the order the controller produced them. A transport that loses its controller calls
// `transportDidClose(error:)` once.
import BLEHCI

public protocol HCITransportSink: AnyObject, Sendable {
    /// A complete packet from the controller (event, ACL, ...).
    func transport(didReceive packet: HCIPacket)
    /// The controller is gone (socket closed, device unplugged, radio removed).
    func transportDidClose(error: (any Error)?)
}

public protocol HCITransport: AnyObject, Sendable {
    /// Starts delivering packets to `sink`.
    func open(sink: any HCITransportSink) throws
    /// Sends a packet (command, ACL) to the controller.
    func send(_ packet: HCIPacket)
    /// Sends several packets in order; stream transports write them with one system call.
    func send(batch packets: [HCIPacket])
    /// True when packets come from a dedicated reader thread that may block while the host handles them
    /// (the host then runs them in place instead of hopping threads).
    var deliversOnReaderThread: Bool { get }
    /// Stops the transport; no more packets are delivered after it returns.
    func close()
    /// A short human description, e.g. "tcp-client:127.0.0.1:6402".
    var name: String { get }
}

extension HCITransport {
    public func send(batch packets: [HCIPacket]) {
        for p in packets { send(p) }
    }
    public var deliversOnReaderThread: Bool { false }
}

/// Errors raised while opening a transport.
public enum TransportError: Error, CustomStringConvertible, Equatable {
    case invalidSpec(String)
    case connectFailed(String)
    /// The operating system refused access to the controller (EPERM, EACCES): a missing capability or group.
    case permissionDenied(String)
    case io(String)
    case closed

    public var description: String {
        switch self {
        case let .invalidSpec(s): return "invalid transport spec: \(s)"
        case let .connectFailed(s): return "could not connect: \(s)"
        case let .permissionDenied(s): return "permission denied: \(s)"
        case let .io(s): return "I/O error: \(s)"
        case .closed: return "transport closed"
        }
    }
}
