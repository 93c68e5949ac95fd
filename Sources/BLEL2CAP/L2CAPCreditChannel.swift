// One connection-oriented channel in LE Credit Based Flow Control mode (Vol 3 Part A §3.4.3, §10.1), as a
// pure state machine: SDU segmentation into K-frames over the peer's MPS (the first K-frame carries the
// 2-octet SDU length), reassembly bounded by our MTU, and credits both ways.
//
// Credits. We send a K-frame only while the peer has given us a credit. We grant the peer credits for a
// receive window of `receiveWindow` octets: what the application has not yet consumed plus what the peer may
// still send never exceeds it (plus one SDU being reassembled), so a slow reader throttles the sender instead
// of growing memory. Credits come back as the application consumes data (`consumed(_:)`), in batches.
//
// Violations (§3.4.3, §4.24, §10.1) — a credit count past 65535, a K-frame longer than MPS, an SDU length
// above MTU, K-frames that overrun the announced SDU length, a K-frame sent without a credit — make the
// channel return `.violation`: the owner disconnects the channel.
import BLEWire

public struct L2CAPCreditChannel: Sendable {
    public let psm: UInt16
    /// Our CID (the peer sends to it) and the peer's CID (we send to it).
    public let localCID: UInt16
    public let remoteCID: UInt16
    /// The largest SDU and K-frame payload we accept.
    public private(set) var localMTU: UInt16
    public private(set) var localMPS: UInt16
    /// The largest SDU and K-frame payload the peer accepts.
    public private(set) var remoteMTU: UInt16
    public private(set) var remoteMPS: UInt16
    /// Credits the peer gave us: K-frames we may still send.
    public private(set) var sendCredits: Int
    /// Credits we gave the peer that it has not used yet.
    public private(set) var receiveCredits: Int
    /// Octets delivered to the application that it has not consumed yet.
    public private(set) var unconsumed = 0
    /// Octets of receive window (see the file comment).
    public let receiveWindow: Int

    // Reassembly of the SDU in progress.
    private var sdu: [UInt8] = []
    private var sduLength: Int?

    // Segmentation: K-frames of queued SDUs waiting for credits (payloads without the L2CAP header).
    private var outgoing = FIFO<[UInt8]>()
    /// K-frame octets queued and not yet sent.
    public private(set) var queuedOctets = 0

    public enum Violation: Error, Equatable, Sendable, CustomStringConvertible {
        case creditOverflow(Int)
        case frameLongerThanMPS(Int)
        case sduLongerThanMTU(Int)
        case sduOverrun(expected: Int, received: Int)
        case frameWithoutCredit
        case emptyFirstFrame

        public var description: String {
            switch self {
            case let .creditOverflow(n): return "credit count would reach \(n) (limit 65535)"
            case let .frameLongerThanMPS(n): return "K-frame of \(n) octets exceeds our MPS"
            case let .sduLongerThanMTU(n): return "SDU length \(n) exceeds our MTU"
            case let .sduOverrun(e, r): return "K-frames carry \(r) octets for an SDU of \(e)"
            case .frameWithoutCredit: return "K-frame received while the peer had no credit"
            case .emptyFirstFrame: return "first K-frame shorter than its SDU length field"
            }
        }
    }

    public init(
        psm: UInt16, localCID: UInt16, remoteCID: UInt16, localMTU: UInt16, localMPS: UInt16,
        remoteMTU: UInt16, remoteMPS: UInt16, sendCredits: UInt16, receiveCredits: UInt16, receiveWindow: Int
    ) {
        self.psm = psm
        self.localCID = localCID
        self.remoteCID = remoteCID
        self.localMTU = localMTU
        self.localMPS = localMPS
        self.remoteMTU = remoteMTU
        self.remoteMPS = remoteMPS
        self.sendCredits = Int(sendCredits)
        self.receiveCredits = Int(receiveCredits)
        self.receiveWindow = receiveWindow
    }

    /// The credits to grant at the start for a window of `window` octets of `mps`-octet K-frames.
    public static func initialCredits(window: Int, mps: UInt16) -> UInt16 {
        UInt16(clamping: max(1, window / max(1, Int(mps))))
    }

    // MARK: Receiving

    /// Takes one K-frame payload. Returns a complete SDU, nil while one is incomplete, or throws a violation.
    public mutating func receive(_ frame: [UInt8]) throws(Violation) -> [UInt8]? {
        guard receiveCredits > 0 else { throw .frameWithoutCredit }
        receiveCredits -= 1
        guard frame.count <= Int(localMPS) else { throw .frameLongerThanMPS(frame.count) }
        if let expected = sduLength {
            guard sdu.count + frame.count <= expected else { throw .sduOverrun(expected: expected, received: sdu.count + frame.count) }
            sdu.append(contentsOf: frame)
        } else {
            guard frame.count >= 2 else { throw .emptyFirstFrame }
            let length = Int(frame[0]) | Int(frame[1]) << 8
            guard length <= Int(localMTU) else { throw .sduLongerThanMTU(length) }
            guard frame.count - 2 <= length else { throw .sduOverrun(expected: length, received: frame.count - 2) }
            if frame.count - 2 == length {
                unconsumed += length
                return Array(frame[2...])
            }
            sduLength = length
            sdu.reserveCapacity(length)
            sdu.append(contentsOf: frame[2...])
        }
        guard sdu.count == sduLength else { return nil }
        let done = sdu
        sdu = []
        sduLength = nil
        unconsumed += done.count
        return done
    }

    /// The application consumed `octets` delivered octets. Returns the credits to give back now (0 when it
    /// is better to wait and send a larger batch).
    public mutating func consumed(_ octets: Int) -> UInt16 {
        unconsumed = max(0, unconsumed - octets)
        return creditsToGrant()
    }

    /// Credits that keep `unconsumed + receiveCredits × MPS` within the window, granted once a quarter of
    /// the window (or all remaining credits) can go back in one indication.
    mutating func creditsToGrant() -> UInt16 {
        let mps = max(1, Int(localMPS))
        let target = max(0, (receiveWindow - unconsumed) / mps)
        let grant = min(target - receiveCredits, 65_535 - receiveCredits)
        let batch = max(1, receiveWindow / mps / 4)
        guard grant > 0, grant >= batch || receiveCredits == 0 else { return 0 }
        receiveCredits += grant
        return UInt16(grant)
    }

    // MARK: Sending

    /// The peer granted `credits`. Throws when the total would pass 65535 (§4.24: disconnect the channel).
    public mutating func addSendCredits(_ credits: UInt16) throws(Violation) {
        let total = sendCredits + Int(credits)
        guard total <= 65_535 else { throw .creditOverflow(total) }
        sendCredits = total
    }

    /// Queues one SDU (at most the peer's MTU; the caller checks) as K-frames.
    public mutating func enqueue(_ data: [UInt8]) {
        precondition(data.count <= Int(remoteMTU), "SDU larger than the peer's MTU")
        let mps = Int(remoteMPS)
        var first = [UInt8]()
        first.reserveCapacity(min(mps, data.count + 2))
        first.append(UInt8(data.count & 0xFF)); first.append(UInt8(data.count >> 8))
        let firstEnd = min(data.count, mps - 2)
        first.append(contentsOf: data[0..<firstEnd])
        outgoing.append(first)
        var i = firstEnd
        while i < data.count {
            let end = min(data.count, i + mps)
            outgoing.append(Array(data[i..<end]))
            i = end
        }
        queuedOctets += data.count + 2
    }

    /// K-frames waiting for credits.
    public var queuedFrames: Int { outgoing.count }

    /// The counters a sender checks for every SDU and K-frame, without the queues (copying the channel retains
    /// and releases each of them).
    public struct Counters: Sendable, Equatable {
        public var remoteMTU: UInt16
        public var remoteMPS: UInt16
        public var localMTU: UInt16
        public var localMPS: UInt16
        public var remoteCID: UInt16
        public var sendCredits: Int
        public var queuedOctets: Int
        public var queuedFrames: Int
    }

    public var counters: Counters {
        Counters(
            remoteMTU: remoteMTU, remoteMPS: remoteMPS, localMTU: localMTU, localMPS: localMPS, remoteCID: remoteCID,
            sendCredits: sendCredits, queuedOctets: queuedOctets, queuedFrames: outgoing.count)
    }

    /// Takes the next K-frame if a credit allows it.
    public mutating func nextFrame() -> [UInt8]? {
        guard sendCredits > 0, let f = outgoing.popFirst() else { return nil }
        sendCredits -= 1
        queuedOctets = outgoing.isEmpty ? 0 : queuedOctets - f.count
        return f
    }

    /// Reconfiguration (§4.27): the peer's new MTU and MPS for what we send.
    public mutating func peerReconfigured(mtu: UInt16, mps: UInt16) {
        remoteMTU = mtu
        remoteMPS = mps
    }

    /// Our new MTU and MPS after a reconfiguration we asked for succeeded.
    public mutating func reconfigured(mtu: UInt16, mps: UInt16) {
        localMTU = mtu
        localMPS = mps
    }
}
