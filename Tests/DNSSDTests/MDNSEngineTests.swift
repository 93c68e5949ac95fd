import Testing
@testable import DNSSD

/// Responder and querier engines against each other on a virtual link (RFC 6762 / 6763).
@Suite struct MDNSEngineTests {
    static let type = try! DNSName("_chat._tcp.local")
    static let txt = try! TXTRecord(["_d": "Alice", "_lx": "1"])

    static func register(_ lan: inout VirtualLAN, _ machine: Int, _ name: String, port: UInt16 = 4000) -> RegistrationID {
        lan.on(machine) { e, now in e.register(instanceName: name, serviceType: type, port: port, txt: txt, now: now) }
    }
    static func browse(_ lan: inout VirtualLAN, _ machine: Int) -> BrowseID {
        lan.on(machine) { e, now in e.startBrowsing(serviceType: type, now: now) }
    }

    @Test func probesThenAnnouncesAndIsFoundWithinOneAndAHalfSeconds() throws {
        var lan = VirtualLAN(machines: 2)
        _ = Self.browse(&lan, 1)
        lan.run(for: 3000)
        let start = lan.now
        let id = Self.register(&lan, 0, "Alice")
        lan.run(for: 3000)
        let found = try #require(lan.firstEvent(of: 1, where: \.isFound))
        #expect(found.at - start <= 1500)
        let service = try #require(found.event.foundService)
        #expect(service.instanceName == "Alice")
        #expect(service.port == 4000)
        #expect(service.txt.dictionary == ["_d": "Alice", "_lx": "1"])
        #expect(service.addresses == [.v4([10, 0, 0, 1])])
        #expect(lan.events(of: 0) == [.registered(id, name: "Alice")])
        // Three probes 250 ms apart, then two announcements 1 s apart (§8.1, §8.3).
        let probes = lan.sent.filter { $0.machine == 0 && !$0.message.authorities.isEmpty }
        #expect(probes.count == 3)
        #expect(probes[1].at - probes[0].at == 250 && probes[2].at - probes[1].at == 250)
        #expect(probes[0].at - start <= 250)
        #expect(probes[0].message.questions[0].unicastResponse && probes[0].message.questions[0].type == .any)
        let announcements = lan.sent.filter { $0.machine == 0 && $0.message.header.isResponse && $0.message.answers.contains { $0.type == .srv } && $0.message.questions.isEmpty }
        #expect(announcements.count >= 2)
        #expect(announcements[1].at - announcements[0].at >= 1000)
        let srv = try #require(announcements[0].message.answers.first { $0.type == .srv })
        #expect(srv.cacheFlush && srv.ttl == 120)
        let ptr = try #require(announcements[0].message.answers.first { $0.type == .ptr && $0.name == Self.type })
        #expect(!ptr.cacheFlush && ptr.ttl == 4500)
        #expect(lan.logs.isEmpty)
    }

    @Test func browserStartedLaterFindsEstablishedService() throws {
        var lan = VirtualLAN(machines: 2)
        _ = Self.register(&lan, 0, "Alice")
        lan.run(for: 5000)
        let start = lan.now
        _ = Self.browse(&lan, 1)
        lan.run(for: 2000)
        let found = try #require(lan.firstEvent(of: 1, where: \.isFound))
        #expect(found.at - start <= 200)   // 20–120 ms query delay + 20–120 ms shared-answer delay
    }

    @Test func goodbyeIsLostWithinOneSecond() throws {
        var lan = VirtualLAN(machines: 2)
        let id = Self.register(&lan, 0, "Alice")
        _ = Self.browse(&lan, 1)
        lan.run(for: 4000)
        #expect(lan.firstEvent(of: 1, where: \.isFound) != nil)
        let stop = lan.now
        lan.on(0) { e, now in e.unregister(id, now: now) }
        lan.run(for: 3000)
        let lost = try #require(lan.firstEvent(of: 1, where: \.isLost))
        #expect(lost.at - stop <= 1000)
        #expect(lost.event == .lost(BrowseID(rawValue: 2), instanceName: "Alice") || lost.event.isLost)
        let goodbye = try #require(lan.sent.last { $0.machine == 0 })
        #expect(goodbye.message.answers.allSatisfy { $0.ttl == 0 })
        // The goodbye record lingers one second in the cache, then goes (§10.1).
        #expect(lan.machines[1].engine.cache.live(Self.type, .ptr).isEmpty)
        #expect(lan.machines[0].engine.isIdle)
    }

    @Test func simultaneousRegistrationOfOneNameRenamesOne() throws {
        for seed in UInt64(1)...20 {
            var lan = VirtualLAN(machines: 3, seed: seed)
            let a = Self.register(&lan, 0, "Printer", port: 1000)
            let b = Self.register(&lan, 1, "Printer", port: 2000)
            _ = Self.browse(&lan, 2)
            lan.run(for: 8000)
            let names = [lan.events(of: 0), lan.events(of: 1)].map { evs in
                evs.compactMap { e -> String? in
                    if case .registered(_, let n) = e { return n }; return nil
                }.last
            }
            #expect(Set(names.compactMap { $0 }) == ["Printer", "Printer (2)"], "seed \(seed): \(lan.events)")
            let renamed = lan.events.filter {
                if case .renamed = $0.event { return true }; return false
            }
            #expect(renamed.count == 1, "seed \(seed)")
            if let r = renamed.first { #expect(r.event == .renamed(r.machine == 0 ? a : b, from: "Printer", to: "Printer (2)")) }
            let found = Set(lan.events(of: 2).compactMap { $0.foundService?.instanceName })
            #expect(found == ["Printer", "Printer (2)"], "seed \(seed)")
        }
    }

    @Test func lateComerIsRenamedByDefender() throws {
        var lan = VirtualLAN(machines: 2)
        _ = Self.register(&lan, 0, "Printer")
        lan.run(for: 5000)
        let b = Self.register(&lan, 1, "Printer")
        lan.run(for: 5000)
        #expect(lan.events(of: 1) == [.renamed(b, from: "Printer", to: "Printer (2)"), .registered(b, name: "Printer (2)")])
        #expect(lan.events(of: 0).count == 1)
        #expect(Registration.nextName(after: "Printer (2)") == "Printer (3)")
        #expect(Registration.nextName(after: "(2)") == "(2) (2)")
        #expect(Registration.nextName(after: String(repeating: "x", count: 63)).utf8.count == 63)
    }

    @Test func knownAnswerSuppressionBothSides() throws {
        var lan = VirtualLAN(machines: 2)
        _ = Self.register(&lan, 0, "Alice")
        _ = Self.browse(&lan, 1)
        lan.run(for: 10_000)
        // Querier side: later browse queries carry the cached PTR as a known answer (§7.1).
        let queries = lan.sent.filter { $0.machine == 1 && !$0.message.header.isResponse && $0.message.questions.contains { $0.type == .ptr } }
        #expect(queries.count >= 3)
        let later = try #require(queries.last)
        #expect(later.message.answers.contains { $0.type == .ptr && $0.name == Self.type && $0.ttl > 2250 })
        // Responder side: no PTR answers to those queries after the first (announcements aside).
        let firstKnown = try #require(queries.first { !$0.message.answers.isEmpty })
        let ptrAnswersAfter = lan.sent.filter {
            $0.machine == 0 && $0.at > firstKnown.at && $0.message.header.isResponse
                && $0.message.answers.contains { $0.type == .ptr && $0.name == Self.type && $0.ttl > 0 }
                && !$0.message.answers.contains { $0.type == .srv }
        }
        #expect(ptrAnswersAfter.isEmpty)
        // Query intervals double (§5.2): 1, 2, 4 s …
        let gaps = zip(queries.dropFirst(), queries).map { $0.at - $1.at }
        #expect(gaps.prefix(3).elementsEqual([1000, 2000, 4000]))
    }

    @Test func refreshKeepsServiceAliveAndSilentHostExpires() throws {
        var lan = VirtualLAN(machines: 2)
        _ = Self.register(&lan, 0, "Alice")
        _ = Self.browse(&lan, 1)
        lan.run(for: 200_000)   // past the 120 s SRV and A TTLs: refreshed at 80–95 %
        #expect(lan.events(of: 1).filter(\.isLost).isEmpty)
        #expect(lan.events(of: 1).filter(\.isFound).count == 1)
        let refreshes = lan.sent.filter {
            $0.machine == 1 && $0.at.milliseconds > 90_000 && $0.at.milliseconds < 120_000
                && $0.message.questions.contains { $0.type == .srv }
        }
        #expect(!refreshes.isEmpty)
        // The advertiser vanishes without goodbye: lost when SRV/A expire and the PTR (4500 s) ends.
        lan.machines[0].online = false
        let off = lan.now
        lan.run(for: 4_700_000)
        let lost = try #require(lan.firstEvent(of: 1, where: \.isLost))
        #expect(lost.at - off <= 4_600_000)
        #expect(lan.machines[1].engine.cache.entries.isEmpty)
    }

    @Test func lossAndReorderingStillConverge() throws {
        for seed in UInt64(1)...30 {
            var lan = VirtualLAN(machines: 3, seed: seed, lossPercent: 25, maxLatency: 40)
            _ = Self.browse(&lan, 2)
            _ = Self.register(&lan, 0, "Same")
            _ = Self.register(&lan, 1, "Same")
            lan.run(for: 30_000)
            let found = Set(lan.events(of: 2).compactMap { $0.foundService?.instanceName })
            #expect(found.count == 2, "seed \(seed): \(found) \(lan.events)")
            #expect(lan.events(of: 2).filter(\.isLost).isEmpty, "seed \(seed)")
        }
    }

    @Test func sharedAnswersAreDelayedAggregatedAndRateLimited() throws {
        var lan = VirtualLAN(machines: 2)
        _ = Self.register(&lan, 0, "Alice")
        _ = Self.register(&lan, 0, "Bob")
        lan.run(for: 6000)
        let before = lan.sent.count
        let q = DNSMessage(header: .mdnsQuery, questions: [DNSQuestion(name: Self.type, type: .ptr)])
        let t0 = lan.now
        lan.on(1) { _, _ in [.send(q.encode(), to: .multicast)] }
        lan.on(1) { _, _ in [.send(q.encode(), to: .multicast)] }
        lan.run(for: 500)
        let replies = lan.sent[before...].filter { $0.machine == 0 }
        #expect(replies.count == 1)   // both PTRs in one response; the duplicate query is rate-limited
        let reply = try #require(replies.first)
        #expect(reply.at - t0 >= 20 && reply.at - t0 <= 122)
        #expect(reply.message.answers.filter { $0.type == .ptr }.count == 2)
        // RFC 6763 §12 additionals: SRV, TXT and A for each instance.
        #expect(reply.message.additionals.filter { $0.type == .srv }.count == 2)
        #expect(reply.message.additionals.contains { $0.type == .a })
    }

    @Test func directQuestionsQUAndLegacyUnicast() throws {
        var lan = VirtualLAN(machines: 2)
        _ = Self.register(&lan, 0, "Alice")
        lan.run(for: 6000)
        let instance = try Self.type.prepending("Alice")
        // A QU question for a record multicast within a quarter of its TTL is answered by unicast.
        let before = lan.sent.count
        let qu = DNSMessage(header: .mdnsQuery, questions: [DNSQuestion(name: instance, type: .srv, unicastResponse: true)])
        let actions = lan.machines[0].engine.receive(qu.encode(), from: MDNSPeer(address: .v4([10, 0, 0, 2])), now: lan.now)
        lan.apply(actions, machine: 0)
        let reply = try #require(lan.sent[before...].first { $0.machine == 0 })
        #expect(reply.to == .unicast(MDNSPeer(address: .v4([10, 0, 0, 2]))))
        #expect(reply.message.answers.map(\.type) == [.srv])
        #expect(reply.message.additionals.map(\.type) == [.a])
        // A legacy resolver (source port ≠ 5353) gets its ID and question back, TTL ≤ 10, no cache-flush (§6.7).
        let legacy = DNSMessage(header: DNSHeader(id: 0x1234, flags: 0), questions: [DNSQuestion(name: instance, type: .txt)])
        let out = lan.machines[0].engine.receive(legacy.encode(), from: MDNSPeer(address: .v4([10, 0, 0, 9]), port: 40000), now: lan.now)
        guard case .send(let bytes, let to)? = out.first else { Issue.record("no legacy reply"); return }
        let m = try DNSMessage(decoding: bytes)
        #expect(to == .unicast(MDNSPeer(address: .v4([10, 0, 0, 9]), port: 40000)))
        #expect(m.header.id == 0x1234 && m.questions == legacy.questions)
        #expect(m.answers.allSatisfy { $0.ttl <= 10 && !$0.cacheFlush })
    }

    /// python-zeroconf probes with a QU question for the service type and its PTR to the new instance in the
    /// authority section, and checks its cache only before its second and third probes (175 ms apart). A
    /// holder of the name must answer in the same step that receives each probe: no shared-record delay.
    @Test func aZeroconfStyleProbeForOurNameIsAnsweredAtOnceEveryTime() throws {
        var lan = VirtualLAN(machines: 2)
        _ = Self.register(&lan, 0, "Alice")
        lan.run(for: 6000)
        let alice = try Self.type.prepending("Alice")
        let prober = MDNSPeer(address: .v4([10, 0, 0, 2]))
        func probe(_ instance: DNSName) -> [UInt8] {
            DNSMessage(
                header: .mdnsQuery, questions: [DNSQuestion(name: Self.type, type: .ptr, unicastResponse: true)],
                authorities: [DNSRecord(name: Self.type, type: .ptr, ttl: 4500, rdata: .ptr(instance))]
            ).encode()
        }
        for step in 0..<3 {
            let actions = lan.machines[0].engine.receive(probe(alice), from: prober, now: lan.now + Int64(step) * 175)
            let answers = actions.compactMap { action -> DNSMessage? in
                guard case .send(let bytes, .unicast(prober)) = action else { return nil }
                return try? DNSMessage(decoding: bytes)
            }
            #expect(answers.contains { $0.answers.contains { $0.rdata == .ptr(alice) } }, "probe \(step): \(actions)")
            #expect(actions.contains { if case .log(let l) = $0 { l.contains("defending \(alice)") } else { false } }, "probe \(step)")
        }
        // A probe for a name we do not hold is answered (the PTR question is ours too) but is no defence.
        let other = lan.machines[0].engine.receive(probe(try Self.type.prepending("Bob")), from: prober, now: lan.now + 600)
        #expect(!other.contains { if case .log(let l) = $0 { l.contains("defending") } else { false } })
    }

    @Test func responsesWithErrorsOrWrongPortAreIgnoredAndGarbageIsLogged() throws {
        var engine = MDNSEngine(hostName: try DNSName("h.local"), addresses: [], seed: 1)
        let (b, _) = engine.startBrowsing(serviceType: Self.type, now: MDNSInstant(milliseconds: 0))
        _ = b
        let instance = try Self.type.prepending("X")
        var resp = DNSMessage(
            header: .mdnsResponse,
            answers: [
                DNSRecord(name: Self.type, type: .ptr, ttl: 4500, rdata: .ptr(instance)),
                DNSRecord(name: instance, type: .srv, ttl: 120, rdata: .srv(priority: 0, weight: 0, port: 1, target: try DNSName("o.local"))),
                DNSRecord(name: instance, type: .txt, ttl: 4500, rdata: .txt([[]])),
                DNSRecord(name: try DNSName("o.local"), type: .a, ttl: 120, rdata: .a([1, 2, 3, 4])),
            ])
        resp.header.flags |= 3   // rcode NXDOMAIN
        let peer = MDNSPeer(address: .v4([10, 0, 0, 2]))
        #expect(
            engine.receive(resp.encode(), from: peer, now: MDNSInstant(milliseconds: 10)).filter {
                if case .event = $0 { return true }; return false
            }.isEmpty)
        resp.header.flags &= ~3
        #expect(
            engine.receive(resp.encode(), from: MDNSPeer(address: .v4([10, 0, 0, 2]), port: 1234), now: MDNSInstant(milliseconds: 10)).filter {
                if case .event = $0 { return true }; return false
            }.isEmpty)
        #expect(
            engine.receive(resp.encode(), from: peer, now: MDNSInstant(milliseconds: 10)).contains {
                if case .event(.found) = $0 { return true }; return false
            })
        let junk: [UInt8] = [0, 0, 0x84, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 12, 0, 1, 0, 1]
        let logged = engine.receive(junk, from: peer, now: MDNSInstant(milliseconds: 20))
        #expect(logged.count == 1)
        if case .log(let line)? = logged.first { #expect(line.contains("compression pointer")) } else { Issue.record("no log line") }
    }

    @Test func cacheFlushReplacesOldData() throws {
        var lan = VirtualLAN(machines: 2)
        _ = Self.register(&lan, 0, "Alice")
        _ = Self.browse(&lan, 1)
        lan.run(for: 5000)
        // The host changes address: new A with cache-flush; the old one expires within a second (§10.2).
        lan.on(0) { e, now in e.setAddresses([.v4([10, 0, 0, 77])], now: now) }
        lan.run(for: 1500)
        let updated = try #require(lan.firstEvent(of: 1, where: \.isUpdated))
        if case .updated(_, let s) = updated.event { #expect(s.addresses == [.v4([10, 0, 0, 77])]) }
    }
}
