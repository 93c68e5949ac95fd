// The per-handle count of ACL packets in flight that the host (toward its controller) and the virtual controller
// (toward its host, under flow control) keep.
import Testing
import BLEHCI

@Suite struct ACLPacketsInFlightTests {
    @Test func aclPacketsInFlightFreeNoMoreThanWasSent() {
        var counts = ACLPacketsInFlight()
        counts.start(0x40)
        for _ in 0..<5 { counts.sent(on: 0x40) }
        counts.sent(on: 0x41)
        #expect(counts.completed(3, on: 0x40) == 3)
        #expect(counts.completed(9, on: 0x40) == 2)
        #expect(counts.completed(1, on: 0x40) == 0)
        #expect(counts.completed(4, on: 0x77) == 0)
        #expect(counts.remove(0x41) == 1)
        #expect(counts.remove(0x41) == nil)
        #expect(counts.completed(1, on: 0x41) == 0)
        counts.start(0x40)
        counts.sent(on: 0x40)
        #expect(counts.remove(0x40) == 1)
    }
}
