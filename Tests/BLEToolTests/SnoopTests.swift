// `ble snoop` on captures made by BLE_SNOOP during real sessions: decoding, masking, following a growing file.
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(2))) struct SnoopTests {
    /// A session with pairing captured by BLE_SNOOP and printed: HCI by name with fields, ATT and SMP
    /// decoded, advertising data by structure, keys masked unless --show-keys.
    @Test func snoopDecodesASessionAndMasksKeys() throws {
        let bench = try Bench()
        defer { bench.stop() }
        _ = try bench.serve()
        let capture = bench.state.appendingPathComponent("session.snoop").path
        var env = bench.env
        env["BLE_SNOOP"] = capture
        let r = try Tool.run(["read", "Served HR", "6E400005-B5A3-F393-E0A9-E50E24DCCA9E", "--yes"], env: env)
        #expect(r.status == 0, "\(r)")
        let masked = try Tool.run(["snoop", capture])
        #expect(masked.status == 0)
        let text = masked.stdout
        var last = text.startIndex
        // In this order: start-up, the advertisement, the connection, discovery, the refusal, pairing, the read.
        for needle in [
            "< HCI Command: Reset (0x0c03)", "> HCI Event: Command Complete: Read BD ADDR (0x1009)", "Address: ",
            "Command Complete: LE Read Buffer Size (0x2002)", "ACL data packet length: 251",
            "> HCI Event: LE Meta: Advertising Report", "Name: \"Served HR\"",
            "< HCI Command: LE Create Connection (0x200d)", "< ACL 0x", "ATT Exchange MTU Request", "Client rx MTU: 517",
            "ATT Read By Group Type Request", "Attribute group type: 2800 (Primary Service)",
            "Error: Insufficient Authentication (0x05)", "SMP Pairing Request", "IO capability: Keyboard Display",
            "SMP Pairing Random", "Value: <16 octets masked; --show-keys shows them>", "LTK: <16 octets masked",
            "ATT Read Response", "Value: 73 65 63 72 65 74",
        ] {
            let found = text.range(of: needle, range: last..<text.endIndex)
            #expect(found != nil, "\(needle) missing (in order)")
            if let found { last = found.upperBound }
        }
        let shown = try Tool.run(["snoop", capture, "--show-keys"])
        #expect(!shown.stdout.contains("masked"))
        #expect(shown.stdout.range(of: #"LTK: ([0-9a-f]{2} ){15}[0-9a-f]{2}\n"#, options: .regularExpression) != nil)
        // Line counts agree: masking changes values, not structure.
        #expect(shown.stdout.split(separator: "\n").count == text.split(separator: "\n").count)
    }

    @Test func snoopFollowsAGrowingCaptureAndRefusesOtherFiles() throws {
        let bench = try Bench()
        defer { bench.stop() }
        let capture = bench.state.appendingPathComponent("live.snoop").path
        var env = bench.env
        env["BLE_SNOOP"] = capture
        let serve = ToolProcess(["serve", Tool.example], env: env)
        try serve.start()
        defer { serve.kill() }
        try serve.waitFor("advertising")
        let live = ToolProcess(["snoop", capture, "--live"], env: [:])
        try live.start()
        defer { live.kill() }
        try live.waitFor("LE Set Advertising Enable")
        // A central arrives after the snoop started: its connection shows up too.
        _ = try bench.run(["read", "Served HR", "2A38"])
        try live.waitFor("ATT Read Response")
        live.signal(SIGINT)
        #expect(try live.wait(seconds: 10) == 0)

        let notSnoop = bench.state.appendingPathComponent("not.snoop")
        try Data("hello, this is not a capture".utf8).write(to: notSnoop)
        var r = try Tool.run(["snoop", notSnoop.path])
        #expect(r.status == 1 && r.stderr == "Error: \(notSnoop.path): not a btsnoop file\n", "\(r)")
        r = try Tool.run(["snoop", "/nonexistent.snoop"])
        #expect(r.status == 1 && r.stderr == "Error: /nonexistent.snoop: No such file or directory\n", "\(r)")
    }
}
