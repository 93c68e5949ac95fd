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
    private let storedPeer: CBPeer
    private let input: PipeInputStream
    private let output: PipeOutputStream
    let bridge: ChannelBridge

    /// The peer at the other end (a CBPeripheral for a central, a CBCentral for a peripheral manager).
    open var peer: CBPeer! { storedPeer }
    /// What the peer sends.
    open var inputStream: InputStream! { input }
    /// What we send.
    open var outputStream: OutputStream! { output }
    open var psm: CBL2CAPPSM { bridge.channel.psm }

    /// Call on the host loop.
    init(peer: CBPeer, channel: HostL2CAPChannel, loop: EventLoop) {
        storedPeer = peer
        input = PipeInputStream()
        output = PipeOutputStream(capacity: max(64 * 1024, 2 * channel.peerMTU))
        bridge = ChannelBridge(channel: channel, loop: loop, input: input, output: output)
        super.init()
    }

    deinit {
        bridge.release()
    }

    open override var description: String {
        "<CBL2CAPChannel: \(address(of: self)), peer = \(storedPeer.identifier.uuidString), psm = \(psm)>"
    }
}

/// Moves bytes between a host channel and the streams, on the host loop.
final class ChannelBridge: @unchecked Sendable {
    let channel: HostL2CAPChannel
    let loop: EventLoop
    let input: PipeInputStream
    let output: PipeOutputStream
    /// Octets the app has read that the loop has not yet turned into credits, and whether a hop is scheduled.
    private let consumed = Mutex<(octets: Int, scheduled: Bool)>((0, false))
    private let pumpScheduled = Atomic<Bool>(false)

    init(channel: HostL2CAPChannel, loop: EventLoop, input: PipeInputStream, output: PipeOutputStream) {
        self.channel = channel
        self.loop = loop
        self.input = input
        self.output = output
        channel.onReceive = { [input] sdu in input.deliver(sdu) }
        channel.onClose = { [input, output] reason in
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
        input.onConsumed = { [weak self] n in self?.readerConsumed(n) }
        output.onDataAvailable = { [weak self] in self?.schedulePump() }
        output.onClose = { [weak self] in self?.schedulePump() }
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

    /// Sends what the app wrote while the channel takes it; closes the channel once the app closed both
    /// streams and everything written has left.
    func pump() {
        guard channel.isOpen else { return }
        let mtu = max(1, channel.peerMTU)
        while true {
            guard channel.canSend else {
                // Full: resume when the peer's credits let queued K-frames go.
                if output.bufferedByteCount > 0 { channel.notifyWhenWritable() }
                break
            }
            let bytes = output.take(maxLength: mtu)
            if bytes.isEmpty { break }
            channel.send(bytes)
        }
        if output.isClosedByApp, output.bufferedByteCount == 0, input.isClosedByApp { channel.close() }
    }

    /// The app let go of the CBL2CAPChannel: close it (iOS closes a channel nobody references), after
    /// sending what the app had written and the channel still takes.
    func release() {
        loop.execute { [self] in
            pump()
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
            return CBError(.connectionFailed, userInfo: [NSLocalizedFailureReasonErrorKey: "L2CAP connection refused: \(r)",
                                                         "L2CAPResult": Int(r.rawValue)])
        case let .failed(f):
            return CBError(.connectionFailed, userInfo: [NSLocalizedFailureReasonErrorKey: "\(f)"])
        case let .pairingFailed(why):
            return CBATTError(.insufficientAuthentication, userInfo: [NSLocalizedFailureReasonErrorKey: why])
        }
    }
}
