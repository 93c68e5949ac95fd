// Every ATT error a peripheral can answer reaches the central as a CBATTError with Apple's code and
// domain, application errors (0x80–0x9F) included; connection events.
import Foundation
import Testing
import CoreBluetooth

@Suite(.serialized) struct CentralErrorTests {
    @Test func everyATTErrorReachesTheApp() async throws {
        let air = TestAir()
        let (per, cen, _) = try await connectedPair(air, name: "errors")
        let p = try #require(cen.peripheral)
        let ch = try #require(cen.characteristic(dynamicUUID.uuidString))
        let codes: [Int] = Array(0x01...0x11) + [0x80, 0x9F, 0xF2]
        for code in codes {
            per.queue.sync { per.onRead = { m, r in m.respond(to: r, withResult: CBATTError.Code(rawValue: code)) } }
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
        q.sync { m.stopScan(); m.registerForConnectionEvents(options: [.peripheralUUIDs: [p.identifier]]); m.connect(p) }
        try await waitUntil("connected") { p.state == .connected }
        q.sync { m.cancelPeripheralConnection(p) }
        try await waitUntil("events") { q.sync { d.events.count } == 2 }
        #expect(q.sync { d.events.map(\.0) } == [.peerConnected, .peerDisconnected])
        // Unregistered (nil): no more events.
        q.sync { m.registerForConnectionEvents(options: nil); m.connect(p) }
        try await waitUntil("connected again") { p.state == .connected }
        try await Task.sleep(nanoseconds: 50_000_000)
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
        q.sync { m.stopScan(); m.connect(p, options: [CBConnectPeripheralOptionEnableAutoReconnect: true]) }
        try await waitUntil("connected") { q.sync { d.connects } == 1 }
        // The peripheral drops the link; it keeps advertising, so the system connects again.
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
