// `ble bench` subcommands: what they move, the simulated-time label, the progress bar only on a terminal.
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(2))) struct BenchSubcommandTests {
    func lastJSON(_ text: String) throws -> [String: Any] {
        let last = try #require(text.split(separator: "\n").last)
        return try #require(try JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any])
    }

    /// Each subcommand moves what it was asked to and ends with one JSON line; the classic flat form
    /// still works.
    @Test(arguments: [
        (["bench", "throughput", "--size", "20", "--count", "300"], "notify", 6000),
        (["bench", "throughput", "--mode", "write", "--size", "20", "--count", "300"], "write", 6000),
        (["bench", "rtt", "--size", "20", "--count", "100"], "rtt", 2000),
        (["bench", "rtt", "--mode", "read", "--size", "20", "--count", "100"], "read", 2000),
        (["bench", "--mode", "notify", "--size", "20", "--count", "300"], "notify", 6000),
    ])
    func subcommandsMoveWhatTheyWereAskedTo(args: [String], mode: String, bytes: Int) throws {
        let r = try Tool.run(args)
        #expect(r.status == 0, "\(r)")
        let json = try lastJSON(r.stdout)
        #expect(json["mode"] as? String == mode)
        #expect(json["bytes"] as? Int == bytes)
    }

    /// A run longer than a second draws a progress bar on a terminal (erased at the end); piped, nothing.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script"), "needs script(1) for a pseudo-terminal"))
    func progressBarOnlyOnATerminal() throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/script")
        // 500,000 notifications: several seconds even on a quiet machine (the bar appears after one second).
        p.arguments = ["-q", "-e", "-c", "\(Tool.executable.path) bench throughput --size 20 --count 500000", "/dev/null"]
        p.environment = Tool.baseEnvironment
        p.standardInput = FileHandle.nullDevice
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
        #expect(text.range(of: #"\rnotify \[#*-*\] +[0-9.]+ % [0-9]+ s"#, options: .regularExpression) != nil, "\(text.debugDescription)")
        #expect(text.contains("\r\u{1B}[K"))
        let piped = try Tool.run(["bench", "throughput", "--size", "20", "--count", "120000"])
        #expect(piped.status == 0 && piped.stderr.isEmpty, "\(piped.stderr)")
    }

    @Test func airtimeSaysItsTimeIsSimulated() throws {
        let r = try Tool.run(["bench", "airtime", "--phy", "2m", "--count", "200"])
        #expect(r.status == 0, "\(r)")
        #expect(r.stdout.contains("(simulated time, on the airtime model's virtual clock)"))
        let json = try lastJSON(r.stdout)
        #expect(json["phy"] as? String == "2m" && (json["fraction"] as? Double ?? 0) > 0.5)
    }
}
