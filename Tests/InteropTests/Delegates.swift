// Core Bluetooth apps used by the interop suite: a peripheral to be read by Bumble, and a central that
// reads a whole database (every service, characteristic and descriptor, every readable value).
import Foundation
import TestSupport
import CoreBluetooth

final class Recorder: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [String] = []
    func add(_ s: String) { lock.lock(); items.append(s); lock.unlock() }
    var all: [String] { lock.lock(); defer { lock.unlock() }; return items }
    func has(_ s: String) -> Bool { all.contains(s) }
    func count(prefix: String) -> Int { all.filter { $0.hasPrefix(prefix) }.count }
}

func waitFor(_ what: String, seconds: Double = 20, _ cond: () -> Bool) async throws {
    let deadline = Date().addingTimeInterval(seconds)
    while !cond() {
        if Date() > deadline { throw InteropError("timed out waiting for \(what)") }
        try await pause(nanoseconds: 10_000_000)
    }
}

/// A heart-rate peripheral with a long dynamic value, a writable characteristic and an indicating one.
final class InteropPeripheral: NSObject, CBPeripheralManagerDelegate, @unchecked Sendable {
    let log = Recorder()
    let queue = DispatchQueue(label: "interop.peripheral")
    var manager: CBPeripheralManager!
    var measurement: CBMutableCharacteristic!
    var indicated: CBMutableCharacteristic!
    let longValue = Data((0..<300).map { UInt8($0 % 251) })
    let name: String
    var written: [Data] = []

    init(name: String) { self.name = name }

    func peripheralManagerDidUpdateState(_ p: CBPeripheralManager) {
        guard p.state == .poweredOn else { return }
        measurement = CBMutableCharacteristic(type: CBUUID(string: "2A37"), properties: [.notify], value: nil, permissions: [])
        measurement.descriptors = [CBMutableDescriptor(type: CBUUID(string: "2901"), value: "Heart Rate")]
        let location = CBMutableCharacteristic(type: CBUUID(string: "2A38"), properties: [.read], value: Data([0x02]), permissions: [.readable])
        let hr = CBMutableService(type: CBUUID(string: "180D"), primary: true)
        hr.characteristics = [measurement, location]
        let long = CBMutableCharacteristic(type: CBUUID(string: "6E400002-B5A3-F393-E0A9-E50E24DCCA9E"), properties: [.read], value: nil, permissions: [.readable])
        let writable = CBMutableCharacteristic(
            type: CBUUID(string: "6E400003-B5A3-F393-E0A9-E50E24DCCA9E"),
            properties: [.write, .writeWithoutResponse], value: nil, permissions: [.writeable])
        indicated = CBMutableCharacteristic(type: CBUUID(string: "6E400004-B5A3-F393-E0A9-E50E24DCCA9E"), properties: [.indicate], value: nil, permissions: [])
        let custom = CBMutableService(type: CBUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"), primary: true)
        custom.characteristics = [long, writable, indicated]
        // The custom service includes the heart-rate service, which must be published first.
        custom.includedServices = [hr]
        pendingService = custom
        p.add(hr)
    }

    var pendingService: CBMutableService?

    func peripheralManager(_ p: CBPeripheralManager, didAdd service: CBService, error: Error?) {
        log.add("added:\(service.uuid.uuidString):\(error == nil)")
        if let next = pendingService { pendingService = nil; p.add(next); return }
        if log.count(prefix: "added:") == 2 {
            p.startAdvertising([CBAdvertisementDataLocalNameKey: name, CBAdvertisementDataServiceUUIDsKey: [CBUUID(string: "180D")]])
        }
    }

    func peripheralManagerDidStartAdvertising(_ p: CBPeripheralManager, error: Error?) { log.add("advertising:\(error == nil)") }

    func peripheralManager(_ p: CBPeripheralManager, didReceiveRead request: CBATTRequest) {
        log.add("read:\(request.offset)")
        guard request.offset <= longValue.count else { return p.respond(to: request, withResult: .invalidOffset) }
        request.value = longValue.subdata(in: request.offset..<longValue.count)
        p.respond(to: request, withResult: .success)
    }

    func peripheralManager(_ p: CBPeripheralManager, didReceiveWrite requests: [CBATTRequest]) {
        for r in requests { written.append(r.value ?? Data()) }
        log.add("write:\(requests.map { $0.value?.count ?? 0 })")
        p.respond(to: requests[0], withResult: .success)
    }

    func peripheralManager(_ p: CBPeripheralManager, central: CBCentral, didSubscribeTo c: CBCharacteristic) {
        log.add("subscribed:\(c.uuid.uuidString)")
        if c.uuid == measurement.uuid {
            for i in 0..<3 { _ = p.updateValue(Data([0x00, UInt8(70 + i)]), for: measurement, onSubscribedCentrals: nil) }
        } else if c.uuid == indicated.uuid {
            for i in 0..<3 { _ = p.updateValue(Data([0xA0 + UInt8(i)]), for: indicated, onSubscribedCentrals: nil) }
        }
    }

    func peripheralManager(_ p: CBPeripheralManager, central: CBCentral, didUnsubscribeFrom c: CBCharacteristic) {
        log.add("unsubscribed:\(c.uuid.uuidString)")
    }
}

/// Reads a whole remote database through the Core Bluetooth API.
final class DatabaseReader: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate, @unchecked Sendable {
    let log = Recorder()
    let queue = DispatchQueue(label: "interop.central")
    var manager: CBCentralManager!
    var target: CBPeripheral?
    let name: String
    var advertisement: [String: Any] = [:]
    var pendingReads = 0
    var values: [String: Data] = [:]
    var notifications: [Data] = []
    var updates: [String: [Data]] = [:]
    var subscribeTo: [CBUUID] = []
    var writes: [(CBUUID, Data, CBCharacteristicWriteType)] = []
    var disconnectError: Error?

    init(name: String) { self.name = name }

    func centralManagerDidUpdateState(_ c: CBCentralManager) {
        log.add("state:\(c.state.rawValue)")
        if c.state == .poweredOn { c.scanForPeripherals(withServices: nil, options: [CBCentralManagerScanOptionAllowDuplicatesKey: true]) }
    }

    func centralManager(_ c: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
        guard (advertisementData[CBAdvertisementDataLocalNameKey] as? String) == name else { return }
        advertisement.merge(advertisementData) { _, new in new }
        guard target == nil, advertisementData[CBAdvertisementDataManufacturerDataKey] != nil || name.hasPrefix("OCB") else { return }
        target = p
        c.stopScan()
        c.connect(p)
    }

    func centralManager(_ c: CBCentralManager, didConnect p: CBPeripheral) {
        log.add("connected")
        p.delegate = self
        p.discoverServices(nil)
    }

    func centralManager(_ c: CBCentralManager, didDisconnectPeripheral p: CBPeripheral, error: Error?) {
        disconnectError = error
        log.add("disconnected:\(error == nil ? "nil" : "\(error!)")")
    }

    func peripheral(_ p: CBPeripheral, didDiscoverServices error: Error?) {
        log.add("services:" + (p.services ?? []).map(\.uuid.uuidString).joined(separator: ","))
        for s in p.services ?? [] { pendingReads += 1; p.discoverCharacteristics(nil, for: s) }
    }

    func peripheral(_ p: CBPeripheral, didDiscoverCharacteristicsFor s: CBService, error: Error?) {
        pendingReads -= 1
        for c in s.characteristics ?? [] {
            log.add("characteristic:\(c.uuid.uuidString):\(c.properties.rawValue)")
            pendingReads += 1
            p.discoverDescriptors(for: c)
            if c.properties.contains(.read) { pendingReads += 1; p.readValue(for: c) }
        }
    }

    func peripheral(_ p: CBPeripheral, didDiscoverDescriptorsFor c: CBCharacteristic, error: Error?) {
        pendingReads -= 1
        for d in c.descriptors ?? [] {
            log.add("descriptor:\(c.uuid.uuidString):\(d.uuid.uuidString)")
            if d.uuid.uuidString != "2902" { pendingReads += 1; p.readValue(for: d) }
        }
        finishIfDone(p)
    }

    func peripheral(_ p: CBPeripheral, didUpdateValueFor d: CBDescriptor, error: Error?) {
        pendingReads -= 1
        log.add("descriptorValue:\(d.uuid.uuidString):\(d.value.map { "\($0)" } ?? "nil")")
        finishIfDone(p)
    }

    func peripheral(_ p: CBPeripheral, didUpdateValueFor c: CBCharacteristic, error: Error?) {
        if c.isNotifying {
            if let v = c.value { notifications.append(v); updates[c.uuid.uuidString, default: []].append(v) }
            return
        }
        pendingReads -= 1
        values[c.uuid.uuidString] = c.value
        log.add("value:\(c.uuid.uuidString):\(c.value?.count ?? -1):\(error == nil)")
        finishIfDone(p)
    }

    private func finishIfDone(_ p: CBPeripheral) {
        guard pendingReads == 0, !log.has("database read") else { return }
        log.add("database read")
        let chars = (p.services ?? []).flatMap { $0.characteristics ?? [] }
        for (uuid, data, type) in writes {
            if let c = chars.first(where: { $0.uuid == uuid }) { p.writeValue(data, for: c, type: type) }
        }
        for s in subscribeTo {
            if let c = chars.first(where: { $0.uuid == s }) { p.setNotifyValue(true, for: c) }
        }
    }

    func peripheral(_ p: CBPeripheral, didWriteValueFor c: CBCharacteristic, error: Error?) {
        log.add("wrote:\(c.uuid.uuidString):\(error == nil)")
    }

    func peripheral(_ p: CBPeripheral, didUpdateNotificationStateFor c: CBCharacteristic, error: Error?) {
        log.add("notifying:\(c.uuid.uuidString):\(c.isNotifying)")
    }
}
