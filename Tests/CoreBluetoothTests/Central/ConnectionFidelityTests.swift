// Issue 15, connections and the device cache, through the Core Bluetooth API on the virtual radio: many
// pending connects at once (none times out, each cancellable), what didConnect sees (the final MTU, the
// services iOS discovers by itself), the reason of a failed connection, per-host random identifiers kept
// in a persistent cache, and peripherals released when the app no longer holds them.
import Foundation
import Testing
import TestSupport
import CoreBluetooth
import BLEHost
import BLEHCI
import BLEWire
import BLETransport
import BLEVirtualRadio

/// A central that records what it sees; it keeps discovered peripherals only when `keep` is set.
final class RecordingCentral: NSObject, CBCentralManagerDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "recording.central")
    var manager: CBCentralManager!
    var keep = true
    var on = false
    var discovered = 0
    var byName: [String: CBPeripheral] = [:]
    var connected: [String] = []
    var failed: [(String, Error?)] = []
    var disconnected: [(String, Error?)] = []
    /// What the app sees inside didConnect: maximumWriteValueLength(.withoutResponse), the identifiers
    /// retrieveConnectedPeripherals gives for `watchedService`, and whether `services` is still nil.
    var atConnect: [(writeLength: Int, retrieved: [UUID], servicesNil: Bool)] = []
    var watchedService = CBUUID(string: "180D")

    func name(_ p: CBPeripheral) -> String { byName.first { $0.value === p }?.key ?? p.identifier.uuidString }

    func centralManagerDidUpdateState(_ c: CBCentralManager) { on = c.state == .poweredOn }
    func centralManager(_ c: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
        discovered += 1
        if keep, let n = advertisementData[CBAdvertisementDataLocalNameKey] as? String { byName[n] = p }
    }
    func centralManager(_ c: CBCentralManager, didConnect p: CBPeripheral) {
        atConnect.append(
            (
                p.maximumWriteValueLength(for: .withoutResponse),
                c.retrieveConnectedPeripherals(withServices: [watchedService]).map(\.identifier), p.services == nil
            ))
        connected.append(name(p))
    }
    func centralManager(_ c: CBCentralManager, didFailToConnect p: CBPeripheral, error: Error?) { failed.append((name(p), error)) }
    func centralManager(_ c: CBCentralManager, didDisconnectPeripheral p: CBPeripheral, error: Error?) { disconnected.append((name(p), error)) }

    func start(on host: LEHost) async throws {
        manager = CBCentralManager(delegate: self, queue: queue, options: nil, host: host)
        try await waitUntil("central on") { queue.sync { on } }
    }

    /// Scans until every name was discovered.
    func find(_ names: [String]) async throws -> [CBPeripheral] {
        queue.sync { manager.scanForPeripherals(withServices: nil) }
        try await waitUntil("found \(names)") { queue.sync { names.allSatisfy { byName[$0] != nil } } }
        queue.sync { manager.stopScan() }
        return queue.sync { names.map { byName[$0]! } }
    }
}

/// A peripheral manager publishing one service and advertising `name`.
final class PublishingPeripheral: NSObject, CBPeripheralManagerDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "publishing.peripheral")
    var manager: CBPeripheralManager!
    let log = EventLog()
    func peripheralManagerDidUpdateState(_ p: CBPeripheralManager) { log.add("state:\(p.state.rawValue)") }
    func peripheralManager(_ p: CBPeripheralManager, didAdd s: CBService, error: Error?) {
        log.add("added:\(s.uuid.uuidString):\(error.map { "\(($0 as NSError).code)" } ?? "ok")")
    }

    static func start(_ air: TestAir, name: String, service: CBUUID) async throws -> PublishingPeripheral {
        let p = PublishingPeripheral()
        p.manager = CBPeripheralManager(delegate: p, queue: p.queue, options: nil, host: try air.host(name))
        try await waitUntil("peripheral on") { p.log.contains("state:5") }
        let s = CBMutableService(type: service, primary: true)
        s.characteristics = [CBMutableCharacteristic(type: CBUUID(string: "2A37"), properties: [.notify], value: nil, permissions: [])]
        p.queue.sync { p.manager.add(s) }
        try await waitUntil("added") { p.log.contains("added:") }
        p.queue.sync { p.manager.startAdvertising([CBAdvertisementDataLocalNameKey: name]) }
        return p
    }
}

@Suite(.serialized) struct ConnectionFidelityTests {
    /// Three connects pending at once: none times out or fails; the last one asked connects as soon as its
    /// device is back even though the first still waits (the controller waits for all of them through its
    /// filter accept list); a cancelled one reads `.disconnected` at once, hears didDisconnect with a nil
    /// error, and never connects.
    @Test func manyPendingConnectsNoneTimesOutEachCancellable() async throws {
        let air = TestAir()
        let names = ["PA", "PB", "PC"]
        var hosts: [String: LEHost] = [:]
        for n in names { hosts[n] = try advertiser(air, name: n.lowercased(), data: ad(n)) }
        let c = RecordingCentral()
        let central = try air.host("central")
        central.loop.sync { central.connectRotationInterval = .seconds(1000) }   // turns would be too slow: the accept list it is
        try await c.start(on: central)
        let ps = try await c.find(names)
        for h in hosts.values { h.loop.sync { h.stopAdvertising() } }
        c.queue.sync { for p in ps { c.manager.connect(p) } }
        try await pause(nanoseconds: 1_000_000_000)
        #expect(ps.allSatisfy { $0.state == .connecting })
        #expect(c.queue.sync { c.connected.isEmpty && c.failed.isEmpty && c.disconnected.isEmpty })
        #expect(central.loop.sync { Set(central.pendingConnections.map(\.string)) }.count == 3)

        // Cancel the second: .disconnected at once, then didDisconnect(nil).
        let stateAfterCancel = c.queue.sync { () -> CBPeripheralState in
            c.manager.cancelPeripheralConnection(ps[1])
            return ps[1].state
        }
        #expect(stateAfterCancel == .disconnected)
        try await waitUntil("cancel announced") { c.queue.sync { c.disconnected.count } == 1 }
        #expect(c.queue.sync { c.disconnected[0].0 == "PB" && c.disconnected[0].1 == nil })

        // The last one asked comes back first and connects while the first still waits.
        hosts["PC"]!.loop.sync { hosts["PC"]!.startAdvertising(AdvertisingConfiguration(data: ad("PC"), interval: 0x20)) }
        try await waitUntil("PC connected") { c.queue.sync { c.connected } == ["PC"] }
        #expect(ps[0].state == .connecting)
        hosts["PA"]!.loop.sync { hosts["PA"]!.startAdvertising(AdvertisingConfiguration(data: ad("PA"), interval: 0x20)) }
        hosts["PB"]!.loop.sync { hosts["PB"]!.startAdvertising(AdvertisingConfiguration(data: ad("PB"), interval: 0x20)) }
        try await waitUntil("PA connected") { c.queue.sync { c.connected } == ["PC", "PA"] }
        try await pause(nanoseconds: 400_000_000)
        #expect(c.queue.sync { c.connected } == ["PC", "PA"])
        #expect(ps[1].state == .disconnected && c.queue.sync { c.failed.isEmpty })
        #expect(central.loop.sync { central.pendingConnections.isEmpty })
    }

    /// Inside didConnect the MTU exchange is over (maximumWriteValueLength is final) and the peripheral is
    /// found by retrieveConnectedPeripherals through the services iOS discovers by itself, while
    /// `services` stays nil until the app discovers them.
    @Test func didConnectSeesTheFinalMTUAndTheSystemDiscoveredServices() async throws {
        let air = TestAir()
        let service = CBUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")
        let per = try await PublishingPeripheral.start(air, name: "MTU", service: service)
        let c = RecordingCentral()
        c.watchedService = service
        try await c.start(on: try air.host("central"))
        let p = try #require(try await c.find(["MTU"]).first)
        c.queue.sync { c.manager.connect(p) }
        try await waitUntil("connected") { c.queue.sync { c.connected.count } == 1 }
        let seen = try #require(c.queue.sync { c.atConnect.first })
        // Both sides offer 517: min(517 - 3, 512).
        #expect(seen.writeLength == 512)
        #expect(seen.retrieved == [p.identifier])
        #expect(seen.servicesNil)
        // Later reads agree, and a service the peripheral lacks matches nothing.
        #expect(p.maximumWriteValueLength(for: .withoutResponse) == 512)
        #expect(c.manager.retrieveConnectedPeripherals(withServices: [CBUUID(string: "180F")]).isEmpty)
        _ = per
    }

    /// A failed connection says why: the HCI reason maps to the closest CBError code and stays in userInfo.
    @Test func failedConnectionsCarryTheirReason() {
        let cases: [(HCIStatus, CBError.Code)] = [
            (.connectionFailedToBeEstablished, .connectionFailed), (.connectionLimitExceeded, .connectionLimitReached),
            (.memoryCapacityExceeded, .outOfSpace), (.connectionTimeout, .connectionTimeout),
            (.remoteUserTerminated, .peripheralDisconnected), (.pinOrKeyMissing, .peerRemovedPairingInformation),
            (.unspecifiedError, .connectionFailed),
        ]
        for (status, code) in cases {
            let e = CBError.from(hciStatus: status, connecting: true)
            #expect(e.code == code, "\(status)")
            #expect((e.userInfo[CBHCIStatusKey] as? NSNumber)?.uint8Value == status.rawValue)
            #expect((e as NSError).localizedFailureReason?.contains(String(status.rawValue, radix: 16, uppercase: true)) == true)
        }
        #expect(CBError.from(hciStatus: .unspecifiedError, connecting: false).code == .unknown)
    }

    /// A link that drops while it is being set up (before didConnect) is a failed connection.
    @Test func aLinkLostBeforeDidConnectIsAFailedConnection() async throws {
        let air = TestAir()
        let per = try advertiser(air, name: "drop", data: ad("DROP"))
        // The peripheral drops every link as soon as it is made, before any ATT exchange can finish.
        final class Dropper: HostPeripheralDelegate {
            func host(_ host: LEHost, didConnect connection: HostConnection) { connection.disconnect(reason: .remoteUserTerminated) }
            func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {}
            func host(_ host: LEHost, didReceiveRead request: HostReadRequest) {}
            func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) {}
            func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {}
        }
        let dropper = Dropper()
        per.loop.sync { per.peripheralDelegate = dropper }
        let c = RecordingCentral()
        try await c.start(on: try air.host("central"))
        let p = try #require(try await c.find(["DROP"]).first)
        c.queue.sync { c.manager.connect(p) }
        try await waitUntil("failed") { c.queue.sync { c.failed.count } == 1 }
        let e = try #require(c.queue.sync { c.failed[0].1 } as? CBError)
        #expect(e.code == .peripheralDisconnected)
        #expect(c.queue.sync { c.connected.isEmpty && c.disconnected.isEmpty })
        #expect(p.state == .disconnected)
        _ = dropper
    }
}

@Suite(.serialized) struct DeviceCacheTests {
    /// Identifiers are random per host: two centrals see one device under two identifiers; one central
    /// sees it under the same identifier every time.
    @Test func identifiersAreRandomPerHostAndStableWithinOne() async throws {
        let air = TestAir()
        _ = try advertiser(air, name: "same", data: ad("SAME"))
        let a = RecordingCentral(), b = RecordingCentral()
        try await a.start(on: try air.host("a"))
        try await b.start(on: try air.host("b"))
        let pa = try #require(try await a.find(["SAME"]).first)
        let pb = try #require(try await b.find(["SAME"]).first)
        #expect(pa.identifier != pb.identifier)
        a.queue.sync { a.byName.removeAll() }
        let again = try #require(try await a.find(["SAME"]).first)
        #expect(again.identifier == pa.identifier)
        #expect(a.manager.retrievePeripherals(withIdentifiers: [UUID(), pa.identifier, pb.identifier]).map(\.identifier) == [pa.identifier])
    }

    /// "Remember the device, reconnect after relaunch": a controller with a state directory keeps its
    /// device cache on disk; a later manager on that controller retrieves the device by identifier (with
    /// its name) without scanning, and connects to it.
    @Test func aDeviceMetInAnEarlierRunIsRetrievedAndConnected() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ocb-devices-\(UUID().uuidString.prefix(8))")
        // Written out before the folder goes, so no coalesced save brings it back.
        defer { DeviceCache.flushAll(); try? FileManager.default.removeItem(at: dir) }
        let air = TestAir()
        let address = BluetoothAddress(bytes: [0x11, 0x22, 0x33, 0x44, 0x55, 0xC6])
        _ = try advertiser(air, name: "remembered", data: ad("REMEMBERED"))

        // First run: meet the device, connect (the GAP name is read), disconnect.
        let host1 = try HostFactory.makeHost(on: air.air, name: "run1", address: address)
        host1.loop.sync { host1.bondStoreDirectory = dir }
        var first: RecordingCentral? = RecordingCentral()
        try await first!.start(on: host1)
        let p = try #require(try await first!.find(["REMEMBERED"]).first)
        let id = p.identifier
        first!.queue.sync { first!.manager.connect(p) }
        try await waitUntil("connected") { first!.queue.sync { first!.connected.count } == 1 }
        try await waitUntil("GAP name") { p.name == "OpenCoreBluetooth" }
        first!.queue.sync { first!.manager.cancelPeripheralConnection(p) }
        try await waitUntil("disconnected") { first!.queue.sync { first!.disconnected.count } == 1 }
        let file = dir.appendingPathComponent("devices-\(address.string.replacingOccurrences(of: ":", with: "")).json")
        try await waitUntil("cache written") {
            ((try? String(contentsOf: file, encoding: .utf8)) ?? "").contains(id.uuidString)
                && ((try? String(contentsOf: file, encoding: .utf8)) ?? "").contains("OpenCoreBluetooth")
        }
        let mode = try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        first = nil
        host1.loop.sync { host1.powerOff() }
        air.air.remove(host1.transport as! VirtualController)

        // Second run: same controller, same directory, a new host and manager.
        let host2 = try HostFactory.makeHost(on: air.air, name: "run2", address: address)
        host2.loop.sync { host2.bondStoreDirectory = dir }
        let second = RecordingCentral()
        try await second.start(on: host2)
        let found = second.manager.retrievePeripherals(withIdentifiers: [UUID(), id])
        #expect(found.map(\.identifier) == [id])
        let q = try #require(found.first)
        #expect(q.name == "OpenCoreBluetooth")
        #expect(q.state == .disconnected)
        #expect(second.queue.sync { second.discovered } == 0)
        second.queue.sync {
            second.byName["REMEMBERED"] = q; second.manager.connect(q)
        }
        try await waitUntil("reconnected") { second.queue.sync { second.connected } == ["REMEMBERED"] }
        #expect(q.state == .connected)
    }

    /// Saving is coalesced, but nothing met is lost when the program ends at once: pending changes are
    /// written at exit (and by `flushAll`, which the exit handler runs).
    @Test func unsavedDevicesAreWrittenWhenFlushed() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ocb-devices-\(UUID().uuidString.prefix(8))")
        defer { DeviceCache.flushAll(); try? FileManager.default.removeItem(at: dir) }
        let air = TestAir()
        let host = try HostFactory.makeHost(on: air.air, name: "flush", address: BluetoothAddress(bytes: [0x21, 0x22, 0x23, 0x24, 0x25, 0xC6]))
        host.loop.sync {
            host.bondStoreDirectory = dir; host.powerOn()
        }
        try await waitUntil("on") { host.loop.sync { host.powerState == .on } }
        let cache = host.loop.sync { DeviceCache.of(host) }
        let id = cache.identifier(for: BluetoothAddress(bytes: [1, 2, 3, 4, 5, 6], type: .public))
        #expect(cache.hasUnsavedChanges)
        DeviceCache.flushAll()
        #expect(!cache.hasUnsavedChanges)
        let file = try #require(cache.file)
        #expect(try String(contentsOf: file, encoding: .utf8).contains(id.uuidString))
        host.loop.sync { host.powerOff() }
    }

    /// A long scan among ever-new addresses: peripherals the app does not keep are released, and the
    /// cache stays bounded.
    @Test func unreferencedPeripheralsAreReleasedDuringALongScan() async throws {
        let air = TestAir()
        let c = RecordingCentral()
        c.keep = false
        let host = try air.host("scanner")
        try await c.start(on: host)
        c.queue.sync { c.manager.scanForPeripherals(withServices: nil) }
        try await waitUntil("scanning") { host.loop.sync { host.isScanning } }
        let total = 3000
        var rng = SystemRandomNumberGenerator()
        for batch in 0..<(total / 100) {
            host.loop.sync {
                for _ in 0..<100 {
                    // Resolvable private addresses (top bits 0b01), a new one every time.
                    var bytes = (0..<6).map { _ in UInt8.random(in: 0...255, using: &rng) }
                    bytes[5] = (bytes[5] & 0x3F) | 0x40
                    c.manager.host(
                        host,
                        didReceive: AdvertisingReport(
                            kind: .connectableUndirected,
                            address: BluetoothAddress(bytes: bytes, type: .random),
                            data: ad("R\(batch)"), rssi: -60))
                }
            }
            // Paced as advertisements come over the air: each batch reaches the app before the next. Without
            // it the table's bound measured how far the delegate queue lagged (peripherals waiting in queued
            // callbacks are alive, and the sweep keeps twice the live count: 314 under stress-ng).
            try await waitUntil("batch \(batch) delivered") { c.queue.sync { c.discovered } == (batch + 1) * 100 }
        }
        let counts = c.manager.peripheralCounts
        #expect(counts.alive == 0)
        #expect(counts.stored < 200)
        let cached = try #require(c.manager.deviceCacheCount)
        #expect(cached <= 513)
    }
}

@Suite(.serialized) struct PeripheralManagerFidelityTests {
    /// An included service and its parent added back to back, without waiting for didAdd: both publish.
    @Test func addingAnIncludedServiceAndItsParentAtOnceWorks() async throws {
        let air = TestAir()
        let per = PublishingPeripheral()
        per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: try air.host("p"))
        try await waitUntil("on") { per.log.contains("state:5") }
        let inner = CBMutableService(type: CBUUID(string: "180A"), primary: false)
        let outer = CBMutableService(type: CBUUID(string: "1810"), primary: true)
        outer.includedServices = [inner]
        per.queue.sync {
            per.manager.add(inner); per.manager.add(outer)
        }
        try await waitUntil("both answered") { per.log.count("added:") == 2 }
        #expect(per.log.all.filter { $0.hasPrefix("added:") } == ["added:180A:ok", "added:1810:ok"])
        // The parent's database entry includes the child.
        let host = per.manager.leHostForTests
        let includes = host.loop.sync { host.gattServer.database.attributes(in: 1...0xFFFF).filter { $0.type == .include }.count }
        #expect(includes == 1)
    }

    /// willRestoreState only when something was saved for that identifier.
    @Test func willRestoreStateOnlyWhenSomethingWasSaved() async throws {
        _ = testStateDirectory
        let air = TestAir()
        final class D: NSObject, CBPeripheralManagerDelegate, @unchecked Sendable {
            let log = EventLog()
            func peripheralManagerDidUpdateState(_ p: CBPeripheralManager) { log.add("state:\(p.state.rawValue)") }
            func peripheralManager(_ p: CBPeripheralManager, willRestoreState dict: [String: Any]) { log.add("restore") }
            func peripheralManager(_ p: CBPeripheralManager, didAdd s: CBService, error: Error?) { log.add("added") }
        }
        let id = "nothing-\(UUID().uuidString.prefix(6))"
        let q = DispatchQueue(label: "restore")
        // A manager that advertised and stopped again leaves nothing to restore.
        let d1 = D()
        var m1: CBPeripheralManager? = CBPeripheralManager(delegate: d1, queue: q, options: [CBPeripheralManagerOptionRestoreIdentifierKey: id], host: try air.host("r1"))
        try await waitUntil("on") { d1.log.contains("state:5") }
        q.sync {
            m1!.startAdvertising([CBAdvertisementDataLocalNameKey: "R"]); m1!.stopAdvertising()
        }
        q.sync { m1 = nil }
        let d2 = D()
        var m2: CBPeripheralManager? = CBPeripheralManager(delegate: d2, queue: q, options: [CBPeripheralManagerOptionRestoreIdentifierKey: id], host: try air.host("r2"))
        try await waitUntil("on") { d2.log.contains("state:5") }
        try await pause(nanoseconds: 100_000_000)
        #expect(!d2.log.contains("restore"))
        // Something published is restored.
        q.sync { m2!.add(CBMutableService(type: CBUUID(string: "180F"), primary: true)) }
        try await waitUntil("added") { d2.log.contains("added") }
        q.sync { m2 = nil }
        let d3 = D()
        let m3 = CBPeripheralManager(delegate: d3, queue: q, options: [CBPeripheralManagerOptionRestoreIdentifierKey: id], host: try air.host("r3"))
        try await waitUntil("on") { d3.log.contains("state:5") }
        #expect(Array(d3.log.all.prefix(2)) == ["restore", "state:5"])
        _ = m3
    }
}

/// Delegate methods are dispatched through the class that adopts the protocol (Swift has no Objective-C
/// runtime on Linux to look them up by name): a subclass method is called when the adopting class
/// declares it too (and the subclass overrides it), which is the rule the README states.
@Suite struct DelegateSubclassTests {
    class Base: NSObject, CBCentralManagerDelegate, @unchecked Sendable {
        func centralManagerDidUpdateState(_ central: CBCentralManager) {}
        func centralManager(
            _ central: CBCentralManager, didDiscover peripheral: CBPeripheral,
            advertisementData: [String: Any], rssi RSSI: NSNumber
        ) {}
    }
    final class Sub: Base, @unchecked Sendable {
        let queue = DispatchQueue(label: "sub")
        var state: CBManagerState?
        var discovered = 0
        override func centralManagerDidUpdateState(_ central: CBCentralManager) { state = central.state }
        override func centralManager(
            _ central: CBCentralManager, didDiscover peripheral: CBPeripheral,
            advertisementData: [String: Any], rssi RSSI: NSNumber
        ) { discovered += 1 }
    }

    @Test func aSubclassOverrideOfADeclaredMethodIsCalled() async throws {
        let air = TestAir()
        _ = try advertiser(air, name: "sub", data: ad("SUB"))
        let d = Sub()
        let m = CBCentralManager(delegate: d, queue: d.queue, options: nil, host: try air.host("c"))
        try await waitUntil("on") { d.queue.sync { d.state == .poweredOn } }
        d.queue.sync { m.scanForPeripherals(withServices: nil) }
        try await waitUntil("discovered") { d.queue.sync { d.discovered } > 0 }
    }
}

/// A controller the operating system refuses (EPERM/EACCES): the manager reads `.unauthorized` and the
/// process's authorization `.denied`, not `.unsupported`. The authorization is the process's, so these
/// tests hold `ProcessGate.authorization` (SimulateOperationTests asserts it too).
@Suite struct AuthorizationTests {
    final class RefusedTransport: HCITransport, @unchecked Sendable {
        let opens = Locked(0)
        func open(sink: any HCITransportSink) throws {
            opens.withLock { $0 += 1 }
            throw TransportError.permissionDenied("hci-socket:9: the HCI user channel needs CAP_NET_ADMIN")
        }
        func send(_ packet: HCIPacket) {}
        func close() {}
        var name: String { "refused" }
    }

    final class D: NSObject, CBCentralManagerDelegate, @unchecked Sendable {
        var states: [CBManagerState] = []
        func centralManagerDidUpdateState(_ c: CBCentralManager) { states.append(c.state) }
    }

    @Test func permissionFailuresReadAsUnauthorizedAndDenied() async throws {
        try await ProcessGate.authorization.run {
            let loop = EventLoop(label: "refused")
            let host = LEHost(transport: RefusedTransport(), loop: loop, name: "refused")
            host.loop.sync { host.reconnectInterval = nil }
            let c = RecordingCentral()
            let d = D()
            var m: CBCentralManager? = CBCentralManager(delegate: d, queue: c.queue, options: nil, host: host)
            try await waitUntil("state") { c.queue.sync { !d.states.isEmpty } }
            let states = c.queue.sync { d.states }
            #expect(states == [.unauthorized])
            #expect(m?.state == .unauthorized)
            #expect(CBManager.authorization == .denied)
            c.queue.sync { m = nil }
            try await waitUntil("released") { CBManager.authorization == .allowedAlways }
            // The host let the controller go with its last manager (.off); the next manager is refused again,
            // not told .poweredOff.
            try await waitUntil("host off") { host.loop.sync { host.powerState == .off } }
            let d2 = D()
            var again: CBCentralManager? = CBCentralManager(delegate: d2, queue: c.queue, options: nil, host: host)
            try await waitUntil("state again") { c.queue.sync { !d2.states.isEmpty } }
            #expect(c.queue.sync { d2.states } == [.unauthorized])
            #expect(again?.state == .unauthorized && CBManager.authorization == .denied)
            // The gate's next holder finds the process allowed again.
            c.queue.sync { again = nil }
            try await waitUntil("released again") { CBManager.authorization == .allowedAlways }
        }
    }

    /// The host tries a refused controller again every `reconnectInterval`. Each attempt is no news: the
    /// process stays `.denied` through it (it read `.allowedAlways` for each attempt's moment).
    @Test func retriesOfARefusedControllerDoNotLiftTheDenial() async throws {
        try await ProcessGate.authorization.run {
            let transport = RefusedTransport()
            let host = LEHost(transport: transport, loop: EventLoop(label: "refused-retrying"), name: "refused")
            host.loop.sync { host.reconnectInterval = .milliseconds(10) }
            let c = RecordingCentral()
            let d = D()
            var m: CBCentralManager? = CBCentralManager(delegate: d, queue: c.queue, options: nil, host: host)
            try await waitUntil("state") { c.queue.sync { !d.states.isEmpty } }
            // Observed after the manager's own observer, at each attempt.
            let duringAttempts = Locked<[CBManagerAuthorization]>([])
            let observer = host.loop.sync {
                host.addPowerObserver { s in
                    if s == .starting { duringAttempts.withLock { $0.append(CBManager.authorization) } }
                }
            }
            try await waitUntil("three attempts") { duringAttempts.withLock { $0.count } >= 3 }
            #expect(duringAttempts.withLock { $0 }.allSatisfy { $0 == .denied }, "\(duringAttempts.withLock { $0 })")
            #expect(c.queue.sync { d.states } == [.unauthorized], "each attempt is no news to the app")
            host.loop.sync { host.removePowerObserver(observer) }
            c.queue.sync { m = nil }
            try await waitUntil("released") { CBManager.authorization == .allowedAlways }
        }
    }

    /// A manager that is gone leaves its observer with its host, which still hears the host's power
    /// changes. A newer manager at the gone one's address (the allocator gives it back at once) is refused
    /// its controller; the old host then goes off, and the process still reads `.denied`. (The process was
    /// filed by the manager's address: the old observer's "not refused" took the new manager's entry away.)
    @Test func aGoneManagersHostDoesNotSpeakForANewManagerAtItsAddress() async throws {
        try await ProcessGate.authorization.run {
            let air = TestAir()
            let working = try air.host("working")
            let refused = LEHost(transport: RefusedTransport(), loop: EventLoop(label: "refused-reuse"), name: "refused")
            refused.loop.sync { refused.reconnectInterval = nil }
            let c = RecordingCentral()
            // Keeps the working host on when the first manager goes.
            let keeper = CBCentralManager(delegate: nil, queue: c.queue, options: nil, host: working)
            var reused: (CBCentralManager, D)?
            for _ in 0..<200 where reused == nil {
                let d = D()
                var first: CBCentralManager? = CBCentralManager(delegate: d, queue: c.queue, options: nil, host: working)
                try await waitUntil("on") { c.queue.sync { d.states.contains(.poweredOn) } }
                let address = ObjectIdentifier(first!)
                weak let gone = first
                // Released and its successor made with nothing in between, so the allocator can hand the
                // address straight back.
                let next: CBCentralManager? = c.queue.sync { () -> CBCentralManager? in
                    first = nil
                    guard gone == nil else { return nil }
                    let d2 = D()
                    let second = CBCentralManager(delegate: d2, queue: c.queue, options: nil, host: refused)
                    if ObjectIdentifier(second) == address { reused = (second, d2) }
                    return second
                }
                _ = next
                if gone != nil { try await waitUntil("gone") { gone == nil } }
            }
            guard let d = reused?.1 else {
                Issue.record("no manager was made at a gone manager's address in 200 tries")
                return
            }
            try await waitUntil("refused") { c.queue.sync { d.states.contains(.unauthorized) } }
            #expect(CBManager.authorization == .denied)
            working.loop.sync { working.powerOff() }
            #expect(working.loop.sync { CBManager.authorization } == .denied)
            #expect(reused?.0.state == .unauthorized)
            _ = keeper
            // The gate's next holder finds the process allowed again.
            reused = nil
            try await waitUntil("released") { CBManager.authorization == .allowedAlways }
        }
    }
}
