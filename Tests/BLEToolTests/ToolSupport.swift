// Running `ble` as a process for the tool's end-to-end tests: one-shot runs with their exit status and
// both outputs, long-running ones (serve, subscribe) whose output is collected as it comes, a virtual
// radio served over TCP from this process (each test its own air), a temporary state directory, and
// golden files. Everything a test starts is stopped and removed when it ends.
import Foundation
import Testing
import BLEVirtualRadio
import BLETransport

struct ToolFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

enum Tool {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let executable = root.appendingPathComponent(".build/debug/ble")
    static let example = root.appendingPathComponent("examples/heart-rate.json").path
    static let golden = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Golden")

    struct Result {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs `ble args` to completion (killed after `timeout` seconds) with `env` added to ours.
    static func run(_ args: [String], env: [String: String] = [:], timeout: Double = 60) throws -> Result {
        let p = ToolProcess(args, env: env)
        try p.start()
        defer { p.kill() }
        let status = try p.wait(seconds: timeout)
        return Result(status: status, stdout: p.stdout, stderr: p.stderr)
    }

    /// The environment without the variables that would change what the tool does.
    static var baseEnvironment: [String: String] {
        var env = ProcessInfo.processInfo.environment
        for k in ["BLE_TRANSPORT", "BLE_SNOOP", "BLE_LOG", "OCB_STATE_DIR", "NO_COLOR"] { env[k] = nil }
        return env
    }
}

/// A `ble` process; standard output and error are collected apart as they arrive.
final class ToolProcess: @unchecked Sendable {
    /// What the reading threads fill; they hold only this, so the process object can go (and kill its
    /// process) whatever they do.
    final class Buffers: @unchecked Sendable {
        let lock = NSLock()
        var out = Data()
        var err = Data()
        var openPipes = 2
    }

    let process = Process()
    private let buffers = Buffers()
    private let outPipe = Pipe()
    private let errPipe = Pipe()

    init(_ args: [String], env: [String: String]) {
        process.executableURL = Tool.executable
        process.arguments = args
        process.environment = Tool.baseEnvironment.merging(env) { $1 }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = outPipe
        process.standardError = errPipe
    }

    /// One thread per pipe, blocking reads until the end (a readability handler can see an empty read
    /// before the end and lose the rest).
    private static func drain(_ pipe: Pipe, _ buffers: Buffers, toOut: Bool) {
        Thread {
            let h = pipe.fileHandleForReading
            while true {
                let d = h.availableData
                if d.isEmpty { break }
                buffers.lock.withLock { if toOut { buffers.out.append(d) } else { buffers.err.append(d) } }
            }
            buffers.lock.withLock { buffers.openPipes -= 1 }
        }.start()
    }

    func start() throws {
        try process.run()
        Self.drain(outPipe, buffers, toOut: true)
        Self.drain(errPipe, buffers, toOut: false)
    }

    var stdout: String { buffers.lock.withLock { String(decoding: buffers.out, as: UTF8.self) } }
    var stderr: String { buffers.lock.withLock { String(decoding: buffers.err, as: UTF8.self) } }

    /// Waits until standard output contains `needle`.
    func waitFor(_ needle: String, seconds: Double = 20) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while !stdout.contains(needle) {
            guard process.isRunning else { throw ToolFailure("ble exited (\(process.terminationStatus)) before \"\(needle)\":\n\(stdout)\n\(stderr)") }
            guard Date() < deadline else { throw ToolFailure("timed out waiting for \"\(needle)\":\n\(stdout)\n\(stderr)") }
            usleep(20_000)
        }
    }

    /// Waits for the exit and for the last output (both pipes at their end); returns the status.
    func wait(seconds: Double) throws -> Int32 {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning {
            guard Date() < deadline else { throw ToolFailure("ble \(process.arguments ?? []) still running after \(seconds) s:\n\(stdout)\n\(stderr)") }
            usleep(10_000)
        }
        let drained = Date().addingTimeInterval(5)
        while buffers.lock.withLock({ buffers.openPipes > 0 }) && Date() < drained { usleep(5_000) }
        return process.terminationStatus
    }

    func signal(_ s: Int32) { if process.isRunning { Foundation.kill(process.processIdentifier, s) } }

    func kill() {
        guard process.isRunning else { return }
        Foundation.kill(process.processIdentifier, SIGKILL)
        for _ in 0..<300 where process.isRunning { usleep(10_000) }
    }

    deinit { kill() }
}

/// A virtual radio served over TCP from this process, with its own air, and a state directory: the
/// environment a `ble` process needs to be one device on that air.
final class Bench: @unchecked Sendable {
    let air = VirtualAir(loop: EventLoop(label: "tool-tests.air", clock: .real))
    let server: RadioServer
    let state: URL
    private var processes: [ToolProcess] = []

    init() throws {
        // The radio server writes to `ble` processes that may be gone (killed by a test): EPIPE, not SIGPIPE.
        signal(SIGPIPE, SIG_IGN)
        server = try RadioServer(air: air, port: 0)
        server.start()
        state = FileManager.default.temporaryDirectory.appendingPathComponent("ble-tool-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
    }

    var env: [String: String] { ["BLE_TRANSPORT": "tcp-client:127.0.0.1:\(server.port)", "OCB_STATE_DIR": state.path] }

    func run(_ args: [String], timeout: Double = 60) throws -> Tool.Result { try Tool.run(args, env: env, timeout: timeout) }

    /// Starts a long-running `ble` process on this air; it is killed by `stop`.
    func start(_ args: [String]) throws -> ToolProcess {
        let p = ToolProcess(args, env: env)
        try p.start()
        processes.append(p)
        return p
    }

    /// `ble serve FILE` on this air, once it advertises; returns the process and the address it printed.
    func serve(_ file: String = Tool.example, _ extra: [String] = []) throws -> (ToolProcess, String) {
        let p = try start(["serve", file] + extra)
        try p.waitFor("advertising")
        guard let line = p.stdout.split(separator: "\n").first(where: { $0.hasPrefix("advertising") }),
            let r = line.range(of: #"[0-9A-F]{2}(:[0-9A-F]{2}){5}/[PR]"#, options: .regularExpression)
        else {
            throw ToolFailure("no address in: \(p.stdout)")
        }
        return (p, String(line[r]))
    }

    func stop() {
        for p in processes { p.kill() }
        server.stop()
        try? FileManager.default.removeItem(at: state)
    }
}

/// Text with what changes from run to run replaced: addresses, RSSI figures, times.
func normalized(_ s: String) -> String {
    var t = s
    for (pattern, replacement) in [
        (#"[0-9A-F]{2}(:[0-9A-F]{2}){5}(/[PR])?"#, "<ADDRESS>"),
        (#""rssi":-?[0-9]+"#, "\"rssi\":<RSSI>"),
        (#"(?m)(random static|public|random private)( +)-?[0-9]+ "#, "$1$2<RSSI> "),
        (#"[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}"#, "<TIME>"),
    ] {
        t = t.replacingOccurrences(of: pattern, with: replacement, options: .regularExpression)
    }
    return t
}

/// Compares `text` with the golden file `name` (written from the output when BLE_UPDATE_GOLDEN=1).
func expectGolden(_ text: String, _ name: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let url = Tool.golden.appendingPathComponent(name)
    if ProcessInfo.processInfo.environment["BLE_UPDATE_GOLDEN"] == "1" {
        try Data(text.utf8).write(to: url)
        return
    }
    let expected = try String(contentsOf: url, encoding: .utf8)
    #expect(text == expected, "output differs from \(name):\n\(text)", sourceLocation: sourceLocation)
}
