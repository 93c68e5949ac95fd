// The seed's GameKit photo exchange (examples/gamekit-photo: KenshinCui's view controller written from Apple's
// Swift declarations) between two "machines": two processes, each in a network namespace of its own, joined
// by a veth pair. Each shows the peer picker, which finds the other over mDNS and connects (both pickers
// choose each other: a mutual invitation); one sends a photo with sendData(toAllPeers:with:), the other's
// receiveData(_:fromPeer:inSession:context:) stores it. Nothing reaches the machine's interfaces; the
// namespaces and processes are removed at the end, also on failure.
import Foundation
import Testing

enum Namespaces {
    /// Whether this process may make network namespaces (`ip netns add`: root and iproute2).
    static let available: Bool = {
        let probe = "gkprobe\(getpid())"
        guard run(["ip", "netns", "add", probe]) == 0 else { return false }
        run(["ip", "netns", "del", probe])
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
}

/// Two namespaces joined by a veth pair (10.78.N.1 and .2), loopback up in each.
final class TwoMachines {
    let a: String, b: String
    init() throws {
        let tag = "\(getpid() % 100_000)"
        a = "gkA\(tag)"; b = "gkB\(tag)"
        let (va, vb) = ("gvA\(tag)", "gvB\(tag)")
        let n = getpid() % 250
        let steps = [
            ["ip", "netns", "add", a], ["ip", "netns", "add", b],
            ["ip", "link", "add", va, "type", "veth", "peer", "name", vb],
            ["ip", "link", "set", va, "netns", a], ["ip", "link", "set", vb, "netns", b],
            ["ip", "-n", a, "addr", "add", "10.78.\(n).1/24", "dev", va], ["ip", "-n", b, "addr", "add", "10.78.\(n).2/24", "dev", vb],
            ["ip", "-n", a, "link", "set", va, "up"], ["ip", "-n", b, "link", "set", vb, "up"],
            ["ip", "-n", a, "link", "set", "lo", "up"], ["ip", "-n", b, "link", "set", "lo", "up"],
        ]
        for step in steps where Namespaces.run(step) != 0 {
            remove()
            throw GKTestFailure(description: "failed: \(step.joined(separator: " "))")
        }
    }

    func remove() {
        Namespaces.run(["ip", "netns", "del", a])
        Namespaces.run(["ip", "netns", "del", b])
    }
}

/// A child process whose output is collected as it comes; killed if still running when the test ends.
final class Machine: @unchecked Sendable {
    let process = Process()
    private let lock = NSLock()
    private var text = Data()

    init(namespace: String, _ argv: [String]) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["ip", "netns", "exec", namespace] + argv
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        pipe.fileHandleForReading.readabilityHandler = { [weak self] h in
            let d = h.availableData
            guard !d.isEmpty else { h.readabilityHandler = nil; return }
            self?.lock.withLock { self?.text.append(d) }
        }
        try process.run()
    }

    var output: String { lock.withLock { String(decoding: text, as: UTF8.self) } }

    /// Waits for the process to end by itself within `seconds` (then kills it); true when it ended by itself.
    func finish(within seconds: Double) -> Bool {
        let end = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < end { usleep(20_000) }
        let ended = !process.isRunning
        if !ended { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        return ended
    }

    deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
}

@Suite(
    .serialized, .enabled(if: Namespaces.available, "network namespaces cannot be made here (needs root and iproute2)"),
    .timeLimit(.minutes(2)))
struct GKSeedPhotoExchangeTests {
    @Test func seedPhotoExchangeBetweenTwoMachines() throws {
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let app = repo.appendingPathComponent(".build/debug/GameKitPhotoExample").path
        try #require(FileManager.default.isExecutableFile(atPath: app), "build the example first: swift build --build-tests")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("gk-seed-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let photo = dir.appendingPathComponent("photo.png"), album = dir.appendingPathComponent("album.png")
        let bytes = Data((0..<400_000).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ ($0 >> 9)) })
        try bytes.write(to: photo)

        let machines = try TwoMachines()
        defer { machines.remove() }
        let phoneA = try Machine(namespace: machines.a, [app, "--name", "Simulator", "--send", photo.path, "--duration", "45"])
        let phoneB = try Machine(namespace: machines.b, [app, "--name", "iPhone", "--save-to", album.path, "--duration", "45"])
        // Each exits by itself: the sender 3 s after sending, the receiver once the photo is in.
        let receiverEnded = phoneB.finish(within: 60), senderEnded = phoneA.finish(within: 10)
        #expect(receiverEnded && senderEnded, "receiver: \(phoneB.output)\nsender: \(phoneA.output)")
        #expect(phoneA.output.contains("已连接客户端设备:") && phoneB.output.contains("已连接客户端设备:"), "\(phoneA.output)\n\(phoneB.output)")
        #expect(phoneA.output.contains("Simulator: sent 400000 bytes"), "\(phoneA.output)")
        #expect(phoneB.output.contains("数据发送成功!") && phoneB.output.contains("iPhone: received 400000 bytes"), "\(phoneB.output)")
        #expect(try Data(contentsOf: album) == bytes)
        #expect(phoneA.process.terminationStatus == 0 && phoneB.process.terminationStatus == 0)
    }
}
