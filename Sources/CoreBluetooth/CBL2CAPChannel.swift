// CBL2CAPChannel (CBL2CAPChannel.h): an L2CAP credit-based channel seen as a pair of Foundation streams.
//
// What the peer sends arrives in `inputStream` (a PipeInputStream fed on the host loop); credits go back to
// the peer only as the app reads, so a reader that stops stops the sender. What the app writes into
// `outputStream` (a PipeOutputStream with a bounded buffer) is taken on the host loop in SDUs of the peer's
// MTU while the channel has room; a full buffer makes `write` return 0 and `.hasSpaceAvailable` follows once
// data has left. As on iOS the app must keep a strong reference to the channel: releasing it closes it.
//
// Threading contract: the streams are used from the app's thread (their events arrive on the run loop or
// queue they are scheduled on); `ChannelBridge` runs on the host loop and only talks to the streams through
// their thread-safe producer/consumer calls.
import Foundation
import Synchronization
import BLEHost
import BLEL2CAP
import BLETransport
import BoundStreams

open class CBL2CAPChannel: NSObject, @unchecked Sendable {
    private let storedPeer: CBPeer?
    private let input: PipeInputStream?
    private let output: PipeOutputStream?
    /// The stack's side of the channel; nil for a channel made with `init()` (a test double, as on iOS).
    let bridge: ChannelBridge?

    /// The peer at the other end (a CBPeripheral for a central, a CBCentral for a peripheral manager).
    open var peer: CBPeer! { storedPeer }
    /// What the peer sends.
    open var inputStream: InputStream! { input }
    /// What we send.
    open var outputStream: OutputStream! { output }
    open var psm: CBL2CAPPSM { bridge?.channel.psm ?? 0 }

    /// The initializer CBL2CAPChannel inherits from NSObject on Apple platforms: a channel attached to nothing
    /// (`peer`, `inputStream` and `outputStream` nil, `psm` 0), for test doubles that override those properties.
    /// Real channels come from `peripheral(_:didOpen:error:)` and `peripheralManager(_:didOpen:error:)`.
    public override init() {
        storedPeer = nil
        input = nil
        output = nil
        bridge = nil
        super.init()
    }

    /// Call on the host loop.
    init(peer: CBPeer, channel: HostL2CAPChannel, loop: EventLoop) {
        storedPeer = peer
        let input = PipeInputStream()
        let output = PipeOutputStream(capacity: max(64 * 1024, 2 * channel.peerMTU))
        self.input = input
        self.output = output
        bridge = ChannelBridge(channel: channel, loop: loop, input: input, output: output)
        super.init()
    }

    deinit {
        bridge?.release()
    }

    open override var description: String {
        "<CBL2CAPChannel: \(address(of: self)), peer = \(storedPeer?.identifier.uuidString ?? "nil"), psm = \(psm)>"
    }
}

/// Moves bytes between a host channel and the streams, on the host loop.
///
/// Per SDU the work is kept off the streams' locks and out of their threads' way: SDUs received in one turn
/// of the loop reach the input stream in one append (one event, at most one wake-up of the reader's run
/// loop), and the output stream is drained in one take of as many SDUs as the channel's queue accepts (one
/// `.hasSpaceAvailable` for the writer, not one per SDU). Outgoing SDUs fill whole K-frames.
final class ChannelBridge: @unchecked Sendable {
    let channel: HostL2CAPChannel
    let loop: EventLoop
    let input: PipeInputStream
    let output: PipeOutputStream
    /// Octets the app has read that the loop has not yet turned into credits, and whether a hop is scheduled.
    private let consumed = Locked<(octets: Int, scheduled: Bool)>((0, false))
    private let pumpScheduled = Atomic<Bool>(false)

    // Loop-confined.
    /// SDUs received since the last hand-over to the input stream.
    private var inbound: [[UInt8]] = []
    private var inboundOctets = 0
    private var inboundFlushScheduled = false
    /// SDUs taken from the output stream that the channel has not accepted yet (it was full).
    private var outbound: [[UInt8]] = []
    private var pumping = false, pumpAgain = false

    /// Received octets handed over at once even while the loop stays busy: a quarter of the receive window,
    /// so the reader's reads (and the credits they return) keep up with a sender that never lets the loop idle.
    static let inboundBatch = 16 * 1024

    init(channel: HostL2CAPChannel, loop: EventLoop, input: PipeInputStream, output: PipeOutputStream) {
        self.channel = channel
        self.loop = loop
        self.input = input
        self.output = output
        channel.onReceive = { [weak self] sdu in self?.received(sdu) }
        channel.onClose = { [weak self, input, output] reason in
            self?.flushInbound()
            switch reason {
            case .peerDisconnected, .localDisconnect, .linkClosed:
                input.finish(error: nil)
                output.fail(error: CBError(.peripheralDisconnected))
            case let .violation(why):
                let e = CBError(.connectionFailed, userInfo: [NSLocalizedFailureReasonErrorKey: why])
                input.finish(error: e)
                output.fail(error: e)
            }
        }
        channel.onWritable = { [weak self] in self?.pump() }
        channel.writableRoom = channel.sendQueueLimit / 4
        input.onConsumed = { [weak self] n in self?.readerConsumed(n) }
        output.onDataAvailable = { [weak self] in self?.schedulePump() }
        output.onClose = { [weak self] in self?.schedulePump() }
    }

    /// An SDU arrived: kept until the loop has nothing else to do (or a batch is full), then appended with
    /// the others in one go.
    func received(_ sdu: [UInt8]) {
        inbound.append(sdu)
        inboundOctets += sdu.count
        if inboundOctets >= Self.inboundBatch {
            flushInbound()
        } else if !inboundFlushScheduled {
            inboundFlushScheduled = true
            loop.whenIdle { [weak self] in
                guard let self else { return }
                inboundFlushScheduled = false
                flushInbound()
            }
        }
    }

    func flushInbound() {
        guard !inbound.isEmpty else { return }
        input.producer.deliver(contentsOf: inbound)
        inbound.removeAll(keepingCapacity: true)
        inboundOctets = 0
    }

    /// Credits go back on the loop, many reads folded into one hop.
    func readerConsumed(_ n: Int) {
        let schedule = consumed.withLock { s -> Bool in
            s.octets += n
            defer { s.scheduled = true }
            return !s.scheduled
        }
        guard schedule else { return }
        loop.execute { [self] in
            let octets = consumed.withLock { s -> Int in
                defer { s = (0, false) }
                return s.octets
            }
            channel.consumed(octets)
        }
    }

    func schedulePump() {
        guard !pumpScheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        loop.execute { [self] in
            pumpScheduled.store(false, ordering: .releasing)
            pump()
        }
    }

    /// The SDU size we send: the peer's MTU, or less so that every SDU fills whole K-frames of the peer's
    /// MPS (the first K-frame carries the 2-octet SDU length). With MTU 2048 and MPS 2048 an SDU of 2048
    /// would take a second K-frame (and a credit) for its last 2 octets; 2046 takes one.
    var sduSize: Int {
        let mtu = max(1, channel.peerMTU), mps = channel.peerMPS
        guard mps > 2, mtu + 2 > mps else { return mtu }
        return (mtu + 2) / mps * mps - 2
    }

    /// Sends what the app wrote while the channel takes it; closes the channel once the app closed both
    /// streams and everything written has left.
    func pump() {
        guard channel.isOpen else { return }
        guard !pumping else { return pumpAgain = true }
        pumping = true
        defer { pumping = false }
        repeat {
            pumpAgain = false
            pumpOnce()
        } while pumpAgain && channel.isOpen
        if output.isClosedByApp, outbound.isEmpty, output.bufferedByteCount == 0, input.isClosedByApp { channel.close() }
    }

    private func pumpOnce() {
        let size = sduSize
        while true {
            if outbound.isEmpty {
                let buffered = output.bufferedByteCount
                guard buffered > 0 else { return }
                // Room for everything buffered, or for a batch (`writableRoom`); otherwise resume when the
                // peer's credits have let that much go. The queue still holds the rest meanwhile.
                let room = channel.sendQueueRoom
                let needed = buffered + (buffered + size - 1) / size * 2
                guard room > 0, room >= min(channel.writableRoom, needed) else {
                    channel.notifyWhenWritable()
                    return
                }
                // As many SDUs as the queue takes now (each also counts its 2-octet length), in one take.
                let count = max(1, room / (size + 2))
                output.consumer.take(maxLength: count * size) { bytes in
                    var i = 0
                    while i < bytes.count {
                        let end = min(bytes.count, i + size)
                        outbound.append([UInt8](UnsafeRawBufferPointer(rebasing: bytes[i..<end])))
                        i = end
                    }
                    return bytes.count
                }
                if outbound.isEmpty { return }
            }
            var sent = 0
            while sent < outbound.count, channel.send(outbound[sent]) { sent += 1 }
            outbound.removeFirst(sent)
            // Refused: `send` asked for `onWritable`, which brings us back.
            if !outbound.isEmpty { return }
        }
    }

    /// The app let go of the CBL2CAPChannel: close it (iOS closes a channel nobody references), after
    /// sending what the app had written and the channel still takes.
    func release() {
        loop.execute { [self] in
            pump()
            flushInbound()
            channel.onReceive = nil
            channel.onWritable = nil
            channel.close()
            input.finish(error: nil)
            output.fail(error: CBError(.peripheralDisconnected))
        }
    }
}

/// Opening failures as Core Bluetooth reports them. iOS documents none; observed: a PSM outside the LE range
/// gives CBError.invalidParameters. A refusal by the peer is reported as connectionFailed with the L2CAP
/// result in the userInfo (our choice), no answer as connectionTimeout, a lost link as peripheralDisconnected.
extension L2CAPOpenError {
    var cbError: any Error {
        switch self {
        case .notConnected, .failed(.linkClosed):
            return CBError(.peripheralDisconnected)
        case .failed(.timeout):
            return CBError(.connectionTimeout)
        case let .failed(.refused(r)):
            return CBError(
                .connectionFailed,
                userInfo: [
                    NSLocalizedFailureReasonErrorKey: "L2CAP connection refused: \(r)",
                    "L2CAPResult": Int(r.rawValue),
                ])
        case let .failed(f):
            return CBError(.connectionFailed, userInfo: [NSLocalizedFailureReasonErrorKey: "\(f)"])
        case let .pairingFailed(why):
            return CBATTError(.insufficientAuthentication, userInfo: [NSLocalizedFailureReasonErrorKey: why])
        }
    }
}
