// `ble radio`: the virtual air served over TCP. Each accepted connection is a new controller speaking H4;
// closing the socket takes that controller off the air (its peers see a supervision timeout).
import Foundation
import BLEHCI
import BLETransport

public final class RadioServer: @unchecked Sendable {
    public let air: VirtualAir
    private let listener: TCPListener
    private let sessions = Locked<[ObjectIdentifier: (StreamConnection, VirtualController)]>([:])

    public init(air: VirtualAir, host: String = "127.0.0.1", port: UInt16) throws {
        self.air = air
        self.listener = try TCPListener(host: host, port: port)
    }

    public var port: UInt16 { listener.port }

    /// Number of controllers currently attached through the server.
    public var connectionCount: Int { sessions.withLock { $0.count } }

    public func start() {
        listener.start { [weak self] fd in self?.accept(fd) }
    }

    private func accept(_ fd: Int32) {
        let connection = StreamConnection(fd: fd, isTCP: true, label: "ble.radio.client")
        let controller = air.addController()
        let bridge = SocketSink(connection: connection)
        try? controller.open(sink: bridge)
        let key = ObjectIdentifier(connection)
        sessions.withLock { $0[key] = (connection, controller) }
        connection.start(
            onPacket: { packet in controller.send(packet) },
            onClose: { [weak self] _ in
                guard let self else { return }
                self.sessions.withLock { _ = $0.removeValue(forKey: key) }
                self.air.remove(controller)
            })
    }

    public func stop() {
        listener.close()
        for (_, (c, _)) in sessions.withLock({ $0 }) { c.close() }
    }
}

/// Writes controller packets to a socket.
private final class SocketSink: HCITransportSink, @unchecked Sendable {
    let connection: StreamConnection
    init(connection: StreamConnection) { self.connection = connection }
    func transport(didReceive packet: HCIPacket) { connection.write(packet.h4Bytes) }
    func transportDidClose(error: (any Error)?) { connection.close() }
}
