// Independent peers for the interop suite: Bumble scripts and rootcanal, installed into ./.venv by
// scripts/setup-venv.sh on first use, started on free ports, and killed when the test ends.
import Foundation
import Testing
import TestSupport
import BLETransport

enum Interop {
    /// The repository root (two levels above this file's directory).
    static let root: URL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let python = root.appendingPathComponent(".venv/bin/python").path
    static let peers = root.appendingPathComponent("Tests/InteropTests/peers")

    /// Installs Bumble and rootcanal once per test process.
    static let ready: Result<Void, InteropError> = {
        let p = Process()
        p.executableURL = root.appendingPathComponent("scripts/setup-venv.sh")
        p.standardOutput = FileHandle.standardError
        do { try p.run() } catch { return .failure(InteropError("cannot run setup-venv.sh: \(error)")) }
        p.waitUntilExit()
        return p.terminationStatus == 0 ? .success(()) : .failure(InteropError("setup-venv.sh failed (\(p.terminationStatus))"))
    }()

    static func requireReady() throws {
        _ = stateDirectory
        try ready.get()
    }

    /// The process's state directory (TestSupport's `processStateDirectory`, the one CoreBluetoothTests' harness
    /// uses too).
    static let stateDirectory = URL(fileURLWithPath: processStateDirectory)

    /// The environment for a child process: ours, the per-process state directory, then `extra`.
    static func environment(_ extra: [String: String] = [:]) -> [String: String] {
        ProcessInfo.processInfo.environment.merging(["OCB_STATE_DIR": stateDirectory.path]) { $1 }.merging(extra) { $1 }
    }

    /// Stops a peer: SIGTERM, then SIGKILL if it lingers. Polls instead of `waitUntilExit`, which can
    /// block a test thread far longer than the process takes to die.
    static func terminate(_ p: Process) {
        guard p.isRunning else { return }
        p.terminate()
        for _ in 0..<200 where p.isRunning { usleep(10_000) }
        if p.isRunning { kill(p.processIdentifier, SIGKILL) }
    }

    /// Arguments that run `command` under peers/guard.py, so the peer dies with this test process.
    static func guarded(_ command: [String]) -> [String] {
        [peers.appendingPathComponent("guard.py").path] + command
    }

    /// The rootcanal executable inside the venv's wheel (run directly, so that signals reach it).
    static func rootcanalBinary() throws -> String {
        let lib = root.appendingPathComponent(".venv/lib")
        for py in (try? FileManager.default.contentsOfDirectory(atPath: lib.path)) ?? [] {
            let candidate = lib.appendingPathComponent("\(py)/site-packages/rootcanal/bin/linux-x86_64/rootcanal").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw InteropError("rootcanal binary not found in .venv")
    }

    /// A TCP port nobody listens on now, outside the range a bind to port 0 draws from (see `reservedPort`).
    static func freePort() throws -> UInt16 { reservedPort() }
}

struct InteropError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// A peer process whose stdout is JSON lines.
final class PeerProcess: @unchecked Sendable {
    let process = Process()
    /// The guard's stdin: when this process dies, the pipe closes and the guard kills the peer.
    private let lifeline = Pipe()
    private let output = Pipe()
    private let lock = NSLock()
    private var lines: [[String: Any]] = []
    private var raw = ""
    /// The output pipe reached end of file: every line the peer wrote is in `lines`.
    private var outputEnded = false
    let name: String

    init(script: String, arguments: [String]) throws {
        name = script
        process.executableURL = URL(fileURLWithPath: Interop.python)
        process.arguments = Interop.guarded([Interop.python, "-u", Interop.peers.appendingPathComponent(script).path] + arguments)
        process.standardInput = lifeline
        let out = output
        process.standardOutput = out
        process.standardError = out
        // At end of file the handler is removed, which cancels its Dispatch read source before the pipe's
        // descriptor closes: a source left on a closed descriptor (soon reused by another test's socket)
        // corrupts Dispatch's event loop.
        out.fileHandleForReading.readabilityHandler = { [weak self] h in
            let d = h.availableData
            guard let self else { h.readabilityHandler = nil; return }
            // Empty means end of file only once the child has gone (a read can also come back empty early).
            guard !d.isEmpty else {
                if !self.process.isRunning {
                    h.readabilityHandler = nil
                    self.lock.withLock { self.outputEnded = true }
                }
                return
            }
            self.lock.lock()
            self.raw += String(decoding: d, as: UTF8.self)
            while let nl = self.raw.firstIndex(of: "\n") {
                let line = String(self.raw[..<nl])
                self.raw = String(self.raw[self.raw.index(after: nl)...])
                if let obj = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] {
                    self.lines.append(obj)
                } else if !line.isEmpty {
                    self.lines.append(["event": "log", "text": line])
                }
            }
            self.lock.unlock()
        }
        try process.run()
    }

    var events: [[String: Any]] { lock.lock(); defer { lock.unlock() }; return lines }

    func events(_ kind: String) -> [[String: Any]] { events.filter { $0["event"] as? String == kind } }

    /// Waits for an event; fails early if the peer reported an error or exited.
    @discardableResult
    func waitFor(_ kind: String, count: Int = 1, seconds: Double = 20, where match: ([String: Any]) -> Bool = { _ in true }) async throws -> [[String: Any]] {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            let found = events(kind).filter(match)
            if found.count >= count { return found }
            if let e = events("error").first { throw InteropError("\(name) failed: \(e["error"] ?? "?")\n\(transcript)") }
            if !process.isRunning {
                // Its last lines may still be on their way through the pipe (a busy machine delays the
                // reading handler): judge only once the pipe has ended, or a few seconds have passed.
                let exited = Date()
                while !lock.withLock({ outputEnded }) && Date().timeIntervalSince(exited) < 5 {
                    try await pause(nanoseconds: 10_000_000)
                }
                let found = events(kind).filter(match)
                if found.count >= count { return found }
                throw InteropError("\(name) exited (\(process.terminationStatus)) before \(kind)\n\(transcript)")
            }
            if Date() > deadline { throw InteropError("timed out waiting for \(kind) from \(name)\n\(transcript)") }
            try await pause(nanoseconds: 20_000_000)
        }
    }

    var transcript: String { events.suffix(30).map { "\($0)" }.joined(separator: "\n") }

    func stop() {
        Interop.terminate(process)
        output.fileHandleForReading.readabilityHandler = nil
    }

    deinit { stop() }
}

/// rootcanal on free ports (never the defaults another instance may hold).
final class RootCanal: @unchecked Sendable {
    let process = Process()
    private let lifeline = Pipe()
    let hciPort: UInt16

    init() throws {
        try Interop.requireReady()
        let ports = try (0..<4).map { _ in try Interop.freePort() }
        hciPort = ports[0]
        process.executableURL = URL(fileURLWithPath: Interop.python)
        process.arguments = Interop.guarded([
            try Interop.rootcanalBinary(), "--hci_port=\(ports[0])", "--test_port=\(ports[1])",
            "--link_port=\(ports[2])", "--link_ble_port=\(ports[3])",
        ])
        process.standardInput = lifeline
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Wait until the HCI port accepts connections.
        let deadline = Date().addingTimeInterval(15)
        while true {
            if let fd = try? Sockets.connectTCP(host: "127.0.0.1", port: hciPort) {
                close(fd)
                break
            }
            if Date() > deadline || !process.isRunning { throw InteropError("rootcanal did not start") }
            usleep(50_000)
        }
    }

    var transport: String { "tcp-client:127.0.0.1:\(hciPort)" }

    func stop() { Interop.terminate(process) }

    deinit { stop() }
}
