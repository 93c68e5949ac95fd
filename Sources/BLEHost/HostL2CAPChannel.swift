// One L2CAP credit-based channel as the layers above the host see it (Core Bluetooth's CBL2CAPChannel, the
// `ble` tool, tests). The channel's state machine lives in its link's signalling state; this object is the
// handle on it.
//
// Threading contract: every method and callback runs on the host's loop. The properties `send` and the pump read for
// every SDU and K-frame are `@exclusivity(unchecked)`, as the host's are (see LEHost): one thread, so the runtime
// check on each access only cost instructions.
import BLEL2CAP

public final class HostL2CAPChannel: @unchecked Sendable, CustomStringConvertible {
    public let psm: UInt16
    public let localCID: UInt16
    @exclusivity(unchecked) public private(set) weak var connection: HostConnection?
    @exclusivity(unchecked) public internal(set) var isOpen = true
    /// Why it closed, once closed.
    public internal(set) var closeReason: L2CAPCreditChannels.CloseReason?

    /// A complete SDU arrived. Call `consumed(_:)` as the application uses the data: credits go back only
    /// then, so a reader that stops stops the sender.
    public var onReceive: (([UInt8]) -> Void)?
    public var onClose: ((L2CAPCreditChannels.CloseReason) -> Void)?
    /// Room for more SDUs after `send` returned false.
    @exclusivity(unchecked) public var onWritable: (() -> Void)?
    /// Free-form slot for the layer above.
    public var context: AnyObject?

    /// SDU octets the host keeps queued before `send` says "full" (at least one SDU of the peer's MTU).
    @exclusivity(unchecked) public var sendQueueLimit = 64 * 1024
    /// Set when a sender was refused (or asked with `notifyWhenWritable`); `onWritable` then follows.
    @exclusivity(unchecked) var wantsWritable = false

    /// Asks for `onWritable` once the channel takes SDUs again (for a sender that checked `canSend`).
    public func notifyWhenWritable() {
        if isWritable { onWritable?() } else { wantsWritable = true }
    }

    /// SDU octets of room `onWritable` waits for after a refusal (0: any room). A sender that refills the
    /// queue in large batches sets it, so it is called back once per batch instead of once per K-frame sent.
    @exclusivity(unchecked) public var writableRoom = 0

    /// Room enough for `onWritable`: `canSend`, and `writableRoom` octets free (or as many as the queue has).
    var isWritable: Bool {
        // `canSend`, and the room `sendQueueRoom` gives, from one reading of the counters (this runs for every K-frame sent).
        guard isOpen, let s = counters else { return false }
        let limit = queueLimit(s)
        guard s.queuedOctets < limit else { return false }
        guard writableRoom > 0 else { return true }
        return limit - s.queuedOctets >= min(writableRoom, limit)
    }

    init(psm: UInt16, localCID: UInt16, connection: HostConnection) {
        self.psm = psm
        self.localCID = localCID
        self.connection = connection
    }

    var state: L2CAPCreditChannel? { connection?.signaling.credit.channels[localCID] }

    /// The channel's counters (what the send path checks), without copying its queues as `state` does.
    var counters: L2CAPCreditChannel.Counters? { connection?.signaling.credit.counters(of: localCID) }

    /// The largest SDU the peer accepts (what one `send` may carry).
    public var peerMTU: Int { Int(counters?.remoteMTU ?? 0) }
    public var peerMPS: Int { Int(counters?.remoteMPS ?? 0) }
    public var localMTU: Int { Int(counters?.localMTU ?? 0) }
    public var localMPS: Int { Int(counters?.localMPS ?? 0) }
    public var remoteCID: UInt16 { counters?.remoteCID ?? 0 }
    /// Credits the peer has given us that we have not used.
    public var sendCredits: Int { counters?.sendCredits ?? 0 }

    /// SDU octets the queue holds before `send` says "full": `sendQueueLimit`, and at least one SDU of the peer's MTU.
    func queueLimit(_ s: L2CAPCreditChannel.Counters) -> Int { max(sendQueueLimit, Int(s.remoteMTU) + 2) }

    /// True while `send` would accept an SDU.
    public var canSend: Bool {
        guard isOpen, let s = counters else { return false }
        return s.queuedOctets < queueLimit(s)
    }

    /// SDU octets `send` still accepts before the queue is full (each SDU also counts its 2-octet length).
    public var sendQueueRoom: Int {
        guard isOpen, let s = counters else { return 0 }
        return max(0, queueLimit(s) - s.queuedOctets)
    }

    /// Queues `data` as one SDU, or several when it is larger than the peer's MTU. Returns false (and calls
    /// `onWritable` later) when the queue is full; nothing is queued then.
    @discardableResult
    public func send(_ data: [UInt8]) -> Bool {
        guard isOpen, !closing, let c = connection, let host = c.host, let s = c.signaling.credit.counters(of: localCID) else { return false }
        guard s.queuedOctets < queueLimit(s) else {
            wantsWritable = true
            return false
        }
        let mtu = Int(s.remoteMTU)
        if data.count <= mtu {
            c.signaling.credit.enqueue(data, on: localCID)
        } else {
            var i = 0
            while i < data.count {
                let end = min(data.count, i + mtu)
                c.signaling.credit.enqueue(Array(data[i..<end]), on: localCID)
                i = end
            }
        }
        host.pump(self, on: c)
        return true
    }

    /// The application used `octets` of what `onReceive` delivered.
    public func consumed(_ octets: Int) {
        guard isOpen, let c = connection, let host = c.host else { return }
        host.perform(c.signaling.channelConsumed(octets, on: localCID), on: c)
    }

    /// Disconnects the channel (Disconnection Request) once what is queued has been sent, or at once with
    /// `discardingQueued`; `onClose` follows. Nothing more may be sent after `close`.
    public func close(discardingQueued: Bool = false) {
        guard isOpen, let c = connection, let host = c.host else { return }
        if !discardingQueued, let s = counters, s.queuedFrames > 0 {
            closing = true
            return
        }
        host.perform(c.signaling.disconnectChannel(localCID), on: c)
    }

    /// Set by `close` while queued K-frames still wait for credits.
    @exclusivity(unchecked) var closing = false

    public var description: String {
        "L2CAP channel PSM 0x\(String(psm, radix: 16)) CID 0x\(String(localCID, radix: 16))" + (connection.map { " on \($0)" } ?? "")
    }
}

/// Why opening a channel failed.
public enum L2CAPOpenError: Error, Sendable, Equatable, CustomStringConvertible {
    case failed(L2CAPCreditChannels.OpenFailure)
    /// The peer asked for security and securing the link failed.
    case pairingFailed(String)
    case notConnected

    public var description: String {
        switch self {
        case let .failed(f): return "\(f)"
        case let .pairingFailed(why): return "pairing failed: \(why)"
        case .notConnected: return "not connected"
        }
    }
}
