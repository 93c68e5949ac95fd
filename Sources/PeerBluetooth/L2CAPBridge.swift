// Carries a PeerLink over an L2CAP credit-based channel: a UNIX socket pair whose one end becomes the
// PeerLink's NIO channel (so framing, TLS and back-pressure are the TCP ones) and whose other end this
// bridge pumps to and from the L2CAP channel.
//
// Flow control end to end: credits go back to the peer only once its bytes were written into the socket
// (so a session that stops reading stops the peer's sender after one window), and bytes read from the socket
// wait while the channel's send queue is full (reading stops, so the PeerLink's writes back up and it turns
// unwritable). Either end closing closes the other: the socket after what the channel delivered was
// written, the channel after what the socket gave was queued (a graceful L2CAP disconnection).
//
// Threading contract: `channel` and the `host*` state are used on the host's loop; `nio*` on the NIO loop.
import Foundation
import NIOCore
import NIOPosix
import BLEHost
import BLETransport
import PeerTransport

final class L2CAPBridge: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let channel: HostL2CAPChannel
    let loop: BLETransport.EventLoop
    // Host loop state.
    private var socket: Channel?
    private var early: [[UInt8]] = []
    private var outbox: [[UInt8]] = []
    private var socketClosed = false
    private var channelClosed = false
    private var lastWrite: EventLoopFuture<Void>?

    init(channel: HostL2CAPChannel, loop: BLETransport.EventLoop) {
        self.channel = channel
        self.loop = loop
    }

    /// Bridges `channel` (call on the host loop): the PeerLink end goes to `completion`.
    static func start(
        channel: HostL2CAPChannel, loop: BLETransport.EventLoop, remoteHost: String, asClient: Bool, tls: PeerTLSIdentity?,
        completion: @escaping @Sendable (Result<PeerLink, PeerTransportError>) -> Void
    ) {
        var fds: [CInt] = [0, 0]
        guard socketpair(AF_UNIX, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            channel.close(discardingQueued: true)
            return completion(.failure(.cannotConnect("socketpair: \(String(cString: strerror(errno)))")))
        }
        let bridge = L2CAPBridge(channel: channel, loop: loop)
        bridge.attachChannel()
        let socketEnd = fds[1]
        ClientBootstrap(group: PeerTransport.shared.group)
            .channelInitializer { ch in
                do {
                    try ch.pipeline.syncOperations.addHandler(bridge)
                    return ch.eventLoop.makeSucceededVoidFuture()
                } catch { return ch.eventLoop.makeFailedFuture(error) }
            }
            .withConnectedSocket(socketEnd)
            .whenComplete { r in
                switch r {
                case let .success(ch): loop.execute { bridge.socketReady(ch) }
                case .failure:
                    // NIO owns the descriptor once given it and closes it on this failure; closing it here too
                    // would close whatever has reused its number meanwhile (another socket, a timerfd).
                    loop.execute { bridge.channel.close(discardingQueued: true) }
                }
            }
        PeerTransport.shared.adopt(socket: fds[0], remoteHost: remoteHost, asClient: asClient, tls: tls) { r in
            if case .failure = r { loop.execute { bridge.channel.close() } }
            completion(r)
        }
    }

    // MARK: Host loop

    private func attachChannel() {
        channel.context = self
        channel.onReceive = { [weak self] sdu in
            guard let self else { return }
            if socket == nil { early.append(sdu) } else { deliver(sdu) }
        }
        channel.onClose = { [weak self] reason in
            guard let self else { return }
            PeerLog.write("L2CAP channel 0x\(String(channel.localCID, radix: 16)) closed: \(reason)")
            channelClosed = true
            outbox.removeAll()
            closeSocketAfterWrites()
            channel.context = nil
        }
        channel.onWritable = { [weak self] in self?.drainOutbox() }
    }

    private func socketReady(_ ch: Channel) {
        socket = ch
        for sdu in early { deliver(sdu) }
        early.removeAll()
        if channelClosed { closeSocketAfterWrites() }
    }

    /// Writes an SDU into the socket; its credits go back once written.
    private func deliver(_ sdu: [UInt8]) {
        guard let socket else { return }
        let n = sdu.count
        let f = socket.writeAndFlush(socket.allocator.buffer(bytes: sdu))
        lastWrite = f
        f.whenComplete { [loop, channel] r in
            guard case .success = r else { return }
            loop.execute { if channel.isOpen { channel.consumed(n) } }
        }
    }

    private func closeSocketAfterWrites() {
        guard let socket else { return }
        if let lastWrite {
            lastWrite.whenComplete { _ in socket.close(promise: nil) }
        } else {
            socket.close(promise: nil)
        }
    }

    /// Bytes the socket gave: queued as SDUs while the channel takes them.
    private func fromSocket(_ bytes: [UInt8]) {
        guard !channelClosed else { return }
        outbox.append(bytes)
        drainOutbox()
    }

    private func drainOutbox() {
        while let first = outbox.first {
            guard channel.send(first) else { return }   // onWritable calls again
            outbox.removeFirst()
        }
        if socketClosed {
            channel.close()
        } else if let socket {
            socket.eventLoop.execute { socket.setOption(ChannelOptions.autoRead, value: true).whenSuccess { socket.read() } }
        }
    }

    private func socketEnded() {
        socketClosed = true
        if outbox.isEmpty && !channelClosed { channel.close() }
    }

    // MARK: NIO loop

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        guard let bytes = buffer.readBytes(length: buffer.readableBytes), !bytes.isEmpty else { return }
        // One batch in the channel's queue at a time: reading resumes once it was taken.
        context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
        loop.execute { [self] in fromSocket(bytes) }
    }

    func channelInactive(context: ChannelHandlerContext) {
        loop.execute { [self] in socketEnded() }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
