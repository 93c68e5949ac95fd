// The front door: a controller that cannot be opened makes every command say why and exit non-zero; a
// scan that finds nothing on a working controller exits 0; bad input gets its message, the subcommand's
// usage and ArgumentParser's validation status (64); the version and the help are right.
import BLEHost
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct FailureTests {
    static let refused = ["BLE_TRANSPORT": "tcp-client:127.0.0.1:1"]
    static let refusedLine = "Error: tcp-client:127.0.0.1:1: could not connect: 127.0.0.1:1: Connection refused\n"

    /// Every command that opens a controller fails at once with the host's one-line reason.
    @Test(arguments: [
        ["scan", "--duration", "30"], ["gatt", "Served HR"], ["read", "Served HR", "2A38"], ["write", "Served HR", "2A39", "--hex", "01"],
        ["subscribe", "Served HR", "2A37"], ["pair", "11:22:33:44:55:66/P"], ["bonds"], ["serve", Tool.example],
        ["demo"], ["send", Tool.example, "--to", "x"], ["receive", "--dir", "/tmp"],
        ["bench", "--role", "central", "--scenario", "send", "--peer", "11:22:33:44:55:66"],
    ])
    func unreachableControllerSaysWhy(args: [String]) throws {
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("ble-refused-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: state) }
        let started = Date()
        let r = try Tool.run(args, env: Self.refused.merging(["OCB_STATE_DIR": state.path]) { $1 }, timeout: 20)
        #expect(r.status == 1, "\(r)")
        #expect(r.stderr == Self.refusedLine, "\(r)")
        #expect(r.stdout.isEmpty, "\(r)")
        #expect(Date().timeIntervalSince(started) < 10)
        // Nothing is written for a controller that never came up (no identity, no bond file).
        #expect(try FileManager.default.contentsOfDirectory(atPath: state.path).isEmpty)
    }

    @Test func radioOnATakenPortSaysWhy() throws {
        let bench = try Bench()
        defer { bench.stop() }
        let r = try Tool.run(["radio", "--port", "\(bench.server.port)"], timeout: 10)
        #expect(r.status == 1)
        #expect(r.stderr == "Error: I/O error: cannot listen on 127.0.0.1:\(bench.server.port): Address already in use\n", "\(r)")
    }

    @Test func invalidTransportSaysWhy() throws {
        let r = try Tool.run(["scan"], env: ["BLE_TRANSPORT": "bluetooth:0"])
        #expect(r.status == 1)
        #expect(r.stderr == "Error: BLE_TRANSPORT: invalid transport spec: \"bluetooth:0\": unknown transport kind \"bluetooth\"\n")
    }

    /// A controller that accepts the connection and closes it before answering.
    @Test func controllerThatHangsUpDuringStartUp() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, len) } }
        listen(listener, 4)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &len) } }
        let port = UInt16(bigEndian: addr.sin_port)
        let closer = Thread { while true { let c = accept(listener, nil, nil); if c < 0 { return }; close(c) } }
        closer.start()
        let r = try Tool.run(["bonds"], env: ["BLE_TRANSPORT": "tcp-client:127.0.0.1:\(port)"], timeout: 30)
        #expect(r.status == 1, "\(r)")
        #expect(r.stderr.hasPrefix("Error: tcp-client:127.0.0.1:\(port): "), "\(r)")
        shutdown(listener, Int32(SHUT_RDWR))
    }

    /// Nothing around on the (default) virtual radio: no rows, exit 0.
    @Test func emptyScanOnAWorkingControllerSucceeds() throws {
        let r = try Tool.run(["scan", "--duration", "0.5"])
        #expect(r.status == 0, "\(r)")
        #expect(r.stdout.isEmpty)
        #expect(r.stderr.hasPrefix("0 device(s)\n(the default virtual radio is inside this process"), "\(r.stderr)")
        // A name nobody advertises, on the default transport: the same hint.
        let g = try Tool.run(["gatt", "Nobody", "--timeout", "0.5"])
        #expect(g.status == 1)
        #expect(g.stderr.hasPrefix("Error: no device named \"Nobody\" advertised within 0.5 s (the default virtual radio"), "\(g.stderr)")
    }

    @Test func version() throws {
        let r = try Tool.run(["--version"])
        #expect(r.status == 0)
        #expect(r.stdout.range(of: #"^[0-9]+\.[0-9]+\.[0-9]+\n$"#, options: .regularExpression) != nil, "\(r.stdout)")
        // The tool prints the library's version, and the changelog has an entry for it.
        #expect(r.stdout == OpenCoreBluetooth.version + "\n")
        let changelog = try String(contentsOf: Tool.root.appendingPathComponent("CHANGELOG.md"), encoding: .utf8)
        #expect(changelog.contains("\n## [\(OpenCoreBluetooth.version)] - "), "CHANGELOG.md has no entry for \(OpenCoreBluetooth.version)")
    }

    /// The library logs only through swift-log; the tool bootstraps a standard-error backend at BLE_LOG's level.
    @Test func bleLogChoosesWhatTheStackLogs() throws {
        // Unset: the host's layers say nothing (the demo's own output is on standard output).
        let quiet = try Tool.run(["demo"])
        #expect(quiet.status == 0)
        #expect(!quiet.stderr.contains("opencorebluetooth."), "\(quiet.stderr.prefix(500))")
        // BLE_LOG=1: procedures at debug, packets not.
        let debug = try Tool.run(["demo"], env: ["BLE_LOG": "1"])
        #expect(debug.status == 0)
        let lines = debug.stderr.split(separator: "\n")
        #expect(lines.contains { $0.contains(" debug opencorebluetooth.gap:") && $0.contains("host=central") && $0.hasSuffix("connected") })
        #expect(lines.contains { $0.contains(" debug opencorebluetooth.hci:") && $0.hasSuffix("controller ready") })
        #expect(!lines.contains { $0.contains(" trace ") })
        // BLE_LOG=trace: every packet and PDU as well, each line with its layer's label.
        let trace = try Tool.run(["demo"], env: ["BLE_LOG": "trace"])
        #expect(trace.status == 0)
        for label in ["hci", "l2cap", "att"] {
            #expect(trace.stderr.contains(" trace opencorebluetooth.\(label):"), "no trace line for \(label)")
        }
    }

    @Test func helpListsEveryTransportAndCommand() throws {
        let r = try Tool.run(["--help"])
        #expect(r.status == 0)
        for t in ["virtual (default)", "tcp-client:HOST:PORT", "tcp-server:PORT", "serial:PATH[,BAUD]", "hci-socket:N", "unix:PATH"] {
            #expect(r.stdout.contains(t), "\(t) missing from the help")
        }
        for c in ["scan", "gatt", "read", "write", "subscribe", "pair", "bonds", "serve", "radio", "snoop"] {
            #expect(r.stdout.contains("\n  \(c) "), "\(c) missing from the help")
        }
    }

    /// Defaults that are IO capabilities read as their names.
    @Test(arguments: [("pair", "keyboard+display"), ("gatt", "keyboard+display"), ("serve", "none")])
    func helpDefaultsAreNames(command: String, expected: String) throws {
        let r = try Tool.run([command, "--help"])
        let flat = r.stdout.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        #expect(flat.contains("default: \(expected))"), "\(r.stdout)")
        #expect(r.stdout.range(of: #"default: [0-9]\)"#, options: .regularExpression) == nil)
    }

    /// Bad input: the message, the subcommand's own usage, status 64.
    @Test(arguments: [
        (["read", "X", "notauuid"], "Error: The value 'notauuid' is invalid for '<attribute>'"),
        (["write", "X", "2A39"], "Error: give the value with exactly one of --hex, --text or --file"),
        (["write", "X", "2A39", "--hex", "0x1"], "Error: --hex: \"0x1\" is not hex (two digits per octet)"),
        (["write", "X", "2A39", "--hex", "01", "--text", "a"], "Error: give the value with exactly one of --hex, --text or --file"),
        (["scan", "--service", "18ZZ"], "Error: --service: \"18ZZ\" is not a 16-, 32- or 128-bit UUID"),
        (["scan", "--rssi=-200"], "Error: --rssi must be between -127 and 20 dBm"),
        (["scan", "--duration=-1"], "Error: --duration must be 0 or more"),
        (["subscribe", "X", "2A37", "--count=-1"], "Error: --count must be 0 or more"),
        (["gatt", "X", "--timeout", "0"], "Error: --timeout must be more than 0 seconds"),
        (
            ["gatt", "X", "--io", "telepathy"],
            "Error: The value 'telepathy' is invalid for '--io <capability>'. Please provide one of 'none', 'display', 'yesno', 'keyboard' or 'keyboard+display'."
        ),
        (["read", "X", "2A38", "--json", "--raw"], "Error: --json and --raw cannot be used together"),
        (["bonds", "--remove", "nonsense"], "Error: --remove: \"nonsense\" is not an address (AA:BB:CC:DD:EE:FF)"),
        (["pair", "X", "--timeout=-3"], "Error: --timeout must be more than 0 seconds"),
        (["serve", "x.json", "--identity", "a/b"], "Error: --identity: letters, digits, - and _ only"),
        (["demo", "--notifications", "0"], "Error: --notifications must be 1…1000"),
        (["receive", "--dir", "/nonexistent"], "Error: --dir: /nonexistent is not a directory"),
        (["bench", "--role", "middle", "--peer", "11:22:33:44:55:66"], "Error: --role central or peripheral"),
        (["bench", "throughput", "--phy", "2m"], "Error: Unknown option '--phy'. Did you mean '--api'?"),
        (["bench", "rtt", "--api", "corebluetooth"], "Error: Unknown option '--api'"),
        (["bench", "throughput", "--mode", "write", "--api", "corebluetooth"], "Error: --api corebluetooth supports --mode notify and l2cap"),
        (["bench", "scale", "advertisers", "--each", "5"], "Error: --each applies to connections"),
        // The flat form takes every option, but refuses one that would be ignored.
        (["bench", "--mode", "write", "--phy", "2m"], "Error: --phy applies to --airtime"),
        (["bench", "--airtime", "--each=5"], "Error: --each applies to --scale"),
        (["bench", "--airtime", "--scale", "connections"], "Error: --scale and --airtime cannot be used together"),
        (["bench", "--sweep", "x.svg", "--api", "corebluetooth"], "Error: --api does not apply to --sweep"),
        (["bench", "airtime", "--role", "central"], "Error: Unknown option '--role'. Did you mean '--mode'?"),
    ])
    func badInputIsRefusedWithUsage(args: [String], message: String) throws {
        let r = try Tool.run(args, env: Self.refused)
        #expect(r.status == 64, "\(r)")
        #expect(r.stderr.hasPrefix(message + "\n"), "\(r.stderr)")
        #expect(r.stderr.contains("Usage: ble \(args[0])"), "\(r.stderr)")
    }

    @Test func serveFileErrors() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ble-serve-errors-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let missing = dir.appendingPathComponent("missing.json").path
        var r = try Tool.run(["serve", missing])
        #expect(r.status == 1)
        #expect(r.stderr == "Error: \(missing): cannot read \(missing): No such file or directory\n")

        let broken = dir.appendingPathComponent("broken.json")
        try Data("{\n  \"services\": [\n    { \"uuid\": \"180D\" },,\n  ]\n}\n".utf8).write(to: broken)
        r = try Tool.run(["serve", broken.path])
        #expect(r.status == 1)
        #expect(r.stderr.hasPrefix("Error: \(broken.path): line 3, column 24: not valid JSON"), "\(r.stderr)")

        let unknown = dir.appendingPathComponent("unknown.json")
        try Data(#"{"services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "properties": ["reed"]}]}]}"#.utf8).write(to: unknown)
        r = try Tool.run(["serve", unknown.path])
        #expect(r.status == 1)
        #expect(r.stderr.hasPrefix("Error: \(unknown.path): services[0].characteristics[0].properties[0]: unknown property \"reed\""), "\(r.stderr)")
    }

    @Test func sendingAMissingFileSaysWhy() throws {
        var r = try Tool.run(["send", "/nonexistent/photo.jpg"], env: Self.refused)
        #expect(r.status == 1)
        #expect(r.stderr == "Error: /nonexistent/photo.jpg: No such file or directory\n")
        r = try Tool.run(["send", "/tmp"], env: Self.refused)
        #expect(r.stderr == "Error: /tmp: Is a directory\n")
    }

    @Test func writeFromAMissingFileSaysWhy() throws {
        let r = try Tool.run(["write", "X", "2A39", "--file", "/nonexistent/value.bin"], env: Self.refused)
        #expect(r.status == 1)
        #expect(r.stderr == "Error: /nonexistent/value.bin: No such file or directory\n")
    }
}
