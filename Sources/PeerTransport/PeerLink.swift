// One connection of the peer session protocol over TCP (optionally TLS 1.3): frames in, frames out, with
// back-pressure from NIO's write buffer. What the frames mean is the session engine's business.
//
// Threading contract: callbacks run on the link's NIO event loop, in order. `send`, `close` and the
// properties are safe from any thread.
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PeerSession
import StackLog

public final class PeerLink: @unchecked Sendable {
    let channel: Channel
    private let lock = NSLock()
    private var _onMessage: ((PeerMessage) -> Void)?
    private var _onClose: (((any Error)?) -> Void)?
    private var _onWritable: (() -> Void)?
    private var closed = false
    private var closeError: (any Error)?
    private var pendingFlush = false
    /// The peer's certificate chain (DER), once a TLS handshake completed; empty for plaintext.
    public internal(set) var peerCertificates: [[UInt8]] = []
    public let isEncrypted: Bool
    /// The peer's address as seen by us ("10.0.0.2" / "fe80::1%veth0").
    public let remoteHost: String

    /// The transport under the link: TCP, or a Bluetooth LE L2CAP channel bridged through a socket pair.
    public let isBluetooth: Bool

    init(channel: Channel, encrypted: Bool, remoteHost: String? = nil) {
        self.channel = channel
        self.isEncrypted = encrypted
        self.remoteHost = remoteHost ?? channel.remoteAddress?.ipAddress ?? "?"
        self.isBluetooth = remoteHost?.hasPrefix("ble:") ?? false
    }

    /// Called for each message; a protocol error closes the link (onClose gets the error).
    public var onMessage: ((PeerMessage) -> Void)? {
        get { lock.withLock { _onMessage } }
        set { lock.withLock { _onMessage = newValue } }
    }
    public var onClose: (((any Error)?) -> Void)? {
        get { lock.withLock { _onClose } }
        set {
            let already = lock.withLock { () -> Bool in
                _onClose = newValue; return closed
            }
            // The handler runs on the loop, as every other call of it does.
            nonisolated(unsafe) let handler = newValue
            if already { channel.eventLoop.execute { [self] in handler?(lock.withLock { closeError }) } }
        }
    }
    /// When set, resource chunks come here — in order with the other messages, as the octets they arrived
    /// in (no copy) — instead of to `onMessage`.
    public var onResourceChunk: ((UInt32, PeerChunk) -> Void)? {
        get { lock.withLock { _onResourceChunk } }
        set { lock.withLock { _onResourceChunk = newValue } }
    }
    private var _onResourceChunk: ((UInt32, PeerChunk) -> Void)?

    /// The write buffer drained below its low mark after `isWritable` was false.
    public var onWritable: (() -> Void)? {
        get { lock.withLock { _onWritable } }
        set { lock.withLock { _onWritable = newValue } }
    }

    /// False while more than the high water mark waits in the write buffer.
    public var isWritable: Bool { channel.isWritable }
    public var isOpen: Bool { lock.withLock { !closed } }

    /// How long, in seconds, the peer has sent nothing at all: any octets count, not only whole frames, so
    /// a peer busy sending one large frame over a slow link (a 64 KB piece at a few KB/s over Bluetooth)
    /// is heard while it sends. 0 while reading is paused (`pauseReading`): the silence is then ours, and
    /// the count starts again when reading resumes. Safe from any thread.
    public var silence: TimeInterval {
        let now = DispatchTime.now().uptimeNanoseconds
        return lock.withLock {
            guard readPauses == 0 else { return 0 }
            return TimeInterval(now &- min(now, lastRead)) / 1e9
        }
    }
    /// When octets last arrived, or reading last resumed (uptime nanoseconds; guarded by `lock`).
    private var lastRead = DispatchTime.now().uptimeNanoseconds

    /// Queues messages; they leave with one flush per event-loop turn. Sends from other threads gather in
    /// buffers that a single event-loop task writes (one write per 256 KB of messages, not one task and one
    /// write each); a send on the event loop first writes what gathered, so each thread's messages keep
    /// their order.
    public func send(_ messages: [PeerMessage]) {
        guard isOpen else { return }
        if channel.eventLoop.inEventLoop && !draining {
            drainOutbox()
            var buffer = channel.allocator.buffer(capacity: PeerWire.encodedLength(messages))
            PeerWire.write(messages, into: &buffer)
            write(buffer)
            return
        }
        let schedule = lock.withLock { () -> Bool in
            if outbox.isEmpty || outbox[outbox.count - 1].readableBytes >= Self.flushThreshold {
                outbox.append(channel.allocator.buffer(capacity: min(Self.flushThreshold, PeerWire.encodedLength(messages))))
            }
            PeerWire.write(messages, into: &outbox[outbox.count - 1])
            defer { outboxScheduled = true }
            return !outboxScheduled
        }
        if schedule { channel.eventLoop.execute { [self] in drainOutbox() } }
    }

    public func send(_ m: PeerMessage) { send([m]) }

    /// Frames queued for the event loop to write, in order, each buffer whole frames (guarded by `lock`).
    private var outbox: [ByteBuffer] = []
    private var outboxScheduled = false
    /// The event loop is writing the outbox (event loop only): a write's flush may call back (writability),
    /// and what is sent meanwhile must queue behind what the outbox still holds.
    private var draining = false
    private var writableWhileDraining = false

    /// Hands what was queued to the channel (event loop only).
    private func drainOutbox() {
        guard !draining else { return }
        draining = true
        while true {
            let batch = lock.withLock { () -> [ByteBuffer] in
                outboxScheduled = false
                let b = outbox
                outbox = []
                return b
            }
            if batch.isEmpty { break }
            for buffer in batch { write(buffer) }
        }
        draining = false
        if writableWhileDraining {
            writableWhileDraining = false
            writabilityChanged()
        }
    }

    /// Sends a `resourceChunk` frame whose chunk `fill` writes straight into the outgoing buffer (reading a
    /// file, say): at most `maximum` octets; returns how many it wrote. Nothing leaves when that is 0 or
    /// `fill` throws. Event loop only.
    public func sendResourceChunk(id: UInt32, maximum: Int, fill: (UnsafeMutableRawBufferPointer) throws -> Int) rethrows -> Int {
        precondition(channel.eventLoop.inEventLoop && maximum > 0 && maximum + 4 <= PeerFrame.maximumPayload)
        guard isOpen else { return 0 }
        drainOutbox()
        var buffer = channel.allocator.buffer(capacity: PeerFrame.headerLength + 4 + maximum)
        buffer.writeInteger(PeerMessage.resourceChunkType)
        buffer.writeInteger(UInt8(0))
        buffer.writeInteger(UInt16(0))
        let lengthAt = buffer.writerIndex
        buffer.writeInteger(UInt32(0), endianness: .little)
        buffer.writeInteger(id, endianness: .little)
        let n = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: maximum) { space in
            let n = try fill(UnsafeMutableRawBufferPointer(rebasing: space.prefix(maximum)))
            precondition(n >= 0 && n <= maximum)
            return n
        }
        guard n > 0 else { return 0 }
        buffer.setInteger(UInt32(4 + n), at: lengthAt, endianness: .little)
        if draining {
            lock.withLock { outbox.append(buffer) }
        } else {
            write(buffer)
        }
        return n
    }

    private func write(_ buffer: ByteBuffer) {
        channel.write(buffer, promise: nil)
        unflushed += buffer.readableBytes
        // A TLS handler keeps unflushed writes to itself, where the channel's writability does not see
        // them: past a few chunks, flush now, so a sender pacing itself on `isWritable` stops in time.
        if unflushed >= Self.flushThreshold {
            unflushed = 0
            channel.flush()
            return
        }
        guard !pendingFlush else { return }
        pendingFlush = true
        channel.eventLoop.execute { [self] in
            pendingFlush = false
            unflushed = 0
            channel.flush()
        }
    }

    /// Octets written since the last flush (event loop only).
    private var unflushed = 0
    static let flushThreshold = 256 * 1024

    public func close() {
        channel.close(promise: nil)
    }

    /// Stops reading from the connection until as many `resumeReading` calls (a consumer that cannot keep
    /// up: the peer's sender then backs up on TCP's window). Safe from any thread.
    public func pauseReading() {
        let first = lock.withLock { () -> Bool in
            readPauses += 1; return readPauses == 1
        }
        if first { applyReadPauses() }
    }

    public func resumeReading() {
        let now = DispatchTime.now().uptimeNanoseconds
        let last = lock.withLock { () -> Bool in
            guard readPauses > 0 else { return false }
            readPauses -= 1
            if readPauses == 0 { lastRead = now }
            return readPauses == 0
        }
        if last { applyReadPauses() }
    }

    /// Sets the channel's reading from the count as it is when this runs on the loop (so a resume decided
    /// on another thread cannot land after a later pause and undo it).
    private func applyReadPauses() {
        let apply: @Sendable () -> Void = { [self] in
            let paused = lock.withLock { readPauses > 0 }
            channel.setOption(ChannelOptions.autoRead, value: !paused).whenFailure { _ in }
        }
        if channel.eventLoop.inEventLoop { apply() } else { channel.eventLoop.execute(apply) }
    }
    private var readPauses = 0

    /// Runs `work` on the link's event loop (at once when already there): work that must not interleave
    /// with the link's own callbacks.
    public func execute(_ work: @escaping @Sendable () -> Void) {
        if channel.eventLoop.inEventLoop { work() } else { channel.eventLoop.execute(work) }
    }

    // Called by the handler on the event loop.
    func received(_ m: PeerMessage) { lock.withLock { _onMessage }?(m) }
    /// Counts the silence from now: the time before was ours, not the peer's (our event loop had fallen behind
    /// and not read what the peer sent), as after `resumeReading`. Safe from any thread.
    public func restartSilence() {
        let now = DispatchTime.now().uptimeNanoseconds
        lock.withLock { lastRead = max(lastRead, now) }
    }

    func heard() {
        let now = DispatchTime.now().uptimeNanoseconds
        lock.withLock { lastRead = now }
    }
    func writabilityChanged() {
        guard !draining else { writableWhileDraining = true; return }
        if channel.isWritable { lock.withLock { _onWritable }?() }
    }
    func didClose(_ error: (any Error)?) {
        let handler = lock.withLock { () -> (((any Error)?) -> Void)? in
            guard !closed else { return nil }
            closed = true
            closeError = error
            return _onClose
        }
        handler?(error)
    }
}

/// First in a link's pipeline (before TLS): notes that octets arrived, so a TLS record or a frame still
/// arriving over a slow link counts as the peer talking (`PeerLink.silence`).
final class HeardHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    weak var link: PeerLink?
    init(link: PeerLink) { self.link = link }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        link?.heard()
        context.fireChannelRead(data)
    }
}

/// Decodes frames into messages for its link; a malformed stream closes the connection.
final class PeerFrameHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    weak var link: PeerLink?
    private var reader = PeerFrameReader()
    private var error: (any Error)?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard error == nil else { return }
        let chunks = link?.onResourceChunk
        do {
            try reader.read(unwrapInboundIn(data), slicingResourceChunks: chunks != nil) { item in
                switch item {
                case let .message(m): link?.received(m)
                case let .resourceChunk(id, chunk): chunks?(id, chunk)
                }
            }
        } catch {
            PeerLog.warning("closing a connection from \(context.remoteAddress?.description ?? "?"): \(error)")
            self.error = error
            context.close(promise: nil)
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        link?.writabilityChanged()
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        link?.didClose(error)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if self.error == nil { self.error = error }
        context.close(promise: nil)
    }
}

/// Diagnostics of Multipeer Connectivity and its peer transports, through swift-log with the label
/// `opencorebluetooth.multipeer`: what a peer or the network did wrong (a misbehaving peer, a refused
/// connection) at `warning`, the rest at `debug`. The logger is made at each call (these are rare), so it
/// follows whatever backend the application has bootstrapped by then.
public enum PeerLog {
    public static func write(_ s: @autoclosure () -> String) {
        Logger(.multipeer).debug("\(s())")
    }
    public static func warning(_ s: @autoclosure () -> String) {
        Logger(.multipeer).warning("\(s())")
    }
}
