// Our stack against independent ones: Bumble hosts attached to `ble radio` (our controller) and to
// rootcanal (Google's), in both roles, reading whole GATT databases.
import Foundation
import Testing
import TestSupport
import CoreBluetooth
@testable import BLEHost
import BLEHCI
import BLEVirtualRadio
import BLETransport

/// Our radio server on a free port with a private air.
func startRadio() throws -> (RadioServer, VirtualAir) {
    _ = Interop.stateDirectory
    let air = VirtualAir(loop: EventLoop(label: "interop.air", clock: .real))
    let server = try RadioServer(air: air, port: 0)
    server.start()
    return (server, air)
}

@Suite(.serialized, .timeLimit(.minutes(2))) struct BumbleOnOurRadioTests {
    @Test func bumbleCentralReadsOurWholeDatabase() async throws {
        try Interop.requireReady()
        let (server, air) = try startRadio()
        defer { server.stop() }
        let per = InteropPeripheral(name: "OCB Interop")
        per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: try HostFactory.makeHost(on: air, name: "ours"))
        try await waitFor("advertising", seconds: 40) { per.log.has("advertising:true") }

        let bumble = try PeerProcess(
            script: "bumble_central.py",
            arguments: [
                "--transport", "tcp-client:127.0.0.1:\(server.port)", "--name", "OCB Interop", "--subscribe", "2A37", "--count", "3",
                "--indicate", "6E400004-B5A3-F393-E0A9-E50E24DCCA9E",
                "--find-service", "6E400001-B5A3-F393-E0A9-E50E24DCCA9E", "--read-by-uuid", "2A38",
                "--write", "6E400003-B5A3-F393-E0A9-E50E24DCCA9E=" + String(repeating: "ab", count: 100),
                "--write", "6E400003-B5A3-F393-E0A9-E50E24DCCA9E=" + String(repeating: "cd", count: 300),
                "--write-no-response", "6E400003-B5A3-F393-E0A9-E50E24DCCA9E=0102",
            ])
        defer { bumble.stop() }
        try await bumble.waitFor("disconnected", seconds: 40)

        let adv = try #require(bumble.events("advertisement").first { $0["name"] as? String == "OCB Interop" })
        #expect(adv["connectable"] as? Bool == true)
        #expect((adv["services"] as? [String])?.contains("180D") == true)
        let rssi = try #require(adv["rssi"] as? Int)
        #expect(rssi < 0 && rssi > -100)
        #expect(bumble.events("mtu").first?["mtu"] as? Int == 247)
        let services = bumble.events("service").compactMap { $0["uuid"] as? String }
        #expect(services == ["1800", "1801", "180D", "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"])
        let chars = Dictionary(bumble.events("characteristic").map { ($0["uuid"] as! String, $0) }, uniquingKeysWith: { a, _ in a })
        #expect(chars["2A00"]?["value"] as? String == Array("OpenCoreBluetooth".utf8).map { String(format: "%02x", $0) }.joined())
        #expect(chars["2A38"]?["value"] as? String == "02")
        // The 300-octet dynamic value needs Read Blob requests; our delegate answered each offset.
        #expect(chars["6E400002-B5A3-F393-E0A9-E50E24DCCA9E"]?["value"] as? String == per.longValue.map { String(format: "%02x", $0) }.joined())
        #expect(per.log.all.filter { $0.hasPrefix("read:") }.count >= 2)
        #expect(chars["2A37"]?["properties"] as? Int == 0x10)
        let descriptors = bumble.events("descriptor").map { "\($0["characteristic"]!):\($0["uuid"]!)" }
        #expect(descriptors.contains("2A37:2902") && descriptors.contains("2A37:2901"))
        #expect(
            bumble.events("descriptor").first { $0["uuid"] as? String == "2901" }?["value"] as? String
                == Array("Heart Rate".utf8).map { String(format: "%02x", $0) }.joined())
        // 100 octets fit one Write Request at ATT_MTU 247; 300 need Prepare/Execute Write, delivered to our
        // delegate as one batch; then a Write Command.
        let written = per.queue.sync { per.written }
        #expect(written.first == Data(repeating: 0xAB, count: 100))
        #expect(Data(written.dropFirst().prefix(while: { $0.first == 0xCD }).joined()) == Data(repeating: 0xCD, count: 300))
        #expect(written.last == Data([1, 2]))
        // Notifications and indications.
        #expect(bumble.events("notification").compactMap { $0["value"] as? String } == ["0046", "0047", "0048"])
        #expect(bumble.events("indication").compactMap { $0["value"] as? String } == ["a0", "a1", "a2"])
        // Discovery by UUID, included services, Read Using Characteristic UUID.
        #expect((bumble.events("found_service").first?["handles"] as? [[Int]])?.count == 1)
        #expect(bumble.events("included").first?["uuids"] as? [String] == ["180D"])
        #expect(bumble.events("read_by_uuid").first?["values"] as? [String] == ["02"])
        try await waitFor("unsubscribe") { per.log.has("unsubscribed:2A37") }
    }

    @Test func twoBumbleCentralsAtOnce() async throws {
        try Interop.requireReady()
        let (server, air) = try startRadio()
        defer { server.stop() }
        let per = InteropPeripheral(name: "OCB Interop")
        per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: try HostFactory.makeHost(on: air, name: "ours"))
        try await waitFor("advertising", seconds: 40) { per.log.has("advertising:true") }
        // Advertising goes on while connected, so a second central connects too; both subscribe.
        let a = try PeerProcess(
            script: "bumble_central.py",
            arguments: [
                "--transport", "tcp-client:127.0.0.1:\(server.port)", "--name", "OCB Interop",
                "--address", "F0:F1:F2:F3:F4:01", "--subscribe", "2A37", "--count", "3",
            ])
        let b = try PeerProcess(
            script: "bumble_central.py",
            arguments: [
                "--transport", "tcp-client:127.0.0.1:\(server.port)", "--name", "OCB Interop",
                "--address", "F0:F1:F2:F3:F4:02", "--subscribe", "2A37", "--count", "3",
            ])
        defer { a.stop(); b.stop() }
        try await a.waitFor("connected", seconds: 30)
        try await b.waitFor("connected", seconds: 30)
        try await a.waitFor("disconnected", seconds: 40)
        try await b.waitFor("disconnected", seconds: 40)
        #expect(a.events("notification").count == 3 && b.events("notification").count == 3)
        #expect(per.log.count(prefix: "subscribed:2A37") == 2)
    }

    @Test func bumblePeripheralDisconnectsOurCentral() async throws {
        try Interop.requireReady()
        let (server, air) = try startRadio()
        defer { server.stop() }
        let bumble = try PeerProcess(
            script: "bumble_peripheral.py",
            arguments: [
                "--transport", "tcp-client:127.0.0.1:\(server.port)", "--name", "Bumble HR",
                "--disconnect-after", "1.5",
            ])
        defer { bumble.stop() }
        try await bumble.waitFor("advertising")
        let central = DatabaseReader(name: "Bumble HR")
        central.manager = CBCentralManager(delegate: central, queue: central.queue, options: nil, host: try HostFactory.makeHost(on: air, name: "ours"))
        try await waitFor("disconnect", seconds: 30) { central.log.all.contains { $0.hasPrefix("disconnected:") } }
        let e = try #require(central.queue.sync { central.disconnectError })
        #expect((e as? CBError)?.code == .peripheralDisconnected)
        #expect(e.localizedDescription == "The specified device has disconnected from us.")
    }

    @Test func ourCentralReadsABumbleDatabase() async throws {
        try Interop.requireReady()
        let (server, air) = try startRadio()
        defer { server.stop() }
        let bumble = try PeerProcess(script: "bumble_peripheral.py", arguments: ["--transport", "tcp-client:127.0.0.1:\(server.port)", "--name", "Bumble HR"])
        defer { bumble.stop() }
        try await bumble.waitFor("advertising")
        try await readBumbleDatabase(host: try HostFactory.makeHost(on: air, name: "ours"), bumble: bumble)
    }
}

@Suite(.serialized, .timeLimit(.minutes(2))) struct RootCanalTests {
    @Test func ourCentralReadsABumbleDatabaseOverRootCanal() async throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let bumble = try PeerProcess(script: "bumble_peripheral.py", arguments: ["--transport", rc.transport, "--name", "Bumble HR"])
        defer { bumble.stop() }
        try await bumble.waitFor("advertising")
        // Our host's packets are captured, so that a failure shows the HCI exchange that led to it.
        let capture = NSTemporaryDirectory() + "rootcanal-central-\(UUID().uuidString).btsnoop"
        defer { try? FileManager.default.removeItem(atPath: capture) }
        let host = LEHost(
            transport: SnoopingTransport(StreamTransport.tcpClient(host: "127.0.0.1", port: rc.hciPort), writer: try BTSnoopWriter(path: capture)),
            loop: EventLoop(label: "ble.ours"), name: "ours")
        host.bondStoreDirectory = HostStateDirectory.url
        try await readBumbleDatabase(host: host, bumble: bumble, capture: capture)
    }

    @Test func bumbleCentralReadsOurDatabaseOverRootCanal() async throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let per = InteropPeripheral(name: "OCB Interop")
        per.manager = CBPeripheralManager(
            delegate: per, queue: per.queue, options: nil,
            host: try HostFactory.makeHost(spec: .tcpClient(host: "127.0.0.1", port: rc.hciPort), name: "ours"))
        try await waitFor("advertising", seconds: 40) { per.log.has("advertising:true") }
        let bumble = try PeerProcess(
            script: "bumble_central.py",
            arguments: [
                "--transport", rc.transport, "--name", "OCB Interop", "--subscribe", "2A37", "--count", "3",
                "--indicate", "6E400004-B5A3-F393-E0A9-E50E24DCCA9E", "--mtu", "23",
                "--write", "6E400003-B5A3-F393-E0A9-E50E24DCCA9E=0a0b",
                "--write", "6E400003-B5A3-F393-E0A9-E50E24DCCA9E=" + String(repeating: "5a", count: 100),
                "--write-no-response", "6E400003-B5A3-F393-E0A9-E50E24DCCA9E=0c",
            ])
        defer { bumble.stop() }
        try await bumble.waitFor("disconnected", seconds: 40)
        let services = bumble.events("service").compactMap { $0["uuid"] as? String }
        #expect(services == ["1800", "1801", "180D", "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"])
        let long = bumble.events("characteristic").first { $0["uuid"] as? String == "6E400002-B5A3-F393-E0A9-E50E24DCCA9E" }
        #expect(long?["value"] as? String == per.longValue.map { String(format: "%02x", $0) }.joined())
        #expect(bumble.events("notification").count == 3)
        #expect(bumble.events("indication").compactMap { $0["value"] as? String } == ["a0", "a1", "a2"])
        // At ATT_MTU 23 the 100-octet write is a long write: our delegate gets it as one batch with offsets.
        let written = per.queue.sync { per.written }
        #expect(written.first == Data([0x0A, 0x0B]))
        #expect(written.dropFirst().dropLast().reduce(Data(), +) == Data(repeating: 0x5A, count: 100))
        #expect(written.last == Data([0x0C]))
    }
}

/// Our central, through the Core Bluetooth API, reads the Bumble peripheral's whole database,
/// writes, and subscribes.
/// `capture`: a btsnoop file of our host's packets, summarised (with our central's and host's state) when a wait fails.
func readBumbleDatabase(host: LEHost, bumble: PeerProcess, capture: String? = nil) async throws {
    let central = DatabaseReader(name: "Bumble HR")
    let started = Date()
    do {
        try await readBumbleDatabase(central, host: host, bumble: bumble)
    } catch {
        let waited = Date().timeIntervalSince(started)
        let hostState = host.loop.sync {
            "connections \(host.connections.values.map { "\($0)" }), outstanding command \(host.outstandingCommand.map { "\($0.opcode)" } ?? "none"), "
                + "queued \(host.commandQueue.count - host.commandQueueHead), credits \(host.commandCredits), power \(host.powerState)"
        }
        let state = "\(Int(waited)) s after the start; " + hostState
        let packets = capture.map(hciSummary) ?? ""
        throw InteropError(
            "\(error)\nour central: \(central.log.all.suffix(8))\nour host: \(state)\nlast HCI packets:\n\(packets)\nBumble: \(bumble.transcript)")
    }
}

private func readBumbleDatabase(_ central: DatabaseReader, host: LEHost, bumble: PeerProcess) async throws {
    central.subscribeTo = [CBUUID(string: "2A37"), CBUUID(string: "6E400004-B5A3-F393-E0A9-E50E24DCCA9E")]
    let writable = CBUUID(string: "6E400003-B5A3-F393-E0A9-E50E24DCCA9E")
    let long = Data((0..<300).map { UInt8($0 % 7) })
    central.writes = [(writable, Data([1, 2, 3, 4]), .withResponse), (writable, long, .withResponse), (writable, Data([9, 9]), .withoutResponse)]
    central.manager = CBCentralManager(delegate: central, queue: central.queue, options: nil, host: host)
    try await waitFor("database read", seconds: 30) { central.log.has("database read") }
    let (adv, values) = central.queue.sync { (central.advertisement, central.values) }
    #expect(adv[CBAdvertisementDataLocalNameKey] as? String == "Bumble HR")
    #expect(adv[CBAdvertisementDataServiceUUIDsKey] as? [CBUUID] == [CBUUID(string: "180D")])
    #expect(adv[CBAdvertisementDataManufacturerDataKey] as? Data == Data([0xFF, 0xFF, 0x01, 0x02]))
    #expect((adv[CBAdvertisementDataTxPowerLevelKey] as? NSNumber)?.intValue == -8)
    #expect(central.log.all.contains { $0.hasPrefix("services:1800,1801,180D,6E400001-B5A3-F393-E0A9-E50E24DCCA9E") })
    #expect(values["2A38"] == Data([0x01]))
    #expect(values["6E400002-B5A3-F393-E0A9-E50E24DCCA9E"] == Data((0..<300).map { UInt8($0 % 251) }))
    #expect(central.log.has("descriptorValue:2901:long value"))
    try await waitFor("write") { central.log.has("wrote:6E400003-B5A3-F393-E0A9-E50E24DCCA9E:true") }
    try await bumble.waitFor("write") { $0["value"] as? String == "01020304" }
    // The long write reaches Bumble whole (prepared and executed), the write command too.
    try await bumble.waitFor("write") { $0["value"] as? String == long.map { String(format: "%02x", $0) }.joined() }
    try await bumble.waitFor("write") { $0["value"] as? String == "0909" }
    try await waitFor("notifications and indications") {
        central.queue.sync { (central.updates["2A37"]?.count ?? 0) >= 3 && (central.updates["6E400004-B5A3-F393-E0A9-E50E24DCCA9E"]?.count ?? 0) >= 3 }
    }
    let p = try #require(central.target)
    central.queue.sync { central.manager.cancelPeripheralConnection(p) }
    try await waitFor("disconnect") { central.log.has("disconnected:nil") }
    try await bumble.waitFor("disconnected")
}

/// The last packets of a btsnoop capture, one line each: time, direction, type and bytes (HCI commands and
/// events whole, ACL data cut short).
func hciSummary(_ path: String) -> String {
    guard let records = try? BTSnoopReader.read(path: path), let first = records.first else { return "(no capture)" }
    return records.suffix(40).map { r in
        let t = String(format: "%9.3f", Double(r.timestampMicros &- first.timestampMicros) / 1e6)
        let bytes = r.packet.bytes.prefix(r.packet.type == .acl ? 12 : 40).map { String(format: "%02x", $0) }.joined(separator: " ")
        return "\(t) \(r.direction == .hostToController ? ">" : "<") \(r.packet.type) \(bytes)"
    }.joined(separator: "\n")
}

@Suite(.serialized, .timeLimit(.minutes(2))) struct ServeTests {
    /// `ble serve` with the example database, attached to rootcanal; a Bumble central reads it all (long
    /// reads at ATT_MTU 23), writes, and receives notifications and indications.
    @Test func bumbleCentralAgainstBleServeOverRootCanal() async throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let serve = Process()
        serve.executableURL = Interop.root.appendingPathComponent(".build/debug/ble")
        serve.arguments = ["serve", Interop.root.appendingPathComponent("examples/heart-rate.json").path, "--notify-every", "0.1"]
        // Its identity and bonds go to a folder of this test's own, removed at the end.
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("ble-serve-interop-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: state) }
        serve.environment = Interop.environment(["BLE_TRANSPORT": rc.transport, "OCB_STATE_DIR": state.path])
        let out = Pipe()
        serve.standardOutput = out
        try serve.run()
        defer { Interop.terminate(serve) }
        let bumble = try PeerProcess(
            script: "bumble_central.py",
            arguments: [
                "--transport", rc.transport, "--name", "Served HR", "--mtu", "23",
                "--subscribe", "2A37", "--indicate", "6E400004-B5A3-F393-E0A9-E50E24DCCA9E", "--count", "2",
                "--find-service", "180D", "--write", "2A39=07", "--write-no-response", "2A39=08",
                "--write", "6E400002-B5A3-F393-E0A9-E50E24DCCA9E=" + String(repeating: "ee", count: 60),
            ])
        defer { bumble.stop() }
        try await bumble.waitFor("disconnected", seconds: 60)
        let chars = Dictionary(bumble.events("characteristic").map { ($0["uuid"] as! String, $0) }, uniquingKeysWith: { a, _ in a })
        #expect(bumble.events("service").compactMap { $0["handle"] as? Int } == [1, 6, 48, 81])
        #expect(chars["2A38"]?["value"] as? String == "01")
        #expect(chars["2A37"]?["handle"] as? Int == 51)   // Bumble reports the value handle; the declaration is at 50
        let long = "A long value that needs several Read Blob requests when the ATT MTU is the default twenty-three octets, so that long reads are exercised."
        #expect(chars["6E400002-B5A3-F393-E0A9-E50E24DCCA9E"]?["value"] as? String == Array(long.utf8).map { String(format: "%02x", $0) }.joined())
        // Reading a characteristic that needs encryption over an unencrypted, unbonded link: Insufficient Authentication (0x05).
        #expect(chars["6E400005-B5A3-F393-E0A9-E50E24DCCA9E"]?["read_error"] as? Int == 0x05)
        #expect(bumble.events("included").first?["uuids"] as? [String] == ["180F"])
        #expect(bumble.events("notification").compactMap { ($0["value"] as? String)?.prefix(4) } == ["0048", "0048"])
        #expect(bumble.events("indication").compactMap { ($0["value"] as? String)?.prefix(2) } == ["a0", "a0"])
        #expect(bumble.events("written").count == 2 && bumble.events("written_no_response").count == 1)
    }
}

@Suite struct BenchToolTests {
    /// `ble bench` moves exactly what it was asked to and ends with one JSON line (figures are for benchmarks).
    @Test(arguments: ["notify", "write", "rtt", "read"])
    func benchReportsWhatItMoved(mode: String) throws {
        let p = Process()
        p.executableURL = Interop.root.appendingPathComponent(".build/debug/ble")
        p.arguments = ["bench", "--mode", mode, "--size", "20", "--count", "500"]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
        let last = try #require(String(decoding: data, as: UTF8.self).split(separator: "\n").last)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any])
        #expect(json["mode"] as? String == mode)
        #expect(json["bytes"] as? Int == 500 * 20)
        #expect(json["packets"] as? Int == 500)
        #expect((json["throughput_bytes_per_s"] as? Double ?? 0) > 0)
        #expect((json["rtt_ms"] != nil) == (mode == "rtt" || mode == "read"))
    }
}

/// `ble bench` against `bumble-bench` over rootcanal, both directions of the bumble-bench GATT protocol,
/// and the airtime and scale modes (figures are for benchmarks; here only what moved is checked).
@Suite(.serialized, .timeLimit(.minutes(3))) struct BenchInteropTests {
    func ble(_ args: [String], env: [String: String] = [:]) throws -> Process {
        let p = Process()
        p.executableURL = Interop.root.appendingPathComponent(".build/debug/ble")
        p.arguments = args
        p.environment = Interop.environment(env)
        return p
    }

    func lastJSON(_ data: Data) throws -> [String: Any] {
        let last = try #require(String(decoding: data, as: UTF8.self).split(separator: "\n").last)
        return try #require(try JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any])
    }

    func bumbleBench(_ args: [String]) throws -> PeerProcess {
        try PeerProcess(script: "../../../scripts/bumble_bench.py", arguments: args)
    }

    @Test func ourCentralSendsToBumbleBench() async throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let bumble = try bumbleBench(["--mode", "gatt-server", "--scenario", "receive", "peripheral", rc.transport])
        defer { bumble.stop() }
        try await bumble.waitFor("log", seconds: 30) { ($0["text"] as? String)?.contains("Waiting for connection") ?? false }
        let p = try ble(["bench", "--role", "central", "--scenario", "send", "--size", "244", "--count", "60"], env: ["BLE_TRANSPORT": rc.transport])
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
        let json = try lastJSON(data)
        #expect(json["bytes"] as? Int == 60 * 244 && json["packets"] as? Int == 60)
        // Bumble received all 60 and counted the right sizes.
        try await bumble.waitFor("log") { ($0["text"] as? String)?.contains("Received packet 59") ?? false }
    }

    @Test func bumbleBenchSendsToOurPeripheral() async throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let p = try ble(["bench", "--role", "peripheral", "--scenario", "receive", "--size", "244"], env: ["BLE_TRANSPORT": rc.transport])
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        defer { if p.isRunning { p.terminate() } }
        try await pause(nanoseconds: 2_000_000_000)
        let bumble = try bumbleBench(["--mode", "gatt-client", "--scenario", "send", "--att-mtu", "247", "-s", "244", "-c", "60", "central", rc.transport])
        defer { bumble.stop() }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
        let json = try lastJSON(data)
        #expect(json["packets"] as? Int == 60 && json["bytes"] as? Int == 60 * 244)
        // Bumble got our ACK for its last packet.
        try await bumble.waitFor("log") { ($0["text"] as? String)?.contains("Received ACK") ?? false }
    }

    @Test func airtimeAndScaleModes() throws {
        let a = try ble(["bench", "--airtime", "--phy", "2m", "--data-length", "251", "--interval", "15", "--count", "300"])
        let out = Pipe()
        a.standardOutput = out
        try a.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        a.waitUntilExit()
        let json = try lastJSON(data)
        #expect(json["packets"] as? Int == 299)
        #expect((json["fraction"] as? Double ?? 0) > 0.95 && (json["fraction"] as? Double ?? 2) < 1.05)
        let s = try ble(["bench", "--scale", "connections", "--sizes", "5,10", "--each", "20"])
        let sout = Pipe()
        s.standardOutput = sout
        try s.run()
        let sdata = sout.fileHandleForReading.readDataToEndOfFile()
        s.waitUntilExit()
        let runs = try #require(try lastJSON(sdata)["runs"] as? [[String: Any]])
        #expect(runs.map { $0["n"] as? Int } == [5, 10] && runs.allSatisfy { $0["connected_all"] as? Bool == true })
    }
}
