// Random octets never crash the decoders: they decode or throw.
import Testing
@testable import BLEHCI

@Suite struct RandomInputTests {
    struct RNG: RandomNumberGenerator {
        var s: UInt64
        mutating func next() -> UInt64 { s = s &* 6364136223846793005 &+ 1442695040888963407; return s }
    }

    @Test func hciDecodersSurviveGarbage() {
        var rng = RNG(s: 42)
        var decoded = 0
        for _ in 0..<20_000 {
            let n = Int.random(in: 0...40, using: &rng)
            var bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            // Keep the length octets consistent half of the time so that deeper parsing is reached.
            if bytes.count >= 2, Bool.random(using: &rng) { bytes[1] = UInt8(bytes.count - 2) }
            if (try? HCIEvent.decode(HCIPacket(type: .event, bytes: bytes))) != nil { decoded += 1 }
            if bytes.count >= 3, Bool.random(using: &rng) { bytes[2] = UInt8(bytes.count - 3) }
            _ = try? HCICommand.decode(HCIPacket(type: .command, bytes: bytes))
            _ = try? ACLPacket.decode(HCIPacket(type: .acl, bytes: bytes))
            var framer = H4Framer(maxPacketSize: 300)
            framer.append(bytes)
            while let p = try? framer.nextPacket() { _ = p }
        }
        #expect(decoded > 100)   // many random events are well-formed enough to decode (e.g. as .unknown)
    }
}
