// L2CAP basic frames on LE-U (Core Spec Vol 3 Part A §3.1): a 4-octet header (PDU length, channel ID)
// and the payload, fragmented into ACL packets no larger than the controller's buffers, and recombined
// on the way in.

/// Channel identifiers (Vol 3 Part A §2.1, Table 2.3). Unknown values are kept.
public struct L2CAPChannelID: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public static let att = L2CAPChannelID(rawValue: 0x0004)
    public static let leSignaling = L2CAPChannelID(rawValue: 0x0005)
    public static let smp = L2CAPChannelID(rawValue: 0x0006)

    public var description: String {
        switch self {
        case .att: return "ATT"
        case .leSignaling: return "LE signalling"
        case .smp: return "SMP"
        default: return "CID 0x" + String(rawValue, radix: 16)
        }
    }
}

/// One ACL payload of a fragmented frame.
public struct L2CAPFragment: Sendable, Equatable {
    public enum Boundary: Sendable, Equatable { case first, continuing }
    public var boundary: Boundary
    public var bytes: [UInt8]
    public init(boundary: Boundary, bytes: [UInt8]) { self.boundary = boundary; self.bytes = bytes }
}

/// A complete L2CAP frame.
public struct L2CAPFrame: Sendable, Equatable {
    public var channelID: L2CAPChannelID
    public var payload: [UInt8]
    public init(channelID: L2CAPChannelID, payload: [UInt8]) { self.channelID = channelID; self.payload = payload }
}

public enum L2CAPFragmenter {
    /// Frames `payload` for `channelID` and splits it into ACL payloads of at most `maximumFragmentSize`.
    public static func fragment(_ payload: [UInt8], channelID: L2CAPChannelID, maximumFragmentSize: Int) -> [L2CAPFragment] {
        precondition(maximumFragmentSize > 0, "the controller's ACL buffer size must be positive")
        precondition(payload.count <= 0xFFFF, "an L2CAP frame carries at most 65535 octets")
        var frame = [UInt8]()
        frame.reserveCapacity(payload.count + 4)
        frame.append(UInt8(payload.count & 0xFF)); frame.append(UInt8(payload.count >> 8))
        frame.append(UInt8(channelID.rawValue & 0xFF)); frame.append(UInt8(channelID.rawValue >> 8))
        frame.append(contentsOf: payload)
        if frame.count <= maximumFragmentSize { return [L2CAPFragment(boundary: .first, bytes: frame)] }
        var out: [L2CAPFragment] = []
        out.reserveCapacity(frame.count / maximumFragmentSize + 1)
        var i = 0
        while i < frame.count {
            let end = min(frame.count, i + maximumFragmentSize)
            out.append(L2CAPFragment(boundary: i == 0 ? .first : .continuing, bytes: Array(frame[i..<end])))
            i = end
        }
        return out
    }
}

public enum L2CAPRecombinationError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A continuing fragment arrived with no frame started.
    case continuationWithoutStart
    /// The frame announces more octets than this channel accepts.
    case frameTooLong(Int)
    /// Fragments carried more octets than the header announced.
    case overflow(expected: Int, received: Int)
    /// A new frame started before the previous one was complete; the partial frame was dropped.
    case incompleteFrameDropped(received: Int, expected: Int)

    public var description: String {
        switch self {
        case .continuationWithoutStart: return "L2CAP continuation fragment without a start"
        case let .frameTooLong(n): return "L2CAP frame of \(n) octets exceeds the limit"
        case let .overflow(e, r): return "L2CAP fragments carry \(r) octets for a frame of \(e)"
        case let .incompleteFrameDropped(r, e): return "incomplete L2CAP frame dropped (\(r) of \(e) octets)"
        }
    }
}

/// Reassembles ACL payloads into L2CAP frames (Vol 3 Part A §7.2). Streaming contract: `append` returns
/// nil while a frame is incomplete. Buffering is bounded by `maximumFrameLength`.
public struct L2CAPRecombiner: Sendable {
    public let maximumFrameLength: Int
    private var buffer: [UInt8] = []
    private var expected = 0   // total octets including the 4-octet header, 0 when idle or header unknown
    private var active = false

    public init(maximumFrameLength: Int) {
        self.maximumFrameLength = maximumFrameLength
    }

    public var isIdle: Bool { !active }

    /// Feeds one ACL payload. Throws on protocol errors; the recombiner is then idle again, except for
    /// `incompleteFrameDropped`, after which the new fragment has been taken as the start of a frame
    /// (call `append` again with an empty continuation is not needed: use `pendingFrame()` if it completed).
    public mutating func append(_ data: [UInt8], boundary: L2CAPFragment.Boundary) throws -> L2CAPFrame? {
        try append(data[...], boundary: boundary)
    }

    /// `append` for a fragment as it lies in its ACL packet (the host hands `packet.bytes[4...]`): no array is
    /// made for it; its octets are copied once, into the frame being recombined.
    public mutating func append(_ data: ArraySlice<UInt8>, boundary: L2CAPFragment.Boundary) throws -> L2CAPFrame? {
        switch boundary {
        case .first:
            // Fast path: a whole frame in one fragment.
            let s = data.startIndex
            if !active, data.count >= 4 {
                let len = Int(data[s]) | Int(data[s + 1]) << 8
                if data.count == len + 4 {
                    guard len <= maximumFrameLength else { throw L2CAPRecombinationError.frameTooLong(len) }
                    return L2CAPFrame(channelID: L2CAPChannelID(rawValue: UInt16(data[s + 2]) | UInt16(data[s + 3]) << 8), payload: Array(data[(s + 4)...]))
                }
            }
            let dropped = active ? (buffer.count, expected) : nil
            buffer.removeAll(keepingCapacity: true)
            active = true
            expected = 0
            let frame = try take(data)
            if let (r, e) = dropped {
                // Keep the new frame's progress; report the loss.
                if let frame { stash = frame }
                throw L2CAPRecombinationError.incompleteFrameDropped(received: r, expected: e)
            }
            return frame
        case .continuing:
            guard active else { throw L2CAPRecombinationError.continuationWithoutStart }
            return try take(data)
        }
    }

    /// A frame completed by the fragment that also reported a dropped predecessor.
    private var stash: L2CAPFrame?

    /// Returns (once) a frame completed while `append` was throwing `incompleteFrameDropped`.
    public mutating func pendingFrame() -> L2CAPFrame? {
        defer { stash = nil }
        return stash
    }

    private mutating func take(_ data: ArraySlice<UInt8>) throws -> L2CAPFrame? {
        buffer.append(contentsOf: data)
        if expected == 0 && buffer.count >= 2 {
            let len = Int(buffer[0]) | Int(buffer[1]) << 8
            guard len <= maximumFrameLength else {
                reset()
                throw L2CAPRecombinationError.frameTooLong(len)
            }
            expected = len + 4
        }
        guard expected > 0, buffer.count >= expected else { return nil }
        guard buffer.count == expected else {
            let (e, r) = (expected, buffer.count)
            reset()
            throw L2CAPRecombinationError.overflow(expected: e, received: r)
        }
        let frame = L2CAPFrame(channelID: L2CAPChannelID(rawValue: UInt16(buffer[2]) | UInt16(buffer[3]) << 8), payload: Array(buffer[4...]))
        reset()
        return frame
    }

    private mutating func reset() {
        buffer.removeAll(keepingCapacity: true)
        expected = 0
        active = false
    }
}
