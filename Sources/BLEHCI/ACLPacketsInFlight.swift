// ACL packets one side of HCI has handed the other and not yet seen reported done, per connection handle
// (Vol 4 Part E §4.1.1, §4.2): the host counts what it gave the controller (Number Of Completed Packets frees it),
// and a controller under controller-to-host flow control counts what it gave its host (Host Number Of Completed
// Packets frees it).
//
// A short list searched in order, not a dictionary: one entry per link, a handful at most, and both counts change
// for every packet (the host's dictionary hashed the handle with SipHash twice per packet, about 6 % of a sender's
// instructions over rootcanal, callgrind). Inlinable, so that each side's packet path gets it specialised.
public struct ACLPacketsInFlight: Sendable {
    @usableFromInline var entries: [(handle: UInt16, count: Int)] = []
    @usableFromInline var sum = 0

    @inlinable public init() {}

    /// Packets in flight on every handle together.
    @inlinable public var total: Int { sum }

    /// The handles with packets in flight, and how many each.
    public var byHandle: [UInt16: Int] {
        Dictionary(uniqueKeysWithValues: entries.filter { $0.count > 0 }.map { ($0.handle, $0.count) })
    }

    @inlinable func index(of handle: UInt16) -> Int? {
        var i = 0
        while i < entries.count {
            if entries[i].handle == handle { return i }
            i += 1
        }
        return nil
    }

    /// Counts `handle` from zero (a new link).
    @inlinable public mutating func start(_ handle: UInt16) {
        if let i = index(of: handle) {
            sum -= entries[i].count
            entries[i].count = 0
        } else {
            entries.append((handle, 0))
        }
    }

    /// One more packet in flight on `handle` (counted from now on if it was not).
    @inlinable public mutating func sent(on handle: UInt16) {
        sent(1, on: handle)
    }

    /// `count` more packets in flight on `handle`.
    @inlinable public mutating func sent(_ count: Int, on handle: UInt16) {
        sum += count
        if let i = index(of: handle) { entries[i].count += count } else { entries.append((handle, count)) }
    }

    /// `count` packets of `handle` reported done: returns how many of those in flight that frees (never more than
    /// are in flight; none for a handle not counted).
    @inlinable public mutating func completed(_ count: Int, on handle: UInt16) -> Int {
        guard let i = index(of: handle) else { return 0 }
        let done = min(entries[i].count, count)
        entries[i].count -= done
        sum -= done
        return done
    }

    /// Stops counting `handle` (its link ended) and returns what was still in flight on it.
    @discardableResult
    @inlinable public mutating func remove(_ handle: UInt16) -> Int? {
        guard let i = index(of: handle) else { return nil }
        let n = entries.remove(at: i).count
        sum -= n
        return n
    }

    @inlinable public mutating func removeAll() {
        entries.removeAll()
        sum = 0
    }
}
