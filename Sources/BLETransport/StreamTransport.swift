// H4 over a byte stream: `tcp-client:HOST:PORT` and `unix:PATH`.
import BLEHCI
import Synchronization

public final class StreamTransport: HCITransport, @unchecked Sendable {
    public let name: String
    private let connectFn: () throws -> (Int32, Bool)
    private let connection = Locked<StreamConnection?>(nil)

    public init(name: String, connect: @escaping () throws -> (fd: Int32, isTCP: Bool)) {
        self.name = name
        self.connectFn = connect
    }

    public static func tcpClient(host: String, port: UInt16) -> StreamTransport {
        StreamTransport(name: "tcp-client:\(host):\(port)") { (try Sockets.connectTCP(host: host, port: port), true) }
    }

    public static func unix(path: String) -> StreamTransport {
        StreamTransport(name: "unix:\(path)") { (try Sockets.connectUNIX(path: path), false) }
    }

    public func open(sink: any HCITransportSink) throws {
        let (fd, tcp) = try connectFn()
        let c = StreamConnection(fd: fd, isTCP: tcp, label: name)
        c.mergeSink = sink
        connection.withLock { $0 = c }
        let weak = WeakSink(sink)
        c.start(
            onPackets: { ps in weak.sink?.transport(didReceivePackets: ps) },
            onClose: { e in weak.sink?.transportDidClose(error: e) })
    }

    public func send(_ packet: HCIPacket) {
        _ = connection.withLock { $0 }?.write(packet: packet)
    }

    public var deliversOnReaderThread: Bool { true }
    /// Written, or copied into the turn's gathered bytes, before `send` returns.
    public var keepsSentPackets: Bool { false }

    public func send(batch packets: [HCIPacket]) {
        _ = connection.withLock { $0 }?.write(packets: packets)
    }

    /// Bytes go into the connection's write as they are (see `HCITransport.takesH4Bytes`).
    public var takesH4Bytes: Bool { true }

    public func send(h4 bytes: UnsafeRawBufferPointer, packets: Int) {
        _ = connection.withLock { $0 }?.write(h4: bytes, packets: packets)
    }

    public var statistics: TransportStatistics? { connection.withLock { $0 }?.statistics }

    public func hostBacklogChanged(_ hasBacklog: Bool) { connection.withLock { $0 }?.hostBacklogChanged(hasBacklog) }

    public func close() {
        connection.withLock { c in
            c?.close(); c = nil
        }
    }
}

/// A sink held weakly by a reader's callbacks. Not a `[weak sink]` capture: that is a variable of the closure, and the
/// runtime checked exclusive access to it on every read of the socket.
final class WeakSink: @unchecked Sendable {
    @exclusivity(unchecked) weak var sink: (any HCITransportSink)?
    init(_ sink: any HCITransportSink) { self.sink = sink }
}
