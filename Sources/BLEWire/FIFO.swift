// FIFO: a first-in first-out queue on a ring of slots, for the queues of the packet path (packets waiting for
// controller buffers, K-frames waiting for credits, procedures waiting their turn, packets on the simulated
// air).
//
// Taking from the front moves the element out of its slot and the head on by one: nothing is shifted, and the
// queue keeps no reference to what it gave away (a packet's bytes are freed when its last user lets go, not
// at a later compaction). The ring doubles when full, so it holds at most twice the most that ever waited at
// once; one that grew past `retainedCapacity` gives its slots back when it empties.
public struct FIFO<Element> {
    @usableFromInline var storage: [Element?] = []
    /// The slot of the oldest element.
    @usableFromInline var head = 0
    @usableFromInline var waiting = 0

    /// Slots an empty queue keeps for its next use; a larger ring is freed when the queue empties.
    @inlinable public static var retainedCapacity: Int { 1024 }

    @inlinable public init() {}

    /// Elements waiting.
    @inlinable public var count: Int { waiting }

    @inlinable public var isEmpty: Bool { waiting == 0 }

    /// The oldest element, if any.
    @inlinable public var first: Element? { waiting > 0 ? storage[head] : nil }

    /// Slots the ring holds (for tests of the bound).
    public var storageCount: Int { storage.count }

    /// The slot of the `i`th waiting element.
    @inlinable func slot(_ i: Int) -> Int {
        let s = head + i
        return s >= storage.count ? s - storage.count : s
    }

    @inlinable public mutating func append(_ element: Element) {
        if waiting == storage.count { grow() }
        storage[slot(waiting)] = element
        waiting += 1
    }

    /// Takes the oldest element.
    @inlinable public mutating func popFirst() -> Element? {
        guard waiting > 0 else { return nil }
        let e = storage[head].take()
        waiting -= 1
        if waiting == 0 {
            head = 0
            if storage.count > Self.retainedCapacity { storage = [] }
        } else {
            head += 1
            if head == storage.count { head = 0 }
        }
        return e
    }

    /// The oldest element, changed in place. The queue must not be empty.
    @inlinable public var front: Element {
        get { storage[head]! }
        _modify { yield &storage[head]! }
    }

    @inlinable public mutating func removeAll() {
        storage.removeAll()
        head = 0
        waiting = 0
    }

    /// Drops the waiting elements that match, keeping the order of the rest.
    @inlinable public mutating func removeAll(where drop: (Element) throws -> Bool) rethrows {
        var kept: [Element?] = []
        kept.reserveCapacity(waiting)
        for i in 0..<waiting {
            let e = storage[slot(i)].take()!
            if try !drop(e) { kept.append(e) }
        }
        storage = kept
        head = 0
        waiting = kept.count
    }

    /// Doubles the ring (8 slots at first), the waiting elements moved to its start in order.
    @usableFromInline mutating func grow() {
        let capacity = Swift.max(8, storage.count * 2)
        var bigger: [Element?] = []
        bigger.reserveCapacity(capacity)
        for i in 0..<waiting { bigger.append(storage[slot(i)].take()) }
        bigger.append(contentsOf: repeatElement(nil, count: capacity - waiting))
        storage = bigger
        head = 0
    }
}

extension FIFO: Sequence {
    public struct Iterator: IteratorProtocol {
        @usableFromInline let queue: FIFO
        @usableFromInline var i = 0
        @inlinable init(_ queue: FIFO) { self.queue = queue }
        @inlinable public mutating func next() -> Element? {
            guard i < queue.waiting else { return nil }
            defer { i += 1 }
            return queue.storage[queue.slot(i)]
        }
    }

    /// The waiting elements, oldest first.
    @inlinable public func makeIterator() -> Iterator { Iterator(self) }
    @inlinable public var underestimatedCount: Int { waiting }
}

extension FIFO: Sendable where Element: Sendable {}
