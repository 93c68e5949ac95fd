// `tcp-server:PORT`: we listen and a controller (or a bridge such as socat or bumble-hci-bridge) connects.
// Packets sent before the controller arrives wait for it; one controller at a time.
import BLEHCI
import Synchronization

public final class TCPServerTransport: HCITransport, @unchecked Sendable {
    public let port: UInt16
    public var name: String { "tcp-server:\(port)" }
    private struct State {
        var listener: TCPListener?
        var connection: StreamConnection?
        var waiting: [HCIPacket] = []
    }
    private let state = Mutex(State())

    public init(port: UInt16) { self.port = port }

    /// The port actually bound (useful when created with 0).
    public var boundPort: UInt16? { state.withLock { $0.listener?.port } }

    public func open(sink: any HCITransportSink) throws {
        let listener = try TCPListener(host: "0.0.0.0", port: port)
        state.withLock { $0.listener = listener }
        listener.start { [weak self] fd in
            guard let self else { return }
            let c = StreamConnection(fd: fd, isTCP: true, label: "tcp-server:\(self.port)")
            let queued = self.state.withLock { s -> [HCIPacket]? in
                if s.connection != nil { return nil }
                s.connection = c
                let q = s.waiting
                s.waiting.removeAll()
                return q
            }
            guard let queued else { c.close(); return }   // one controller at a time
            c.mergeSink = sink
            c.start(
                onPackets: { ps in sink.transport(didReceivePackets: ps) },
                onClose: { [weak self] e in
                    self?.state.withLock { $0.connection = nil }
                    sink.transportDidClose(error: e)
                })
            if !queued.isEmpty { c.write(packets: queued) }
        }
    }

    public func send(_ packet: HCIPacket) {
        let c = state.withLock { s -> StreamConnection? in
            if let c = s.connection { return c }
            s.waiting.append(packet)
            return nil
        }
        c?.write(packet: packet)
    }

    public var statistics: TransportStatistics? { state.withLock { $0.connection }?.statistics }

    public func hostBacklogChanged(_ hasBacklog: Bool) { state.withLock { $0.connection }?.hostBacklogChanged(hasBacklog) }

    public func close() {
        let (l, c) = state.withLock { s in (s.listener, s.connection) }
        l?.close()
        c?.close()
    }
}
