// mDNS on a network that changes under it (issue 25), with real sockets inside namespaces made here: an
// advertiser started before its link has addresses or while its IPv6 address is still tentative, a link
// taken down and up, an address replaced, IPv6 absent or switched off and on. Each test drives
// `dnssd-tool` processes in two namespaces joined by a veth pair and judges what they print: discovery
// outcomes, and how often they logged (a failure is reported once, never per packet).
import Foundation
import Testing

@Suite(.serialized, .enabled(if: Netns.available, "network namespaces cannot be made here (needs root and iproute2); real-socket tests skipped"))
struct NetworkChangeTests {
    /// The tool's diagnostic lines ("<ms> log …").
    static func logLines(_ c: Child) -> [String] {
        c.output.split(separator: "\n").map(String.init).filter { $0.split(separator: " ").dropFirst().first == "log" }
    }

    /// A failure may be reported once per kind; the same line twice is a per-packet report.
    static func expectQuiet(_ c: Child, _ who: String, atMost: Int = 2, sourceLocation: SourceLocation = #_sourceLocation) {
        let logs = logLines(c)
        let texts = logs.map { $0.split(separator: " ", maxSplits: 1).last.map(String.init) ?? $0 }
        #expect(logs.count <= atMost, "\(who) logged \(logs.count) lines:\n\(logs.joined(separator: "\n"))", sourceLocation: sourceLocation)
        #expect(Set(texts).count == texts.count, "\(who) repeated a log line:\n\(logs.joined(separator: "\n"))", sourceLocation: sourceLocation)
        #expect(!c.output.contains("closed channel"), "\(who):\n\(c.output)", sourceLocation: sourceLocation)
    }

    @Test func advertiserStartedBeforeTheLinkHasAddressesIsFoundOnceItHas() throws {
        let pair = try VethPair(configured: false)
        defer { pair.remove() }
        // Only loopback is up in both namespaces when the two start.
        let adv = try pair.spawn(pair.a, [Netns.tool, "register", "--name", "Early", "--port", "4242"])
        let browser = try pair.spawn(pair.b, [Netns.tool, "browse"])
        // Registered on loopback alone. Times are the tools' own (from their start; see Child.waitFor): at load
        // 19 (stress-ng beside a full run) this advertiser printed nothing within 5 s of being spawned, in a
        // test that took 65 s where it takes 5, its `ip` commands taking seconds each.
        #expect(adv.waitFor("registered Early", withinOwnMilliseconds: 5000), "\(adv.output)")
        Thread.sleep(forTimeInterval: 0.5)
        let configured = DispatchTime.now()
        try pair.configure()
        let found = browser.waitFor("found Early\t", timeout: 10)
        #expect(found != nil, "browser:\n\(browser.output)\nadvertiser:\n\(adv.output)")
        #expect(browser.lines(containing: "found Early").first?.contains("addrs=\(pair.addressA)") == true, "\(browser.output)")
        if let found { print("MEASURED found after the link was configured: \(Int(ms(configured, found))) ms") }
        Self.expectQuiet(adv, "advertiser")
        Self.expectQuiet(browser, "browser")
    }

    @Test func advertiserStartedWhileIPv6IsTentativeIsFoundOverIPv6() throws {
        // IPv6 only, and both tools start the moment the link is up: their link-local addresses are still in
        // duplicate address detection, and sending from one fails (EADDRNOTAVAIL).
        let pair = try VethPair(ipv4: false, settle: false)
        defer { pair.remove() }
        let adv = try pair.spawn(pair.a, [Netns.tool, "register", "--name", "Tentative", "--port", "4242"])
        let browser = try pair.spawn(pair.b, [Netns.tool, "browse", "--family", "6"])
        #expect(browser.waitFor("found Tentative\t", withinOwnMilliseconds: 12000), "browser:\n\(browser.output)\nadvertiser:\n\(adv.output)")
        #expect(browser.lines(containing: "found Tentative").first?.contains("fe80::") == true, "\(browser.output)")
        // The advertiser keeps working over IPv6 afterwards: a browser started now finds it too.
        let late = try pair.spawn(pair.b, [Netns.tool, "browse", "--family", "6"])
        #expect(late.waitFor("found Tentative\t", withinOwnMilliseconds: 5000), "late browser:\n\(late.output)\nadvertiser:\n\(adv.output)")
        Self.expectQuiet(adv, "advertiser")
        Self.expectQuiet(browser, "browser")
    }

    @Test func linkDownIsLostAtOnceAndLinkUpIsFoundAgain() throws {
        let pair = try VethPair()
        defer { pair.remove() }
        let adv = try pair.spawn(pair.a, [Netns.tool, "register", "--name", "Flappy", "--port", "4242"])
        // The browser starts once the name is ours: its own-clock window measures discovery, not the
        // advertiser's probing (sat12, stress-ng: the advertiser took 6.2 s of its own clock to register).
        #expect(adv.waitFor("registered Flappy", timeout: 30) != nil, "advertiser:\n\(adv.output)")
        let browser = try pair.spawn(pair.b, [Netns.tool, "browse"])
        #expect(browser.waitFor("found Flappy\t", withinOwnMilliseconds: 5000), "browser:\n\(browser.output)\nadvertiser:\n\(adv.output)")
        for round in 1...2 {
            // The advertiser's end goes down: the browser's end loses its carrier, and what it learnt there goes.
            let down = DispatchTime.now()
            #expect(pair.ip(pair.a, "link", "set", pair.va, "down"))
            let lost = browser.waitFor("lost Flappy", since: down, timeout: 5)
            #expect(lost != nil, "round \(round): browser:\n\(browser.output)")
            let up = DispatchTime.now()
            #expect(pair.ip(pair.a, "link", "set", pair.va, "up"))
            let again = browser.waitFor("found Flappy\t", since: up, timeout: 10)
            #expect(again != nil, "round \(round): browser:\n\(browser.output)\nadvertiser:\n\(adv.output)")
            if let lost, let again { print("MEASURED round \(round): lost \(Int(ms(down, lost))) ms after down, found \(Int(ms(up, again))) ms after up") }
        }
        Self.expectQuiet(adv, "advertiser", atMost: 4)
        Self.expectQuiet(browser, "browser", atMost: 4)
    }

    @Test func addressReplacedIsAnnouncedAndTheOldOneWithdrawn() throws {
        let pair = try VethPair()
        defer { pair.remove() }
        let adv = try pair.spawn(pair.a, [Netns.tool, "register", "--name", "Mover", "--port", "4242"])
        // The browser starts once the name is ours: its own-clock window measures discovery, not the
        // advertiser's probing (sat12, stress-ng: the advertiser took 6.2 s of its own clock to register).
        #expect(adv.waitFor("registered Mover", timeout: 30) != nil, "advertiser:\n\(adv.output)")
        let browser = try pair.spawn(pair.b, [Netns.tool, "browse"])
        #expect(browser.waitFor("found Mover\t", withinOwnMilliseconds: 5000), "browser:\n\(browser.output)\nadvertiser:\n\(adv.output)")
        #expect(browser.output.contains("addrs=\(pair.addressA)"))
        let newAddress = "10.77.\(pair.n % 250).11"
        let changed = DispatchTime.now()
        // (Deleting a primary address takes its secondaries with it: delete first, then add.)
        #expect(pair.ip(pair.a, "addr", "del", "\(pair.addressA)/24", "dev", pair.va))
        #expect(pair.ip(pair.a, "addr", "add", "\(newAddress)/24", "dev", pair.va))
        // Found at the new address only: announced, and the old A record withdrawn (TTL 0).
        var updated: String?
        let deadline = Date().addingTimeInterval(5)
        while updated == nil && Date() < deadline {
            updated = browser.lines(containing: "updated Mover").last { $0.contains(newAddress + ",") || $0.contains(newAddress + " ") }
            if updated != nil && updated!.contains(pair.addressA + ",") { updated = nil }
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(updated != nil, "browser:\n\(browser.output)\nadvertiser:\n\(adv.output)")
        if let at = browser.waitFor("updated Mover", since: changed, timeout: 0) { print("MEASURED address change seen after \(Int(ms(changed, at))) ms") }
        // A browser started now resolves the new address only.
        let late = try pair.spawn(pair.b, [Netns.tool, "browse", "--family", "4"])
        #expect(late.waitFor("found Mover\t", withinOwnMilliseconds: 5000), "\(late.output)")
        let line = late.lines(containing: "found Mover").first ?? ""
        #expect(line.contains("addrs=\(newAddress)") && !line.contains(pair.addressA + ",") && !line.contains(pair.addressA + " "), "\(late.output)")
        Self.expectQuiet(adv, "advertiser")
    }

    @Test func namespaceWithoutIPv6WorksOverIPv4Quietly() throws {
        let pair = try VethPair(ipv6: false)
        defer { pair.remove() }
        let adv = try pair.spawn(pair.a, [Netns.tool, "register", "--name", "Four", "--port", "4242"])
        // The browser starts once the name is ours: its own-clock window measures discovery, not the
        // advertiser's probing (sat12, stress-ng: the advertiser took 6.2 s of its own clock to register).
        #expect(adv.waitFor("registered Four", timeout: 30) != nil, "advertiser:\n\(adv.output)")
        let browser = try pair.spawn(pair.b, [Netns.tool, "browse"])
        #expect(browser.waitFor("found Four\t", withinOwnMilliseconds: 5000), "browser:\n\(browser.output)\nadvertiser:\n\(adv.output)")
        #expect(browser.lines(containing: "found Four").first?.contains("addrs=\(pair.addressA) ") == true, "\(browser.output)")
        Self.expectQuiet(adv, "advertiser", atMost: 0)
        Self.expectQuiet(browser, "browser", atMost: 0)
    }

    @Test func ipv6SwitchedOffAndOnUnderARunningAdvertiser() throws {
        let pair = try VethPair()
        defer { pair.remove() }
        let adv = try pair.spawn(pair.a, [Netns.tool, "register", "--name", "Switch", "--port", "4242"])
        // The browser starts once the name is ours: its own-clock window measures discovery, not the
        // advertiser's probing (sat12, stress-ng: the advertiser took 6.2 s of its own clock to register).
        #expect(adv.waitFor("registered Switch", timeout: 30) != nil, "advertiser:\n\(adv.output)")
        let six = try pair.spawn(pair.b, [Netns.tool, "browse", "--family", "6"])
        #expect(six.waitFor("found Switch\t", withinOwnMilliseconds: 5000), "browser:\n\(six.output)\nadvertiser:\n\(adv.output)")
        // IPv6 off on both ends: the advertiser goes on over IPv4 (a browser started now is answered).
        for (ns, dev) in [(pair.a, pair.va), (pair.b, pair.vb)] { #expect(pair.sysctl(ns, "net.ipv6.conf.\(dev).disable_ipv6=1")) }
        Thread.sleep(forTimeInterval: 0.5)
        let four = try pair.spawn(pair.b, [Netns.tool, "browse", "--family", "4"])
        #expect(four.waitFor("found Switch\t", withinOwnMilliseconds: 5000), "IPv4 browser:\n\(four.output)\nadvertiser:\n\(adv.output)")
        // IPv6 back on: once the link-local addresses are verified, the advertiser answers over IPv6 again.
        for (ns, dev) in [(pair.a, pair.va), (pair.b, pair.vb)] { #expect(pair.sysctl(ns, "net.ipv6.conf.\(dev).disable_ipv6=0")) }
        Thread.sleep(forTimeInterval: 3)
        let sixAgain = try pair.spawn(pair.b, [Netns.tool, "browse", "--family", "6"])
        #expect(sixAgain.waitFor("found Switch\t", withinOwnMilliseconds: 6000), "IPv6 browser:\n\(sixAgain.output)\nadvertiser:\n\(adv.output)")
        #expect(sixAgain.lines(containing: "found Switch").first?.contains("fe80::") == true, "\(sixAgain.output)")
        Self.expectQuiet(adv, "advertiser")
    }
}
