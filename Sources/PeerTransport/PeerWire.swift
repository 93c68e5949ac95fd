// The frames of docs/multipeer-protocol.md read from and written to NIO buffers directly. Bulk messages
// (data, resource and stream chunks) are written header, id and chunk straight into the outgoing buffer
// and read with one copy of the chunk; the other messages go through PeerFrame and PeerMessage as before.
// The checks are PeerFrameDecoder's, in its order: a length over the limit is refused before any of the
// frame is buffered, then reserved octets must be zero.
import NIOCore
import PeerSession

enum PeerWire {
    /// Octets `messages` take on the wire (bulk ones exactly, others estimated from their frame).
    static func encodedLength(_ messages: [PeerMessage]) -> Int {
        var n = 0
        for m in messages {
            if let b = m.bulkParts { n += PeerFrame.headerLength + 4 + b.chunk.count } else { n += PeerFrame.headerLength + 64 }
        }
        return n
    }

    static func write(_ messages: [PeerMessage], into out: inout ByteBuffer) {
        for m in messages { write(m, into: &out) }
    }

    static func write(_ m: PeerMessage, into out: inout ByteBuffer) {
        if let b = m.bulkParts {
            out.reserveCapacity(minimumWritableBytes: PeerFrame.headerLength + 4 + b.chunk.count)
            header(type: b.type, flags: b.flags, length: 4 + b.chunk.count, into: &out)
            out.writeInteger(b.id, endianness: .little)
            out.writeBytes(b.chunk)
        } else {
            let f = m.frame
            out.reserveCapacity(minimumWritableBytes: PeerFrame.headerLength + f.payload.count)
            header(type: f.type, flags: f.flags, length: f.payload.count, into: &out)
            out.writeBytes(f.payload)
        }
    }

    private static func header(type: UInt8, flags: UInt8, length: Int, into out: inout ByteBuffer) {
        out.writeInteger(type)
        out.writeInteger(flags)
        out.writeInteger(UInt16(0))
        out.writeInteger(UInt32(length), endianness: .little)
    }

    /// The whole length (header included) of the frame `buffer` starts with, once its header is there.
    static func frameLength(in buffer: ByteBuffer) -> Int? {
        guard buffer.readableBytes >= PeerFrame.headerLength,
            let length = buffer.getInteger(at: buffer.readerIndex + 4, endianness: .little, as: UInt32.self)
        else { return nil }
        return PeerFrame.headerLength + min(Int(length), PeerFrame.maximumPayload)
    }

    /// What a frame gives: a message, or — when asked for — a resource chunk left in the buffer it came in.
    enum Item {
        case message(PeerMessage)
        case resourceChunk(id: UInt32, PeerChunk)
    }

    /// The next whole frame in `buffer` (consumed), nil while more octets are needed. With
    /// `slicingResourceChunks`, resource chunks come as slices of `buffer` (no copy).
    static func next(from buffer: inout ByteBuffer, slicingResourceChunks: Bool = false) throws(PeerProtocolError) -> Item? {
        let at = buffer.readerIndex
        guard buffer.readableBytes >= PeerFrame.headerLength,
            let type = buffer.getInteger(at: at, as: UInt8.self),
            let flags = buffer.getInteger(at: at + 1, as: UInt8.self),
            let reserved = buffer.getInteger(at: at + 2, as: UInt16.self),
            let length32 = buffer.getInteger(at: at + 4, endianness: .little, as: UInt32.self)
        else { return nil }
        let length = Int(length32)
        guard length <= PeerFrame.maximumPayload else { throw .frameTooLong(length) }
        guard reserved == 0 else { throw .malformed("reserved octets set") }
        guard buffer.readableBytes >= PeerFrame.headerLength + length else { return nil }
        buffer.moveReaderIndex(forwardBy: PeerFrame.headerLength)
        if PeerMessage.isBulk(type: type), length >= 4, let id = buffer.readInteger(endianness: .little, as: UInt32.self) {
            if slicingResourceChunks && type == PeerMessage.resourceChunkType, let slice = buffer.readSlice(length: length - 4) {
                return .resourceChunk(id: id, PeerChunk(buffer: slice))
            }
            if let chunk = buffer.readBytes(length: length - 4), let m = PeerMessage(bulkType: type, flags: flags, id: id, chunk: chunk) {
                return .message(m)
            }
        }
        let payload = buffer.readBytes(length: length) ?? []
        return .message(try PeerMessage(frame: PeerFrame(type: type, flags: flags, payload: payload)))
    }
}

/// The octets of a resource chunk where they were received (no copy made).
public struct PeerChunk: @unchecked Sendable {
    let buffer: ByteBuffer
    public var count: Int { buffer.readableBytes }
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try buffer.withUnsafeReadableBytes(body)
    }
    public init(_ bytes: [UInt8]) { buffer = ByteBuffer(bytes: bytes) }
    init(buffer: ByteBuffer) { self.buffer = buffer }
}

/// Cuts what a connection reads into frames. A frame split across reads waits in `partial` (one frame at
/// most: lengths over the limit are refused first) — except a resource chunk, when the caller takes them
/// as slices: once its header is in, its octets are passed on as they arrive, so a large chunk is neither
/// gathered nor copied.
struct PeerFrameReader {
    private var partial: ByteBuffer?
    /// Inside a resource chunk being passed on: its id and the octets still to come.
    private var streaming: (id: UInt32, left: Int)?

    /// Octets held back until their frame is whole.
    var buffered: Int { partial?.readableBytes ?? 0 }

    mutating func read(_ incoming: ByteBuffer, slicingResourceChunks slicing: Bool, _ each: (PeerWire.Item) -> Void) throws(PeerProtocolError) {
        var buffer = incoming
        if var pending = partial {
            partial = nil
            pending.writeBuffer(&buffer)
            buffer = pending
        }
        while true {
            if let s = streaming {
                let n = min(s.left, buffer.readableBytes)
                if n > 0, let piece = buffer.readSlice(length: n) { each(.resourceChunk(id: s.id, PeerChunk(buffer: piece))) }
                if n < s.left {
                    streaming = (s.id, s.left - n)
                    return
                }
                streaming = nil
                continue
            }
            if slicing, let (id, length) = Self.incompleteResourceChunk(in: buffer) {
                buffer.moveReaderIndex(forwardBy: PeerFrame.headerLength + 4)
                streaming = (id, length - 4)
                continue
            }
            guard let item = try PeerWire.next(from: &buffer, slicingResourceChunks: slicing) else { break }
            each(item)
        }
        if buffer.readableBytes > 0 {
            buffer.discardReadBytes()
            // Room for the whole frame at once, rather than growing read by read.
            if let length = PeerWire.frameLength(in: buffer) { buffer.reserveCapacity(length) }
            partial = buffer
        }
    }

    /// For tests: `bytes` as one read.
    mutating func read(bytes: [UInt8], slicingResourceChunks slicing: Bool, _ each: (PeerWire.Item) -> Void) throws(PeerProtocolError) {
        try read(ByteBuffer(bytes: bytes), slicingResourceChunks: slicing, each)
    }

    /// A valid resource chunk header and id at the start of `buffer` whose chunk has not all arrived: its
    /// id and payload length. Anything else (whole frames, other types, bad headers) is PeerWire.next's.
    private static func incompleteResourceChunk(in buffer: ByteBuffer) -> (UInt32, Int)? {
        let at = buffer.readerIndex
        guard buffer.readableBytes >= PeerFrame.headerLength + 4,
            buffer.getInteger(at: at, as: UInt8.self) == PeerMessage.resourceChunkType,
            buffer.getInteger(at: at + 2, as: UInt16.self) == 0,
            let length32 = buffer.getInteger(at: at + 4, endianness: .little, as: UInt32.self),
            let id = buffer.getInteger(at: at + PeerFrame.headerLength, endianness: .little, as: UInt32.self)
        else { return nil }
        let length = Int(length32)
        guard length >= 4, length <= PeerFrame.maximumPayload, buffer.readableBytes < PeerFrame.headerLength + length else { return nil }
        return (id, length)
    }
}
