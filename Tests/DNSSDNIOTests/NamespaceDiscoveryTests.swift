// Real sockets, only inside network namespaces made here: our tool against itself, python-zeroconf and
// (when available) avahi. Figures measured: found-after-register and lost-after-stop across a veth pair.
import Foundation
import Testing
@testable import DNSSDNIO

@Suite(.serialized, .enabled(if: Netns.available, "network namespaces cannot be made here (needs root and iproute2); real-socket tests skipped"))
struct NamespaceDiscoveryTests {
    @Test func foundWithinBudgetAndLostAfterGoodbyeAcrossVeth() throws {
        let pair = try VethPair()
        defer { pair.remove() }
        var founds: [Double] = [], losts: [Double] = []
        let browser = try pair.spawn(pair.b, [Netns.tool, "browse", "--type", "_chat._tcp"])
        #expect(browser.waitFor("0 ", timeout: 0.1) == nil)   // no event before anything is registered
        Thread.sleep(forTimeInterval: 1.0)
        for round in 1...3 {
            let name = "Alice\(round)"
            let adv = try pair.spawn(pair.a, [Netns.tool, "register", "--type", "_chat._tcp", "--name", name, "--port", "4242", "--txt", "_d=Alice", "--txt", "_lx=1"])
            let found = try #require(browser.waitFor("found \(name)\t", timeout: 30), "browser output:\n\(browser.output)\nadvertiser:\n\(adv.output)")
            let registered = try #require(adv.waitFor("registered \(name)", timeout: 30), "advertiser:\n\(adv.output)")
            // Found by the advertiser's announcement, not by one of the browser's backed-off queries (seconds
            // apart by now): its arrival here is close to the advertiser's "registered" line, which the tool
            // prints as it sends the first announcement. Both are arrival times here, so a busy machine delays
            // both alike; the absolute figure is measured, not judged (stress-ng at load 21 took it to 2.2 s,
            // most of it the advertiser's probe timers waiting for a core).
            #expect(abs(ms(registered, found)) <= 1000, "found \(Int(ms(registered, found))) ms after the announcement")
            // From the advertiser's start by its own clock, not from the spawn.
            founds.append(ms(adv.clockOrigin ?? adv.started, found))
            let stopAt = DispatchTime.now()
            adv.process.terminate()
            // Lost by the goodbye (TTL 0) within seconds, not by the records' TTLs expiring (120 s and more).
            let lost = try #require(browser.waitFor("lost \(name)", timeout: 5), "browser output:\n\(browser.output)")
            losts.append(ms(stopAt, lost))
            #expect(adv.waitExit(timeout: 3))
        }
        print("MEASURED found-after-register ms: \(founds.map { Int($0) }), lost-after-stop ms: \(losts.map { Int($0) })")
        #expect(browser.output.contains("txt=_d=Alice;_lx=1"))
    }

    @Test func conflictBetweenTwoOfOursRenamesOne() throws {
        let pair = try VethPair()
        defer { pair.remove() }
        let first = try pair.spawn(pair.a, [Netns.tool, "register", "--name", "Same", "--port", "1"])
        #expect(first.waitFor("registered Same", timeout: 3) != nil)
        let second = try pair.spawn(pair.b, [Netns.tool, "register", "--name", "Same", "--port", "2"])
        #expect(second.waitFor("renamed Same -> Same (2)", timeout: 5) != nil, "\(second.output)")
        #expect(second.waitFor("registered Same (2)", timeout: 1) != nil)
    }

    static let zeroconfBrowse = """
        import sys, time
        from zeroconf import Zeroconf, ServiceBrowser, ServiceStateChange
        zc = Zeroconf()
        def on_change(zeroconf, service_type, name, state_change):
            if state_change is ServiceStateChange.Added:
                info = zeroconf.get_service_info(service_type, name, timeout=3000)
                if info:
                    print("found", name, info.port, sorted(info.properties.items()), info.parsed_addresses(), flush=True)
            elif state_change is ServiceStateChange.Removed:
                print("removed", name, flush=True)
        ServiceBrowser(zc, "_chat._tcp.local.", handlers=[on_change])
        time.sleep(float(sys.argv[1]))
        zc.close()
        """

    static let zeroconfRegister = """
        import sys, time, socket
        from zeroconf import Zeroconf, ServiceInfo, NonUniqueNameException
        zc = Zeroconf()
        info = ServiceInfo("_chat._tcp.local.", sys.argv[1] + "._chat._tcp.local.", addresses=[socket.inet_aton(sys.argv[2])],
                           port=5000, properties={"_d": "Zed", "_lx": "1"}, server="zed-host.local.")
        try:
            zc.register_service(info)
            print("registered", sys.argv[1], flush=True)
        except NonUniqueNameException:
            print("conflict", sys.argv[1], flush=True)
        time.sleep(float(sys.argv[3]))
        zc.unregister_all_services()
        zc.close()
        print("closed", flush=True)
        """

    var zeroconfAvailable: Bool { FileManager.default.isExecutableFile(atPath: Netns.python) }

    @Test func pythonZeroconfFindsOurAdvertisement() throws {
        try #require(zeroconfAvailable, "python-zeroconf missing: run scripts/setup-venv.sh")
        let pair = try VethPair()
        defer { pair.remove() }
        let zc = try pair.spawn(pair.b, [Netns.python, "-u", "-c", Self.zeroconfBrowse, "120"])
        let adv = try pair.spawn(pair.a, [Netns.tool, "register", "--name", "Ours", "--port", "4242", "--txt", "_d=Bob"])
        // 30 s: Python's start alone takes seconds on a busy machine; the wait ends when it finds us.
        #expect(zc.waitFor("found Ours._chat._tcp.local. 4242", timeout: 30) != nil, "zeroconf:\n\(zc.output)\nours:\n\(adv.output)")
        #expect(zc.output.contains("(b'_d', b'Bob')"))
        adv.process.terminate()
        #expect(zc.waitFor("removed Ours._chat._tcp.local.", timeout: 10) != nil, "zeroconf:\n\(zc.output)")
    }

    @Test func weFindPythonZeroconfAdvertisement() throws {
        try #require(zeroconfAvailable, "python-zeroconf missing: run scripts/setup-venv.sh")
        let pair = try VethPair()
        defer { pair.remove() }
        let a = pair.a
        _ = a
        let zc = try pair.spawn(pair.a, [Netns.python, "-u", "-c", Self.zeroconfRegister, "Zed", "10.77.0.9", "10"])
        let ours = try pair.spawn(pair.b, [Netns.tool, "browse"])
        #expect(ours.waitFor("found Zed\thost=zed-host.local. port=5000 addrs=10.77.0.9 txt=_d=Zed;_lx=1", timeout: 30) != nil, "ours:\n\(ours.output)\nzeroconf:\n\(zc.output)")
        #expect(ours.waitFor("lost Zed", timeout: 30) != nil, "ours:\n\(ours.output)")
    }

    @Test func conflictRenamingAgainstZeroconfBothWays() throws {
        try #require(zeroconfAvailable, "python-zeroconf missing: run scripts/setup-venv.sh")
        let pair = try VethPair()
        defer { pair.remove() }
        // They hold the name first: we must rename.
        // Waits are long (30 s): a process start, Python's above all, takes seconds on a busy machine, and
        // every wait ends at the outcome it judges. The holder lives until the test removes it.
        let zc = try pair.spawn(pair.a, [Netns.python, "-u", "-c", Self.zeroconfRegister, "Shared", "10.77.0.9", "120"])
        #expect(zc.waitFor("registered Shared", timeout: 30) != nil, "\(zc.output)")
        let ours = try pair.spawn(pair.b, [Netns.tool, "register", "--name", "Shared", "--port", "7"])
        let outcome = ours.waitFor("registered Shared", timeout: 30)
        #expect(outcome != nil && ours.lines(containing: "renamed Shared -> Shared (2)").count == 1, "ours:\n\(ours.output)")
        #expect(ours.lines(containing: "registered Shared (2)").count == 1, "ours:\n\(ours.output)")
        // We hold a name first: their probe must fail.
        let mine = try pair.spawn(pair.b, [Netns.tool, "register", "--name", "Mine", "--port", "8"])
        #expect(mine.waitFor("registered Mine", timeout: 30) != nil)
        let theirs = try pair.spawn(pair.a, [Netns.python, "-u", "-c", Self.zeroconfRegister, "Mine", "10.77.0.9", "1"])
        _ = theirs.waitFor(" Mine", timeout: 30)
        if theirs.lines(containing: "conflict Mine").count == 1 {
            // Their name check failed on what we said: usually our answer to their probe ("defending" in our log;
            // we must answer every probe at once, which MDNSEngineTests checks on a virtual clock), or, if they
            // started while we re-announced (a new address on the veth), our announcement already in their cache
            // before they probed at all (sat13: "conflict" with no probe to defend against).
            #expect(theirs.lines(containing: "registered Mine").isEmpty)
            if mine.lines(containing: "defending Mine._chat._tcp.local.").isEmpty { print("SLOW: zeroconf found our Mine in its cache before probing") }
        } else {
            // python-zeroconf checks its cache only before its 2nd and 3rd probes, 175 ms apart: an answer it
            // has not processed within ~350 ms of its first probe is too late for it. On a saturated machine
            // a process can wait a second for the processor (a 5 ms nanosleep loop in C measured 1011 ms at
            // load 19 here), so both then hold "Mine" and RFC 6762 §9 must resolve it: one of us renames.
            // We answered (`defending`); judge the resolution.
            #expect(mine.waitFor("defending Mine._chat._tcp.local.", timeout: 10) != nil, "ours:\n\(mine.output)\nzeroconf:\n\(theirs.output)")
            #expect(theirs.lines(containing: "registered Mine").count == 1, "zeroconf:\n\(theirs.output)")
            #expect(mine.waitFor("renamed Mine -> Mine (2)", timeout: 30) != nil, "ours:\n\(mine.output)")
            print("SLOW: zeroconf registered Mine before our defence reached it; resolved by our §9 rename")
        }
    }
}
