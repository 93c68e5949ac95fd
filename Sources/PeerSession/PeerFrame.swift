// Framing of our peer session protocol (docs/multipeer-protocol.md): every frame is
//
//   type u8 | flags u8 | reserved u16 (0) | length u32 | payload (length octets)
//
// little-endian. A frame carries at most `maximumPayload` octets; larger messages are split by the sender
// (see PeerMessage.data). The decoder is a streaming one: it returns nil until a whole frame is buffered,
// and throws on a length over the limit, so a peer cannot make us buffer more than one frame's worth.

public struct PeerFrame: Sendable, Equatable {
    public var type: UInt8
    public var flags: UInt8
    public var payload: [UInt8]

    public init(type: UInt8, flags: UInt8 = 0, payload: [UInt8]) {
        self.type = type
        self.flags = flags
        self.payload = payload
    }

    public static let headerLength = 8
    /// The largest payload a frame may carry (1 MiB + a little for headers of data chunks).
    public static let maximumPayload = (1 << 20) + 64

    public func encode(into out: inout [UInt8]) {
        out.reserveCapacity(out.count + Self.headerLength + payload.count)
        out.append(type); out.append(flags); out.append(0); out.append(0)
        let n = UInt32(payload.count)
        out.append(UInt8(n & 0xFF)); out.append(UInt8(n >> 8 & 0xFF)); out.append(UInt8(n >> 16 & 0xFF)); out.append(UInt8(n >> 24))
        out.append(contentsOf: payload)
    }

    public func encode() -> [UInt8] {
        var out: [UInt8] = []
        encode(into: &out)
        return out
    }
}

public enum PeerProtocolError: Error, Equatable, Sendable, CustomStringConvertible {
    case frameTooLong(Int)
    case malformed(String)
    case unexpected(String)

    public var description: String {
        switch self {
        case let .frameTooLong(n): return "frame of \(n) octets exceeds the limit"
        case let .malformed(why): return "malformed frame: \(why)"
        case let .unexpected(why): return "unexpected frame: \(why)"
        }
    }
}

/// Cuts a byte stream into frames.
public struct PeerFrameDecoder: Sendable {
    private var buffer: [UInt8] = []
    private var head = 0

    public init() {}

    /// Octets buffered and not yet returned as frames.
    public var buffered: Int { buffer.count - head }

    public mutating func append(_ bytes: some Sequence<UInt8>) {
        if head > 0 && head == buffer.count { buffer.removeAll(keepingCapacity: true); head = 0 }
        buffer.append(contentsOf: bytes)
    }

    /// The next whole frame, nil when more octets are needed.
    public mutating func next() throws(PeerProtocolError) -> PeerFrame? {
        guard buffer.count - head >= PeerFrame.headerLength else { return nil }
        let h = head
        let length = Int(buffer[h + 4]) | Int(buffer[h + 5]) << 8 | Int(buffer[h + 6]) << 16 | Int(buffer[h + 7]) << 24
        guard length <= PeerFrame.maximumPayload else { throw .frameTooLong(length) }
        guard buffer[h + 2] == 0 && buffer[h + 3] == 0 else { throw .malformed("reserved octets set") }
        guard buffer.count - head >= PeerFrame.headerLength + length else { return nil }
        let frame = PeerFrame(type: buffer[h], flags: buffer[h + 1], payload: Array(buffer[h + 8..<h + 8 + length]))
        head += PeerFrame.headerLength + length
        if head == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 1 << 20 {
            buffer.removeFirst(head)
            head = 0
        }
        return frame
    }
}
