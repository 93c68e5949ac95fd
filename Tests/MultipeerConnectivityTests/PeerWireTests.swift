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
            [9, 0, 0, 0] + le(tooLong),   // a resource chunk too long, refused from its header
            [9, 0, 1, 0, 16, 0, 0, 0, 1, 0, 0, 0],   // reserved octets set, the chunk not yet there
            [7, 1, 0, 0, 2, 0, 0, 0, 1, 2],   // data shorter than its id
            [1, 0, 0, 0, 1, 0, 0, 0, 1],   // hello cut short
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

    @Test func randomStreamsDecodeAsTheReferenceDoesUntilTheSameError() {
        // Valid frames, mutated frames and garbage, cut at random places: the reader (copying or slicing)
        // gives the reference decoder's messages, then its error if it has one; it never crashes.
        var rng = SplitMix(seed: 12)
        var withErrors = 0, withMessages = 0
        for round in 0..<400 {
            var bytes: [UInt8] = []
            for _ in 0..<Int(rng.next() % 6) {
                var frame = Self.encoded([Self.messages[Int(rng.next() % UInt64(Self.messages.count))]])
                switch rng.next() % 5 {
                case 0 where !frame.isEmpty: frame[Int(rng.next() % UInt64(frame.count))] ^= UInt8(truncatingIfNeeded: rng.next() | 1)
                case 1: frame = (0..<Int(rng.next() % 40)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                default: break
                }
                bytes += frame
            }
            var reference = PeerFrameDecoder()
            reference.append(bytes)
            var expected: [PeerMessage] = []
            var expectedError: PeerProtocolError?
            do { while let f = try reference.next() { expected.append(try PeerMessage(frame: f)) } } catch { expectedError = error }
            if expectedError != nil { withErrors += 1 }
            if !expected.isEmpty { withMessages += 1 }
            for slicing in [false, true] {
                var reader = PeerFrameReader()
                var got: [PeerMessage] = []
                var gotError: PeerProtocolError?
                var i = 0
                while i < bytes.count && gotError == nil {
                    let end = min(bytes.count, i + 1 + Int(rng.next() % 700))
                    do {
                        try reader.read(bytes: Array(bytes[i..<end]), slicingResourceChunks: slicing) { item in
                            switch item {
                            case let .message(m): got.append(m)
                            case let .resourceChunk(id, chunk): got.append(.resourceChunk(id: id, chunk: chunk.withUnsafeBytes { Array($0) }))
                            }
                        }
                    } catch { gotError = error }
                    i = end
                }
                var want = Self.joined(expected), have = Self.joined(got)
                // Sliced, the start of a chunk whose end never came was passed on; the reference holds it back.
                if slicing, have.count == want.count + 1, case .resourceChunk = have.last! { have.removeLast() }
                if have.count == want.count, slicing, case let .resourceChunk(id, w)? = want.last, case let .resourceChunk(id2, h)? = have.last,
                    id == id2, h.count > w.count, Array(h.prefix(w.count)) == w
                {
                    want[want.count - 1] = .resourceChunk(id: id, chunk: h)
                }
                #expect(have == want, "round \(round), slicing \(slicing)")
                #expect(gotError == expectedError, "round \(round), slicing \(slicing)")
            }
        }
        #expect(withErrors > 50 && withMessages > 150, "\(withErrors) streams with an error, \(withMessages) with messages")
    }

    /// Consecutive resource chunks of one resource as one (pieces and frames alike).
    static func joined(_ list: [PeerMessage]) -> [PeerMessage] {
        var out: [PeerMessage] = []
        for m in list {
            if case let .resourceChunk(id, chunk) = m, case let .resourceChunk(lastID, last)? = out.last, lastID == id {
                out[out.count - 1] = .resourceChunk(id: id, chunk: last + chunk)
            } else {
                out.append(m)
            }
        }
        return out
    }

    private func le(_ n: Int) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: n >> (8 * $0)) } }
}

/// A small deterministic generator (SplitMix64) for reproducible random streams.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
