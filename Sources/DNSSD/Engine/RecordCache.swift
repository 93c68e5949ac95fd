// The querier's cache (RFC 6762 §10): records with their expiry, goodbye marks and refresh progress.
//
// Bounded: only PTR, SRV, TXT, A and AAAA are kept, at most `capacity` entries; when full, the entry that
// would expire first is dropped, so a flood of junk cannot grow memory.

struct CacheEntry: Equatable {
    var record: DNSRecord
    var received: MDNSInstant
    var expires: MDNSInstant
    /// A goodbye (TTL 0) or a cache-flush made this record stale; it lingers one second (§10.1, §10.2)
    /// but no longer counts for resolution.
    var stale: Bool
    /// How many of the 80/85/90/95 % refresh queries have gone out (§5.2).
    var refreshesSent: Int
    /// 0–2 % of the TTL, in ms, added to each refresh point (§5.2).
    var jitter: Int64
    /// The interface the record last arrived on (0: unknown).
    var interface: UInt32 = 0

    /// When the next refresh query is due, if any remain.
    var nextRefresh: MDNSInstant? {
        guard !stale, refreshesSent < 4 else { return nil }
        let ttlMs = Int64(record.ttl) * 1000
        let percent = Int64(80 + 5 * refreshesSent)
        return received + (ttlMs * percent / 100 + jitter)
    }

    func remainingTTL(now: MDNSInstant) -> UInt32 {
        UInt32(max(0, (expires - now) / 1000))
    }
}

struct RecordCache {
    static let capacity = 4096
    private(set) var entries: [RecordKey: CacheEntry] = [:]

    static func cacheable(_ type: RRType) -> Bool {
        type == .ptr || type == .srv || type == .txt || type == .a || type == .aaaa
    }

    /// Adds or refreshes a record received at `now` (TTL 0 marks a goodbye, §10.1).
    mutating func insert(_ rr: DNSRecord, now: MDNSInstant, jitter: Int64, interface: UInt32 = 0) {
        let key = RecordKey(rr)
        if rr.ttl == 0 {
            if var e = entries[key] {
                e.expires = min(e.expires, now + 1000)
                e.stale = true
                entries[key] = e
            }
            return
        }
        var record = rr
        record.cacheFlush = false
        entries[key] = CacheEntry(
            record: record, received: now, expires: now + Int64(rr.ttl) * 1000,
            stale: false, refreshesSent: 0, jitter: jitter, interface: interface)
        if entries.count > RecordCache.capacity, let victim = entries.min(by: { $0.value.expires < $1.value.expires })?.key {
            entries[victim] = nil
        }
    }

    /// §10.2: records with the same name, type and class as a cache-flush record, but other data, and
    /// received more than one second ago, expire in one second.
    mutating func flush(like rr: DNSRecord, now: MDNSInstant) {
        let keep = RecordKey(rr)
        for (key, e) in entries
        where key != keep && e.record.type == rr.type && e.record.name == rr.name
            && now - e.received > 1000 && !e.stale
        {
            var copy = e
            copy.expires = min(copy.expires, now + 1000)
            copy.stale = true
            entries[key] = copy
        }
    }

    /// Forgets every record last heard on one of `interfaces` (they went away: RFC 6762 §13 leaves what
    /// to do open; mDNSResponder purges them too). Returns whether anything went.
    mutating func forget(interfaces: Set<UInt32>) -> Bool {
        let before = entries.count
        entries = entries.filter { !interfaces.contains($0.value.interface) }
        return entries.count != before
    }

    /// Removes expired entries; returns whether anything went.
    mutating func expire(now: MDNSInstant) -> Bool {
        let before = entries.count
        entries = entries.filter { $0.value.expires > now }
        return entries.count != before
    }

    /// Live (not stale) records of `name` and `type`, newest first.
    func live(_ name: DNSName, _ type: RRType) -> [DNSRecord] {
        entries.values.filter { !$0.stale && $0.record.type == type && $0.record.name == name }
            .sorted { $0.received > $1.received }.map(\.record)
    }

    func entry(_ key: RecordKey) -> CacheEntry? { entries[key] }

    /// The interface a live record of `name`, `type` and `rdata` arrived on (0 if unknown).
    func interface(of rr: DNSRecord) -> UInt32 { entries[RecordKey(rr)]?.interface ?? 0 }

    mutating func markRefreshed(_ key: RecordKey, now: MDNSInstant) {
        guard var e = entries[key] else { return }
        while let t = e.nextRefresh, t <= now { e.refreshesSent += 1 }
        entries[key] = e
    }

    /// The earliest expiry, or refresh of an interesting record.
    func nextDeadline(interesting: Set<DNSName>) -> MDNSInstant? {
        var best: MDNSInstant?
        for e in entries.values {
            var t = e.expires
            if interesting.contains(e.record.name), let r = e.nextRefresh { t = min(t, r) }
            if best.map({ t < $0 }) ?? true { best = t }
        }
        return best
    }
}
