// Test harness: network namespaces joined by a veth pair, and child processes run inside them.
//
// Nothing here touches the machine's own interfaces: every socket lives in a namespace made by the test,
// and `remove()` (called by every test, also on failure, through `defer`) kills the processes and deletes
// the namespaces. Real-socket tests are skipped when namespaces cannot be made (not root, no `ip`).
import Foundation
import Testing

enum Netns {
    /// Whether `ip netns add` works here.
    static let available: Bool = {
        let name = "dnssdprobe\(getpid())"
        guard run(["ip", "netns", "add", name]) == 0 else { return false }
        _ = run(["ip", "netns", "del", name])
        return true
    }()

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

    static let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let tool = repo.appendingPathComponent(".build/debug/dnssd-tool").path
    static let python = repo.appendingPathComponent(".venv/bin/python").path
}

/// Two namespaces, `a` (10.77.N.1 on `va`) and `b` (10.77.N.2 on `vb`), linked by a veth pair.
final class VethPair: @unchecked Sendable {
    static let counter = NSLock()
    nonisolated(unsafe) static var next = 0
    let a: String, b: String, va: String, vb: String
    let n: Int
    var children: [Child] = []
    var addressA: String { "10.77.\(n % 250).1" }
    var addressB: String { "10.77.\(n % 250).2" }

    /// - Parameters:
    ///   - configured: give the veth ends their IPv4 addresses and bring them up (else only loopback is up:
    ///     call `configure()` later).
    ///   - ipv4: with `configured`, add the IPv4 addresses (without, the link has only IPv6 link-local ones).
    ///   - ipv6: false disables IPv6 in both namespaces before the link is made (no IPv6 address anywhere).
    ///   - settle: wait for IPv6 duplicate address detection (2 s) before returning.
    init(configured: Bool = true, ipv4: Bool = true, ipv6: Bool = true, settle: Bool = true) throws {
        n = VethPair.counter.withLock {
            VethPair.next += 1; return VethPair.next
        }
        let tag = "\(getpid() % 10000)x\(n)"
        a = "dnsA\(tag)"; b = "dnsB\(tag)"; va = "vA\(tag)"; vb = "vB\(tag)"
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
            ["ip", "-n", a, "link", "set", "lo", "up"], ["ip", "-n", b, "link", "set", "lo", "up"],
        ]
        for step in steps where Netns.run(step) != 0 {
            remove()
            throw NSError(domain: "netns", code: 1, userInfo: [NSLocalizedDescriptionKey: "failed: \(step.joined(separator: " "))"])
        }
        if configured { try configure(ipv4: ipv4) }
        // IPv6 duplicate address detection must finish before link-local addresses are usable.
        if configured && settle && ipv6 { Thread.sleep(forTimeInterval: 2.0) }
    }

    /// Adds the IPv4 addresses (unless `ipv4` is false) and brings both veth ends up.
    func configure(ipv4: Bool = true) throws {
        var steps: [[String]] = []
        if ipv4 {
            steps += [["ip", "-n", a, "addr", "add", "\(addressA)/24", "dev", va], ["ip", "-n", b, "addr", "add", "\(addressB)/24", "dev", vb]]
        }
        steps += [["ip", "-n", a, "link", "set", va, "up"], ["ip", "-n", b, "link", "set", vb, "up"]]
        for step in steps where Netns.run(step) != 0 {
            throw NSError(domain: "netns", code: 1, userInfo: [NSLocalizedDescriptionKey: "failed: \(step.joined(separator: " "))"])
        }
    }

    /// Runs `ip -n ns ARGS`; true when it succeeded.
    @discardableResult
    func ip(_ ns: String, _ args: String...) -> Bool { Netns.run(["ip", "-n", ns] + args) == 0 }

    /// Runs `sysctl -qw SETTING` inside `ns`.
    @discardableResult
    func sysctl(_ ns: String, _ setting: String) -> Bool { Netns.run(["ip", "netns", "exec", ns, "sysctl", "-qw", setting]) == 0 }

    /// Starts `argv` inside namespace `ns`.
    func spawn(_ ns: String, _ argv: [String]) throws -> Child {
        let child = try Child(["ip", "netns", "exec", ns] + argv)
        children.append(child)
        return child
    }

    /// Kills every child and deletes both namespaces (the veth pair goes with them).
    func remove() {
        for c in children { c.stop() }
        _ = Netns.run(["ip", "netns", "del", a])
        _ = Netns.run(["ip", "netns", "del", b])
    }
}

/// A child process whose output lines are collected with arrival times.
final class Child: @unchecked Sendable {
    let process = Process()
    private let lock = NSLock()
    private var buffer = Data()
    private var lines: [(at: DispatchTime, text: String)] = []
    let started: DispatchTime

    init(_ argv: [String]) throws {
        started = .now()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = argv
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        pipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            guard let self else { handle.readabilityHandler = nil; return }
            // Empty means end of file only once the child has gone: a read can come back empty early, and
            // removing the handler then lost everything the child printed afterwards.
            guard !data.isEmpty else { if !self.process.isRunning { handle.readabilityHandler = nil }; return }
            let now = DispatchTime.now()
            self.lock.withLock {
                self.buffer.append(data)
                while let nl = self.buffer.firstIndex(of: 0x0A) {
                    let line = String(decoding: self.buffer[self.buffer.startIndex..<nl], as: UTF8.self)
                    self.buffer.removeSubrange(self.buffer.startIndex...nl)
                    self.lines.append((now, line))
                }
            }
        }
        try process.run()
    }

    /// Waits up to `timeout` seconds for a line containing `text`; returns its arrival time.
    func waitFor(_ text: String, timeout: Double) -> DispatchTime? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let hit = lock.withLock({ lines.first { $0.text.contains(text) } }) { return hit.at }
            Thread.sleep(forTimeInterval: 0.005)
        }
        return nil
    }

    /// Waits up to `timeout` seconds for a line containing `text` that arrived after `since`.
    func waitFor(_ text: String, since: DispatchTime, timeout: Double) -> DispatchTime? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let hit = lock.withLock({ lines.first { $0.at > since && $0.text.contains(text) } }) { return hit.at }
            Thread.sleep(forTimeInterval: 0.005)
        }
        return nil
    }

    /// The child's own time of the first line containing `text`: the milliseconds its lines start with
    /// (dnssd-tool counts them from its start), so that a slow start on a busy machine is not counted.
    func toolMilliseconds(of text: String) -> Int? {
        lines(containing: text).first.flatMap { $0.split(separator: " ").first.flatMap { Int($0) } }
    }

    /// Whether a line containing `text` comes within `milliseconds` of the child's start by its own clock. The
    /// wall-clock wait is longer (30 s at least): a child spawned on a busy machine can take seconds to start.
    func waitFor(_ text: String, withinOwnMilliseconds milliseconds: Int) -> Bool {
        waitFor(text, timeout: max(30, Double(milliseconds) / 1000)) != nil && (toolMilliseconds(of: text) ?? .max) < milliseconds
    }

    /// When the child's own clock started, as seen from here: a line's arrival less the milliseconds it carries
    /// (the earliest over all lines, since delivery only adds delay). It leaves out the child's start-up, which
    /// takes seconds on a busy machine. Nil before a timed line has come.
    var clockOrigin: DispatchTime? {
        lock.withLock {
            lines.compactMap { l -> UInt64? in
                guard let ms = l.text.split(separator: " ").first.flatMap({ UInt64($0) }) else { return nil }
                let at = l.at.uptimeNanoseconds
                return at > ms * 1_000_000 ? at - ms * 1_000_000 : nil
            }.min().map { DispatchTime(uptimeNanoseconds: $0) }
        }
    }

    /// The lines that contain `text`.
    func lines(containing text: String) -> [String] { lock.withLock { lines.map(\.text).filter { $0.contains(text) } } }

    var output: String { lock.withLock { lines.map(\.text).joined(separator: "\n") } }

    /// SIGTERM (clean stop), then SIGKILL after 3 s.
    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        let deadline = Date().addingTimeInterval(3)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() }
    }

    func waitExit(timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        return !process.isRunning
    }
}

func ms(_ from: DispatchTime, _ to: DispatchTime) -> Double {
    Double(Int64(to.uptimeNanoseconds) - Int64(from.uptimeNanoseconds)) / 1e6
}
