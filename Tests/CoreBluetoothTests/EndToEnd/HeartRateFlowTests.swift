// The seeds' heart-rate flows, end to end on the virtual radio, through nothing but the Core Bluetooth API:
// a peripheral publishes and advertises (seed 000), a central scans, connects, discovers, subscribes,
// reads and writes (seeds 003, 004).
import Foundation
import Testing
import CoreBluetooth

final class HRPeripheral: NSObject, CBPeripheralManagerDelegate, @unchecked Sendable {
    let log = EventLog()
    var manager: CBPeripheralManager!
    var measurement: CBMutableCharacteristic!
    var subscribed: CBCentral?
    var writes: [(UUID, Int, Data)] = []
    let queue = DispatchQueue(label: "test.peripheral")

    func peripheralManagerDidUpdateState(_ p: CBPeripheralManager) {
        log.add("state:\(p.state.rawValue)")
        guard p.state == .poweredOn else { return }
        measurement = CBMutableCharacteristic(type: CBUUID(string: "2A37"), properties: [.notify], value: nil, permissions: [])
        measurement.descriptors = [CBMutableDescriptor(type: CBUUID(string: CBUUIDCharacteristicUserDescriptionString), value: "HRM")]
        let location = CBMutableCharacteristic(type: CBUUID(string: "2A38"), properties: [.read], value: Data([0x01]), permissions: [.readable])
        let control = CBMutableCharacteristic(type: CBUUID(string: "2A39"), properties: [.write], value: nil, permissions: [.writeable])
        let s = CBMutableService(type: CBUUID(string: "180D"), primary: true)
        s.characteristics = [measurement, location, control]
        p.add(s)
    }

    func peripheralManager(_ p: CBPeripheralManager, didAdd service: CBService, error: Error?) {
        log.add("didAdd:\(service.uuid.uuidString):\(error == nil)")
        p.startAdvertising([CBAdvertisementDataLocalNameKey: "HR Sensor", CBAdvertisementDataServiceUUIDsKey: [CBUUID(string: "180D")]])
    }

    func peripheralManagerDidStartAdvertising(_ p: CBPeripheralManager, error: Error?) {
        log.add("advertising:\(error == nil)")
    }

    func peripheralManager(_ p: CBPeripheralManager, central: CBCentral, didSubscribeTo c: CBCharacteristic) {
        subscribed = central
        log.add("subscribe:\(c.uuid.uuidString)")
    }

    func peripheralManager(_ p: CBPeripheralManager, central: CBCentral, didUnsubscribeFrom c: CBCharacteristic) {
        log.add("unsubscribe:\(c.uuid.uuidString)")
    }

    func peripheralManager(_ p: CBPeripheralManager, didReceiveWrite requests: [CBATTRequest]) {
        for r in requests { writes.append((r.central.identifier, r.offset, r.value ?? Data())) }
        log.add("write:\(requests.count)")
        p.respond(to: requests[0], withResult: .success)
    }
}

final class HRCentral: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate, @unchecked Sendable {
    let log = EventLog()
    var manager: CBCentralManager!
    var peripheral: CBPeripheral?
    var advertisement: [String: Any] = [:]
    var rssi: NSNumber?
    var values: [Data] = []
    var disconnectError: Error?? = .none
    let queue = DispatchQueue(label: "test.central")

    func centralManagerDidUpdateState(_ c: CBCentralManager) {
        log.add("state:\(c.state.rawValue)")
        if c.state == .poweredOn { c.scanForPeripherals(withServices: [CBUUID(string: "180D")], options: nil) }
    }

    func centralManager(_ c: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi RSSI: NSNumber) {
        log.add("discover:\(p.name ?? "-")")
        guard peripheral == nil else { return }
        peripheral = p
        advertisement = advertisementData
        rssi = RSSI
        c.stopScan()
        c.connect(p, options: nil)
    }

    func centralManager(_ c: CBCentralManager, didConnect p: CBPeripheral) {
        log.add("connect")
        p.delegate = self
        p.discoverServices(nil)
    }

    func centralManager(_ c: CBCentralManager, didDisconnectPeripheral p: CBPeripheral, error: Error?) {
        disconnectError = .some(error)
        log.add("disconnect")
    }

    func peripheral(_ p: CBPeripheral, didDiscoverServices error: Error?) {
        log.add("services:" + (p.services ?? []).map(\.uuid.uuidString).joined(separator: ","))
        for s in p.services ?? [] where s.uuid == CBUUID(string: "180D") { p.discoverCharacteristics(nil, for: s) }
    }

    func peripheral(_ p: CBPeripheral, didDiscoverCharacteristicsFor s: CBService, error: Error?) {
        log.add("characteristics:" + (s.characteristics ?? []).map(\.uuid.uuidString).joined(separator: ","))
        for c in s.characteristics ?? [] where c.uuid == CBUUID(string: "2A37") { p.discoverDescriptors(for: c) }
    }

    func peripheral(_ p: CBPeripheral, didDiscoverDescriptorsFor c: CBCharacteristic, error: Error?) {
        log.add("descriptors:" + (c.descriptors ?? []).map(\.uuid.uuidString).joined(separator: ","))
        p.setNotifyValue(true, for: c)
    }

    func peripheral(_ p: CBPeripheral, didUpdateNotificationStateFor c: CBCharacteristic, error: Error?) {
        log.add("notifying:\(c.isNotifying):\(error == nil)")
    }

    func peripheral(_ p: CBPeripheral, didUpdateValueFor c: CBCharacteristic, error: Error?) {
        if c.uuid == CBUUID(string: "2A37"), let v = c.value { values.append(v) }
        log.add("value:\(c.uuid.uuidString):\(c.value.map { [UInt8]($0) } ?? [])")
    }

    func peripheral(_ p: CBPeripheral, didWriteValueFor c: CBCharacteristic, error: Error?) {
        log.add("wrote:\(c.uuid.uuidString):\(error == nil)")
    }
}

@Suite(.serialized) struct HeartRateFlowTests {
    @Test func seedsHeartRateFlowEndToEnd() async throws {
        let air = TestAir()
        let per = HRPeripheral()
        per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: try air.host("peripheral"))
        try await waitUntil("advertising") { per.log.contains("advertising:true") }
        #expect(per.log.all.prefix(3) == ["state:5", "didAdd:180D:true", "advertising:true"])

        let cen = HRCentral()
        cen.manager = CBCentralManager(delegate: cen, queue: cen.queue, options: nil, host: try air.host("central"))
        try await waitUntil("subscription") { per.log.contains("subscribe:2A37") && cen.log.contains("notifying:true") }

        // What the scan saw, with Apple's keys and value types.
        #expect(cen.advertisement[CBAdvertisementDataLocalNameKey] as? String == "HR Sensor")
        #expect(cen.advertisement[CBAdvertisementDataServiceUUIDsKey] as? [CBUUID] == [CBUUID(string: "180D")])
        #expect((cen.advertisement[CBAdvertisementDataIsConnectable] as? NSNumber)?.boolValue == true)
        let rssi = try #require(cen.rssi?.intValue)
        #expect(rssi < 0 && rssi > -100)

        // Discovery results: GAP and GATT services come first, then ours; the CCCD was added by the stack.
        #expect(cen.log.contains("services:1800,1801,180D"))
        #expect(cen.log.contains("characteristics:2A37,2A38,2A39"))
        #expect(cen.log.contains("descriptors:2902,2901"))

        // Notifications arrive in order with the values sent.
        let p = try #require(cen.peripheral)
        for beat in UInt8(70)..<UInt8(75) {
            let sent = per.queue.sync { per.manager.updateValue(Data([0x00, beat]), for: per.measurement, onSubscribedCentrals: nil) }
            #expect(sent)
        }
        try await waitUntil("notifications") { cen.queue.sync { cen.values.count } >= 5 }
        #expect(cen.queue.sync { cen.values } == (UInt8(70)..<UInt8(75)).map { Data([0x00, $0]) })

        // A read of a cached value, answered by the stack without the peripheral's delegate.
        let location = try #require(p.services?.first { $0.uuid == CBUUID(string: "180D") }?.characteristics?.first { $0.uuid == CBUUID(string: "2A38") })
        cen.queue.sync { p.readValue(for: location) }
        try await waitUntil("read") { cen.log.contains("value:2A38:[1]") }

        // A write with response, answered by the peripheral's delegate.
        let control = try #require(location.service?.characteristics?.first { $0.uuid == CBUUID(string: "2A39") })
        cen.queue.sync { p.writeValue(Data([0x01]), for: control, type: .withResponse) }
        try await waitUntil("write") { cen.log.contains("wrote:2A39:true") }
        #expect(per.queue.sync { per.writes.map { [UInt8]($0.2) } } == [[0x01]])
        #expect(per.queue.sync { per.writes.first?.0 } == per.queue.sync { per.subscribed?.identifier })

        // A local cancel: nil error; the peripheral sees the central unsubscribe.
        cen.queue.sync { cen.manager.cancelPeripheralConnection(p) }
        try await waitUntil("disconnect") { cen.log.contains("disconnect") && per.log.contains("unsubscribe:2A37") }
        if case let .some(err) = cen.queue.sync(execute: { cen.disconnectError }) { #expect(err == nil) } else { Issue.record("no disconnect error recorded") }
        #expect(p.state == .disconnected)
        #expect(p.services == nil)
    }
}
