// `ble shell` driven by a script on its standard input, against `ble serve` on the tests' virtual radio.
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(2))) struct ShellTests {
    /// A script piped into `ble shell`: one connection for every command; bad lines are reported and the
    /// shell goes on; notifications arrive between commands.
    @Test func shellRunsAScript() throws {
        let bench = try Bench()
        defer { bench.stop() }
        let (serve, _) = try bench.serve(Tool.example, ["--notify-every", "0.05"])
        let p = Process()
        p.executableURL = Tool.executable
        p.arguments = ["shell", "Served HR"]
        p.environment = Tool.baseEnvironment.merging(bench.env) { $1 }
        let input = Pipe(), output = Pipe(), errors = Pipe()
        p.standardInput = input
        p.standardOutput = output
        p.standardError = errors
        try p.run()
        defer { if p.isRunning { kill(p.processIdentifier, SIGKILL) } }
        final class Collected: @unchecked Sendable {
            let lock = NSLock()
            var data = Data()
            var text: String { lock.withLock { String(decoding: data, as: UTF8.self) } }
        }
        let collected = Collected()
        let reader = Thread {
            while true {
                let d = output.fileHandleForReading.availableData
                if d.isEmpty { return }
                collected.lock.withLock { collected.data.append(d) }
            }
        }
        reader.start()
        let script = "read 2A38\nwrite 0x0053 --text \"hello world\"\nread 0x0053\nread nonsense\nwrite 2A38 --hex 01\nsubscribe 2A37\n"
        // (Throwing writes: a shell that ended early gives EPIPE, which `write(_:)` turned into a crash of the process.
        // EPIPE and not SIGPIPE, whose default action ends the test process: ignored here, not left to another
        // suite having done it first.)
        signal(SIGPIPE, SIG_IGN)
        try? input.fileHandleForWriting.write(contentsOf: Data(script.utf8))
        // Notifications arrive between commands; the rest of the script follows the first one.
        let deadline = Date().addingTimeInterval(20)
        while !collected.text.contains("notification 0x0033"), Date() < deadline, p.isRunning { usleep(20_000) }
        try? input.fileHandleForWriting.write(contentsOf: Data("unsubscribe 2A37\nbogus\nquit\n".utf8))
        while !reader.isFinished, Date() < deadline.addingTimeInterval(10) { usleep(20_000) }
        let out = collected.text
        let err = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        #expect(p.terminationStatus == 0, "\(out)\(err)")
        #expect(out.contains("0x0037 2A38 Body Sensor Location: Chest  [01]\n"))
        #expect(out.contains("wrote 11 octet(s) to 0x0053 6E400002-B5A3-F393-E0A9-E50E24DCCA9E\n"))
        #expect(out.contains("0x0053 6E400002-B5A3-F393-E0A9-E50E24DCCA9E: \"hello world\"\n"))
        #expect(out.contains("subscribed to 0x0033 2A37 Heart Rate Measurement\n") && out.contains("unsubscribed from 0x0033"))
        #expect(out.contains("notification 0x0033 2A37 Heart Rate Measurement: 72 bpm"))
        #expect(
            err == "error: The value 'nonsense' is invalid for '<attribute>'\nerror: Write Not Permitted (ATT error 0x03) at handle 0x0037\nerror: Unexpected argument 'bogus'\n",
            "\(err)")
        // One connection for the whole session.
        #expect(serve.stdout.split(separator: "\n").filter { $0.hasPrefix("connected: ") }.count == 1, "\(serve.stdout)")
    }
}
