// The querier half: continuous browse queries, the cache, resolution and found/updated/lost events
// (RFC 6762 §5.2, §7, §10; RFC 6763 §4–§6, §12).

/// One continuous DNS-SD browse (RFC 6762 §5.2).
struct Browse: Equatable {
    let id: BrowseID
    let serviceType: DNSName
    /// The next PTR query; intervals start at 1 s and double up to 60 minutes.
    var nextQuery: MDNSInstant
    var interval: Int64
    /// What we last reported, by instance name.
    var reported: [DNSName: ResolvedService] = [:]

    static let maxInterval: Int64 = 3_600_000
}

extension MDNSEngine {
    /// Names whose records we must keep fresh: browsed types, their instances, and those instances' hosts.
    func interestingNames() -> Set<DNSName> {
        var names = Set<DNSName>()
        for b in browses {
            names.insert(b.serviceType)
            for ptr in cache.live(b.serviceType, .ptr) {
                guard case .ptr(let instance) = ptr.rdata else { continue }
                names.insert(instance)
                for srv in cache.live(instance, .srv) {
                    if case .srv(_, _, _, let target) = srv.rdata { names.insert(target) }
                }
            }
        }
        return names
    }

    /// Takes a response's answers and additionals into the cache (§10), then re-evaluates browses.
    mutating func absorbResponse(_ msg: DNSMessage, from source: MDNSPeer, now: MDNSInstant, out: inout [MDNSAction]) {
        let records = (msg.answers + msg.additionals).filter { $0.rrclass == dnsClassIN && RecordCache.cacheable($0.type) }
        guard !records.isEmpty else { return }
        for rr in records where rr.cacheFlush && rr.ttl > 0 { cache.flush(like: rr, now: now) }
        for rr in records {
            let jitter = Int64.random(in: 0...Int64(max(rr.ttl, 1)) * 20, using: &rng)   // 2 % of the TTL in ms
            cache.insert(rr, now: now, jitter: jitter, interface: source.interface)
        }
        evaluateBrowses(now: now, out: &out)
    }

    mutating func querierTick(now: MDNSInstant, out: inout [MDNSAction]) {
        var questions: [DNSQuestion] = []
        func ask(_ name: DNSName, _ type: RRType) {
            let q = DNSQuestion(name: name, type: type)
            if !questions.contains(q) { questions.append(q) }
        }
        // §5.2 continuous querying: 1 s, doubling, capped at 60 minutes.
        for i in browses.indices where browses[i].nextQuery <= now {
            ask(browses[i].serviceType, .ptr)
            browses[i].nextQuery = now + browses[i].interval
            browses[i].interval = min(browses[i].interval * 2, Browse.maxInterval)
        }
        // §5.2 cache maintenance: query again at 80, 85, 90, 95 % of the TTL for records still wanted.
        let wanted = interestingNames()
        for (key, e) in cache.entries where wanted.contains(e.record.name) {
            if let t = e.nextRefresh, t <= now {
                ask(e.record.name, e.record.type)
                cache.markRefreshed(key, now: now)
            }
        }
        if cache.expire(now: now) || !questions.isEmpty { evaluateBrowses(now: now, out: &out) }
        if let t = resolveRetryAt, t <= now {
            resolveRetryAt = nil
            evaluateBrowses(now: now, out: &out)
        }
        resolveAsked = resolveAsked.filter { now - $0.value < 10_000 }
        if !questions.isEmpty { sendQuery(questions, now: now, out: &out) }
    }

    /// A multicast query carrying our known answers (§7.1): cached records for the questions with more
    /// than half their TTL left, their TTL field set to what remains.
    mutating func sendQuery(_ questions: [DNSQuestion], now: MDNSInstant, out: inout [MDNSAction]) {
        var known: [DNSRecord] = []
        for q in questions {
            for var rr in cache.live(q.name, q.type) {
                guard let e = cache.entry(RecordKey(rr)) else { continue }
                let remaining = e.remainingTTL(now: now)
                guard remaining > rr.ttl / 2 else { continue }
                rr.ttl = remaining
                known.append(rr)
            }
        }
        send(DNSMessage(header: .mdnsQuery, questions: questions, answers: known), to: .multicast, out: &out)
    }

    /// Resolves each browse from the cache and reports the differences; asks for what is missing.
    mutating func evaluateBrowses(now: MDNSInstant, out: inout [MDNSAction]) {
        var questions: [DNSQuestion] = []
        for i in browses.indices {
            var current: [DNSName: ResolvedService] = [:]
            var present = Set<DNSName>()
            for ptr in cache.live(browses[i].serviceType, .ptr) {
                guard case .ptr(let instance) = ptr.rdata else { continue }
                present.insert(instance)
                let srv = cache.live(instance, .srv).first
                let txt = cache.live(instance, .txt).first
                guard let srv, case .srv(_, _, let port, let target) = srv.rdata, let txt, case .txt(let strings) = txt.rdata else {
                    askOnce(instance, [.srv, .txt], now: now, into: &questions)
                    continue
                }
                var addresses: [IPAddress] = []
                var interfaces: [IPAddress: UInt32] = [:]
                for rr in cache.live(target, .a) + cache.live(target, .aaaa) {
                    let address: IPAddress
                    switch rr.rdata {
                    case .a(let b): address = .v4(b)
                    case .aaaa(let b): address = .v6(b)
                    default: continue
                    }
                    addresses.append(address)
                    let i = cache.interface(of: rr)
                    if i != 0 { interfaces[address] = i }
                }
                addresses.sort { $0.description < $1.description }
                guard !addresses.isEmpty else {
                    askOnce(target, [.a, .aaaa], now: now, into: &questions)
                    continue
                }
                current[instance] = ResolvedService(
                    instance: instance, txt: TXTRecord(rdataStrings: strings),
                    host: target, port: port, addresses: addresses, interfaces: interfaces)
            }
            let id = browses[i].id
            for (name, service) in current.sorted(by: { $0.key < $1.key }) {
                switch browses[i].reported[name] {
                case nil: out.append(.event(.found(id, service)))
                case let old? where old != service: out.append(.event(.updated(id, service)))
                default: break
                }
                browses[i].reported[name] = service
            }
            for name in browses[i].reported.keys.sorted() where !present.contains(name) {
                browses[i].reported[name] = nil
                out.append(.event(.lost(id, instanceName: name.firstLabel)))
            }
        }
        if !questions.isEmpty { sendQuery(questions, now: now, out: &out) }
    }

    /// Asks for `types` of `name` unless asked within the last second; remembers when to try again.
    mutating func askOnce(_ name: DNSName, _ types: [RRType], now: MDNSInstant, into questions: inout [DNSQuestion]) {
        if let last = resolveAsked[name], now - last < 1000 {
            let retry = last + 1000
            resolveRetryAt = min(resolveRetryAt ?? retry, retry)
            return
        }
        resolveAsked[name] = now
        for t in types { questions.append(DNSQuestion(name: name, type: t)) }
    }
}
