// `ble interop peripheral` and `ble interop central` (the Core Bluetooth programs of the kernel rows, issue 27)
// against each other on a virtual radio served from this process: the central finds the peripheral by name,
// discovers and reads everything (the 512-octet value answered in didReceiveRead), subscribes, writes 300
// octets with response, and receives the peripheral's notifications; bad arguments are refused.
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct InteropCommandTests {
    @Test func theCentralProgramRunsEveryStepAgainstThePeripheralProgram() throws {
        let bench = try Bench()
        defer { bench.stop() }
        let peripheral = try bench.start(["interop", "peripheral", "--name", "Interop Test", "--updates", "3", "--timeout", "170"])
        try peripheral.waitFor("advertising as \"Interop Test\"")
        let value = String(repeating: "4142", count: 150)
        let r = try bench.run(
            [
                "interop", "central", "--name", "Interop Test", "--service", "7D2E0000-5B6A-4C3E-9A6D-2F4B1C0E8A10",
                "--write-hex", value, "--notifications", "3", "--timeout", "150",
            ], timeout: 160)
        #expect(r.status == 0, "\(r)")
        let out = r.stdout
        #expect(out.contains("[central] connected"))
        #expect(out.contains("characteristic 7D2E0002-5B6A-4C3E-9A6D-2F4B1C0E8A10 [read, write]"))
        #expect(out.contains("characteristic 7D2E0004-5B6A-4C3E-9A6D-2F4B1C0E8A10 [indicate]"))
        #expect(out.contains("characteristic 7D2E0005-5B6A-4C3E-9A6D-2F4B1C0E8A10 [writeWithoutResponse]"))
        // The long value, whole: its text starts and ends where the peripheral put them.
        #expect(out.contains("read 7D2E0001-5B6A-4C3E-9A6D-2F4B1C0E8A10 = 4f4342206c6f6e67"))
        #expect(out.contains("END.\""))
        #expect(out.contains("notification 3 on 7D2E0003-5B6A-4C3E-9A6D-2F4B1C0E8A10: ") && out.contains("\"notification 3 of 3\""))
        #expect(out.contains("write to 7D2E0002-5B6A-4C3E-9A6D-2F4B1C0E8A10 acknowledged"))
        #expect(out.contains("[central] disconnected (by us)"))
        try peripheral.waitFor("central unsubscribed from 7D2E0003", seconds: 10)
        let p = peripheral.stdout
        // Both sides' whole output on failure: once under saturation (sat6) the peripheral's output held
        // its "unsubscribed" line without the read, write and notification lines that must precede it.
        let both = "peripheral:\n\(p)\(peripheral.stderr)\ncentral:\n\(r.stdout)\(r.stderr)"
        #expect(p.contains("read 7D2E0001-5B6A-4C3E-9A6D-2F4B1C0E8A10 at offset 0 of 512"), "\(both)")
        #expect(p.contains("write 7D2E0002-5B6A-4C3E-9A6D-2F4B1C0E8A10: 300 octets in 1 request(s) at offsets 0: ABABAB"), "\(both)")
        #expect(p.contains("sent notification 3 of 3"), "\(both)")
    }

    @Test func findingNothingTimesOutWithExitOne() throws {
        // Nothing advertises that name: the central gives up after its time limit, exit 1.
        let bench = try Bench()
        defer { bench.stop() }
        let r = try bench.run(["interop", "central", "--name", "Nobody", "--timeout", "2"])
        #expect(r.status == 1, "\(r)")
        #expect(r.stdout.contains("[central] timed out after 2 s"))
    }

    @Test func badArgumentsAreRefused() throws {
        for (args, message) in [
            (["interop", "central"], "give --name or --service"),
            (["interop", "central", "--name", "x", "--write-hex", "zz"], "--write-hex: not hexadecimal: zz"),
            (["interop", "peripheral", "--updates", "0"], "--updates must be 1…10000"),
        ] {
            let r = try Tool.run(args)
            #expect(r.status == 64, "\(args): \(r)")
            #expect(r.stderr.contains(message), "\(args): \(r.stderr)")
        }
    }
}
