// The transport's own framing (PeerWire, PeerFrameReader) against the reference codec of PeerSession: the
// same octets out, the same messages in however the reads are cut, resource chunks passed on in pieces, and
// bad frames refused with the same errors.
import Testing
import NIOCore
import PeerSession
@testable import PeerTransport

@Suite struct PeerWireTests {
    static let messages: [PeerMessage] = [
        .hello(version: 1, identity: PeerIdentity(token: 42, displayName: "Ünïcode"), port: 7000),
        .data(id: 1, final: true, unreliable: false, chunk: Array(0..<200).map { UInt8($0) }),
        .data(id: 2, final: false, unreliable: true, chunk: []),
        .resourceStart(id: 3, size: 5000, name: "photo.png"),
        .resourceChunk(id: 3, chunk: (0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 7) }),
        .resourceChunk(id: 3, chunk: []),
        .streamData(id: 4, chunk: [9, 8, 7]),
        .info(["a": "b"]),
        .ping,
        .resourceEnd(id: 3),
    ]

    static func encoded(_ messages: [PeerMessage]) -> [UInt8] {
        var buffer = ByteBuffer()
        PeerWire.write(messages, into: &buffer)
        return Array(buffer.readableBytesView)
    }

    /// Feeds `bytes` in reads of `size`; resource chunks (sliced when asked) are joined back per id.
    static func decode(_ bytes: [UInt8], reads size: Int, slicing: Bool) throws -> (messages: [PeerMessage], pieces: Int, buffered: Int) {
        var reader = PeerFrameReader()
        var out: [PeerMessage] = []
        var pieces = 0
        var joining: (id: UInt32, bytes: [UInt8])?
        var i = 0
        while i < bytes.count {
            let end = min(bytes.count, i + size)
            try reader.read(bytes: Array(bytes[i..<end]), slicingResourceChunks: slicing) { item in
                switch item {
                case let .message(m):
                    if let j = joining { out.append(.resourceChunk(id: j.id, chunk: j.bytes)); joining = nil }
                    out.append(m)
                case let .resourceChunk(id, chunk):
                    pieces += 1
                    let part = chunk.withUnsafeBytes { Array($0) }
                    #expect(joining == nil || joining?.id == id)
                    joining = (id, (joining?.bytes ?? []) + part)
                }
            }
            i = end
        }
        if let j = joining { out.append(.resourceChunk(id: j.id, chunk: j.bytes)) }
        return (out, pieces, reader.buffered)
    }

    @Test func writesTheReferenceOctets() {
        for m in Self.messages { #expect(Self.encoded([m]) == m.frame.encode(), "\(m)") }
    }

    @Test func readsWhateverTheCutsAndPassesResourceChunksOnInPieces() throws {
        // Two empty resource chunks in a row would join into one; keep one of them apart.
        let list = Self.messages.filter { $0 != .resourceChunk(id: 3, chunk: []) }
        let bytes = Self.encoded(list)
        for size in [1, 3, 8, 11, 12, 13, 100, 4096, bytes.count] {
            let plain = try Self.decode(bytes, reads: size, slicing: false)
            #expect(plain.messages == list, "reads of \(size)")
            #expect(plain.pieces == 0 && plain.buffered == 0)
            let sliced = try Self.decode(bytes, reads: size, slicing: true)
            #expect(sliced.messages == list, "reads of \(size), sliced")
            #expect(sliced.buffered == 0)
        }
        // Cut small, the 5000-octet chunk comes in many pieces and is never gathered.
        #expect(try Self.decode(bytes, reads: 100, slicing: true).pieces > 40)
        let head = Array(Self.encoded([.resourceChunk(id: 9, chunk: [UInt8](repeating: 1, count: 1 << 20))]).prefix(64 * 1024))
        #expect(try Self.decode(head, reads: head.count, slicing: true).buffered == 0)
        #expect(try Self.decode(head, reads: head.count, slicing: false).buffered == head.count)
    }

    @Test func refusesBadFramesAsTheReferenceDecoderDoes() {
        func error(_ bytes: [UInt8], slicing: Bool) -> PeerProtocolError? {
            var reader = PeerFrameReader()
            do { try reader.read(bytes: bytes, slicingResourceChunks: slicing) { _ in } } catch { return error }
            return nil
        }
        let tooLong = PeerFrame.maximumPayload + 1
        let cases: [[UInt8]] = [
            [9, 0, 0, 0] + le(tooLong),                       // a resource chunk too long, refused from its header
            [9, 0, 1, 0, 16, 0, 0, 0, 1, 0, 0, 0],            // reserved octets set, the chunk not yet there
            [7, 1, 0, 0, 2, 0, 0, 0, 1, 2],                   // data shorter than its id
            [1, 0, 0, 0, 1, 0, 0, 0, 1],                      // hello cut short
        ]
        for bytes in cases {
            var reference = PeerFrameDecoder()
            reference.append(bytes)
            var expected: PeerProtocolError?
            do {
                if let f = try reference.next() { _ = try PeerMessage(frame: f) }
            } catch { expected = error }
            #expect(expected != nil)
            for slicing in [false, true] { #expect(error(bytes, slicing: slicing) == expected, "\(bytes)") }
        }
    }

    private func le(_ n: Int) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: n >> (8 * $0)) } }
}
