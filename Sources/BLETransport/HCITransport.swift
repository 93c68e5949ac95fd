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
    /// Several complete packets, in order: everything one read from the controller held. A sink that hops
    /// threads does it once for all of them.
    func transport(didReceivePackets packets: [HCIPacket])
    /// The controller is gone (socket closed, device unplugged, radio removed).
    func transportDidClose(error: (any Error)?)
    /// True when the sink takes a run of Number Of Completed Packets events for one connection handle, read in
    /// one go, as one event with their counts added up (a host that only counts freed buffers). False (the
    /// default) for a sink that must see each event as the controller sent it: a capture, a relay.
    var acceptsMergedCompletions: Bool { get }
    /// True when the sink takes ACL continuation fragments for one handle that follow a packet in the same read as
    /// part of that packet (its header, the length covering them all): a host that recombines L2CAP frames and
    /// does not report each ACL packet back to the controller (controller-to-host flow control). Asked before each
    /// read, from the transport's reader thread. False (the default) for a sink that must see each packet as the
    /// controller sent it.
    var acceptsMergedACLContinuations: Bool { get }
    /// ACL packets the host has handed to the transport so far, and how many of those the controller is done with
    /// (reported completed, or dropped with their link); both only grow. Read from the transport's reader thread: a
    /// TCP transport learns from it whether the controller still owes completions of earlier writes. Nil (the
    /// default) for a sink that does not count.
    var aclPacketTally: (sent: Int, done: Int)? { get }
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
    /// False when `send` is done with a packet's bytes once it returns (written, or copied into what a turn
    /// gathers): the host then builds later packets in the same arrays. True (the default) when the transport may
    /// keep them (the virtual controller queues the packet itself): reusing such an array would cost a copy.
    var keepsSentPackets: Bool { get }
    /// True when `send(h4:packets:)` costs no more than the packets themselves would: a byte stream, which writes
    /// the bytes as they are. A host then cuts L2CAP frames into ACL fragments straight into such bytes, as
    /// controller buffers free up, instead of making a packet of each fragment ahead. False (the default) otherwise.
    var takesH4Bytes: Bool { get }
    /// Sends `packets` packets given as their H4 bytes (each its indicator, then the packet), in order with the rest.
    /// The default frames them and calls `send(batch:)`.
    func send(h4 bytes: UnsafeRawBufferPointer, packets: Int)
    /// Stops the transport; no more packets are delivered after it returns.
    func close()
    /// A short human description, e.g. "tcp-client:127.0.0.1:6402".
    var name: String { get }
    /// What the transport has done so far (system calls, packets), for benchmarks; nil when it does not count.
    var statistics: TransportStatistics? { get }
    /// The host tells when it starts (true) and stops (false) holding packets that wait for controller
    /// buffers: while it does, every buffer the controller frees is answered at once with a write. A TCP
    /// transport then leaves acknowledgement to those writes instead of forcing quick ACKs. Call on the loop.
    func hostBacklogChanged(_ hasBacklog: Bool)
}

extension HCITransport {
    public func send(batch packets: [HCIPacket]) {
        for p in packets { send(p) }
    }
    public var deliversOnReaderThread: Bool { false }
    public var keepsSentPackets: Bool { true }
    public var takesH4Bytes: Bool { false }
    public func send(h4 bytes: UnsafeRawBufferPointer, packets: Int) {
        var framer = H4Framer()
        framer.append(bytes)
        var batch: [HCIPacket] = []
        batch.reserveCapacity(packets)
        while let p = try? framer.nextPacket() { batch.append(p) }
        send(batch: batch)
    }
    public var statistics: TransportStatistics? { nil }
    public func hostBacklogChanged(_ hasBacklog: Bool) {}
}

extension HCITransportSink {
    public func transport(didReceivePackets packets: [HCIPacket]) {
        for p in packets { transport(didReceive: p) }
    }

    public var acceptsMergedCompletions: Bool { false }
    public var acceptsMergedACLContinuations: Bool { false }
    public var aclPacketTally: (sent: Int, done: Int)? { nil }
}

/// Counts kept by a transport that talks to its controller through a file descriptor: the system calls it
/// made for I/O and the HCI packets they carried. Benchmarks divide one by the other.
public struct TransportStatistics: Sendable, Equatable {
    /// read(2) calls that returned data or end of file (EINTR retries included).
    public var reads = 0
    /// write(2)/send(2)/writev(2) calls.
    public var writes = 0
    /// Other system calls made per packet (setsockopt for TCP_QUICKACK).
    public var other = 0
    public var packetsIn = 0
    public var packetsOut = 0
    public var bytesIn = 0
    public var bytesOut = 0

    public init() {}

    public var systemCalls: Int { reads + writes + other }
    public var packets: Int { packetsIn + packetsOut }

    public static func + (a: Self, b: Self) -> Self {
        var d = a
        d.reads += b.reads; d.writes += b.writes; d.other += b.other
        d.packetsIn += b.packetsIn; d.packetsOut += b.packetsOut
        d.bytesIn += b.bytesIn; d.bytesOut += b.bytesOut
        return d
    }

    public static func - (a: Self, b: Self) -> Self {
        var d = Self()
        d.reads = a.reads - b.reads; d.writes = a.writes - b.writes; d.other = a.other - b.other
        d.packetsIn = a.packetsIn - b.packetsIn; d.packetsOut = a.packetsOut - b.packetsOut
        d.bytesIn = a.bytesIn - b.bytesIn; d.bytesOut = a.bytesOut - b.bytesOut
        return d
    }
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
