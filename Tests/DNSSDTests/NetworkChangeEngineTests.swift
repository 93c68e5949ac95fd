// The engine's side of a changing network (issue 25, RFC 6762 §13): interfaces gained and lost, addresses
// replaced. The socket edge (DNSSDNIO) notices the changes; these tests drive the engine's inputs directly.
import Testing
@testable import DNSSD

@Suite struct NetworkChangeEngineTests {
    static let type = MDNSEngineTests.type

    /// Machine 0 advertises "Alice", machine 1 browses and has found it.
    static func established() throws -> VirtualLAN {
        var lan = VirtualLAN(machines: 2)
        _ = MDNSEngineTests.register(&lan, 0, "Alice")
        _ = MDNSEngineTests.browse(&lan, 1)
        lan.run(for: 10_000)
        try #require(lan.firstEvent(of: 1, where: \.isFound) != nil)
        return lan
    }

    @Test func servicesLearntOnAnInterfaceThatWentAwayAreLostAtOnceAndFoundWhenItIsBack() throws {
        var lan = try Self.established()
        let down = lan.now
        lan.machines[0].online = false   // the link is gone: nothing from the advertiser reaches machine 1
        lan.on(1) { e, now in e.interfacesChanged(added: [], removed: [1], now: now) }
        let lost = try #require(lan.firstEvent(of: 1, after: down, where: \.isLost))
        #expect(lost.at == down)
        // An interface the records did not come from changes nothing.
        lan.run(for: 1000)
        let before = lan.events(of: 1).count
        lan.on(1) { e, now in e.interfacesChanged(added: [], removed: [7], now: now) }
        lan.run(for: 1000)
        #expect(lan.events(of: 1).count == before)
        #expect(lan.firstEvent(of: 1, after: down + 1, where: \.isFound) == nil)
        // Back: the browse queries afresh at once (not at its backed-off interval) and finds it.
        lan.run(for: 20_000)   // the browse interval has backed off meanwhile
        lan.machines[0].online = true
        let up = lan.now
        lan.on(1) { e, now in e.interfacesChanged(added: [1], removed: [], now: now) }
        lan.run(for: 2000)
        let found = try #require(lan.firstEvent(of: 1, after: up, where: \.isFound))
        #expect(found.at - up <= 300)
        #expect(lan.logs.isEmpty)
    }

    @Test func recordsAreAnnouncedAgainOnAGainedInterfaceWithoutReportingRegisteredTwice() throws {
        var lan = try Self.established()
        let registeredBefore = lan.events(of: 0).filter {
            if case .registered = $0 { return true }; return false
        }.count
        let up = lan.now
        lan.on(0) { e, now in e.interfacesChanged(added: [2], removed: [], now: now) }
        lan.run(for: 5000)
        let announcements = lan.sent.filter {
            $0.machine == 0 && $0.at >= up && $0.message.header.isResponse && $0.message.questions.isEmpty
                && $0.message.answers.contains { $0.type == .srv && $0.ttl > 0 }
        }
        #expect(announcements.count >= 2, "\(announcements.map(\.at))")
        #expect((announcements.first?.at ?? up) - up <= 120)
        if announcements.count >= 2 { #expect(announcements[1].at - announcements[0].at >= 1000) }
        let registeredAfter = lan.events(of: 0).filter {
            if case .registered = $0 { return true }; return false
        }.count
        #expect(registeredAfter == registeredBefore)
    }

    @Test func aReplacedAddressIsAnnouncedAndTheOldOneWithdrawn() throws {
        var lan = try Self.established()
        lan.run(for: 2000)   // the cached address is older than one second (RFC 6762 §10.2)
        let change = lan.now
        let new = IPAddress.v4([10, 0, 0, 99])
        lan.on(0) { e, now in e.setAddresses([new], now: now) }
        lan.run(for: 2000)
        let updated = try #require(lan.events.first { $0.machine == 1 && $0.at >= change && $0.event.isUpdated })
        #expect(updated.at - change <= 1100)
        guard case .updated(_, let service) = updated.event else { return }
        #expect(service.addresses == [new])
        // The goodbye for the old address went out with the new one.
        let withdrawn = lan.sent.contains { $0.machine == 0 && $0.at == change && $0.message.answers.contains { $0.type == .a && $0.ttl == 0 && $0.rdata == .a([10, 0, 0, 1]) } }
        #expect(withdrawn)
    }

    @Test func theInterfaceOfEachAddressIsReported() throws {
        let lan = try Self.established()
        let found = try #require(lan.firstEvent(of: 1, where: \.isFound)?.event.foundService)
        #expect(found.interfaces == [.v4([10, 0, 0, 1]): 1])
    }
}
