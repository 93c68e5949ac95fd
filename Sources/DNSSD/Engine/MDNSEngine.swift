// The mDNS responder and querier as one pure state machine (RFC 6762, RFC 6763).
//
// One engine per process serves every registration and browse, as RFC 6762 §15 expects of a host.
// Inputs: API calls (`register`, `unregister`, `startBrowsing`, `stopBrowsing`, `setAddresses`), a received
// datagram with its source (`receive`), and the clock (`timerFired`). Each returns `[MDNSAction]`: datagrams
// to send, the next instant to be woken, events and log lines. The engine keeps no clock: `now` comes with
// every input, and random delays come from a seeded `SplitMix64`.
//
// Threading contract: a value type; the owner serialises all calls (DNSSDNIO confines it to one event loop).
//
// The responder part is in MDNSEngine+Responder.swift, the querier part in MDNSEngine+Querier.swift.

public struct MDNSEngine {
    /// Largest datagram payload: 9000 bytes including IPv6 (40) and UDP (8) headers (RFC 6762 §17).
    public static let maxPayload = 9000 - 40 - 8
    /// `_services._dns-sd._udp.local.` (RFC 6763 §9).
    public static let servicesEnumeration = DNSName(uncheckedLabels: [
        Array("_services".utf8), Array("_dns-sd".utf8), Array("_udp".utf8), Array("local".utf8),
    ])
    public static let local = DNSName(uncheckedLabels: [Array("local".utf8)])

    /// Our host name (`<uuid>.local.`), target of every SRV we publish.
    public let hostName: DNSName
    /// Our addresses for A/AAAA.
    public private(set) var addresses: [IPAddress]

    var rng: SplitMix64
    var nextID = 1
    var lastWakeUp: MDNSInstant?

    // Responder state.
    var registrations: [Registration] = []
    var lastMulticast: [RecordKey: MDNSInstant] = [:]
    var pending: PendingResponse?

    // Querier state.
    var browses: [Browse] = []
    var cache = RecordCache()
    var resolveAsked: [DNSName: MDNSInstant] = [:]
    var resolveRetryAt: MDNSInstant?

    public init(hostName: DNSName, addresses: [IPAddress], seed: UInt64) {
        self.hostName = hostName
        self.addresses = addresses
        self.rng = SplitMix64(seed: seed)
    }

    // MARK: Inputs

    /// Starts probing for `<instanceName>.<serviceType>` (RFC 6762 §8.1). `serviceType` is e.g. `_foo._tcp.local.`.
    public mutating func register(
        instanceName: String, serviceType: DNSName, port: UInt16, txt: TXTRecord,
        now: MDNSInstant
    ) -> (RegistrationID, [MDNSAction]) {
        var out: [MDNSAction] = []
        let id = RegistrationID(rawValue: nextID)
        nextID += 1
        let delay = Int64.random(in: 0...250, using: &rng)
        registrations.append(
            Registration(
                id: id, requestedName: instanceName, reportedName: instanceName,
                instanceLabel: instanceName, serviceType: serviceType, port: port, txt: txt,
                state: .waitingToProbe(until: now + delay)))
        finish(&out, now: now)
        return (id, out)
    }

    /// Withdraws a registration, sending goodbyes (TTL 0) if it had been announced (RFC 6762 §10.1).
    public mutating func unregister(_ id: RegistrationID, now: MDNSInstant) -> [MDNSAction] {
        var out: [MDNSAction] = []
        sendGoodbye(for: id, now: now, out: &out)
        finish(&out, now: now)
        return out
    }

    /// Sends goodbyes for everything and forgets all registrations and browses (shutdown).
    public mutating func goodbyeAll(now: MDNSInstant) -> [MDNSAction] {
        var out: [MDNSAction] = []
        for reg in registrations { sendGoodbye(for: reg.id, now: now, out: &out) }
        browses.removeAll()
        pending = nil
        return out
    }

    /// Starts browsing for `serviceType` (e.g. `_foo._tcp.local.`); first query after 20–120 ms (RFC 6762 §5.2).
    public mutating func startBrowsing(serviceType: DNSName, now: MDNSInstant) -> (BrowseID, [MDNSAction]) {
        var out: [MDNSAction] = []
        let id = BrowseID(rawValue: nextID)
        nextID += 1
        let delay = Int64.random(in: 20...120, using: &rng)
        browses.append(Browse(id: id, serviceType: serviceType, nextQuery: now + delay, interval: 1000))
        evaluateBrowses(now: now, out: &out)
        finish(&out, now: now)
        return (id, out)
    }

    /// Stops a browse; no further events for it.
    public mutating func stopBrowsing(_ id: BrowseID, now: MDNSInstant) -> [MDNSAction] {
        var out: [MDNSAction] = []
        browses.removeAll { $0.id == id }
        finish(&out, now: now)
        return out
    }

    /// Replaces our addresses; announced registrations re-announce the host records.
    public mutating func setAddresses(_ new: [IPAddress], now: MDNSInstant) -> [MDNSAction] {
        var out: [MDNSAction] = []
        guard new != addresses else { return out }
        let old = hostRecords(ttl: 0).filter { rr in !new.contains { $0.rdata == rr.rdata } }
        addresses = new
        if registrations.contains(where: \.isAnnounced) {
            var msg = DNSMessage(header: .mdnsResponse, answers: old + hostRecords(ttl: MDNSTTL.hostRecord))
            msg.answers.sort { $0.ttl < $1.ttl }
            send(msg, to: .multicast, out: &out)
        }
        finish(&out, now: now)
        return out
    }

    /// The machine's interfaces changed (RFC 6762 §13): on `added` interfaces (new, back up, or with a
    /// new address) our announced records are announced again and every browse starts querying afresh
    /// (1 s, doubling); records learnt on `removed` interfaces are forgotten at once, so their services are
    /// reported lost (and found again through another interface, if they are there, by the fresh queries).
    ///
    /// §13 asks for probing and announcing after a link change. We announce without probing again: the
    /// records stay answerable meanwhile on the interfaces that did not change, and a clash on the new
    /// link still shows as a conflicting response, which sends the registration back to probing (§9).
    public mutating func interfacesChanged(added: Set<UInt32>, removed: Set<UInt32>, now: MDNSInstant) -> [MDNSAction] {
        var out: [MDNSAction] = []
        if !removed.isEmpty, cache.forget(interfaces: removed) {
            evaluateBrowses(now: now, out: &out)
        }
        if !added.isEmpty || !removed.isEmpty {
            for i in browses.indices {
                browses[i].interval = 1000
                browses[i].nextQuery = min(browses[i].nextQuery, now + Int64.random(in: 20...120, using: &rng))
            }
        }
        if !added.isEmpty {
            for i in registrations.indices where registrations[i].isAnnounced {
                // The random delay spreads the announcements of hosts that saw the same link come up.
                registrations[i].state = .announcing(sent: 0, next: now + Int64.random(in: 20...120, using: &rng))
            }
        }
        finish(&out, now: now)
        return out
    }

    /// Handles a received datagram (RFC 6762 §6 for queries, §8–§10 for responses).
    public mutating func receive(_ bytes: [UInt8], from source: MDNSPeer, now: MDNSInstant) -> [MDNSAction] {
        var out: [MDNSAction] = []
        let message: DNSMessage
        do {
            message = try DNSMessage(decoding: bytes)
        } catch {
            out.append(.log("mDNS: dropped \(bytes.count)-byte packet from \(source.address): \(error)"))
            return out
        }
        guard message.header.opcode == 0 else { return out }   // §18.3: opcode ≠ 0 is ignored
        if message.header.isResponse {
            // §18.11: ignore responses with a non-zero rcode. §11: responses must come from port 5353.
            guard message.header.rcode == 0, source.port == 5353 else { return out }
            handleResponse(message, now: now, out: &out)
            absorbResponse(message, from: source, now: now, out: &out)
        } else {
            handleQuery(message, from: source, now: now, out: &out)
        }
        finish(&out, now: now)
        return out
    }

    /// Runs everything that is due at `now`.
    public mutating func timerFired(now: MDNSInstant) -> [MDNSAction] {
        var out: [MDNSAction] = []
        lastWakeUp = nil
        responderTick(now: now, out: &out)
        querierTick(now: now, out: &out)
        finish(&out, now: now)
        return out
    }

    /// The next instant something is due, if any.
    public var nextDeadline: MDNSInstant? {
        var best: MDNSInstant?
        func consider(_ t: MDNSInstant?) { if let t, best.map({ t < $0 }) ?? true { best = t } }
        for r in registrations { consider(r.deadline) }
        consider(pending?.at)
        for b in browses { consider(b.nextQuery) }
        consider(resolveRetryAt)
        consider(cache.nextDeadline(interesting: interestingNames()))
        return best
    }

    /// True when nothing is registered, browsed, pending or cached: what tests check at the end.
    public var isIdle: Bool { registrations.isEmpty && browses.isEmpty && pending == nil }

    // MARK: Helpers

    mutating func finish(_ out: inout [MDNSAction], now: MDNSInstant) {
        guard let deadline = nextDeadline else { return }
        let at = max(deadline, now)
        if lastWakeUp != at {
            lastWakeUp = at
            out.append(.wakeUp(at: at))
        }
    }

    func hostRecords(ttl: UInt32) -> [DNSRecord] {
        addresses.map { DNSRecord(name: hostName, type: $0.type, cacheFlush: true, ttl: ttl, rdata: $0.rdata) }
    }

    /// Encodes and sends `message`, splitting its records over several datagrams when it exceeds
    /// `maxPayload` (RFC 6762 §17). Queries that spill known answers set TC on all but the last (§7.2).
    func send(_ message: DNSMessage, to destination: MDNSDestination, out: inout [MDNSAction]) {
        let bytes = message.encode()
        if bytes.count <= MDNSEngine.maxPayload {
            out.append(.send(bytes, to: destination))
            return
        }
        var records = message.answers + message.authorities
        let extra = message.additionals
        guard records.count > 1 else {
            // One record alone too big: drop the additionals, else give up on it.
            if !extra.isEmpty {
                send(
                    DNSMessage(
                        header: message.header, questions: message.questions, answers: message.answers,
                        authorities: message.authorities), to: destination, out: &out)
            } else {
                out.append(.log("mDNS: a single record exceeds \(MDNSEngine.maxPayload) bytes; not sent"))
            }
            return
        }
        let isQuery = !message.header.isResponse
        let half = records.count / 2
        let second = Array(records[half...])
        records.removeLast(records.count - half)
        var firstHeader = message.header
        if isQuery { firstHeader.isTruncated = true }
        let inAuthority = Set(message.authorities.map(RecordKey.init))
        func split(_ rs: [DNSRecord]) -> (answers: [DNSRecord], authorities: [DNSRecord]) {
            (rs.filter { !inAuthority.contains(RecordKey($0)) }, rs.filter { inAuthority.contains(RecordKey($0)) })
        }
        let a = split(records), b = split(second)
        send(
            DNSMessage(header: firstHeader, questions: message.questions, answers: a.answers, authorities: a.authorities),
            to: destination, out: &out)
        send(
            DNSMessage(
                header: message.header, questions: [], answers: b.answers,
                authorities: b.authorities, additionals: extra), to: destination, out: &out)
    }
}
