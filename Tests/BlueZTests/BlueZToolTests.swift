// `ble` on BLE_TRANSPORT=bluez against the fake bluetoothd: the built tool (.build/debug/ble) as a process whose
// system bus is the test's private bus (DBUS_SYSTEM_BUS_ADDRESS). `ble scan` reports what Device1 says, `ble bonds`
// lists and forgets BlueZ's bonds, `ble pair` pairs through its terminal agent, and a command that needs a
// controller of its own says so.
import Foundation
import Testing
import TestSupport
import DBus

private enum BLE {
    static let executable = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent(".build/debug/ble")

    struct Outcome: Sendable {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs `ble args` on the bus (killed after `timeout` seconds), stdin closed.
    static func run(_ args: [String], bus: String, adapter: String? = nil, timeout: Double = 30) async throws -> Outcome {
        try await onThread {
            let p = Process()
            p.executableURL = executable
            p.arguments = args
            var env = ProcessInfo.processInfo.environment
            for k in ["BLE_SNOOP", "BLE_LOG", "OCB_STATE_DIR", "NO_COLOR"] { env[k] = nil }
            env["BLE_TRANSPORT"] = adapter.map { "bluez:\($0)" } ?? "bluez"
            env["DBUS_SYSTEM_BUS_ADDRESS"] = bus
            p.environment = env
            let out = Pipe()
            let err = Pipe()
            p.standardOutput = out
            p.standardError = err
            p.standardInput = FileHandle.nullDevice
            try p.run()
            let pid = p.processIdentifier
            let killer = DispatchWorkItem { kill(pid, SIGKILL) }
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: killer)
            let errData = CBox<Data>()
            let reader = Thread { errData.value = err.fileHandleForReading.readDataToEndOfFile() }
            reader.start()
            let o = out.fileHandleForReading.readDataToEndOfFile()
            while errData.value == nil { usleep(5_000) }
            // Both pipes closed: the process has exited or is exiting (Foundation reaps it; its waitUntilExit can wait
            // for good inside the test runner, so poll).
            let deadline = Date().addingTimeInterval(timeout)
            while p.isRunning && Date() < deadline { usleep(5_000) }
            killer.cancel()
            let code: Int32 = p.isRunning ? -1 : (p.terminationReason == .exit ? p.terminationStatus : 128 + p.terminationStatus)
            return Outcome(status: code, stdout: String(decoding: o, as: UTF8.self), stderr: String(decoding: errData.value ?? Data(), as: UTF8.self))
        }
    }
}

private final class CBox<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: T?
    var value: T? {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}

@Suite(
    .enabled(
        if: PrivateBus.available && FileManager.default.isExecutableFile(atPath: BLE.executable.path),
        "needs dbus-daemon and the built ble (swift build --build-tests builds it)"),
    .timeLimit(.minutes(2)))
struct BlueZToolTests {
    @Test func bleScanBondsAndPairRunThroughBluetoothd() async throws {
        let bus = try await PrivateBus()
        let fake = try await FakeBlueZ(address: bus.address)
        let adapter = fake.addAdapter()
        fake.addDevice(address: "C0:FF:EE:00:00:0A", ["Name": .string("Keyboard"), "Paired": .boolean(true), "Bonded": .boolean(true)])
        let sensor = fake.addDevice(
            address: "C0:FF:EE:00:00:0B", random: true,
            [
                "Name": .string("HRM"), "UUIDs": .array(.string, [.string("0000180d-0000-1000-8000-00805f9b34fb")]),
                "ManufacturerData": .dictionary(key: .uint16, value: .variant, [DBusDictEntry(.uint16(0x004C), .variant(.bytes([1, 2])))]),
            ])

        // scan: what BlueZ reports while it discovers, in the native JSON keys.
        async let scanned = BLE.run(["scan", "--duration", "3", "--json"], bus: bus.address)
        try await fake.wait("discovery") { _ in fake.property(adapter, "org.bluez.Adapter1", "Discovering") == .boolean(true) }
        fake.change(sensor, "org.bluez.Device1", ["RSSI": .int16(-48)])
        let scan = try await scanned
        #expect(scan.status == 0, "\(scan.stderr)")
        let line = try #require(scan.stdout.split(separator: "\n").first { $0.contains("C0:FF:EE:00:00:0B") }, "\(scan.stdout) \(scan.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["name"] as? String == "HRM")
        #expect(object["rssi"] as? Int == -48)
        #expect(object["services"] as? [String] == ["180D"])
        #expect(object["address_type"] as? String == "random static")
        #expect((object["manufacturer_data"] as? [[String: Any]])?.first?["company_id"] as? Int == 0x004C)
        #expect(!scan.stdout.contains("C0:FF:EE:00:00:0A"))   // not heard while scanning
        #expect(scan.stderr.contains("1 device(s)"))

        // bonds: BlueZ's.
        let bonds = try await BLE.run(["bonds"], bus: bus.address)
        #expect(bonds.status == 0)
        #expect(bonds.stdout.contains("1 bond(s) kept by bluetoothd (bluez)"))
        #expect(bonds.stdout.contains("  C0:FF:EE:00:00:0A (public) Keyboard bonded"))

        // pair: Device1.Pair asks the terminal agent, which accepts with --yes.
        fake.pairingPrompt = ("RequestConfirmation", [.uint32(123_456)])
        let pair = try await BLE.run(["pair", "C0:FF:EE:00:00:0B", "--io", "yesno", "--yes"], bus: bus.address)
        #expect(pair.status == 0, "\(pair.stdout) \(pair.stderr)")
        #expect(pair.stdout.contains("Comparison value 123456: accepted"))
        #expect(pair.stdout.contains("bonded with C0:FF:EE:00:00:0B (random) HRM bonded"))
        try await fake.wait("the agent gone with its process") { _ in fake.registeredAgents.isEmpty }
        let again = try await BLE.run(["pair", "C0:FF:EE:00:00:0B"], bus: bus.address)
        #expect(again.status == 0 && again.stdout.contains("already bonded with C0:FF:EE:00:00:0B"))
        let refused = try await BLE.run(["pair", "C0:FF:EE:00:00:0B", "--legacy"], bus: bus.address)
        #expect(refused.status != 0 && refused.stderr.contains("bluetoothd chooses LE Secure Connections"))

        // bonds --remove: Adapter1.RemoveDevice.
        let removed = try await BLE.run(["bonds", "--remove", "C0:FF:EE:00:00:0A"], bus: bus.address)
        #expect(removed.status == 0 && removed.stdout.contains("forgot C0:FF:EE:00:00:0A"))
        let missing = try await BLE.run(["bonds", "--remove", "C0:FF:EE:00:00:0A"], bus: bus.address)
        #expect(missing.status == 1 && missing.stdout.contains("no bond with C0:FF:EE:00:00:0A"), "\(missing)")
        let after = try await BLE.run(["bonds"], bus: bus.address)
        #expect(after.stdout.contains("1 bond(s)") && after.stdout.contains("C0:FF:EE:00:00:0B"))

        // A command that runs our own host says what runs on bluez instead.
        let gatt = try await BLE.run(["gatt", "C0:FF:EE:00:00:0B"], bus: bus.address)
        #expect(gatt.status != 0)
        #expect(gatt.stderr.contains("bluetoothd keeps the adapter") && gatt.stderr.contains("`ble read`, `ble write`, `ble subscribe`, `ble pair`, `ble bonds`"), "\(gatt.stderr)")
        // No bluetoothd for the adapter named: a clear failure, not a hang.
        let wrong = try await BLE.run(["bonds"], bus: bus.address, adapter: "hci7")
        #expect(wrong.status != 0 && wrong.stderr.contains("no bluetoothd with hci7"), "\(wrong.stderr)")
    }

    @Test func bleReadAndWriteRunThroughBluetoothd() async throws {
        let bus = try await PrivateBus()
        let fake = try await FakeBlueZ(address: bus.address)
        fake.addAdapter()
        fake.database = [
            FakeService(
                uuid: "0000180d-0000-1000-8000-00805f9b34fb",
                characteristics: [
                    FakeCharacteristic(uuid: "00002a37-0000-1000-8000-00805f9b34fb", flags: ["read", "notify"], value: [0x06, 72]),
                    FakeCharacteristic(uuid: "00002a39-0000-1000-8000-00805f9b34fb", flags: ["write", "write-without-response"], value: []),
                ])
        ]
        // WriteValue {type: command}, as BlueZ before 5.46 (no AcquireWrite) takes a write without response.
        fake.offersAcquireWrite = false
        let device = fake.addDevice(address: "C0:FF:EE:00:00:0D", random: true, ["Name": .string("HRM")])

        let read = try await BLE.run(["read", "HRM", "2A37"], bus: bus.address)
        #expect(read.status == 0, "\(read.stdout) \(read.stderr)")
        #expect(read.stdout.hasPrefix("0x0003 2A37 Heart Rate Measurement: 72 bpm") && read.stdout.contains("[06 48]"), "\(read.stdout)")
        let json = try await BLE.run(["read", "C0:FF:EE:00:00:0D/R", "0x0003", "--json"], bus: bus.address)
        #expect(json.stdout.contains("\"value\":\"0648\"") && json.stdout.contains("\"handle\":3"), "\(json.stdout) \(json.stderr)")
        // Each command ends the link it made.
        #expect(fake.property(device, "org.bluez.Device1", "Connected") == .boolean(false))

        let write = try await BLE.run(["write", "HRM", "2A39", "--hex", "0102"], bus: bus.address)
        #expect(write.status == 0 && write.stdout.contains("wrote 2 octet(s) to 0x0005 2A39"), "\(write.stdout) \(write.stderr)")
        let command = try await BLE.run(["write", "HRM", "2A39", "--text", "hi", "--no-response"], bus: bus.address)
        #expect(command.status == 0 && command.stdout.contains("without response"), "\(command.stdout) \(command.stderr)")
        #expect(fake.lastWrites.map(\.value) == [[1, 2], Array("hi".utf8)])
        #expect(fake.lastWrites.map(\.type) == ["request", "command"])

        // subscribe: StartNotify, each value printed decoded, until --count; then the link's loss ends it with an error.
        // The fake sets Notifying before its answer to StartNotify leaves, so the test notifies until the tool is done
        // (a value that overtakes the answer is not one the app subscribed to yet).
        let charPath = device + "/service0001/char0002"
        let address = bus.address
        let beats = Task {
            var bpm: UInt8 = 80
            while !Task.isCancelled {
                if fake.property(charPath, "org.bluez.GattCharacteristic1", "Notifying") == .boolean(true) {
                    fake.notify(charPath, [0x06, bpm])
                    bpm &+= 1
                }
                try? await pause(nanoseconds: 50_000_000)
            }
        }
        let sub = try await BLE.run(["subscribe", "HRM", "2A37", "--count", "2"], bus: address)
        #expect(sub.status == 0, "\(sub.stdout) \(sub.stderr)")
        #expect(sub.stderr.contains("subscribed to 0x0003 2A37 Heart Rate Measurement (notifications)"))
        let lines = sub.stdout.split(separator: "\n")
        #expect(lines.count == 2 && lines.allSatisfy { $0.contains("notification 0x0003 2A37 Heart Rate Measurement: ") && $0.contains(" bpm") }, "\(lines)")
        async let endless = BLE.run(["subscribe", "HRM", "2A37", "--json"], bus: address)
        try await fake.wait("the second subscription") { _ in fake.property(charPath, "org.bluez.GattCharacteristic1", "Notifying") == .boolean(true) }
        try await pause(nanoseconds: 600_000_000)
        fake.dropLink(device)
        let dropped = try await endless
        beats.cancel()
        #expect(dropped.status != 0 && dropped.stderr.contains("the link went down"), "\(dropped.stderr)")
        #expect(dropped.stdout.contains("\"value\":\"06"), "\(dropped.stdout)")
        let flat = try await BLE.run(["subscribe", "HRM", "2A39"], bus: bus.address)
        #expect(flat.status != 0 && flat.stderr.contains("neither notifies nor indicates"), "\(flat.stderr)")

        // BlueZ's refusal, as the tool's error.
        fake.failNext("ReadValue", name: "org.bluez.Error.NotPermitted", message: "Read not permitted")
        let refused = try await BLE.run(["read", "HRM", "2A37"], bus: bus.address)
        #expect(refused.status != 0 && refused.stderr.contains("Read not permitted"), "\(refused.stderr)")
        let unknown = try await BLE.run(["read", "HRM", "2A99"], bus: bus.address)
        #expect(unknown.status != 0 && unknown.stderr.contains("no characteristic 2A99"), "\(unknown.stderr)")
    }
}
