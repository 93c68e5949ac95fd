// CBPeripheralManager against our own central (through the Core Bluetooth API) on the virtual radio:
// publication rules, advertising, dynamic reads with offsets, all-or-nothing write batches, permissions,
// back-pressure, indications, subscriptions, removal with Service Changed.
import Foundation
import Testing
import CoreBluetooth

/// A peripheral whose reactions the test sets.
final class TestPeripheral: NSObject, CBPeripheralManagerDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "pm.test")
    let log = EventLog()
    var manager: CBPeripheralManager!
    var onRead: (CBPeripheralManager, CBATTRequest) -> Void = { $0.respond(to: $1, withResult: .success) }
    var onWrite: (CBPeripheralManager, [CBATTRequest]) -> Void = { $0.respond(to: $1[0], withResult: .success) }
    var reads: [CBATTRequest] = []
    var writeBatches: [[CBATTRequest]] = []
    var subscribers: [CBCentral] = []
    var addErrors: [String: Error?] = [:]
    var advertisingErrors: [Error?] = []
    var readyCount = 0

    func peripheralManagerDidUpdateState(_ p: CBPeripheralManager) { log.add("state:\(p.state.rawValue)") }
    func peripheralManager(_ p: CBPeripheralManager, didAdd s: CBService, error: Error?) {
        addErrors[s.uuid.uuidString] = error
        log.add("added:\(s.uuid.uuidString):\(error.map { "\(($0 as NSError).code)" } ?? "ok")")
    }
    func peripheralManagerDidStartAdvertising(_ p: CBPeripheralManager, error: Error?) {
        advertisingErrors.append(error)
        log.add("advertising:\(error.map { "\(($0 as NSError).code)" } ?? "ok")")
    }
    func peripheralManager(_ p: CBPeripheralManager, didReceiveRead r: CBATTRequest) { reads.append(r); onRead(p, r) }
    func peripheralManager(_ p: CBPeripheralManager, didReceiveWrite rs: [CBATTRequest]) { writeBatches.append(rs); onWrite(p, rs) }
    func peripheralManager(_ p: CBPeripheralManager, central: CBCentral, didSubscribeTo c: CBCharacteristic) {
        subscribers.append(central)
        log.add("subscribe:\(c.uuid.uuidString)")
    }
    func peripheralManager(_ p: CBPeripheralManager, central: CBCentral, didUnsubscribeFrom c: CBCharacteristic) { log.add("unsubscribe:\(c.uuid.uuidString)") }
    func peripheralManagerIsReady(toUpdateSubscribers p: CBPeripheralManager) { readyCount += 1; log.add("ready") }
}

/// A central that connects to the first peripheral named `name` and discovers everything.
final class TestCentral: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "cm.test")
    let log = EventLog()
    var manager: CBCentralManager!
    var peripheral: CBPeripheral?
    let name: String
    var values: [String: [Data]] = [:]
    var errors: [String: Error] = [:]
    var modified: [[String]] = []
    var disconnectError: Error??

    init(name: String) { self.name = name }

    func centralManagerDidUpdateState(_ c: CBCentralManager) {
        if c.state == .poweredOn { c.scanForPeripherals(withServices: nil) }
    }
    func centralManager(_ c: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
        guard peripheral == nil, advertisementData[CBAdvertisementDataLocalNameKey] as? String == name else { return }
        peripheral = p
        c.stopScan()
        c.connect(p)
    }
    func centralManager(_ c: CBCentralManager, didConnect p: CBPeripheral) {
        p.delegate = self
        p.discoverServices(nil)
    }
    func centralManager(_ c: CBCentralManager, didDisconnectPeripheral p: CBPeripheral, error: Error?) { disconnectError = .some(error); log.add("disconnected") }
    func peripheral(_ p: CBPeripheral, didDiscoverServices error: Error?) {
        for s in p.services ?? [] { p.discoverCharacteristics(nil, for: s) }
    }
    func peripheral(_ p: CBPeripheral, didDiscoverCharacteristicsFor s: CBService, error: Error?) {
        log.add("characteristics:\(s.uuid.uuidString)")
    }
    func peripheral(_ p: CBPeripheral, didUpdateValueFor c: CBCharacteristic, error: Error?) {
        if let error { errors[c.uuid.uuidString] = error; log.add("readError:\(c.uuid.uuidString)"); return }
        values[c.uuid.uuidString, default: []].append(c.value ?? Data())
        log.add("value:\(c.uuid.uuidString)")
    }
    func peripheral(_ p: CBPeripheral, didWriteValueFor c: CBCharacteristic, error: Error?) {
        if let error { errors[c.uuid.uuidString] = error }
        log.add("wrote:\(c.uuid.uuidString):\(error == nil)")
    }
    func peripheral(_ p: CBPeripheral, didUpdateNotificationStateFor c: CBCharacteristic, error: Error?) { log.add("notifying:\(c.uuid.uuidString):\(c.isNotifying)") }
    func peripheral(_ p: CBPeripheral, didModifyServices invalidated: [CBService]) {
        modified.append(invalidated.map(\.uuid.uuidString))
        log.add("modified")
    }

    func characteristic(_ uuid: String) -> CBCharacteristic? {
        (peripheral?.services ?? []).flatMap { $0.characteristics ?? [] }.first { $0.uuid.uuidString == uuid }
    }
}

let dynamicUUID = CBUUID(string: "6E400002-B5A3-F393-E0A9-E50E24DCCA9E")
let writableUUID = CBUUID(string: "6E400003-B5A3-F393-E0A9-E50E24DCCA9E")
let indicateUUID = CBUUID(string: "6E400004-B5A3-F393-E0A9-E50E24DCCA9E")
let secretUUID = CBUUID(string: "6E400005-B5A3-F393-E0A9-E50E24DCCA9E")
let notifyUUID = CBUUID(string: "6E400006-B5A3-F393-E0A9-E50E24DCCA9E")

/// A published service with every kind of characteristic, advertised as `name`, and a central connected to it.
func connectedPair(_ air: TestAir, name: String) async throws -> (TestPeripheral, TestCentral, CBMutableService) {
    let per = TestPeripheral()
    per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: try air.host("peripheral"))
    try await waitUntil("on") { per.log.contains("state:5") }
    let service = CBMutableService(type: CBUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"), primary: true)
    service.characteristics = [
        CBMutableCharacteristic(type: dynamicUUID, properties: [.read], value: nil, permissions: [.readable]),
        CBMutableCharacteristic(type: writableUUID, properties: [.write, .writeWithoutResponse], value: nil, permissions: [.writeable]),
        CBMutableCharacteristic(type: indicateUUID, properties: [.indicate], value: nil, permissions: []),
        CBMutableCharacteristic(type: secretUUID, properties: [.read], value: nil, permissions: [.readEncryptionRequired]),
        CBMutableCharacteristic(type: notifyUUID, properties: [.notify], value: nil, permissions: []),
    ]
    per.queue.sync { per.manager.add(service) }
    try await waitUntil("added") { per.log.contains("added:6E400001") }
    per.queue.sync { per.manager.startAdvertising([CBAdvertisementDataLocalNameKey: name]) }
    let cen = TestCentral(name: name)
    cen.manager = CBCentralManager(delegate: cen, queue: cen.queue, options: nil, host: try air.host("central"))
    try await waitUntil("discovered") { cen.log.contains("characteristics:6E400001") }
    return (per, cen, service)
}

@Suite(.serialized) struct PeripheralManagerTests {
    @Test func publicationRules() async throws {
        let air = TestAir()
        let per = TestPeripheral()
        per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: try air.host("p"))
        try await waitUntil("on") { per.log.contains("state:5") }
        let gap = CBMutableService(type: CBUUID(string: "1800"), primary: true)
        let cachedWritable = CBMutableService(type: CBUUID(string: "180F"), primary: true)
        cachedWritable.characteristics = [
            CBMutableCharacteristic(type: CBUUID(string: "2A19"), properties: [.read, .write], value: Data([1]), permissions: [.readable, .writeable])
        ]
        let inner = CBMutableService(type: CBUUID(string: "180A"), primary: false)
        let outer = CBMutableService(type: CBUUID(string: "1810"), primary: true)
        outer.includedServices = [inner]
        per.queue.sync {
            per.manager.add(gap)
            per.manager.add(cachedWritable)
            per.manager.add(outer)
        }
        try await waitUntil("three answers") { per.log.count("added:") == 3 }
        #expect((per.addErrors["1800"]! as? CBError)?.code == .uuidNotAllowed)
        #expect((per.addErrors["180F"]! as? CBError)?.code == .invalidParameters)
        #expect((per.addErrors["1810"]! as? CBError)?.code == .invalidParameters)
        // Publish the included service first, then it works; publishing the same instance again does not.
        per.queue.sync { per.manager.add(inner) }
        try await waitUntil("inner") { per.log.contains("added:180A:ok") }
        per.queue.sync {
            per.manager.add(outer); per.manager.add(inner)
        }
        try await waitUntil("outer") { per.log.contains("added:1810:ok") && per.log.count("added:180A") == 2 }
        #expect(per.log.all.filter { $0.hasPrefix("added:180A") } == ["added:180A:ok", "added:180A:\(CBError.Code.invalidParameters.rawValue)"])
        // Published services are immutable: changes are ignored.
        inner.characteristics = [CBMutableCharacteristic(type: CBUUID(string: "2A29"), properties: [.read], value: Data([1]), permissions: [.readable])]
        #expect(inner.characteristics == nil)
        let published = cachedWritable   // refused earlier, so still mutable
        published.characteristics = []
        #expect(published.characteristics?.isEmpty == true)
        // Advertising: only once at a time.
        per.queue.sync {
            per.manager.startAdvertising([CBAdvertisementDataLocalNameKey: "P"])
            per.manager.startAdvertising([CBAdvertisementDataLocalNameKey: "P"])
        }
        try await waitUntil("advertising answers") { per.queue.sync { per.advertisingErrors.count } == 2 }
        let errs = per.queue.sync { per.advertisingErrors }
        #expect(errs.compactMap { ($0 as? CBError)?.code } == [.alreadyAdvertising])
        #expect(per.manager.isAdvertising)
        per.queue.sync { per.manager.stopAdvertising() }
        #expect(!per.manager.isAdvertising)
    }

    @Test func dynamicReadsWithOffsetsAndErrors() async throws {
        let air = TestAir()
        let (per, cen, _) = try await connectedPair(air, name: "reads")
        let value = Data((0..<600).map { UInt8($0 % 256) }).prefix(512)
        per.queue.sync {
            per.onRead = { p, r in
                guard r.characteristic.uuid == dynamicUUID else { return p.respond(to: r, withResult: .readNotPermitted) }
                guard r.offset <= value.count else { return p.respond(to: r, withResult: .invalidOffset) }
                r.value = value.subdata(in: value.startIndex + r.offset..<value.endIndex)
                p.respond(to: r, withResult: .success)
            }
        }
        let p = try #require(cen.peripheral)
        cen.queue.sync { p.readValue(for: cen.characteristic(dynamicUUID.uuidString)!) }
        try await waitUntil("long read") { cen.log.contains("value:6E400002") }
        #expect(cen.queue.sync { cen.values[dynamicUUID.uuidString]?.first } == Data(value))
        // The central negotiated ATT_MTU 517: a Read Response carries 516 octets, so 512 need one request.
        #expect(per.queue.sync { per.reads.map(\.offset) } == [0])
        // The encryption-required characteristic on an unencrypted link with no bond: the server says
        // Insufficient Authentication, the central pairs (Just Works) and reads again; only that second read
        // reaches the delegate, which refuses it.
        cen.queue.sync { p.readValue(for: cen.characteristic(secretUUID.uuidString)!) }
        try await waitUntil("secret") { cen.log.contains("readError:6E400005") }
        let e = try #require(cen.queue.sync { cen.errors[secretUUID.uuidString] })
        #expect((e as? CBATTError)?.code == .readNotPermitted)
        #expect((e as NSError).domain == CBATTErrorDomain && (e as NSError).code == 2)
        #expect(per.queue.sync { per.reads.count } == 2)
    }

    @Test func writeBatchesAreAllOrNothing() async throws {
        let air = TestAir()
        let (per, cen, _) = try await connectedPair(air, name: "writes")
        let p = try #require(cen.peripheral)
        let target = try #require(cen.characteristic(writableUUID.uuidString))
        // 512 octets, the longest value, fit one Write Request at the negotiated ATT_MTU of 517.
        let long = Data((0..<512).map { UInt8($0 % 200) })
        cen.queue.sync { p.writeValue(long, for: target, type: .withResponse) }
        try await waitUntil("one write") { cen.log.contains("wrote:6E400003-B5A3-F393-E0A9-E50E24DCCA9E:true") }
        // Refusing the first request of a batch fails the whole write.
        per.queue.sync { per.onWrite = { $0.respond(to: $1[0], withResult: .insufficientResources) } }
        cen.queue.sync { p.writeValue(Data([1, 2, 3]), for: target, type: .withResponse) }
        try await waitUntil("refused") { cen.log.contains("wrote:6E400003-B5A3-F393-E0A9-E50E24DCCA9E:false") }
        #expect((cen.queue.sync { cen.errors[writableUUID.uuidString] } as? CBATTError)?.code == .insufficientResources)
        // Write without response reaches the delegate, needing no answer.
        per.queue.sync { per.onWrite = { _, _ in } }
        cen.queue.sync { p.writeValue(Data([9]), for: target, type: .withoutResponse) }
        try await waitUntil("command") { per.queue.sync { per.writeBatches.count } == 3 }
        #expect(per.queue.sync { per.writeBatches.map { $0.map { $0.value ?? Data() } } }.last == [Data([9])])
        #expect(per.queue.sync { per.writeBatches.first?.first?.value?.count } == 512)
        #expect(p.maximumWriteValueLength(for: .withResponse) == 512)
        #expect(p.maximumWriteValueLength(for: .withoutResponse) == 512)
    }

    @Test func subscriptionsBackPressureAndIndications() async throws {
        let air = TestAir()
        let (per, cen, service) = try await connectedPair(air, name: "updates")
        let p = try #require(cen.peripheral)
        let notifying = service.characteristics![4] as! CBMutableCharacteristic
        let indicating = service.characteristics![2] as! CBMutableCharacteristic
        cen.queue.sync {
            p.setNotifyValue(true, for: cen.characteristic(notifyUUID.uuidString)!)
            p.setNotifyValue(true, for: cen.characteristic(indicateUUID.uuidString)!)
        }
        try await waitUntil("subscribed") { per.log.count("subscribe:") == 2 && cen.log.contains("notifying:6E400004") }
        let central = try #require(per.queue.sync { per.subscribers.first })
        #expect(central.maximumUpdateValueLength == 514)
        #expect(notifying.subscribedCentrals?.map(\.identifier) == [central.identifier])
        // Send until the transmit queue is full; the ready callback follows; everything sent arrives in order.
        var sent: [UInt8] = []
        per.queue.sync {
            for i in 0..<200 {
                if per.manager.updateValue(Data([UInt8(i)]), for: notifying, onSubscribedCentrals: nil) { sent.append(UInt8(i)) } else { break }
            }
        }
        #expect(sent.count < 200)
        try await waitUntil("ready") { per.queue.sync { per.readyCount } == 1 }
        try await waitUntil("all delivered") { cen.queue.sync { cen.values[notifyUUID.uuidString]?.count } == sent.count }
        #expect(cen.queue.sync { cen.values[notifyUUID.uuidString] } == sent.map { Data([$0]) })
        // Indications wait for confirmations, and all arrive.
        per.queue.sync { for i in 0..<5 { _ = per.manager.updateValue(Data([0xA0 + UInt8(i)]), for: indicating, onSubscribedCentrals: nil) } }
        try await waitUntil("indications") { cen.queue.sync { cen.values[indicateUUID.uuidString]?.count } == 5 }
        // A value longer than maximumUpdateValueLength is cut to fit.
        per.queue.sync { _ = per.manager.updateValue(Data(repeating: 7, count: 600), for: notifying, onSubscribedCentrals: nil) }
        try await waitUntil("long") { cen.queue.sync { cen.values[notifyUUID.uuidString]?.last?.count } == 514 }
        // Disconnecting unsubscribes the central from both.
        cen.queue.sync { cen.manager.cancelPeripheralConnection(p) }
        try await waitUntil("unsubscribed") { per.log.count("unsubscribe:") == 2 }
        #expect(notifying.subscribedCentrals?.isEmpty == true)
    }

    @Test func desiredConnectionLatencyReachesTheLink() async throws {
        let air = TestAir()
        let (per, cen, _) = try await connectedPair(air, name: "latency")
        let p = try #require(cen.peripheral)
        cen.queue.sync { p.setNotifyValue(true, for: cen.characteristic(notifyUUID.uuidString)!) }
        try await waitUntil("subscribed") { per.log.contains("subscribe:") }
        let central = try #require(per.queue.sync { per.subscribers.first })
        let host = cen.manager.leHostForTests
        let before = host.loop.sync { host.connections.values.first?.interval }
        per.queue.sync { per.manager.setDesiredConnectionLatency(.high, for: central) }
        try await waitUntil("updated") { host.loop.sync { host.connections.values.first?.interval } == 120 }
        #expect(before != 120)
        per.queue.sync { per.manager.setDesiredConnectionLatency(.low, for: central) }
        try await waitUntil("updated again") { host.loop.sync { host.connections.values.first?.interval } == 12 }
    }

    @Test func removingAServiceTellsTheCentral() async throws {
        let air = TestAir()
        let (per, cen, service) = try await connectedPair(air, name: "changes")
        let extra = CBMutableService(type: CBUUID(string: "180F"), primary: true)
        extra.characteristics = [CBMutableCharacteristic(type: CBUUID(string: "2A19"), properties: [.read], value: Data([50]), permissions: [.readable])]
        per.queue.sync { per.manager.add(extra) }
        try await waitUntil("added and indicated") { per.log.contains("added:180F:ok") && cen.log.contains("modified") }
        let p = try #require(cen.peripheral)
        cen.queue.sync { p.discoverServices(nil) }
        try await waitUntil("rediscovered") { (p.services ?? []).contains { $0.uuid == CBUUID(string: "180F") } }
        per.queue.sync { per.manager.remove(service) }
        try await waitUntil("removed") { cen.queue.sync { cen.modified.count } == 2 }
        #expect(cen.queue.sync { cen.modified.last } == ["6E400001-B5A3-F393-E0A9-E50E24DCCA9E"])
        #expect(!(p.services ?? []).contains { $0.uuid == CBUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E") })
    }
}

final class RestoringPeripheral: NSObject, CBPeripheralManagerDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "restore.test")
    let log = EventLog()
    var restored: [String: Any] = [:]
    func peripheralManager(_ p: CBPeripheralManager, willRestoreState dict: [String: Any]) {
        restored = dict
        log.add("willRestore")
    }
    func peripheralManagerDidUpdateState(_ p: CBPeripheralManager) { log.add("state:\(p.state.rawValue)") }
    func peripheralManager(_ p: CBPeripheralManager, didAdd service: CBService, error: Error?) { log.add("added") }
    func peripheralManagerDidStartAdvertising(_ p: CBPeripheralManager, error: Error?) { log.add("advertising") }
}

@Suite(.serialized) struct RestorationTests {
    @Test func aManagerWithTheSameRestoreIdentifierGetsServicesAndAdvertisingBack() async throws {
        _ = testStateDirectory
        let air = TestAir()
        let id = "restore-\(UUID().uuidString.prefix(6))"
        let first = RestoringPeripheral()
        var m1: CBPeripheralManager? = CBPeripheralManager(
            delegate: first, queue: first.queue,
            options: [CBPeripheralManagerOptionRestoreIdentifierKey: id], host: try air.host("first"))
        try await waitUntil("on") { first.log.contains("state:5") }
        #expect(!first.log.contains("willRestore"))   // nothing saved yet
        let s = CBMutableService(type: CBUUID(string: "180F"), primary: true)
        let level = CBMutableCharacteristic(type: CBUUID(string: "2A19"), properties: [.read], value: Data([77]), permissions: [.readable])
        level.descriptors = [CBMutableDescriptor(type: CBUUID(string: "2901"), value: "Battery")]
        s.characteristics = [level]
        first.queue.sync {
            m1!.add(s); m1!.startAdvertising([CBAdvertisementDataLocalNameKey: "Restored"])
        }
        try await waitUntil("published") { first.log.contains("added") && first.log.contains("advertising") }
        first.queue.sync { m1 = nil }

        // A new manager (as after a relaunch) with the same identifier.
        let second = RestoringPeripheral()
        let m2 = CBPeripheralManager(
            delegate: second, queue: second.queue,
            options: [CBPeripheralManagerOptionRestoreIdentifierKey: id], host: try air.host("second"))
        try await waitUntil("restored") { second.log.contains("state:5") }
        #expect(second.log.all.prefix(2) == ["willRestore", "state:5"])
        let services = try #require(second.queue.sync { second.restored[CBPeripheralManagerRestoredStateServicesKey] } as? [CBMutableService])
        #expect(services.map(\.uuid) == [CBUUID(string: "180F")])
        #expect((services[0].characteristics?.first as? CBMutableCharacteristic)?.value == Data([77]))
        let adv = second.queue.sync { second.restored[CBPeripheralManagerRestoredStateAdvertisementDataKey] } as? [String: Any]
        #expect(adv?[CBAdvertisementDataLocalNameKey] as? String == "Restored")
        // It serves and advertises again: a central finds it and reads the restored value.
        let cen = TestCentral(name: "Restored")
        cen.manager = CBCentralManager(delegate: cen, queue: cen.queue, options: nil, host: try air.host("central"))
        try await waitUntil("discovered") { cen.log.contains("characteristics:180F") }
        let p = try #require(cen.peripheral)
        cen.queue.sync { p.readValue(for: cen.characteristic("2A19")!) }
        try await waitUntil("read") { cen.log.contains("value:2A19") }
        #expect(cen.queue.sync { cen.values["2A19"]?.first } == Data([77]))
        #expect(m2.isAdvertising)
    }
}
