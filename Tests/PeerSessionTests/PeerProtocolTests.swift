// The session protocol's wire format: every message round-trips, every truncation is an error, the framer
// takes a stream byte by byte, oversized length headers are refused before any allocation.
import Testing
@testable import PeerSession

let samples: [PeerMessage] = [
    .hello(version: 1, identity: PeerIdentity(token: 0x0123_4567_89AB_CDEF, displayName: "Kenshin ✓"), port: 4242),
    .invite(id: 7, mesh: 99, context: [1, 2, 3]), .invite(id: 8, mesh: 1, context: nil),
    .inviteReply(id: 7, accepted: true), .join(mesh: 99), .joinReply(accepted: false),
    .members(mesh: 77, [PeerMember(identity: PeerIdentity(token: 5, displayName: "b"), host: "10.0.0.2", port: 7)]),
    .data(id: 3, final: false, unreliable: false, chunk: [9, 9]), .data(id: 4, final: true, unreliable: true, chunk: []),
    .resourceStart(id: 1, size: 1 << 33, name: "photo.png"), .resourceChunk(id: 1, chunk: [0xFF]), .resourceEnd(id: 1),
    .resourceCancel(id: 1), .resourceAck(id: 1), .streamOpen(id: 2, name: "s"), .streamData(id: 2, chunk: [1]),
    .streamCredit(id: 2, octets: 65536), .streamClose(id: 2), .ping, .pong, .bye, .evict(token: 42),
    .hello(
        version: 1, identity: PeerIdentity(token: 9, displayName: "B"), port: 0,
        bluetooth: PeerBluetoothEndpoint(address: [1, 2, 3, 4, 5, 0xC6], isRandom: true, psm: 0x81)),
    .members(
        mesh: 1,
        [
            PeerMember(identity: PeerIdentity(token: 5, displayName: "b"), host: "10.0.0.2", port: 7),
            PeerMember(identity: PeerIdentity(token: 5, displayName: "b"), host: "ble:C6:05:04:03:02:01/random", port: 0x81),
        ]),
    .infoRequest, .info(["room": "1", "": "empty key"]), .info([:]),
]

@Suite struct PeerProtocolTests {
    @Test func everyMessageRoundTripsThroughTheFramer() throws {
        var all: [UInt8] = []
        for m in samples { m.frame.encode(into: &all) }
        var d = PeerFrameDecoder()
        var out: [PeerMessage] = []
        for b in all {   // byte by byte
            d.append([b])
            while let f = try d.next() { out.append(try PeerMessage(frame: f)) }
        }
        #expect(out == samples)
        #expect(d.buffered == 0)
    }

    @Test func truncatedBodiesAreMalformed() throws {
        for m in samples {
            let f = m.frame
            // Messages whose body ends with free-form bytes accept any length of them; the others must not.
            if case .data = m { continue }
            if case .resourceChunk = m { continue }
            if case .streamData = m { continue }
            for n in 0..<f.payload.count {
                // A hello without its optional Bluetooth tail is the plain hello.
                if case let .hello(v, id, port, bt?) = m, n == f.payload.count - 9 {
                    #expect(bt.psm != 0)
                    #expect(try PeerMessage(frame: PeerFrame(type: f.type, flags: f.flags, payload: Array(f.payload[0..<n]))) == .hello(version: v, identity: id, port: port))
                    continue
                }
                #expect(throws: PeerProtocolError.self) { _ = try PeerMessage(frame: PeerFrame(type: f.type, flags: f.flags, payload: Array(f.payload[0..<n]))) }
            }
            #expect(throws: PeerProtocolError.self) { _ = try PeerMessage(frame: PeerFrame(type: f.type, flags: f.flags, payload: f.payload + [0])) }
        }
    }

    @Test func oversizedLengthHeadersAndGarbage() throws {
        var d = PeerFrameDecoder()
        d.append([7, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0x7F])
        #expect(throws: PeerProtocolError.frameTooLong(0x7FFF_FFFF)) { _ = try d.next() }
        var g = PeerFrameDecoder()
        g.append([1, 0, 9, 9, 0, 0, 0, 0])
        #expect(throws: PeerProtocolError.self) { _ = try g.next() }
        #expect(try PeerMessage(frame: PeerFrame(type: 200, payload: [1, 2])) == .unknown(type: 200))
    }

    @Test func assemblyIsBoundedAndOrdered() throws {
        let big = (0..<200_000).map { UInt8(truncatingIfNeeded: $0) }
        var a = MessageAssembler(maximumMessage: 300_000)
        var got: [UInt8]?
        for case let .data(id, final, _, chunk) in MessageAssembler.split(big, id: 1) { got = try a.take(id: id, final: final, chunk: chunk) }
        #expect(got == big)
        var small = MessageAssembler(maximumMessage: 100_000)
        #expect(throws: PeerProtocolError.self) {
            for case let .data(id, final, _, chunk) in MessageAssembler.split(big, id: 2) { _ = try small.take(id: id, final: final, chunk: chunk) }
        }
        var interleaved = MessageAssembler()
        _ = try interleaved.take(id: 1, final: false, chunk: [1])
        #expect(throws: PeerProtocolError.self) { _ = try interleaved.take(id: 2, final: true, chunk: [2]) }
    }
}
