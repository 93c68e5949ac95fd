// CBCentralManager and CBPeripheral against advertisers with hand-made data and our own peripheral manager:
// scan filters (including UUIDs only in the scan response, and solicitations), duplicates, advertisement
// dictionary, pending connections, cancels, identifiers, names, RSSI, write flow control, CCCD refusal.
import Foundation
import Testing
import TestSupport
import CoreBluetooth
import BLEHost
import BLETransport
import BLEVirtualRadio

final class Scanner: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "central.tests")
    var manager: CBCentralManager!
    var on = false
    var discoveries: [(CBPeripheral, [String: Any], NSNumber)] = []
    var connected: [CBPeripheral] = []
    var failed: [(CBPeripheral, Error?)] = []
    var disconnected: [(CBPeripheral, Error?)] = []
    var rssi: [NSNumber] = []
    var names: [String?] = []
    var ready = 0
    var descriptorWrites: [Error?] = []

    func centralManagerDidUpdateState(_ c: CBCentralManager) { on = c.state == .poweredOn }
    func centralManager(_ c: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
        discoveries.append((p, advertisementData, rssi))
    }
    func centralManager(_ c: CBCentralManager, didConnect p: CBPeripheral) { connected.append(p); p.delegate = self }
    func centralManager(_ c: CBCentralManager, didFailToConnect p: CBPeripheral, error: Error?) { failed.append((p, error)) }
    func centralManager(_ c: CBCentralManager, didDisconnectPeripheral p: CBPeripheral, error: Error?) { disconnected.append((p, error)) }
    func peripheral(_ p: CBPeripheral, didReadRSSI RSSI: NSNumber, error: Error?) { rssi.append(RSSI) }
    func peripheralDidUpdateName(_ p: CBPeripheral) { names.append(p.name) }
    func peripheralIsReady(toSendWriteWithoutResponse p: CBPeripheral) { ready += 1 }
    func peripheral(_ p: CBPeripheral, didWriteValueFor d: CBDescriptor, error: Error?) { descriptorWrites.append(error) }

    func names(of d: [(CBPeripheral, [String: Any], NSNumber)]) -> [String] { d.compactMap { $0.1[CBAdvertisementDataLocalNameKey] as? String } }
}

/// An advertiser with exactly these bytes.
func advertiser(_ air: TestAir, name: String, data: [UInt8], scanResponse: [UInt8] = [], connectable: Bool = true) throws -> LEHost {
    let h = try air.host(name)
    try waitBlocking {
        h.loop.sync {
            h.powerOn(); return true
        }
    }
    try waitBlocking { h.loop.sync { h.powerState == .on } }
    h.loop.sync { h.startAdvertising(AdvertisingConfiguration(data: data, scanResponse: scanResponse, connectable: connectable, interval: 0x20)) }
    return h
}

func waitBlocking(_ cond: () -> Bool) throws {
    let deadline = Date().addingTimeInterval(5)
    while !cond() {
        if Date() > deadline { throw TimedOut(what: "condition") }
        usleep(1000)
    }
}

func ad(_ name: String, _ extra: [UInt8] = []) -> [UInt8] { [2, 1, 6, UInt8(name.utf8.count + 1), 0x09] + Array(name.utf8) + extra }

func startScanner(_ air: TestAir) async throws -> Scanner {
    let s = Scanner()
    s.manager = CBCentralManager(delegate: s, queue: s.queue, options: nil, host: try air.host("scanner"))
    try await waitUntil("on") { s.queue.sync { s.on } }
    return s
}

@Suite(.serialized) struct CentralScanTests {
    @Test func filtersByServiceIncludingScanResponseAndSolicitations() async throws {
        let air = TestAir()
        _ = try advertiser(air, name: "a", data: ad("HR", [3, 3, 0x0D, 0x18]))
        _ = try advertiser(air, name: "b", data: ad("BAT"), scanResponse: [3, 3, 0x0F, 0x18])   // 180F only in the scan response
        _ = try advertiser(air, name: "c", data: ad("SOL", [3, 0x14, 0x0A, 0x18]))   // soliciting 180A
        _ = try advertiser(air, name: "d", data: ad("NONE"), connectable: false)
        let s = try await startScanner(air)
        s.queue.sync { s.manager.scanForPeripherals(withServices: [CBUUID(string: "180F")]) }
        try await pause(nanoseconds: 300_000_000)
        #expect(s.queue.sync { Set(s.names(of: s.discoveries)) } == ["BAT"])
        // A new scan replaces the filters; solicitations match through the option.
        s.queue.sync {
            s.discoveries.removeAll()
            s.manager.scanForPeripherals(
                withServices: [CBUUID(string: "180D")],
                options: [CBCentralManagerScanOptionSolicitedServiceUUIDsKey: [CBUUID(string: "180A")]])
        }
        try await pause(nanoseconds: 300_000_000)
        #expect(s.queue.sync { Set(s.names(of: s.discoveries)) } == ["HR", "SOL"])
        let sol = try #require(s.queue.sync { s.discoveries.first { $0.1[CBAdvertisementDataLocalNameKey] as? String == "SOL" } })
        #expect(sol.1[CBAdvertisementDataSolicitedServiceUUIDsKey] as? [CBUUID] == [CBUUID(string: "180A")])
        // nil: everything, with Apple's value types.
        s.queue.sync {
            s.discoveries.removeAll(); s.manager.scanForPeripherals(withServices: nil)
        }
        try await pause(nanoseconds: 300_000_000)
        #expect(s.queue.sync { Set(s.names(of: s.discoveries)) } == ["HR", "BAT", "SOL", "NONE"])
        let none = try #require(s.queue.sync { s.discoveries.first { $0.1[CBAdvertisementDataLocalNameKey] as? String == "NONE" } })
        #expect((none.1[CBAdvertisementDataIsConnectable] as? NSNumber)?.boolValue == false)
        s.queue.sync { s.manager.stopScan() }
        #expect(!s.manager.isScanning)
        let count = s.queue.sync { s.discoveries.count }
        try await pause(nanoseconds: 200_000_000)
        #expect(s.queue.sync { s.discoveries.count } == count)
    }

    @Test func duplicatesAndTheScanResponseUpdate() async throws {
        let air = TestAir()
        _ = try advertiser(air, name: "a", data: ad("DUP"), scanResponse: [4, 0xFF, 0x4C, 0x00, 0x01])
        let s = try await startScanner(air)
        s.queue.sync { s.manager.scanForPeripherals(withServices: nil) }
        // Without duplicates: the advertisement, then once more when the scan response adds data, and no
        // more for the advertising events that follow every 20 ms.
        try await waitUntil("the advertisement and its scan response") { s.queue.sync { s.discoveries.count } >= 2 }
        try await pause(nanoseconds: 300_000_000)
        let first = s.queue.sync { s.discoveries }
        #expect(first.count == 2)
        #expect(first.first?.1[CBAdvertisementDataManufacturerDataKey] == nil)
        #expect(first.last?.1[CBAdvertisementDataManufacturerDataKey] as? Data == Data([0x4C, 0x00, 0x01]))
        #expect(first.allSatisfy { $0.2.intValue < 0 && $0.2.intValue != 127 })
        #expect(first[0].0 === first[1].0)
        // With duplicates: every advertisement (one every 20 ms). Judged by count, not by a window: a
        // saturated machine delivered 4 in 300 ms (sat7).
        s.queue.sync {
            s.discoveries.removeAll(); s.manager.scanForPeripherals(withServices: nil, options: [CBCentralManagerScanOptionAllowDuplicatesKey: true])
        }
        try await waitUntil("advertisements reported again") { s.queue.sync { s.discoveries.count } > 6 }
    }
}

@Suite(.serialized) struct CentralConnectionTests {
    @Test func pendingConnectWaitsForTheDeviceAndCancelGivesNilError() async throws {
        let air = TestAir()
        let s = try await startScanner(air)
        let h = try advertiser(air, name: "late", data: ad("LATE"))
        s.queue.sync { s.manager.scanForPeripherals(withServices: nil) }
        try await waitUntil("seen") { s.queue.sync { !s.discoveries.isEmpty } }
        let p = s.queue.sync { s.discoveries[0].0 }
        s.queue.sync { s.manager.stopScan() }
        // Stop advertising: the connection waits (it never times out) and completes when the device is back.
        h.loop.sync { h.stopAdvertising() }
        s.queue.sync { s.manager.connect(p) }
        try await pause(nanoseconds: 500_000_000)
        #expect(p.state == .connecting && s.queue.sync { s.connected.isEmpty && s.failed.isEmpty })
        h.loop.sync { h.startAdvertising(AdvertisingConfiguration(data: ad("LATE"), interval: 0x20)) }
        try await waitUntil("connected") { s.queue.sync { s.connected.count } == 1 }
        #expect(p.state == .connected)
        // Retrieval by identifier (random per host, kept in the host's device cache).
        #expect(s.manager.retrievePeripherals(withIdentifiers: [UUID(), p.identifier]).map(\.identifier) == [p.identifier])
        #expect(p.identifier == s.manager.retrievePeripherals(withIdentifiers: [p.identifier]).first?.identifier)
        // readRSSI.
        s.queue.sync { p.readRSSI() }
        try await waitUntil("rssi") { s.queue.sync { s.rssi.count } == 1 }
        #expect(s.queue.sync { s.rssi[0].intValue } < 0)
        // The GAP device name replaces the advertised one.
        try await waitUntil("name") { s.queue.sync { s.names } == ["OpenCoreBluetooth"] }
        #expect(p.name == "OpenCoreBluetooth")
        // A local cancel ends with a nil error; a cancel of a pending connection too.
        s.queue.sync { s.manager.cancelPeripheralConnection(p) }
        try await waitUntil("disconnected") { s.queue.sync { s.disconnected.count } == 1 }
        #expect(s.queue.sync { s.disconnected[0].1 } == nil)
        h.loop.sync { h.stopAdvertising() }
        try await pause(nanoseconds: 100_000_000)
        s.queue.sync { s.manager.connect(p) }
        try await pause(nanoseconds: 100_000_000)
        s.queue.sync { s.manager.cancelPeripheralConnection(p) }
        try await waitUntil("pending cancelled") { s.queue.sync { s.disconnected.count } == 2 }
        #expect(s.queue.sync { s.disconnected[1].1 } == nil && s.queue.sync { s.failed.isEmpty })
        #expect(p.state == .disconnected)
    }

    @Test func writeFlowControlAndCCCDRefusal() async throws {
        let air = TestAir()
        let (per, cen, _) = try await connectedPair(air, name: "flow")
        defer { withExtendedLifetime(per) {} }   // the peripheral's manager (and host) live as long as the test
        let p = try #require(cen.peripheral)
        let target = try #require(cen.characteristic(writableUUID.uuidString))
        #expect(p.canSendWriteWithoutResponse)
        // Each write without response makes canSendWriteWithoutResponse false until the stack is ready again.
        let readiness = Scanner()
        p.delegate = readiness
        let afterBurst = cen.queue.sync { () -> Bool in
            for i in 0..<50 { p.writeValue(Data([UInt8(i)]), for: target, type: .withoutResponse) }
            return p.canSendWriteWithoutResponse
        }
        #expect(!afterBurst)
        try await waitUntil("ready") { cen.queue.sync { readiness.ready } >= 1 }
        #expect(p.canSendWriteWithoutResponse)
        // Nothing of the burst is lost: the writes the host's queue could not take were held and went out in order
        // (more than the controller's buffers and the host's queue together).
        let written = { per.queue.sync { per.writeBatches.joined().filter { $0.characteristic.uuid == writableUUID }.compactMap { $0.value?.first } } }
        try await waitUntil("all 50 written") { written().count >= 50 }
        #expect(written() == (0..<50).map { UInt8($0) })
        // The CCCD may not be written through writeValue(_:for: CBDescriptor).
        let notify = try #require(cen.characteristic(notifyUUID.uuidString))
        cen.queue.sync { p.discoverDescriptors(for: notify) }
        try await waitUntil("descriptors") { notify.descriptors?.isEmpty == false }
        let cccd = try #require(notify.descriptors?.first { $0.uuid.uuidString == "2902" })
        cen.queue.sync { p.writeValue(Data([1, 0]), for: cccd) }
        try await waitUntil("refused") { cen.queue.sync { readiness.descriptorWrites.count } == 1 }
        #expect((cen.queue.sync { readiness.descriptorWrites[0] } as? CBATTError)?.code == .writeNotPermitted)
        #expect(!notify.isNotifying)
    }
}
