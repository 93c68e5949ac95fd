// `ble scan`, `ble gatt`, `ble read`, `ble write` and `ble subscribe` against a database nobody here
// wrote: a Bumble peripheral over rootcanal. Each `ble` run has its own state directory, removed at the end.
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct GattToolInteropTests {
    struct Run { var status: Int32; var out: String; var err: String }

    func ble(_ args: [String], transport: String, state: URL) throws -> Run {
        let p = Process()
        p.executableURL = Interop.root.appendingPathComponent(".build/debug/ble")
        p.arguments = args
        var env = ProcessInfo.processInfo.environment
        env["BLE_TRANSPORT"] = transport
        env["OCB_STATE_DIR"] = state.path
        p.environment = env
        p.standardInput = FileHandle.nullDevice
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        defer { Interop.terminate(p) }
        // Read both pipes to the end (they close when the process exits).
        final class Box: @unchecked Sendable { var data = Data() }
        let errBox = Box()
        let reader = Thread { errBox.data = err.fileHandleForReading.readDataToEndOfFile() }
        reader.start()
        let o = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        while !reader.isFinished { usleep(10_000) }
        return Run(status: p.terminationStatus, out: String(decoding: o, as: UTF8.self), err: String(decoding: errBox.data, as: UTF8.self))
    }

    @Test func exploringABumblePeripheralOverRootCanal() async throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("ble-gatt-interop-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: state) }
        let bumble = try PeerProcess(script: "bumble_peripheral.py", arguments: ["--transport", rc.transport, "--name", "Bumble HR", "--duration", "120"])
        defer { bumble.stop() }
        try await bumble.waitFor("advertising", seconds: 30)

        // The scan shows Bumble's address with its type, as the other commands take it.
        let scan = try ble(["scan", "--duration", "3", "--json", "--name", "Bumble HR"], transport: rc.transport, state: state)
        #expect(scan.status == 0, "\(scan)")
        let seen = try #require(try JSONSerialization.jsonObject(with: Data((scan.out.split(separator: "\n").first ?? "").utf8)) as? [String: Any])
        let address = try #require(seen["address"] as? String)
        // Bumble advertises from the public address rootcanal gave its controller.
        #expect(address.range(of: #"^[0-9A-F]{2}(:[0-9A-F]{2}){5}/P$"#, options: .regularExpression) != nil, "\(address)")

        let dump = try ble(["gatt", address, "--json"], transport: rc.transport, state: state)
        #expect(dump.status == 0, "\(dump)")
        let db = try #require(try JSONSerialization.jsonObject(with: Data(dump.out.utf8)) as? [String: Any])
        let services = try #require(db["services"] as? [[String: Any]])
        #expect(services.contains { $0["uuid"] as? String == "180D" })
        let custom = try #require(services.first { $0["uuid"] as? String == "6E400001-B5A3-F393-E0A9-E50E24DCCA9E" })
        let chars = try #require(custom["characteristics"] as? [[String: Any]])
        let long = try #require(chars.first { $0["uuid"] as? String == "6E400002-B5A3-F393-E0A9-E50E24DCCA9E" })
        // Read whole with Read Blob: 300 octets, i % 251.
        #expect(long["value"] as? String == (0..<300).map { String(format: "%02x", $0 % 251) }.joined())
        #expect((long["descriptors"] as? [[String: Any]])?.first?["decoded"] as? String == "\"long value\"")

        let tree = try ble(["gatt", "Bumble HR"], transport: rc.transport, state: state)
        #expect(tree.status == 0, "\(tree)")
        #expect(tree.out.contains("characteristic 2A38 Body Sensor Location"), "\(tree.out)")
        #expect(tree.out.contains("= Chest  [01]"), "\(tree.out)")

        let read = try ble(["read", address, "2A38"], transport: rc.transport, state: state)
        #expect(read.out.hasSuffix("2A38 Body Sensor Location: Chest  [01]\n"), "\(read)")

        let write = try ble(["write", address, "6E400003-B5A3-F393-E0A9-E50E24DCCA9E", "--hex", "0a0b"], transport: rc.transport, state: state)
        #expect(write.status == 0, "\(write)")
        try await bumble.waitFor("write") { $0["value"] as? String == "0a0b" }

        let sub = try ble(["subscribe", address, "2A37", "--count", "3"], transport: rc.transport, state: state)
        #expect(sub.status == 0, "\(sub)")
        #expect(sub.out.split(separator: "\n").filter { $0.contains("notification") && $0.contains("2A37 Heart Rate Measurement") }.count == 3, "\(sub.out)")
    }
}
