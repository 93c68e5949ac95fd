// One controller, many managers (issue 15): managers on one host share it with both roles at once, as an
// iPhone's managers share the phone's controller; on a real transport every manager of the process gets
// the same host, while the virtual radio keeps one device per manager unless given the same host.
import Foundation
import Testing
import TestSupport
import CoreBluetooth
import BLEHost
import BLETransport
import BLEVirtualRadio

@Suite(.serialized) struct SharedHostTests {
    /// Two devices, each a central and a peripheral manager on one host: each central connects to the other
    /// device's peripheral manager, so every host has a link in each role, and both links carry GATT.
    @Test func bothRolesAtOnceOnOneHost() async throws {
        let air = TestAir()
        let hostA = try air.host("A"), hostB = try air.host("B")
        let serviceA = CBUUID(string: "A0A0"), serviceB = CBUUID(string: "B0B0")
        var peripherals: [PublishingPeripheral] = []
        for (host, name, service) in [(hostA, "DEV-A", serviceA), (hostB, "DEV-B", serviceB)] {
            let p = PublishingPeripheral()
            p.manager = CBPeripheralManager(delegate: p, queue: p.queue, options: nil, host: host)
            try await waitUntil("peripheral on") { p.log.contains("state:5") }
            let s = CBMutableService(type: service, primary: true)
            s.characteristics = [CBMutableCharacteristic(type: CBUUID(string: "2A19"), properties: [.read], value: Data([42]), permissions: [.readable])]
            p.queue.sync { p.manager.add(s) }
            try await waitUntil("added") { p.log.contains("added:") }
            p.queue.sync { p.manager.startAdvertising([CBAdvertisementDataLocalNameKey: name]) }
            peripherals.append(p)
        }
        let centralA = RecordingCentral(), centralB = RecordingCentral()
        centralA.watchedService = serviceB
        centralB.watchedService = serviceA
        try await centralA.start(on: hostA)
        try await centralB.start(on: hostB)
        // The hosts are shared, not duplicated: one device each on the air.
        #expect(air.air.loop.sync { hostA.powerState == .on && hostB.powerState == .on })
        let pB = try #require(try await centralA.find(["DEV-B"]).first)
        let pA = try #require(try await centralB.find(["DEV-A"]).first)
        // A central never finds its own host's peripheral manager: it is the same device.
        #expect(centralA.queue.sync { centralA.byName["DEV-A"] } == nil)
        centralA.queue.sync { centralA.manager.connect(pB) }
        centralB.queue.sync { centralB.manager.connect(pA) }
        try await waitUntil("both connected") { centralA.queue.sync { centralA.connected.count } == 1 && centralB.queue.sync { centralB.connected.count } == 1 }
        // Each link found the other device's service (the system discovery before didConnect).
        #expect(centralA.queue.sync { centralA.atConnect[0].retrieved } == [pB.identifier])
        #expect(centralB.queue.sync { centralB.atConnect[0].retrieved } == [pA.identifier])
        // Each host has two links, one per role.
        let rolesA = hostA.loop.sync { hostA.connections.values.map { $0.role == .central ? "central" : "peripheral" }.sorted() }
        #expect(rolesA == ["central", "peripheral"])
        // GATT over both links: read the other side's cached value.
        final class Reader: NSObject, CBPeripheralDelegate, @unchecked Sendable {
            var value: Data?
            func peripheral(_ p: CBPeripheral, didDiscoverServices error: Error?) {
                for s in p.services ?? [] { p.discoverCharacteristics(nil, for: s) }
            }
            func peripheral(_ p: CBPeripheral, didDiscoverCharacteristicsFor s: CBService, error: Error?) {
                for c in s.characteristics ?? [] where c.uuid == CBUUID(string: "2A19") { p.readValue(for: c) }
            }
            func peripheral(_ p: CBPeripheral, didUpdateValueFor c: CBCharacteristic, error: Error?) { value = c.value }
        }
        let ra = Reader(), rb = Reader()
        centralA.queue.sync {
            pB.delegate = ra; pB.discoverServices([serviceB])
        }
        centralB.queue.sync {
            pA.delegate = rb; pA.discoverServices([serviceA])
        }
        try await waitUntil("values") { centralA.queue.sync { ra.value } == Data([42]) && centralB.queue.sync { rb.value } == Data([42]) }
        _ = peripherals
    }

    /// Two centrals on one host scan independently: stopping one does not stop the other; releasing every
    /// manager powers the host off, releasing one does not.
    @Test func twoCentralsShareTheScanAndTheHost() async throws {
        let air = TestAir()
        let adv = try advertiser(air, name: "adv", data: ad("SHARED"))
        let host = try air.host("two")
        var one: RecordingCentral? = RecordingCentral()
        let two = RecordingCentral()
        try await one!.start(on: host)
        try await two.start(on: host)
        _ = try await one!.find(["SHARED"])   // find() stops one's scan when done
        two.queue.sync { two.manager.scanForPeripherals(withServices: nil, options: [CBCentralManagerScanOptionAllowDuplicatesKey: true]) }
        one!.queue.sync { one!.manager.scanForPeripherals(withServices: nil) }
        one!.queue.sync { one!.manager.stopScan() }
        let before = two.queue.sync { two.discovered }
        try await pause(nanoseconds: 300_000_000)
        #expect(two.queue.sync { two.discovered } > before)
        #expect(host.loop.sync { host.isScanning })
        one = nil
        try await pause(nanoseconds: 100_000_000)
        #expect(host.loop.sync { host.powerState } == .on)
        two.queue.sync { two.manager.stopScan() }
        #expect(host.loop.sync { host.isScanning } == false)
        // The last manager gone: the host is powered off.
        two.queue.sync { two.manager = nil }
        try await waitUntil("host off") { host.loop.sync { host.powerState } == .off }
        _ = adv
    }

    /// retrieveConnectedPeripherals finds links other managers of the process made on the same controller
    /// (iOS: links of the system and other apps), as this manager's own peripheral object, disconnected
    /// for it until it connects.
    @Test func connectedRetrievalSeesTheOtherManagersLinks() async throws {
        let air = TestAir()
        let service = CBUUID(string: "C0C0")
        let per = try await PublishingPeripheral.start(air, name: "LINKED", service: service)
        let host = try air.host("shared")
        let first = RecordingCentral(), second = RecordingCentral()
        try await first.start(on: host)
        try await second.start(on: host)
        let p = try #require(try await first.find(["LINKED"]).first)
        #expect(second.manager.retrieveConnectedPeripherals(withServices: [service]).isEmpty)
        first.queue.sync { first.manager.connect(p) }
        try await waitUntil("connected") { first.queue.sync { first.connected.count } == 1 }
        let seen = second.manager.retrieveConnectedPeripherals(withServices: [service])
        #expect(seen.map(\.identifier) == [p.identifier])
        #expect(seen.first !== p && seen.first?.state == .disconnected)
        #expect(second.manager.retrieveConnectedPeripherals(withServices: [CBUUID(string: "180F")]).isEmpty)
        // Connecting it shares the first manager's link, as iOS does for two apps (issue 21).
        let mine = try #require(seen.first)
        second.queue.sync {
            second.byName["LINKED"] = mine; second.manager.connect(mine)
        }
        try await waitUntil("shared") { second.queue.sync { second.connected.count } == 1 }
        #expect(second.queue.sync { second.failed.isEmpty })
        #expect(p.state == .connected && mine.state == .connected)
        #expect(host.loop.sync { host.connections.count } == 1)
        _ = per
    }

    /// On a real transport (here TCP to a radio server) every caller gets the process's one host; the
    /// virtual radio makes a device per caller.
    @Test func realTransportsShareOneHostPerProcess() async throws {
        let air = VirtualAir(loop: EventLoop(label: "shared.tcp", clock: .real))
        let server = try RadioServer(air: air, port: 0)
        server.start()
        defer { server.stop() }
        _ = testStateDirectory   // a real transport keeps its state (device cache, bonds) on disk: in the test's folder
        let spec = TransportSpec.tcpClient(host: "127.0.0.1", port: server.port)
        let h1 = try HostFactory.sharedHost(spec: spec)
        let h2 = try HostFactory.sharedHost(spec: spec)
        #expect(h1 === h2)
        let v1 = try HostFactory.sharedHost(spec: .virtual), v2 = try HostFactory.sharedHost(spec: .virtual)
        #expect(v1 !== v2)
        let c = RecordingCentral()
        let p = PublishingPeripheral()
        p.manager = CBPeripheralManager(delegate: p, queue: p.queue, options: nil, host: h2)
        try await c.start(on: h1)
        try await waitUntil("peripheral on") { p.log.contains("state:5") }
        // One TCP connection: one controller on the server's air for both managers.
        try await waitUntil("one connection") { server.connectionCount == 1 }
        #expect(server.connectionCount == 1)
    }
}
