// Packets a host has given the controller and not yet seen completed, per connection handle (Vol 4 Part E
// §4.1.1, §7.7.19): counted for every ACL packet sent and every Number Of Completed Packets.
//
// A short list searched in order, not a dictionary: a host has a handful of links, and the dictionary hashed the
// handle (SipHash) twice per packet, about 6 % of a sender's instructions over rootcanal (callgrind).
struct InFlightCounts {
    private var entries: [(handle: UInt16, count: Int)] = []

    private func index(of handle: UInt16) -> Int? {
        var i = 0
        while i < entries.count {
            if entries[i].handle == handle { return i }
            i += 1
        }
        return nil
    }

    /// Starts counting `handle` at zero (a new link).
    mutating func start(_ handle: UInt16) {
        if let i = index(of: handle) { entries[i].count = 0 } else { entries.append((handle, 0)) }
    }

    /// One more packet in flight on `handle` (counted from now on if it was not).
    mutating func sent(on handle: UInt16) {
        if let i = index(of: handle) { entries[i].count += 1 } else { entries.append((handle, 1)) }
    }

    /// The controller reports `count` packets of `handle` done: returns how many of ours that frees (never more
    /// than are in flight; none for a handle not counted).
    mutating func completed(_ count: Int, on handle: UInt16) -> Int {
        guard let i = index(of: handle) else { return 0 }
        let done = min(entries[i].count, count)
        entries[i].count -= done
        return done
    }

    /// Stops counting `handle` (its link ended) and returns what was still in flight on it.
    mutating func remove(_ handle: UInt16) -> Int? {
        guard let i = index(of: handle) else { return nil }
        return entries.remove(at: i).count
    }

    mutating func removeAll() { entries.removeAll() }
}
