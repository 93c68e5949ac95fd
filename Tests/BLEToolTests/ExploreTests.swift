// Each exploring command end to end: `ble serve` with the example database and the command under test are
// two processes, each its own controller on a virtual radio served from this process. Outputs that are
// tables, trees or JSON are compared with golden files (addresses, RSSI and times normalised).
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct ExploreTests {
    @Test func scanShowsTheAddressThatGattTakes() throws {
        let bench = try Bench()
        defer { bench.stop() }
        let (_, address) = try bench.serve()
        let r = try bench.run(["scan", "--duration", "2"])
        #expect(r.status == 0, "\(r)")
        #expect(r.stdout.hasPrefix(address + " "), "\(r.stdout)")
        #expect(r.stderr == "1 device(s)\n")
        try expectGolden(normalized(r.stdout), "scan.txt")
        // Piped output is plain: no escape sequences.
        #expect(!r.stdout.contains("\u{1B}"))
        // The address as printed is what the other commands take.
        let read = try bench.run(["read", address, "2A38"])
        #expect(read.status == 0, "\(read)")
        #expect(read.stdout == "0x0037 2A38 Body Sensor Location: Chest  [01]\n")
    }

    @Test func scanJSONAndFilters() throws {
        let bench = try Bench()
        defer { bench.stop() }
        let (_, address) = try bench.serve()
        let r = try bench.run(["scan", "--duration", "2", "--json"])
        #expect(r.status == 0, "\(r)")
        let lines = r.stdout.split(separator: "\n")
        #expect(lines.count == 1)
        let o = try #require(try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any])
        #expect(o["address"] as? String == address)
        #expect(o["name"] as? String == "Served HR")
        #expect(o["services"] as? [String] == ["180D"])
        try expectGolden(normalized(r.stdout), "scan.jsonl")
        // Filters that exclude it and filters that keep it.
        for (args, kept) in [
            (["--name", "served"], true), (["--name", "nobody"], false), (["--service", "180D"], true),
            (["--service", "180F"], false), (["--rssi=-100"], true), (["--rssi", "10"], false),
        ] {
            let f = try bench.run(["scan", "--duration", "1.5", "--json"] + args)
            #expect(f.status == 0)
            #expect(f.stdout.contains(address) == kept, "\(args): \(f.stdout)")
        }
    }

    @Test func gattDumpsTheTree() throws {
        let bench = try Bench()
        defer { bench.stop() }
        _ = try bench.serve()
        let r = try bench.run(["gatt", "Served HR", "--yes"])
        #expect(r.status == 0, "\(r)")
        try expectGolden(normalized(r.stdout), "gatt-tree.txt")
        #expect(!r.stdout.contains("\u{1B}"))
    }

    @Test func gattJSON() throws {
        let bench = try Bench()
        defer { bench.stop() }
        _ = try bench.serve()
        let r = try bench.run(["gatt", "Served HR", "--json", "--yes"])
        #expect(r.status == 0, "\(r)")
        try expectGolden(normalized(r.stdout), "gatt.json")
        let o = try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        let services = try #require(o["services"] as? [[String: Any]])
        #expect(services.compactMap { $0["handle"] as? Int } == [1, 6, 32, 48, 81])
        #expect(services.first { $0["uuid"] as? String == "180F" }?["primary"] as? Bool == false)
    }

    @Test func readWriteAndLongValues() throws {
        let bench = try Bench()
        defer { bench.stop() }
        let (serve, _) = try bench.serve()
        var r = try bench.run(["read", "Served HR", "0x0037", "--json"])
        #expect(r.stdout == #"{"decoded":"Chest","handle":55,"uuid":"2A38","value":"01"}"# + "\n", "\(r)")
        r = try bench.run(["read", "Served HR", "2A38", "--raw"])
        #expect(r.stdout == "\u{01}")
        // A long write (prepared writes) then a long read (Read Blob) of the same value.
        let long = String(repeating: "0123456789", count: 30)
        r = try bench.run(["write", "Served HR", "6E400002-B5A3-F393-E0A9-E50E24DCCA9E", "--text", long])
        #expect(r.status == 0, "\(r)")
        #expect(r.stdout == "wrote 300 octet(s) to 0x0053 6E400002-B5A3-F393-E0A9-E50E24DCCA9E\n")
        r = try bench.run(["read", "Served HR", "0x0053", "--raw"])
        #expect(r.stdout == long)
        // Hex, then a file without response, each read back.
        r = try bench.run(["write", "Served HR", "6E400002-B5A3-F393-E0A9-E50E24DCCA9E", "--hex", "07:08"])
        #expect(r.status == 0, "\(r)")
        r = try bench.run(["read", "Served HR", "0x0053", "--json"])
        #expect(r.stdout == #"{"handle":83,"uuid":"6E400002-B5A3-F393-E0A9-E50E24DCCA9E","value":"0708"}"# + "\n", "\(r)")
        let file = bench.state.appendingPathComponent("value.bin")
        try Data([0xAB, 0xCD]).write(to: file)
        r = try bench.run(["write", "Served HR", "0x0053", "--file", file.path, "--no-response"])
        #expect(r.stdout == "wrote 2 octet(s) to 0x0053 6E400002-B5A3-F393-E0A9-E50E24DCCA9E without response\n", "\(r)")
        r = try bench.run(["read", "Served HR", "0x0053", "--raw"])
        #expect(Array(r.stdout.utf8) == [0xAB, 0xCD] || r.stdout == "\u{FFFD}\u{FFFD}", "\(r)")
        _ = serve
        // What the device refuses, and what is not there.
        r = try bench.run(["write", "Served HR", "2A38", "--hex", "02"])
        #expect(r.status == 1)
        #expect(r.stderr == "Error: writing 0x0037 2A38 Body Sensor Location: Write Not Permitted (ATT error 0x03) at handle 0x0037\n", "\(r)")
        r = try bench.run(["read", "Served HR", "2A99"])
        #expect(r.status == 1)
        #expect(r.stderr == "Error: no characteristic 2A99 on the device\n")
        r = try bench.run(["write", "Served HR", "2A39", "--text", String(repeating: "x", count: 600), "--no-response"])
        #expect(r.status == 1)
        #expect(r.stderr == "Error: 600 octets; an attribute value holds at most 512\n")
        r = try bench.run(["read", "Nobody", "2A38", "--timeout", "1"])
        #expect(r.status == 1)
        #expect(r.stderr == "Error: no device named \"Nobody\" advertised within 1 s\n")
    }

    @Test func subscribeCountsNotificationsAndIndications() throws {
        let bench = try Bench()
        defer { bench.stop() }
        let (serve, _) = try bench.serve(Tool.example, ["--notify-every", "0.1"])
        let r = try bench.run(["subscribe", "Served HR", "2A37", "6E400004-B5A3-F393-E0A9-E50E24DCCA9E", "--count", "6"])
        #expect(r.status == 0, "\(r)")
        let lines = r.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 6)
        #expect(lines.filter { $0.contains("notification 0x0033 2A37 Heart Rate Measurement: 72 bpm  [00 48 ") }.count >= 2, "\(lines)")
        #expect(lines.filter { $0.contains("indication 0x0056 6E400004-B5A3-F393-E0A9-E50E24DCCA9E: a0 ") }.count >= 2, "\(lines)")
        #expect(lines.allSatisfy { $0.range(of: #"^[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} "#, options: .regularExpression) != nil })
        #expect(r.stderr.contains("subscribed to 0x0033 2A37 Heart Rate Measurement (notifications)"))
        // It unsubscribed before leaving.
        try serve.waitFor("subscription 0x33: notify false indicate false")
        // JSON lines, and an interrupt that ends the run cleanly.
        let live = try bench.start(["subscribe", "Served HR", "2A37", "--json"])
        try live.waitFor("\"kind\":\"notification\"")
        live.signal(SIGINT)
        #expect(try live.wait(seconds: 10) == 0)
        let first = try #require(live.stdout.split(separator: "\n").first)
        let o = try #require(try JSONSerialization.jsonObject(with: Data(first.utf8)) as? [String: Any])
        #expect(o["uuid"] as? String == "2A37" && o["handle"] as? Int == 51 && o["decoded"] as? String == "72 bpm")
        // Not a characteristic that notifies.
        let bad = try bench.run(["subscribe", "Served HR", "2A38"])
        #expect(bad.status == 1)
        #expect(bad.stderr == "Error: 0x0037 2A38 Body Sensor Location neither notifies nor indicates (properties: read)\n")
    }

    /// Pairing when the device asks (a value that needs encryption), then `ble pair`, `ble bonds` and a
    /// reconnection that uses the bond; both sides keep their identity when run again: one bond file each.
    @Test func pairBondsAndReconnect() throws {
        let bench = try Bench()
        defer { bench.stop() }
        var (serve, address) = try bench.serve()
        var r = try bench.run(["read", "Served HR", "6E400005-B5A3-F393-E0A9-E50E24DCCA9E", "--yes"])
        #expect(r.stdout == "0x0059 6E400005-B5A3-F393-E0A9-E50E24DCCA9E: \"secret\"  [73 65 63 72 65 74]\n", "\(r)")
        try serve.waitFor("paired with ")
        r = try bench.run(["bonds"])
        #expect(r.status == 0)
        #expect(r.stdout.contains("1 bond(s)") && r.stdout.contains("  \(address)  SC"), "\(r.stdout)")
        // The server restarts: same address, and the reconnection encrypts with the bond, no new pairing.
        serve.kill()
        (serve, _) = try bench.serve()
        #expect(serve.stdout.contains("as \(address) "), "\(serve.stdout)")
        r = try bench.run(["read", address, "6E400005-B5A3-F393-E0A9-E50E24DCCA9E"])
        #expect(r.status == 0, "\(r)")
        try serve.waitFor("encrypted")
        #expect(!serve.stdout.contains("paired with"))
        // `ble pair --force` pairs again into the same bond file.
        r = try bench.run(["pair", address, "--io", "none", "--yes", "--force", "--timeout", "20"])
        #expect(r.status == 0, "\(r)")
        #expect(r.stdout.contains("bonded with \(address)"), "\(r.stdout)")
        let files = try FileManager.default.contentsOfDirectory(atPath: bench.state.path)
        #expect(files.filter { $0.hasPrefix("bonds-") }.count == 2, "\(files)")   // one per identity: central and serve
        #expect(Set(files.filter { $0.hasPrefix("identity-") }) == ["identity-central.json", "identity-serve.json"])
        // The server's side of the same bond, under its own identity.
        r = try bench.run(["bonds", "--identity", "serve"])
        #expect(r.stdout.hasPrefix("1 bond(s)"), "\(r.stdout)")
        r = try bench.run(["bonds", "--remove", address])
        #expect(r.stdout == "forgot \(address)\n")
        r = try bench.run(["bonds"])
        #expect(r.stdout.hasPrefix("0 bond(s)"))
    }

    /// A served file that includes by handle (1 is a number, not `true`) a service declared later.
    @Test func serveIncludesByHandle() throws {
        let bench = try Bench()
        defer { bench.stop() }
        let file = bench.state.appendingPathComponent("includes.json")
        try Data(
            #"{"advertise": {"name": "Includer"}, "defaultServices": false, "services": [{"uuid": "1805", "handle": 1, "includes": [128]}, {"uuid": "180F", "primary": false, "handle": 128, "characteristics": [{"uuid": "2A19", "properties": ["read"], "permissions": ["readable"], "value": "hex:64"}]}, {"uuid": "180D", "handle": 140, "includes": [1]}]}"#
                .utf8
        ).write(to: file)
        _ = try bench.serve(file.path)
        let r = try bench.run(["gatt", "Includer"])
        #expect(r.status == 0, "\(r)")
        #expect(r.stdout.contains("0x0001–0x0002 service 1805 Current Time\n│   └── 0x0002 includes 180F Battery (0x0080–0x0082)\n"), "\(r.stdout)")
        #expect(r.stdout.contains("0x0080–0x0082 secondary service 180F Battery"), "\(r.stdout)")
        #expect(r.stdout.contains("0x008c–0x008d service 180D Heart Rate\n    └── 0x008d includes 1805 Current Time (0x0001–0x0002)\n"), "\(r.stdout)")
        #expect(r.stdout.contains("= 100 %  [64]"))
    }

    /// Values decoded where the format is known: GAP, Device Information, Heart Rate, Environmental Sensing,
    /// Presentation Format descriptors (sint16 ×10⁻² °C, uint24 %), user descriptions; hex otherwise.
    @Test func gattDecodesKnownFormats() throws {
        let bench = try Bench()
        defer { bench.stop() }
        _ = try bench.serve(Tool.golden.appendingPathComponent("decoding.json").path)
        let r = try bench.run(["gatt", "Decoder"])
        #expect(r.status == 0, "\(r)")
        try expectGolden(normalized(r.stdout), "gatt-decoding.txt")
    }

    /// On a terminal (a pseudo-terminal made by `script`) the scan is a table redrawn in place and the
    /// output has colours; NO_COLOR keeps the in-place table and drops the colours.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script"), "needs script(1) for a pseudo-terminal"))
    func terminalTableAndColours() throws {
        let bench = try Bench()
        defer { bench.stop() }
        _ = try bench.serve()
        func onTerminal(_ command: String, noColor: Bool) throws -> String {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/script")
            p.arguments = ["-q", "-e", "-c", command, "/dev/null"]
            var env = Tool.baseEnvironment.merging(bench.env) { $1 }
            env["TERM"] = "xterm"
            if noColor { env["NO_COLOR"] = "1" }
            p.environment = env
            p.standardInput = FileHandle.nullDevice
            let out = Pipe()
            p.standardOutput = out
            try p.run()
            let data = out.fileHandleForReading.readDataToEndOfFile()
            p.waitUntilExit()
            #expect(p.terminationStatus == 0)
            return String(decoding: data, as: UTF8.self)
        }
        let ble = Tool.executable.path
        let table = try onTerminal("\(ble) scan --duration 1.5", noColor: false)
        #expect(table.contains("\u{1B}[2K") && table.contains("\u{1B}[1mADDRESS"), "\(table.debugDescription)")
        #expect(table.contains("\"Served HR\""))
        let plain = try onTerminal("\(ble) scan --duration 1.5", noColor: true)
        #expect(plain.contains("\u{1B}[2K") && !plain.contains("\u{1B}[1m"), "\(plain.debugDescription)")
        let tree = try onTerminal("\(ble) gatt 'Served HR' --no-values", noColor: false)
        #expect(tree.contains("\u{1B}[36m0x0001–0x0005\u{1B}[0m"), "\(tree.debugDescription)")
        let bare = try onTerminal("\(ble) gatt 'Served HR' --no-values", noColor: true)
        #expect(!bare.contains("\u{1B}["), "\(bare.debugDescription)")
    }

    @Test func completionScripts() throws {
        for shell in ["bash", "zsh", "fish"] {
            let r = try Tool.run(["--generate-completion-script", shell])
            #expect(r.status == 0)
            for c in ["gatt", "subscribe", "keyboard+display"] { #expect(r.stdout.contains(c), "\(shell) completion lacks \(c)") }
        }
    }

    /// `ble radio` as a process of its own: serve, subscribe and read through it; the radio outlives
    /// clients killed in the middle of a connection and serves the next ones.
    @Test func overBleRadioInAnotherProcess() throws {
        let bench = try Bench()
        defer { bench.stop() }
        let radio = try bench.start(["radio", "--port", "0"])
        try radio.waitFor("listening on")
        let port = try #require(radio.stdout.split(separator: ":").last.flatMap { Int($0.prefix { $0.isNumber }) })
        let env = ["BLE_TRANSPORT": "tcp-client:127.0.0.1:\(port)", "OCB_STATE_DIR": bench.state.path]
        let serve = ToolProcess(["serve", Tool.example, "--notify-every", "0.05"], env: env)
        try serve.start()
        defer { serve.kill() }
        try serve.waitFor("advertising")
        let sub = ToolProcess(["subscribe", "Served HR", "2A37"], env: env)
        try sub.start()
        defer { sub.kill() }
        try sub.waitFor("notification")
        sub.kill()
        serve.kill()
        usleep(300_000)
        #expect(radio.process.isRunning, "\(radio.stdout)\(radio.stderr)")
        let again = ToolProcess(["serve", Tool.example], env: env)
        try again.start()
        defer { again.kill() }
        try again.waitFor("advertising")
        let r = try Tool.run(["read", "Served HR", "2A38"], env: env)
        #expect(r.stdout == "0x0037 2A38 Body Sensor Location: Chest  [01]\n", "\(r)")
    }
}
