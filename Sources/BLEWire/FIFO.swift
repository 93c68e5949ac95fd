// FIFO: a first-in first-out queue on one array, for the queues of the packet path (packets waiting for
// controller buffers, K-frames waiting for credits, procedures waiting their turn, packets on the simulated
// air).
//
// Taking from the front moves an index instead of shifting the array. The slots already taken are dropped
// when the queue empties, or once they are at least `compactionThreshold` and half the array: a queue that is
// never empty (a sender that keeps it fed for the whole of a long transfer) holds what waits in it, not
// everything that ever passed through it, and each element is moved at most once more on average.
public struct FIFO<Element> {
    @usableFromInline var storage: [Element] = []
    @usableFromInline var head = 0

    /// Taken slots dropped at once when this many make up half the array or more.
    @inlinable public static var compactionThreshold: Int { 64 }

    @inlinable public init() {}

    /// Elements waiting.
    @inlinable public var count: Int { storage.count - head }

    @inlinable public var isEmpty: Bool { head == storage.count }

    /// The oldest element, if any.
    @inlinable public var first: Element? { head < storage.count ? storage[head] : nil }

    /// Slots the array holds, taken ones included (for tests of the bound).
    public var storageCount: Int { storage.count }

    @inlinable public mutating func append(_ element: Element) { storage.append(element) }

    /// Takes the oldest element.
    @inlinable public mutating func popFirst() -> Element? {
        guard head < storage.count else { return nil }
        let e = storage[head]
        head += 1
        compact()
        return e
    }

    /// The oldest element, changed in place. The queue must not be empty.
    @inlinable public var front: Element {
        get { storage[head] }
        _modify { yield &storage[head] }
    }

    @inlinable public mutating func removeAll() {
        storage.removeAll()
        head = 0
    }

    /// Drops the waiting elements that match, keeping the order of the rest.
    @inlinable public mutating func removeAll(where drop: (Element) throws -> Bool) rethrows {
        storage = try storage[head...].filter { try !drop($0) }
        head = 0
    }

    @inlinable mutating func compact() {
        if head == storage.count {
            storage.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= Self.compactionThreshold && head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
    }
}

extension FIFO: Sequence {
    /// The waiting elements, oldest first.
    @inlinable public func makeIterator() -> ArraySlice<Element>.Iterator { storage[head...].makeIterator() }
    @inlinable public var underestimatedCount: Int { count }
}

extension FIFO: Sendable where Element: Sendable {}
