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
    static func run(_ args: [String], bus: String, adapter: String? = nil, timeout: Double = 30, input: Pipe? = nil) async throws -> Outcome {
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
            p.standardInput = input ?? FileHandle.nullDevice
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
        let radio = try await BLE.run(["bench", "peer", "central", "--peer", "C0:FF:EE:00:00:0B"], bus: bus.address)
        #expect(radio.status != 0)
        #expect(
            radio.stderr.contains("bluetoothd keeps the adapter") && radio.stderr.contains("`ble gatt`, `ble read`, `ble write`, `ble subscribe`, `ble shell`, `ble serve`"),
            "\(radio.stderr)")
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

    /// A database with a secondary service included by a primary one, descriptors, and values of each kind.
    private static func heartRateDatabase() -> [FakeService] {
        [
            FakeService(
                uuid: "0000180f-0000-1000-8000-00805f9b34fb",
                characteristics: [FakeCharacteristic(uuid: "00002a19-0000-1000-8000-00805f9b34fb", flags: ["read", "notify"], value: [0x5a])],
                primary: false),
            FakeService(
                uuid: "0000180d-0000-1000-8000-00805f9b34fb",
                characteristics: [
                    FakeCharacteristic(
                        uuid: "00002a37-0000-1000-8000-00805f9b34fb", flags: ["notify"], value: [0x00, 0x48],
                        descriptors: [
                            FakeDescriptor(uuid: "00002901-0000-1000-8000-00805f9b34fb", value: Array("Heart Rate Measurement".utf8)),
                            FakeDescriptor(uuid: "00002902-0000-1000-8000-00805f9b34fb", value: [0, 0]),
                        ]),
                    FakeCharacteristic(uuid: "00002a38-0000-1000-8000-00805f9b34fb", flags: ["read"], value: [0x01]),
                    FakeCharacteristic(uuid: "00002a39-0000-1000-8000-00805f9b34fb", flags: ["write", "write-without-response"], value: []),
                ],
                includes: [0]),
        ]
    }

    /// bluetoothd may say a bonded device's services are resolved before it exports its changed database: `ble read`
    /// looks again for a characteristic it did not find, for 3 s, before it says there is none.
    @Test func bleReadWaitsForADatabaseExportedLate() async throws {
        let bus = try await PrivateBus()
        let fake = try await FakeBlueZ(address: bus.address)
        fake.addAdapter()
        fake.database = Self.heartRateDatabase()
        fake.exportsDatabaseAfter = 1.2
        fake.addDevice(address: "C0:FF:EE:00:00:0E", random: true, ["Name": .string("HRM")])
        let read = try await BLE.run(["read", "HRM", "2A38"], bus: bus.address)
        #expect(read.status == 0 && read.stdout.contains("Chest"), "\(read.stdout) \(read.stderr)")
        // One that never comes is still an error, once the 3 s are over.
        let began = Date()
        let unknown = try await BLE.run(["read", "HRM", "2A99"], bus: bus.address)
        #expect(unknown.status != 0 && unknown.stderr.contains("no characteristic 2A99"), "\(unknown.stderr)")
        #expect(Date().timeIntervalSince(began) >= 3)
    }

    @Test func bleGattDumpsWhatBluetoothdExports() async throws {
        let bus = try await PrivateBus()
        let fake = try await FakeBlueZ(address: bus.address)
        fake.addAdapter()
        fake.database = Self.heartRateDatabase()
        fake.addDevice(address: "C0:FF:EE:00:00:0E", random: true, ["Name": .string("HRM")])

        let tree = try await BLE.run(["gatt", "HRM"], bus: bus.address)
        #expect(tree.status == 0, "\(tree.stdout) \(tree.stderr)")
        let expected = [
            "C0:FF:EE:00:00:0E/R (ATT MTU 247)",
            "├── 0x0001–0x0003 secondary service 180F Battery",
            "│   └── 0x0002 characteristic 2A19 Battery Level, value 0x0003 [read, notify]",
            "│           = 90 %  [5a]",
            "└── 0x0004–0x000c service 180D Heart Rate",
            "    ├── ------ includes 180F Battery (0x0001–0x0003)",
            "    ├── 0x0005 characteristic 2A37 Heart Rate Measurement, value 0x0006 [notify]",
            "    │   ├── 0x0007 descriptor 2901 Characteristic User Description = \"Heart Rate Measurement\"",
            "    │   └── 0x0008 descriptor 2902 Client Characteristic Configuration = off  [00 00]",
            "    ├── 0x0009 characteristic 2A38 Body Sensor Location, value 0x000a [read]",
            "    │       = Chest  [01]",
            "    └── 0x000b characteristic 2A39 Heart Rate Control Point, value 0x000c [writeWithoutResponse, write]",
        ]
        let lines = tree.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == expected.count && zip(lines, expected).allSatisfy { $0.hasPrefix($1) || $0 == $1 }, "\(tree.stdout)")
        #expect(tree.stderr.contains("bluetoothd keeps the GAP service, 1800, to itself"), "\(tree.stderr)")

        // JSON as on hci-socket; a refused read is kept in the dump, not fatal.
        fake.failNext("ReadValue", name: "org.bluez.Error.NotPermitted", message: "Read not permitted")
        let json = try await BLE.run(["gatt", "C0:FF:EE:00:00:0E/R", "--json"], bus: bus.address)
        #expect(json.status == 0, "\(json.stderr)")
        let root = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect(root["address"] as? String == "C0:FF:EE:00:00:0E/R" && root["mtu"] as? Int == 247)
        let services = try #require(root["services"] as? [[String: Any]])
        #expect(services.map { $0["uuid"] as? String } == ["180F", "180D"])
        #expect(services.map { $0["primary"] as? Bool } == [false, true])
        #expect((services[1]["includes"] as? [[String: Any]])?.first?["start_handle"] as? Int == 1)
        let chars = try #require(services[1]["characteristics"] as? [[String: Any]])
        #expect(chars.map { $0["value_handle"] as? Int } == [6, 10, 12])
        #expect((chars[0]["descriptors"] as? [[String: Any]])?.map { $0["handle"] as? Int } == [7, 8])
        #expect(chars[1]["value"] as? String == "01")
        // The first read of the run was 2A37's first descriptor (primary services first, descriptors before values).
        let description = try #require((chars[0]["descriptors"] as? [[String: Any]])?.first)
        #expect((description["error"] as? String)?.contains("Read not permitted") == true, "\(description)")
        #expect((description["value"]) == nil)
        let device = "/org/bluez/hci0/dev_C0_FF_EE_00_00_0E"
        #expect(fake.property(device, "org.bluez.Device1", "Connected") == .boolean(false))
    }

    @Test func bleShellReadsWritesAndSubscribesThroughBluetoothd() async throws {
        let bus = try await PrivateBus()
        let fake = try await FakeBlueZ(address: bus.address)
        fake.addAdapter()
        fake.database = Self.heartRateDatabase()
        let device = fake.addDevice(address: "C0:FF:EE:00:00:0F", random: true, ["Name": .string("HRM")])
        let charPath = device + "/service0004/char0005"
        let input = Pipe()
        let address = bus.address
        async let session = BLE.run(["shell", "HRM"], bus: address, input: input)
        // (Throwing: a shell that has already ended gives EPIPE, which `write(_:)` turned into a crash of the whole
        // test process; the expectations below then say what the shell printed. EPIPE and not SIGPIPE, whose default
        // action ends the test process: ignored here, not left to another suite having done it first.)
        signal(SIGPIPE, SIG_IGN)
        let type = { (s: String) in try? input.fileHandleForWriting.write(contentsOf: Data((s + "\n").utf8)) }
        type("read 2A38")
        type("read 0x0007")
        type("write 2A39 --hex 0102")
        type("write 0x0008 --hex 0100")   // bluetoothd's CCCD: refused, the shell goes on
        type("read 2A99")
        type("subscribe 2A37")
        try await fake.wait("the subscription") { _ in fake.property(charPath, "org.bluez.GattCharacteristic1", "Notifying") == .boolean(true) }
        try await pause(nanoseconds: 300_000_000)
        fake.notify(charPath, [0x06, 70])
        fake.notify(charPath, [0x06, 71])
        try await pause(nanoseconds: 300_000_000)
        type("unsubscribe 2A37")
        try await fake.wait("StopNotify") { _ in fake.property(charPath, "org.bluez.GattCharacteristic1", "Notifying") == .boolean(false) }
        type("list")
        type("quit")
        let out = try await session
        #expect(out.status == 0, "\(out.stdout) \(out.stderr)")
        let o = out.stdout
        #expect(o.contains("connected; 4 characteristics in 2 services"), "\(o)")
        #expect(o.contains("0x000a 2A38 Body Sensor Location: Chest  [01]"), "\(o)")
        #expect(o.contains("0x0007 2901 Characteristic User Description: \"Heart Rate Measurement\""), "\(o)")
        #expect(o.contains("wrote 2 octet(s) to 0x000c 2A39 Heart Rate Control Point"), "\(o)")
        #expect(out.stderr.contains("error: no characteristic 2A99"), "\(out.stderr)")
        #expect(out.stderr.contains("error: 0x0008 2902 Client Characteristic Configuration: bluetoothd writes it itself; use subscribe"), "\(out.stderr)")
        #expect(o.contains("subscribed to 0x0006 2A37 Heart Rate Measurement"), "\(o)")
        #expect(o.contains("notification 0x0006 2A37 Heart Rate Measurement: 70 bpm") && o.contains(": 71 bpm"), "\(o)")
        #expect(o.contains("unsubscribed from 0x0006 2A37"), "\(o)")
        #expect(o.contains("└── 0x0004–0x000c service 180D Heart Rate"), "\(o)")
        #expect(fake.lastWrites.map(\.value).first == [1, 2])

        // The link's loss ends the shell at once, though no line is typed.
        let input2 = Pipe()
        async let second = BLE.run(["shell", "HRM"], bus: address, input: input2)
        try await fake.wait("connected again") { _ in fake.property(device, "org.bluez.Device1", "ServicesResolved") == .boolean(true) }
        try await pause(nanoseconds: 500_000_000)
        fake.dropLink(device)
        let lost = try await second
        #expect(lost.status != 0 && lost.stderr.contains("the link went down"), "\(lost.stderr)")
        withExtendedLifetime(input2) {}
    }

    @Test func bleServeServesTheFileThroughBluetoothd() async throws {
        let bus = try await PrivateBus()
        let fake = try await FakeBlueZ(address: bus.address)
        fake.addAdapter()
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("examples/heart-rate.json").path
        async let served = BLE.run(["serve", file, "--notify-every", "0.2", "--duration", "20"], bus: bus.address, timeout: 45)
        try await fake.wait("registered") { _ in fake.registeredApplications.count == 3 && fake.advertisements.count == 1 }
        let ad = try #require(fake.advertisements.values.first)
        #expect(ad["LocalName"] == .string("Served HR"))
        #expect(ad["ServiceUUIDs"]?.arrayItems == [.string("0000180d-0000-1000-8000-00805f9b34fb")])
        // Reads answered from the file's values, writes read back, long values from an offset.
        let location = try await fake.callApplication("00002a38-0000-1000-8000-00805f9b34fb", "ReadValue", [FakeBlueZ.requestOptions()])
        #expect(location.body.first?.byteArray == [1])
        let long = "6e400002-b5a3-f393-e0a9-e50e24dcca9e"
        let tail = try await fake.callApplication(long, "ReadValue", [FakeBlueZ.requestOptions(offset: 100)])
        #expect(tail.body.first?.byteArray.map { String(decoding: $0, as: UTF8.self) }?.hasPrefix("ts, so that") == true, "\(tail.body)")
        _ = try await fake.callApplication(long, "WriteValue", [.bytes(Array("hello".utf8)), FakeBlueZ.requestOptions(type: "request")])
        let back = try await fake.callApplication(long, "ReadValue", [FakeBlueZ.requestOptions()])
        #expect(back.body.first?.byteArray == Array("hello".utf8))
        await #expect(throws: DBusError.remote(name: "org.bluez.Error.InvalidOffset", message: "Invalid offset")) {
            try await fake.callApplication(long, "ReadValue", [FakeBlueZ.requestOptions(offset: 6)])
        }
        // Notifications every --notify-every while subscribed: the value with a counter octet.
        let hr = "00002a37-0000-1000-8000-00805f9b34fb"
        _ = try await fake.callApplication(hr, "StartNotify", [])
        let hrPath = try #require(fake.applicationCharacteristic(hr)?.path)
        try await fake.wait("two notifications") { _ in fake.notifiedValues.filter { $0.path == hrPath }.count >= 2 }
        let values = fake.notifiedValues.filter { $0.path == hrPath }.map(\.value)
        #expect(values.allSatisfy { $0.count == 3 && $0.prefix(2) == [0x00, 0x48] }, "\(values)")
        _ = try await fake.callApplication(hr, "StopNotify", [])
        let out = try await served
        #expect(out.status == 0, "\(out.stdout) \(out.stderr)")
        #expect(out.stdout.contains("advertising \"Served HR\" as 00:11:22:33:44:55/P on bluez (through bluetoothd)"), "\(out.stdout)")
        #expect(out.stdout.contains("write \(CBUUIDText.long) offset 0: 68 65 6c 6c 6f"), "\(out.stdout)")
        #expect(out.stdout.contains("subscription 2A37: on") && out.stdout.contains("subscription 2A37: off"), "\(out.stdout)")
        #expect(out.stderr.contains("services[1]: its includes are not served") && out.stderr.contains("services[0]: served as a primary service"), "\(out.stderr)")
        // Gone with the process: bluetoothd would unregister them when it leaves the bus.
    }
}

private enum CBUUIDText {
    static let long = "6E400002-B5A3-F393-E0A9-E50E24DCCA9E"
}
