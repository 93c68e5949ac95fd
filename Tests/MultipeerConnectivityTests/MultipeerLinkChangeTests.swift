// Multipeer sessions across network changes (issue 25), with `ble mc` peers in two network namespaces
// made here and joined by a veth pair: a link taken down (the session reports the peer disconnected within
// its 10 s liveness timeout, on both sides) and up again (the browser finds the advertiser again and the
// session is joined again); an advertiser whose address is replaced (found again, at the new address); a
// peer killed with SIGKILL in the middle of a resource (the other side reports the transfer failed and the
// peer gone at once, and a new peer joins it). The test process sends nothing itself; the namespaces and
// every process go when each test ends.
import Foundation
import Testing

/// Two namespaces joined by a veth pair, and `ble` processes inside them whose lines are kept with times.
final class LinkLab: @unchecked Sendable {
    static let available: Bool = {
        let name = "mclab\(getpid())"
        guard LinkLab.run(["ip", "netns", "add", name]) == 0 else { return false }
        LinkLab.run(["ip", "netns", "del", name])
        return FileManager.default.isExecutableFile(atPath: LinkLab.ble)
    }()
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let ble = root.appendingPathComponent(".build/debug/ble").path
    static let counter = NSLock()
    nonisolated(unsafe) static var next = 0

    let a: String, b: String, va: String, vb: String, n: Int
    var addressA: String { "10.78.\(n % 250).1" }
    var addressB: String { "10.78.\(n % 250).2" }
    private var peers: [LabPeer] = []
    let dir: URL

    init(ipv6: Bool = true) throws {
        n = LinkLab.counter.withLock {
            LinkLab.next += 1; return LinkLab.next
        }
        let tag = "\(getpid() % 10000)m\(n)"
        a = "mcA\(tag)"; b = "mcB\(tag)"; va = "mA\(tag)"; vb = "mB\(tag)"
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("mc-lab-\(tag)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("in"), withIntermediateDirectories: true)
        var steps: [[String]] = [["ip", "netns", "add", a], ["ip", "netns", "add", b]]
        if !ipv6 {
            for ns in [a, b] {
                steps.append(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])
                steps.append(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"])
            }
        }
        steps += [
            ["ip", "link", "add", va, "type", "veth", "peer", "name", vb],
            ["ip", "link", "set", va, "netns", a], ["ip", "link", "set", vb, "netns", b],
            ["ip", "-n", a, "addr", "add", "\(addressA)/24", "dev", va], ["ip", "-n", b, "addr", "add", "\(addressB)/24", "dev", vb],
            ["ip", "-n", a, "link", "set", "lo", "up"], ["ip", "-n", b, "link", "set", "lo", "up"],
            ["ip", "-n", a, "link", "set", va, "up"], ["ip", "-n", b, "link", "set", vb, "up"],
        ]
        for step in steps where LinkLab.run(step) != 0 {
            remove()
            throw TestFailure("failed: \(step.joined(separator: " "))")
        }
        if ipv6 { Thread.sleep(forTimeInterval: 2) }   // duplicate address detection
    }

    @discardableResult
    static func run(_ argv: [String]) -> Int32 {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = argv
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        do { try p.run() } catch { return -1 }
        p.waitUntilExit()
        return p.terminationStatus
    }

    @discardableResult
    func ip(_ ns: String, _ args: String...) -> Bool { LinkLab.run(["ip", "-n", ns] + args) == 0 }

    /// `ble ARGS` inside `ns`.
    func ble(_ ns: String, _ args: [String]) throws -> LabPeer {
        let p = try LabPeer(["ip", "netns", "exec", ns, LinkLab.ble] + args)
        peers.append(p)
        return p
    }

    func remove() {
        for p in peers { p.kill() }
        LinkLab.run(["ip", "netns", "del", a])
        LinkLab.run(["ip", "netns", "del", b])
        try? FileManager.default.removeItem(at: dir)
    }
}

final class LabPeer: @unchecked Sendable {
    let process = Process()
    private let lock = NSLock()
    private var pending = Data()
    private var lines: [(at: Date, text: String)] = []
    private let drained = DispatchSemaphore(value: 0)

    init(_ argv: [String]) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = argv
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let reader = pipe.fileHandleForReading
        Thread.detachNewThread { [self] in
            while true {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                let now = Date()
                lock.withLock {
                    pending.append(chunk)
                    while let nl = pending.firstIndex(of: 0x0A) {
                        lines.append((now, String(decoding: pending[pending.startIndex..<nl], as: UTF8.self)))
                        pending.removeSubrange(pending.startIndex...nl)
                    }
                }
            }
            drained.signal()
        }
    }

    /// The arrival time of the first line containing `text` after `since`, waiting up to `seconds`.
    func waitFor(_ text: String, since: Date = .distantPast, seconds: Double) -> Date? {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            if let hit = lock.withLock({ lines.first { $0.at > since && $0.text.contains(text) } }) { return hit.at }
            if Date() > deadline { return nil }
            usleep(10_000)
        }
    }

    var output: String { lock.withLock { lines.map(\.text).joined(separator: "\n") } }

    func kill(signal: Int32 = SIGKILL) {
        guard process.isRunning else { return }
        Foundation.kill(process.processIdentifier, signal)
        process.waitUntilExit()
        _ = drained.wait(timeout: .now() + 5)
    }
}

@Suite(
    .serialized, .enabled(if: LinkLab.available, "needs root, network namespaces and .build/debug/ble; Multipeer link-change tests skipped"),
    .timeLimit(.minutes(4)))
struct MultipeerLinkChangeTests {
    let service = "lk" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
    /// MCSession's liveness timeout, and the longest it may take past it to notice (it checks every second).
    static let timeout = 10.0, slack = 2.0

    @Test func linkDownIsDisconnectedWithinTheTimeoutAndTheSessionIsJoinedAgainWhenItIsBack() throws {
        let lab = try LinkLab()
        defer { lab.remove() }
        let adv = try lab.ble(lab.a, ["mc", "advertise", "--name", "Adv", "--service", service, "--duration", "120"])
        let brw = try lab.ble(lab.b, ["mc", "browse", "--name", "Brw", "--service", service, "--duration", "120"])
        #expect(brw.waitFor("Adv: connected", seconds: 20) != nil, "browser:\n\(brw.output)\nadvertiser:\n\(adv.output)")
        #expect(adv.waitFor("Brw: connected", seconds: 5) != nil, "advertiser:\n\(adv.output)")
        let down = Date()
        #expect(lab.ip(lab.a, "link", "set", lab.va, "down"))
        let lostB = brw.waitFor("Adv: notConnected", since: down, seconds: Self.timeout + Self.slack + 2)
        let lostA = adv.waitFor("Brw: notConnected", since: down, seconds: 2)
        #expect(lostB != nil && lostA != nil, "browser:\n\(brw.output)\nadvertiser:\n\(adv.output)")
        if let lostB, let lostA {
            print(
                "MEASURED link down: browser reports the peer gone after \(Int(lostB.timeIntervalSince(down) * 1000)) ms, advertiser after \(Int(lostA.timeIntervalSince(down) * 1000)) ms"
            )
            #expect(lostB.timeIntervalSince(down) <= Self.timeout + Self.slack && lostA.timeIntervalSince(down) <= Self.timeout + Self.slack)
        }
        let up = Date()
        #expect(lab.ip(lab.a, "link", "set", lab.va, "up"))
        let again = brw.waitFor("Adv: connected", since: up, seconds: 20)
        #expect(again != nil, "browser:\n\(brw.output)\nadvertiser:\n\(adv.output)")
        #expect(adv.waitFor("Brw: connected", since: up, seconds: 5) != nil, "advertiser:\n\(adv.output)")
        if let again { print("MEASURED link up: joined again after \(Int(again.timeIntervalSince(up) * 1000)) ms") }
        #expect(!adv.output.contains("closed channel") && !brw.output.contains("closed channel"))
    }

    @Test func anAdvertiserWhoseAddressChangedIsFoundAgainAtTheNewAddress() throws {
        // IPv4 only: the replaced address is the only way to reach the advertiser.
        let lab = try LinkLab(ipv6: false)
        defer { lab.remove() }
        let adv = try lab.ble(lab.a, ["mc", "advertise", "--name", "Adv", "--service", service, "--duration", "120"])
        let first = try lab.ble(lab.b, ["mc", "browse", "--name", "Brw", "--service", service, "--duration", "120"])
        #expect(first.waitFor("Adv: connected", seconds: 20) != nil, "browser:\n\(first.output)\nadvertiser:\n\(adv.output)")
        let moved = Date()
        let newAddress = "10.78.\(lab.n % 250).11"
        #expect(lab.ip(lab.a, "addr", "del", "\(lab.addressA)/24", "dev", lab.va))
        #expect(lab.ip(lab.a, "addr", "add", "\(newAddress)/24", "dev", lab.va))
        // The session on the old address falls silent: reported within the timeout.
        let lost = first.waitFor("Adv: notConnected", since: moved, seconds: Self.timeout + Self.slack + 2)
        #expect(lost != nil, "browser:\n\(first.output)")
        if let lost { #expect(lost.timeIntervalSince(moved) <= Self.timeout + Self.slack) }
        // A browser finds it again, at its new address, and joins it.
        let second = try lab.ble(lab.b, ["mc", "browse", "--name", "Brw2", "--service", service, "--duration", "120"])
        #expect(second.waitFor("Adv: connected", seconds: 15) != nil, "second browser:\n\(second.output)\nadvertiser:\n\(adv.output)")
        #expect(adv.waitFor("Brw2: connected", since: moved, seconds: 5) != nil, "advertiser:\n\(adv.output)")
    }

    @Test func aPeerKilledMidResourceIsReportedAndANewPeerJoins() throws {
        let lab = try LinkLab()
        defer { lab.remove() }
        let photo = lab.dir.appendingPathComponent("photo.bin")
        try writePattern(photo, size: 100_000_000)
        let adv = try lab.ble(lab.a, ["mc", "advertise", "--name", "Adv", "--service", service, "--dir", lab.dir.appendingPathComponent("in").path, "--duration", "120"])
        let sender = try lab.ble(lab.b, ["mc", "browse", "--name", "Brw", "--service", service, "--photo", photo.path, "--duration", "120"])
        #expect(adv.waitFor("receiving photo.bin from Brw", seconds: 20) != nil, "advertiser:\n\(adv.output)\nbrowser:\n\(sender.output)")
        let killed = Date()
        sender.kill(signal: SIGKILL)
        // The receiver hears the connection end at once: the transfer failed, the peer gone.
        let failed = adv.waitFor("photo.bin failed", since: killed, seconds: 5)
        let gone = adv.waitFor("Brw: notConnected", since: killed, seconds: 5)
        #expect(failed != nil && gone != nil, "advertiser:\n\(adv.output)")
        if let gone { print("MEASURED killed mid-resource: reported gone after \(Int(gone.timeIntervalSince(killed) * 1000)) ms") }
        #expect(!FileManager.default.fileExists(atPath: lab.dir.appendingPathComponent("in/photo.bin").path))
        // A new peer joins the same session and its photo arrives whole.
        let small = lab.dir.appendingPathComponent("small.bin")
        try writePattern(small, size: 2_000_000)
        let again = try lab.ble(lab.b, ["mc", "browse", "--name", "Brw2", "--service", service, "--photo", small.path, "--duration", "120"])
        #expect(again.waitFor("photo sent to Adv", seconds: 20) != nil, "new browser:\n\(again.output)\nadvertiser:\n\(adv.output)")
        #expect(adv.waitFor("stored", since: killed, seconds: 5) != nil, "advertiser:\n\(adv.output)")
        #expect(try sameContents(small, lab.dir.appendingPathComponent("in/small.bin")))
    }
}
