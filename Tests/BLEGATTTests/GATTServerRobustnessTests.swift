import Testing
import BLEATT
import BLEWire
@testable import BLEGATT

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Xorshift {
    var state: UInt64
    mutating func next() -> UInt64 {
        state ^= state >> 12; state ^= state << 25; state ^= state >> 27
        return state &* 2685821657736338717
    }
}

@Test func randomPDUsNeverCrashTheServerAndRequestsAlwaysGetOneAnswer() throws {
    var s = try makeServer()
    var rng = Xorshift(state: 0x9E3779B97F4A7C15)
    let requestOpcodes: [UInt8] = [0x02, 0x04, 0x06, 0x08, 0x0A, 0x0C, 0x0E, 0x10, 0x12, 0x16, 0x18, 0x20]
    for _ in 0..<5000 {
        let length = Int(rng.next() % 12)
        var bytes = [requestOpcodes[Int(rng.next() % UInt64(requestOpcodes.count))]]
        for _ in 0..<length { bytes.append(UInt8(truncatingIfNeeded: rng.next() % 3 == 0 ? rng.next() % 0x20 : rng.next())) }
        let actions = s.handle(bytes: bytes, from: alice)
        // Dynamic values are answered by a stub application at once.
        var answered: [GATTServerAction] = []
        for a in actions {
            switch a {
            case let .readRequest(id, _, _, _): answered += s.completeRead(id: id, result: .success([0xAB]))
            case let .writeRequests(id, _, _, _): answered += s.completeWrite(id: id, error: nil)
            default: break
            }
        }
        let sent = (actions + answered).filter {
            if case .send(_, alice) = $0 { return true }; return false
        }
        #expect(sent.count == 1, "request \(bytes.hexString) got \(sent.count) answers")
    }
    #expect(s.pendingRequestCount == 0)
}

@Test func everyPrefixOfEveryRequestGetsInvalidPDU() throws {
    var s = try makeServer()
    let requests = [
        "02 1700", "04 0100 ffff", "06 0100 ffff 0028", "08 0100 ffff 0328", "0a 0300", "0c 0300 0000",
        "0e 0300 0500", "10 0100 ffff 0028", "12 1100", "16 1100 0000", "18 01", "20 0300 0500",
    ]
    for hex in requests {
        let bytes = [UInt8](hexString: hex)!
        for n in 1..<bytes.count {
            #expect(s.exchange(Array(bytes.prefix(n)).hexString) == err(bytes[0], 0, 0x04), "\(hex) cut to \(n)")
        }
    }
    #expect(s.pendingRequestCount == 0)
}
