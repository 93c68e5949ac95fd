// The responder half: probing, announcing, answering, defending, goodbyes (RFC 6762 §6–§10).

/// Shared answers waiting for their random 20–120 ms delay (RFC 6762 §6), aggregated.
struct PendingResponse: Equatable {
    var at: MDNSInstant
    var records: [DNSRecord]
}

extension MDNSEngine {
    // MARK: Timers

    mutating func responderTick(now: MDNSInstant, out: inout [MDNSAction]) {
        for index in registrations.indices {
            guard let due = registrations[index].deadline, due <= now else { continue }
            switch registrations[index].state {
            case .waitingToProbe, .deferredAfterTieBreak:
                sendProbe(registrations[index], first: true, out: &out)
                registrations[index].state = .probing(sent: 1, next: now + Registration.probeInterval)
            case .probing(let sent, _):
                if sent < Registration.probeCount {
                    sendProbe(registrations[index], first: false, out: &out)
                    registrations[index].state = .probing(sent: sent + 1, next: now + Registration.probeInterval)
                } else {
                    // §8.3: probing done without conflict; the name is ours.
                    let reg = registrations[index]
                    if reg.reportedName != reg.instanceLabel {
                        out.append(.event(.renamed(reg.id, from: reg.reportedName, to: reg.instanceLabel)))
                        registrations[index].reportedName = reg.instanceLabel
                    }
                    out.append(.event(.registered(reg.id, name: reg.instanceLabel)))
                    announce(reg, now: now, out: &out)
                    registrations[index].state = .announcing(sent: 1, next: now + Registration.announceInterval)
                }
            case .announcing(let sent, _):
                announce(registrations[index], now: now, out: &out)
                if sent + 1 >= Registration.announceCount {
                    registrations[index].state = .established
                } else {
                    // §8.3: the interval between announcements at least doubles.
                    registrations[index].state = .announcing(sent: sent + 1, next: now + Registration.announceInterval << Int64(sent))
                }
            case .established:
                break
            }
        }
        if let p = pending, p.at <= now {
            pending = nil
            let answers = p.records.filter { rr in
                lastMulticast[RecordKey(rr)].map { now - $0 >= 1000 } ?? true   // §6: once per second
            }
            if !answers.isEmpty {
                let msg = DNSMessage(header: .mdnsResponse, answers: answers, additionals: additionals(for: answers, excluding: []))
                markMulticast(msg, now: now)
                send(msg, to: .multicast, out: &out)
            }
        }
    }

    /// §8.1: a query for the instance name, type ANY, with the proposed records in the Authority section.
    func sendProbe(_ reg: Registration, first: Bool, out: inout [MDNSAction]) {
        let msg = DNSMessage(
            header: .mdnsQuery,
            questions: [DNSQuestion(name: reg.instanceName, type: .any, unicastResponse: first)],
            authorities: reg.uniqueRecords(host: hostName))
        send(msg, to: .multicast, out: &out)
    }

    /// §8.3: an unsolicited response with every record, cache-flush set on the unique ones.
    mutating func announce(_ reg: Registration, now: MDNSInstant, out: inout [MDNSAction]) {
        let msg = DNSMessage(
            header: .mdnsResponse,
            answers: reg.sharedRecords() + reg.uniqueRecords(host: hostName),
            additionals: hostRecords(ttl: MDNSTTL.hostRecord))
        markMulticast(msg, now: now)
        send(msg, to: .multicast, out: &out)
    }

    mutating func markMulticast(_ msg: DNSMessage, now: MDNSInstant) {
        for rr in msg.answers + msg.additionals { lastMulticast[RecordKey(rr)] = now }
        if lastMulticast.count > 4096 { lastMulticast = lastMulticast.filter { now - $0.value < 3_600_000 } }
    }

    /// §10.1: the announced records again with TTL 0.
    mutating func sendGoodbye(for id: RegistrationID, now: MDNSInstant, out: inout [MDNSAction]) {
        guard let index = registrations.firstIndex(where: { $0.id == id }) else { return }
        let reg = registrations.remove(at: index)
        pending?.records.removeAll { $0.name == reg.instanceName || $0.rdata == .ptr(reg.instanceName) }
        guard reg.isAnnounced else { return }
        var records = reg.sharedRecords() + reg.uniqueRecords(host: hostName)
        if registrations.contains(where: { $0.serviceType == reg.serviceType && $0.isAnnounced }) {
            records.removeAll { $0.name == MDNSEngine.servicesEnumeration }
        }
        for i in records.indices { records[i].ttl = 0 }
        send(DNSMessage(header: .mdnsResponse, answers: records), to: .multicast, out: &out)
    }

    // MARK: Answering (§6)

    /// Every record we may answer with now: announced registrations and our host records.
    func answerableRecords() -> [DNSRecord] {
        var records: [DNSRecord] = []
        var seen = Set<RecordKey>()
        for reg in registrations where reg.isAnnounced {
            for rr in reg.sharedRecords() + reg.uniqueRecords(host: hostName) where seen.insert(RecordKey(rr)).inserted {
                records.append(rr)
            }
        }
        if !records.isEmpty { records += hostRecords(ttl: MDNSTTL.hostRecord) }
        return records
    }

    /// RFC 6763 §12: PTR brings SRV, TXT, A, AAAA; SRV brings A, AAAA. Known answers are left out (§7.1).
    func additionals(for answers: [DNSRecord], excluding known: [DNSRecord]) -> [DNSRecord] {
        let all = answerableRecords()
        var keys = Set(answers.map(RecordKey.init))
        var extra: [DNSRecord] = []
        func add(_ rr: DNSRecord) {
            if known.contains(where: { $0.sameRecord(as: rr) && $0.ttl >= rr.ttl / 2 }) { return }
            if keys.insert(RecordKey(rr)).inserted { extra.append(rr) }
        }
        for rr in answers {
            switch rr.rdata {
            case .ptr(let instance):
                for s in all where s.name == instance && (s.type == .srv || s.type == .txt) {
                    add(s)
                    if case .srv(_, _, _, let target) = s.rdata { for h in all where h.name == target && (h.type == .a || h.type == .aaaa) { add(h) } }
                }
            case .srv(_, _, _, let target):
                for h in all where h.name == target && (h.type == .a || h.type == .aaaa) { add(h) }
            default:
                break
            }
        }
        return extra
    }

    mutating func handleQuery(_ msg: DNSMessage, from source: MDNSPeer, now: MDNSInstant, out: inout [MDNSAction]) {
        let isProbe = !msg.authorities.isEmpty
        if isProbe { breakProbeTies(msg, now: now) }
        let all = answerableRecords()
        guard !all.isEmpty else { return }
        let legacy = source.port != 5353   // §6.7: a one-shot resolver expects a conventional unicast reply
        var immediate: [DNSRecord] = []
        var unicast: [DNSRecord] = []
        var delayed: [DNSRecord] = []
        for q in msg.questions where q.rrclass == dnsClassIN || q.rrclass == 255 {
            for rr in all where rr.name == q.name && (q.type == .any || q.type == rr.type) {
                // §7.1 known-answer suppression: the querier already holds it with at least half the TTL.
                if msg.answers.contains(where: { $0.sameRecord(as: rr) && $0.ttl >= rr.ttl / 2 }) { continue }
                if legacy { unicast.append(rr); continue }
                let last = lastMulticast[RecordKey(rr)]
                if q.unicastResponse, let last, now - last < Int64(rr.ttl) * 1000 / 4 {
                    unicast.append(rr)   // §5.4: recently multicast, so unicast suffices
                    continue
                }
                // §6: at most once per second per record by multicast (250 ms when defending a probe, §8.1).
                if let last, now - last < (isProbe ? 250 : 1000) { continue }
                if rr.cacheFlush { immediate.append(rr) } else { delayed.append(rr) }
            }
        }
        if legacy, !unicast.isEmpty {
            var answers = unicast
            for i in answers.indices { answers[i].cacheFlush = false; answers[i].ttl = min(answers[i].ttl, 10) }
            var extra = additionals(for: answers, excluding: [])
            for i in extra.indices { extra[i].cacheFlush = false; extra[i].ttl = min(extra[i].ttl, 10) }
            let reply = DNSMessage(
                header: DNSHeader(id: msg.header.id, flags: 0x8400), questions: msg.questions,
                answers: answers, additionals: extra)
            send(reply, to: .unicast(source), out: &out)
            return
        }
        if isProbe { logDefence(of: msg, answering: unicast + immediate + delayed, from: source, out: &out) }
        if !unicast.isEmpty {
            send(
                DNSMessage(header: .mdnsResponse, answers: unicast, additionals: additionals(for: unicast, excluding: msg.answers)),
                to: .unicast(source), out: &out)
        }
        if !immediate.isEmpty {
            let reply = DNSMessage(header: .mdnsResponse, answers: immediate, additionals: additionals(for: immediate, excluding: msg.answers))
            markMulticast(reply, now: now)
            send(reply, to: .multicast, out: &out)
        }
        if !delayed.isEmpty {
            // §6: shared answers wait 20–120 ms (400–500 ms when more known answers follow, TC) and aggregate.
            let delay = msg.header.isTruncated ? Int64.random(in: 400...500, using: &rng) : Int64.random(in: 20...120, using: &rng)
            var p = pending ?? PendingResponse(at: now + delay, records: [])
            for rr in delayed where !p.records.contains(where: { $0.sameRecord(as: rr) }) { p.records.append(rr) }
            p.at = min(p.at, now + delay)
            pending = p
        }
    }

    /// Logs a probe for a name we hold, answered now (§8.1): what a conflict on the network looked like from
    /// here. A prober that registers the name anyway received our answer late (or not at all); §9 then
    /// resolves the conflict, and this line tells whose timing it was.
    func logDefence(of msg: DNSMessage, answering answers: [DNSRecord], from source: MDNSPeer, out: inout [MDNSAction]) {
        for reg in registrations where reg.isAnnounced {
            let name = reg.instanceName
            let probed = msg.authorities.contains { rr in
                if rr.name == name { return true }
                if case .ptr(let target) = rr.rdata { return target == name }
                return false
            }
            let answered = answers.contains { rr in
                if rr.name == name { return true }
                if case .ptr(let target) = rr.rdata { return target == name }
                return false
            }
            if probed && answered { out.append(.log("mDNS: defending \(name) against a probe from \(source.address)")) }
        }
    }

    /// §8.2 simultaneous probe tie-break: compare our proposed records with theirs, sorted by class, type,
    /// rdata; the lexicographically earlier set loses and probes again after one second.
    mutating func breakProbeTies(_ msg: DNSMessage, now: MDNSInstant) {
        for index in registrations.indices {
            guard case .probing = registrations[index].state else { continue }
            let name = registrations[index].instanceName
            let theirs = msg.authorities.filter { $0.name == name }
            guard !theirs.isEmpty else { continue }
            let ours = registrations[index].uniqueRecords(host: hostName)
            if MDNSEngine.compareProbeSets(ours, theirs) < 0 {
                registrations[index].state = .deferredAfterTieBreak(until: now + 1000)
            }
        }
    }

    /// Negative when `a` is lexicographically earlier than `b`, zero when identical (our own probe echoed).
    static func compareProbeSets(_ a: [DNSRecord], _ b: [DNSRecord]) -> Int {
        func key(_ r: DNSRecord) -> [UInt8] {
            [UInt8(r.rrclass >> 8), UInt8(r.rrclass & 0xFF), UInt8(r.type.rawValue >> 8), UInt8(r.type.rawValue & 0xFF)] + r.rdata.canonicalBytes
        }
        let x = a.map(key).sorted { $0.lexicographicallyPrecedes($1) }
        let y = b.map(key).sorted { $0.lexicographicallyPrecedes($1) }
        for (p, q) in zip(x, y) where p != q { return p.lexicographicallyPrecedes(q) ? -1 : 1 }
        return x.count == y.count ? 0 : (x.count < y.count ? -1 : 1)
    }

    // MARK: Conflicts (§8.1, §9) and duplicate answers (§7.4)

    mutating func handleResponse(_ msg: DNSMessage, now: MDNSInstant, out: inout [MDNSAction]) {
        let records = msg.answers + msg.additionals
        if var p = pending {
            // §7.4: someone else already multicast an answer we were about to give.
            p.records.removeAll { mine in records.contains { $0.sameRecord(as: mine) && $0.ttl >= mine.ttl / 2 } }
            pending = p.records.isEmpty ? nil : p
        }
        for index in registrations.indices.reversed() {   // reversed: `rename` may remove one
            let reg = registrations[index]
            let ours = reg.uniqueRecords(host: hostName)
            let conflict = records.contains { rr in
                guard rr.name == reg.instanceName, rr.ttl > 0, rr.rrclass == dnsClassIN else { return false }
                if ours.contains(where: { $0.sameRecord(as: rr) }) { return false }
                // While probing any record with our name conflicts (§8.1); once announced only a unique
                // record of the same type with other data does (§9).
                return reg.isProbing ? (rr.type != .nsec) : (rr.type == .srv || rr.type == .txt)
            }
            guard conflict else { continue }
            if reg.isProbing {
                rename(index, now: now, out: &out)
            } else {
                out.append(.log("mDNS: conflict on announced name \(reg.instanceName); probing again (RFC 6762 §9)"))
                registrations[index].state = .waitingToProbe(until: now)
            }
        }
    }

    mutating func rename(_ index: Int, now: MDNSInstant, out: inout [MDNSAction]) {
        registrations[index].renames += 1
        let reg = registrations[index]
        if reg.renames > Registration.maxRenames {
            out.append(.event(.registrationFailed(reg.id, reason: "name conflict: gave up after \(Registration.maxRenames) renames")))
            registrations.remove(at: index)
            return
        }
        registrations[index].instanceLabel = Registration.nextName(after: reg.instanceLabel)
        // §9: after fifteen conflicts within ten seconds, wait five seconds between attempts.
        registrations[index].conflictsInWindow = reg.conflictsInWindow.filter { now - $0 < 10_000 } + [now]
        let wait: Int64 = registrations[index].conflictsInWindow.count >= 15 ? 5000 : 0
        registrations[index].state = .waitingToProbe(until: now + wait)
    }
}
