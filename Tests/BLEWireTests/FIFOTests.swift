// FIFO: order, in-place changes at the front, removal by predicate, the bound on the slots a queue that
// never empties keeps, and that it keeps nothing it gave away.
import Testing
import BLEWire

@Suite struct FIFOTests {
    @Test func takesInOrderAndEmptiesCleanly() {
        var q = FIFO<Int>()
        #expect(q.isEmpty && q.first == nil && q.popFirst() == nil)
        for i in 0..<10 { q.append(i) }
        #expect(q.count == 10 && q.first == 0 && Array(q) == Array(0..<10))
        #expect((0..<4).map { _ in q.popFirst() } == [0, 1, 2, 3])
        q.front += 100
        #expect(q.first == 104 && Array(q) == [104, 5, 6, 7, 8, 9])
        q.removeAll { $0 % 2 == 1 }
        #expect(Array(q) == [104, 6, 8] && q.storageCount == 3)
        while q.popFirst() != nil {}
        #expect(q.isEmpty && q.storageCount == 3)
        q.append(1)
        #expect(Array(q) == [1])
    }

    final class Token {}

    /// An element taken from the front is the caller's alone: the queue holds no reference to it, so what it
    /// owns is freed when the caller lets go, whatever still waits behind it.
    @Test func whatIsTakenIsNoLongerHeld() {
        var q = FIFO<Token>()
        weak var gone: Token?
        for _ in 0..<5 { q.append(Token()) }
        do {
            let t = q.popFirst()
            gone = t
            #expect(gone != nil)
        }
        #expect(gone == nil)
        #expect(q.count == 4)
    }

    /// A ring that grew for a burst gives its slots back once it empties; a small one keeps them for reuse.
    @Test func aLargeRingIsFreedWhenItEmpties() {
        var q = FIFO<Int>()
        for i in 0..<(FIFO<Int>.retainedCapacity + 1) { q.append(i) }
        #expect(q.storageCount > FIFO<Int>.retainedCapacity)
        var expected = 0
        while let x = q.popFirst() {
            #expect(x == expected)
            expected += 1
        }
        #expect(expected == FIFO<Int>.retainedCapacity + 1 && q.storageCount == 0)
        for i in 0..<10 { q.append(i) }
        while q.popFirst() != nil {}
        #expect(q.storageCount == 16)
    }

    /// Fed faster than it drains and never empty: it holds what waits (at most twice that, plus the first
    /// ring's slots), not everything that passed through, and gives every element back once, in order.
    @Test func aQueueThatNeverEmptiesStaysBounded() {
        var q = FIFO<Int>()
        var next = 0, expected = 0, maxCount = 0, maxSlots = 0
        for _ in 0..<10 { q.append(next); next += 1 }
        for round in 0..<20_000 {
            for _ in 0..<(round % 2 == 0 ? 4 : 2) { q.append(next); next += 1 }
            for _ in 0..<3 {
                #expect(q.popFirst() == expected)
                expected += 1
            }
            #expect(!q.isEmpty)
            maxCount = max(maxCount, q.count)
            maxSlots = max(maxSlots, q.storageCount)
        }
        #expect(next > 60_000)
        #expect(maxSlots <= 2 * maxCount + 64)
        #expect(Array(q) == Array(expected..<next))
    }
}
