// Every ATT error a peripheral can answer reaches the central as a CBATTError with Apple's code and
// domain, application errors (0x80–0x9F) included; connection events.
import Foundation
import Testing
import TestSupport
import CoreBluetooth

@Suite(.serialized) struct CentralErrorTests {
    @Test func everyATTErrorReachesTheApp() async throws {
        let air = TestAir()
        let (per, cen, _) = try await connectedPair(air, name: "errors")
        let p = try #require(cen.peripheral)
        let ch = try #require(cen.characteristic(dynamicUUID.uuidString))
        let codes: [Int] = Array(0x01...0x11) + [0x80, 0x9F, 0xF2]
        for code in codes {
            per.queue.sync { per.onRead = { m, r in m.respond(to: r, withResult: CBATTError.Code(rawValue: code)!) } }
            cen.queue.sync { cen.errors.removeAll() }
            cen.queue.sync { p.readValue(for: ch) }
            try await waitUntil("error \(code)") { cen.queue.sync { cen.errors[dynamicUUID.uuidString] } != nil }
            let e = try #require(cen.queue.sync { cen.errors[dynamicUUID.uuidString] })
            #expect((e as NSError).domain == CBATTErrorDomain, "code \(code)")
            #expect((e as NSError).code == code, "code \(code)")
            #expect((e as? CBATTError)?.code.rawValue == code)
        }
    }

    @Test func connectionEventsForRegisteredPeripherals() async throws {
        let air = TestAir()
        final class Events: NSObject, CBCentralManagerDelegate, @unchecked Sendable {
            var on = false
            var events: [(CBConnectionEvent, UUID)] = []
            var found: CBPeripheral?
            func centralManagerDidUpdateState(_ c: CBCentralManager) { on = c.state == .poweredOn }
            func centralManager(_ c: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
                if found == nil, advertisementData[CBAdvertisementDataLocalNameKey] as? String == "EV" { found = p }
            }
            func centralManager(_ c: CBCentralManager, connectionEventDidOccur event: CBConnectionEvent, for p: CBPeripheral) {
                events.append((event, p.identifier))
            }
        }
        _ = try advertiser(air, name: "ev", data: ad("EV"))
        let d = Events()
        let q = DispatchQueue(label: "events")
        let m = CBCentralManager(delegate: d, queue: q, options: nil, host: try air.host("c"))
        try await waitUntil("on") { q.sync { d.on } }
        q.sync { m.scanForPeripherals(withServices: nil) }
        try await waitUntil("found") { q.sync { d.found != nil } }
        let p = try #require(q.sync { d.found })
        q.sync {
            m.stopScan(); m.registerForConnectionEvents(options: [.peripheralUUIDs: [p.identifier]]); m.connect(p)
        }
        try await waitUntil("connected") { p.state == .connected }
        q.sync { m.cancelPeripheralConnection(p) }
        try await waitUntil("events") { q.sync { d.events.count } == 2 }
        #expect(q.sync { d.events.map(\.0) } == [.peerConnected, .peerDisconnected])
        // Unregistered (nil): no more events.
        q.sync {
            m.registerForConnectionEvents(options: nil); m.connect(p)
        }
        try await waitUntil("connected again") { p.state == .connected }
        try await pause(nanoseconds: 50_000_000)
        #expect(q.sync { d.events.count } == 2)
    }
}

@Suite(.serialized) struct AutoReconnectTests {
    @Test func enableAutoReconnectReconnectsAfterALostLink() async throws {
        let air = TestAir()
        final class D: NSObject, CBCentralManagerDelegate, @unchecked Sendable {
            var on = false
            var found: CBPeripheral?
            var connects = 0
            var disconnects: [(Bool, Error?)] = []
            func centralManagerDidUpdateState(_ c: CBCentralManager) { on = c.state == .poweredOn }
            func centralManager(_ c: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
                if found == nil, advertisementData[CBAdvertisementDataLocalNameKey] as? String == "AR" { found = p }
            }
            func centralManager(_ c: CBCentralManager, didConnect p: CBPeripheral) { connects += 1 }
            func centralManager(_ c: CBCentralManager, didDisconnectPeripheral p: CBPeripheral, timestamp: CFAbsoluteTime, isReconnecting: Bool, error: Error?) {
                disconnects.append((isReconnecting, error))
            }
        }
        let adv = try advertiser(air, name: "ar", data: ad("AR"))
        let d = D()
        let q = DispatchQueue(label: "autoreconnect")
        let m = CBCentralManager(delegate: d, queue: q, options: nil, host: try air.host("c"))
        try await waitUntil("on") { q.sync { d.on } }
        q.sync { m.scanForPeripherals(withServices: nil) }
        try await waitUntil("found") { q.sync { d.found != nil } }
        let p = try #require(q.sync { d.found })
        q.sync {
            m.stopScan(); m.connect(p, options: [CBConnectPeripheralOptionEnableAutoReconnect: true])
        }
        try await waitUntil("connected") { q.sync { d.connects } == 1 }
        // The peripheral drops the link; it keeps advertising, so the system connects again. The delegate
        // queue is busy meanwhile, so the link is back before the app hears of the loss (a busy app, or a
        // loaded machine): the reconnection must not be taken for a cancelled connection.
        q.async { usleep(400_000) }
        adv.loop.sync { for (h, _) in adv.connections { adv.disconnect(handle: h) } }
        try await waitUntil("reconnected") { q.sync { d.connects } == 2 }
        let first = try #require(q.sync { d.disconnects.first })
        #expect(first.0 == true)
        #expect((first.1 as? CBError)?.code == .peripheralDisconnected)
        #expect(p.state == .connected)
        // A local cancel ends it for good: isReconnecting false, error nil.
        q.sync { m.cancelPeripheralConnection(p) }
        try await waitUntil("cancelled") { q.sync { d.disconnects.count } == 2 }
        #expect(q.sync { d.disconnects[1].0 } == false && q.sync { d.disconnects[1].1 } == nil)
    }
}

@Suite(.serialized) struct CentralRestorationTests {
    @Test func restoredCentralGetsItsPeripheralsAndScanBack() async throws {
        _ = testStateDirectory
        let air = TestAir()
        _ = try advertiser(air, name: "rs", data: ad("RS", [3, 3, 0x0D, 0x18]))
        final class D: NSObject, CBCentralManagerDelegate, @unchecked Sendable {
            var order: [String] = []
            var restored: [String: Any] = [:]
            var found: CBPeripheral?
            func centralManager(_ c: CBCentralManager, willRestoreState dict: [String: Any]) { restored = dict; order.append("restore") }
            func centralManagerDidUpdateState(_ c: CBCentralManager) { order.append("state:\(c.state.rawValue)") }
            func centralManager(_ c: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
                if found == nil { found = p }
            }
            func centralManager(_ c: CBCentralManager, didConnect p: CBPeripheral) { order.append("connected") }
        }
        let id = "central-\(UUID().uuidString.prefix(6))"
        let first = D()
        let q1 = DispatchQueue(label: "first")
        var m1: CBCentralManager? = CBCentralManager(delegate: first, queue: q1, options: [CBCentralManagerOptionRestoreIdentifierKey: id], host: try air.host("c1"))
        try await waitUntil("on") { q1.sync { first.order.contains("state:5") } }
        q1.sync { m1!.scanForPeripherals(withServices: [CBUUID(string: "180D")]) }
        try await waitUntil("found") { q1.sync { first.found != nil } }
        let p1 = try #require(q1.sync { first.found })
        q1.sync { m1!.connect(p1) }
        try await waitUntil("connected") { q1.sync { first.order.contains("connected") } }
        q1.sync { m1 = nil }

        let second = D()
        let q2 = DispatchQueue(label: "second")
        let m2 = CBCentralManager(delegate: second, queue: q2, options: [CBCentralManagerOptionRestoreIdentifierKey: id], host: try air.host("c2"))
        try await waitUntil("reconnected") { q2.sync { second.order.contains("connected") } }
        #expect(q2.sync { Array(second.order.prefix(2)) } == ["restore", "state:5"])
        let peripherals = try #require(q2.sync { second.restored[CBCentralManagerRestoredStatePeripheralsKey] } as? [CBPeripheral])
        #expect(peripherals.map(\.identifier) == [p1.identifier])
        #expect(q2.sync { second.restored[CBCentralManagerRestoredStateScanServicesKey] } as? [CBUUID] == [CBUUID(string: "180D")])
        #expect(m2.isScanning)
        #expect(peripherals[0].state == .connected)
    }
}

@Suite(.serialized) struct CentralModelTests {
    @Test func servicesMergeWithoutDuplicatesAndConnectedRetrieval() async throws {
        let air = TestAir()
        let (per, cen, _) = try await connectedPair(air, name: "merge")
        defer { withExtendedLifetime(per) {} }   // the peripheral's manager (and host) live as long as the test
        let p = try #require(cen.peripheral)
        let before = try #require(p.services)
        final class Once: NSObject, CBPeripheralDelegate, @unchecked Sendable {
            var done = 0
            func peripheral(_ p: CBPeripheral, didDiscoverServices error: Error?) { done += 1 }
        }
        let once = Once()
        p.delegate = once
        cen.queue.sync {
            p.discoverServices(nil); p.discoverServices([CBUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")])
        }
        try await waitUntil("rediscovered") { cen.queue.sync { once.done } == 2 }
        let after = try #require(p.services)
        // The same objects, no duplicates, and their characteristics kept.
        #expect(after.count == before.count)
        #expect(zip(after, before).allSatisfy { $0 === $1 })
        #expect(after.last?.characteristics?.count == 5)
        #expect(cen.manager.retrieveConnectedPeripherals(withServices: [CBUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")]).map(\.identifier) == [p.identifier])
        #expect(cen.manager.retrieveConnectedPeripherals(withServices: [CBUUID(string: "180F")]).isEmpty)
        #expect(CBCentralManager.supports([]))
        #expect(p.description.hasPrefix("<CBPeripheral: 0x") && p.description.contains("state = connected"))
    }
}
