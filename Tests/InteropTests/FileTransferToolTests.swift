// `ble send` and `ble receive` as processes, each its own controller on our radio server (in this process):
// a file arrives intact with no partial file left; a second send of the same name is stored as
// "name (1).ext"; a sender killed mid-transfer and run again resumes where the receiver stopped; a send to
// a name nobody advertises fails with a clear message. Each test works in its own temporary directory and
// leaves no process behind.
import Foundation
import Testing
import TestSupport
import Crypto
import BLEVirtualRadio

/// A `ble` process whose output (stdout and stderr together) is collected as it comes.
final class ToolProcess: @unchecked Sendable {
    let process = Process()
    private let lock = NSLock()
    private var text = ""

    init(_ arguments: [String], transport: String, environment: [String: String] = [:]) throws {
        process.executableURL = Interop.root.appendingPathComponent(".build/debug/ble")
        process.arguments = arguments
        process.environment = Interop.environment(["BLE_TRANSPORT": transport].merging(environment) { $1 })
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        pipe.fileHandleForReading.readabilityHandler = { [weak self] h in
            let d = h.availableData
            // At end of file: removing the handler cancels its read source before the descriptor closes.
            guard let self else { h.readabilityHandler = nil; return }
            guard !d.isEmpty else { if !self.process.isRunning { h.readabilityHandler = nil }; return }
            lock.withLock { text += String(decoding: d, as: UTF8.self) }
        }
        try process.run()
    }

    var output: String { lock.withLock { text } }

    func waitFor(_ needle: String, seconds: Double = 20) async throws {
        let deadline = Date().addingTimeInterval(seconds)
        while !output.contains(needle) {
            guard process.isRunning else { throw InteropError("ble exited (\(process.terminationStatus)) before \"\(needle)\":\n\(output)") }
            guard Date() < deadline else { throw InteropError("timed out waiting for \"\(needle)\":\n\(output)") }
            try await pause(nanoseconds: 20_000_000)
        }
    }

    /// Waits for the exit; returns the status.
    func exit(seconds: Double = 60) async throws -> Int32 {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning {
            guard Date() < deadline else { throw InteropError("ble still running after \(seconds) s:\n\(output)") }
            try await pause(nanoseconds: 20_000_000)
        }
        // Let the last output reach the handler.
        try await pause(nanoseconds: 50_000_000)
        return process.terminationStatus
    }

    func kill() {
        guard process.isRunning else { return }
        Foundation.kill(process.processIdentifier, SIGKILL)
        for _ in 0..<200 where process.isRunning { usleep(10_000) }
    }

    deinit { kill() }
}

/// A temporary directory with `in` and `out`, removed at the end.
struct TransferDirectory {
    let root: URL
    var inbox: URL { root.appendingPathComponent("out") }
    var outbox: URL { root.appendingPathComponent("in") }

    init() throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("ble-transfer-\(UUID().uuidString)")
        for d in ["in", "out"] { try FileManager.default.createDirectory(at: root.appendingPathComponent(d), withIntermediateDirectories: true) }
    }

    func write(_ name: String, size: Int, seed: UInt32) throws -> URL {
        var x = seed
        let data = Data(
            (0..<size).map { _ in
                x = x &* 1_664_525 &+ 1_013_904_223; return UInt8(truncatingIfNeeded: x >> 24)
            })
        let url = outbox.appendingPathComponent(name)
        try data.write(to: url)
        return url
    }

    /// Every entry of the receiving directory, hidden ones too.
    func received() throws -> [String] { try FileManager.default.contentsOfDirectory(atPath: inbox.path).sorted() }

    func remove() { try? FileManager.default.removeItem(at: root) }
}

func sha256(_ url: URL) throws -> [UInt8] { Array(SHA256.hash(data: try Data(contentsOf: url))) }

@Suite(.serialized, .timeLimit(.minutes(3))) struct FileTransferToolTests {
    @Test func aFileArrivesIntactAndASecondSendGetsANumberedName() async throws {
        let (server, _) = try startRadio()
        defer { server.stop() }
        let dir = try TransferDirectory()
        defer { dir.remove() }
        let transport = "tcp-client:127.0.0.1:\(server.port)"
        let file = try dir.write("photo.jpg", size: 300_000, seed: 7)
        let receiver = try ToolProcess(["receive", "--dir", dir.inbox.path, "--name", "inbox-a"], transport: transport)
        defer { receiver.kill() }
        try await receiver.waitFor("receiving into")

        let first = try ToolProcess(["send", file.path, "--to", "inbox-a"], transport: transport)
        defer { first.kill() }
        #expect(try await first.exit() == 0, "\(first.output)")
        #expect(first.output.contains("SHA-256 verified by the receiver"))
        #expect(try dir.received() == ["photo.jpg"])
        #expect(try Data(contentsOf: dir.inbox.appendingPathComponent("photo.jpg")) == Data(contentsOf: file))

        let second = try ToolProcess(["send", file.path, "--to", "inbox-a"], transport: transport)
        defer { second.kill() }
        #expect(try await second.exit() == 0, "\(second.output)")
        try await receiver.waitFor("photo (1).jpg")
        // Both copies, intact, and no partial file left behind.
        #expect(try dir.received() == ["photo (1).jpg", "photo.jpg"])
        #expect(try Data(contentsOf: dir.inbox.appendingPathComponent("photo (1).jpg")) == Data(contentsOf: file))
    }

    @Test func aSenderKilledMidTransferResumesWhenRunAgain() async throws {
        let (server, air) = try startRadio()
        defer { server.stop() }
        // Airtime charged (LE 2M, 251-octet data length), so that the transfer lasts long enough to interrupt.
        air.loop.sync { air.airtime = AirtimeModel(phy: .le2M, dataLength: 251, connectionIntervalMilliseconds: 7.5) }
        let dir = try TransferDirectory()
        defer { dir.remove() }
        let transport = "tcp-client:127.0.0.1:\(server.port)"
        // The link really runs at LE 2M and 251 octets now (the host asks for them, as iOS does): ~120 KB/s,
        // so a 3 MB file takes about 25 s and the sender below is interrupted after its first megabyte.
        let file = try dir.write("firmware.bin", size: 3_000_000, seed: 11)
        let receiver = try ToolProcess(["receive", "--dir", dir.inbox.path, "--name", "inbox-b"], transport: transport)
        defer { receiver.kill() }
        try await receiver.waitFor("receiving into")

        // The first sender kills itself with SIGKILL once 1 MB has gone into the channel (OCB_SEND_KILL_AFTER), so the
        // interruption lands mid-transfer however late this task is scheduled. Watching the partial file from here
        // and killing it from the test failed under stress-ng: the whole 18 s transfer ended before the watcher ran.
        let first = try ToolProcess(
            ["send", file.path, "--to", "inbox-b"], transport: transport, environment: ["OCB_SEND_KILL_AFTER": "1000000"])
        defer { first.kill() }
        #expect(try await first.exit(seconds: 90) == SIGKILL, "\(first.output)")
        #expect(first.process.terminationReason == .uncaughtSignal)
        // The receiver keeps what arrived, under a hidden partial name.
        let deadline = Date().addingTimeInterval(30)
        var partial: UInt64 = 0
        while partial == 0 {
            guard Date() < deadline else { throw InteropError("no partial file:\n\(first.output)\n\(receiver.output)") }
            partial =
                (try dir.received().filter { $0.hasSuffix(".part") }.first).flatMap {
                    try? FileManager.default.attributesOfItem(atPath: dir.inbox.appendingPathComponent($0).path)[.size] as? UInt64
                } ?? 0
            try await pause(nanoseconds: 20_000_000)
        }
        #expect(partial < 3_000_000)
        #expect(try dir.received().allSatisfy { $0.hasPrefix(".") }, "nothing under a final name yet")

        let second = try ToolProcess(["send", file.path, "--to", "inbox-b"], transport: transport)
        defer { second.kill() }
        #expect(try await second.exit(seconds: 90) == 0, "\(second.output)\n\(receiver.output)")
        #expect(receiver.output.contains("resuming at"), "\(receiver.output)")
        #expect(try dir.received() == ["firmware.bin"])
        #expect(try sha256(dir.inbox.appendingPathComponent("firmware.bin")) == sha256(file))
    }

    @Test func sendingToANameNobodyAdvertisesFails() async throws {
        let (server, _) = try startRadio()
        defer { server.stop() }
        let dir = try TransferDirectory()
        defer { dir.remove() }
        let file = try dir.write("notes.txt", size: 1000, seed: 3)
        let send = try ToolProcess(["send", file.path, "--to", "nobody-here", "--timeout", "2"], transport: "tcp-client:127.0.0.1:\(server.port)")
        defer { send.kill() }
        let status = try await send.exit(seconds: 30)
        #expect(status != 0)
        #expect(send.output.contains("no receiver matching \"nobody-here\" found"), "\(send.output)")
    }
}
