// A small Core Bluetooth app for the kit's tests, written against the delegate API only: it scans (for a
// service or a name), connects, discovers the whole database, reads every readable characteristic and
// descriptor, subscribes to every notifying one, and records what it saw. The tests drive it on the
// simulation's virtual clock, or on a real air against a Bumble peripheral.
import Foundation
import CoreBluetooth
import BLEHost
import CoreBluetoothTesting

final class ExplorerApp: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate, @unchecked Sendable {
    let queue: DispatchQueue?
    private let lock = NSLock()
    var central: CBCentralManager!
    private(set) var target: CBPeripheral?
    private let service: CBUUID?
    private let name: String?
    private var _log: [String] = []
    private var _values: [String: Data] = [:]
    private var _updates: [String: [Data]] = [:]
    private var _advertisement: [String: Any] = [:]
    private var _rssi: [Int] = []
    private var _discovered: [UUID] = []
    private var pendingDescriptorWork = 0
    var subscribe = true
    var reconnect = false
    var host: AnyObject?

    init(service: CBUUID? = nil, name: String? = nil, queue: DispatchQueue? = DispatchQueue(label: "explorer")) {
        self.service = service
        self.name = name
        self.queue = queue
    }

    /// Starts inside the simulation's scope, so that the manager joins its phone.
    func start(in sim: BluetoothSimulation) { sim.scope { start() } }

    func start() {
        if let host = host as? LEHost {
            central = CBCentralManager(delegate: self, queue: queue, options: nil, host: host)
        } else {
            central = CBCentralManager(delegate: self, queue: queue)
        }
    }

    var log: [String] { lock.withLock { _log } }
    var values: [String: Data] { lock.withLock { _values } }
    var updates: [String: [Data]] { lock.withLock { _updates } }
    var advertisement: [String: Any] { lock.withLock { _advertisement } }
    var rssi: [Int] { lock.withLock { _rssi } }
    var discovered: [UUID] { lock.withLock { _discovered } }
    func has(_ prefix: String) -> Bool { log.contains { $0.hasPrefix(prefix) } }
    func count(_ prefix: String) -> Int { log.filter { $0.hasPrefix(prefix) }.count }
    private func note(_ s: String) { lock.withLock { _log.append(s) } }

    /// Runs `work` on the app's queue (as a button tap would).
    func onQueue(_ work: @escaping @Sendable () -> Void) { (queue ?? .main).async(execute: work) }

    func centralManagerDidUpdateState(_ central: CBCentralManager) {
        note("state:\(central.state.rawValue)")
        guard central.state == .poweredOn else { return }
        central.scanForPeripherals(withServices: service.map { [$0] }, options: [CBCentralManagerScanOptionAllowDuplicatesKey: true])
    }

    func centralManager(_ central: CBCentralManager, didDiscover peripheral: CBPeripheral, advertisementData: [String: Any], rssi RSSI: NSNumber) {
        if let name, (advertisementData[CBAdvertisementDataLocalNameKey] as? String) != name && peripheral.name != name { return }
        lock.withLock {
            _rssi.append(RSSI.intValue)
            if !_discovered.contains(peripheral.identifier) { _discovered.append(peripheral.identifier) }
            for (k, v) in advertisementData { _advertisement[k] = v }
        }
        guard lock.withLock({ target == nil }) else { return }
        lock.withLock { target = peripheral }
        note("discovered:\(peripheral.name ?? "?")")
        central.connect(peripheral)
    }

    func centralManager(_ central: CBCentralManager, didConnect peripheral: CBPeripheral) {
        note("connected")
        central.stopScan()
        peripheral.delegate = self
        peripheral.discoverServices(nil)
    }

    func centralManager(_ central: CBCentralManager, didFailToConnect peripheral: CBPeripheral, error: Error?) {
        note("failed:\((error as NSError?)?.code ?? 0)")
    }

    func centralManager(_ central: CBCentralManager, didDisconnectPeripheral peripheral: CBPeripheral, error: Error?) {
        note("disconnected:\((error as NSError?).map { "\($0.domain):\($0.code)" } ?? "nil")")
        if reconnect { central.connect(peripheral) }
    }

    func peripheral(_ peripheral: CBPeripheral, didDiscoverServices error: Error?) {
        if let error { return note("servicesError:\(error)") }
        let services = peripheral.services ?? []
        note("services:" + services.map(\.uuid.uuidString).joined(separator: ","))
        lock.withLock { pendingDescriptorWork += services.count }
        for s in services { peripheral.discoverCharacteristics(nil, for: s) }
    }

    func peripheral(_ peripheral: CBPeripheral, didDiscoverCharacteristicsFor service: CBService, error: Error?) {
        let list = service.characteristics ?? []
        lock.withLock { pendingDescriptorWork += list.count - 1 }
        for c in list {
            if c.properties.contains(.read) { peripheral.readValue(for: c) }
            peripheral.discoverDescriptors(for: c)
        }
        finishedOne(peripheral, n: 0)
    }

    func peripheral(_ peripheral: CBPeripheral, didDiscoverDescriptorsFor characteristic: CBCharacteristic, error: Error?) {
        for d in characteristic.descriptors ?? [] where d.uuid.uuidString != CBUUIDClientCharacteristicConfigurationString {
            peripheral.readValue(for: d)
        }
        if subscribe, !characteristic.properties.isDisjoint(with: [.notify, .indicate]) { peripheral.setNotifyValue(true, for: characteristic) }
        finishedOne(peripheral, n: 1)
    }

    private func finishedOne(_ peripheral: CBPeripheral, n: Int) {
        let done = lock.withLock { () -> Bool in
            pendingDescriptorWork -= n; return pendingDescriptorWork == 0
        }
        if done { note("database discovered") }
    }

    func peripheral(_ peripheral: CBPeripheral, didUpdateValueFor characteristic: CBCharacteristic, error: Error?) {
        let key = characteristic.uuid.uuidString
        if let error { return note("readError:\(key):\((error as NSError).domain):\((error as NSError).code)") }
        let v = characteristic.value ?? Data()
        if characteristic.isNotifying {
            lock.withLock { _updates[key, default: []].append(v) }
            note("update:\(key)")
        } else {
            lock.withLock { _values[key] = v }
            note("read:\(key)")
        }
    }

    func peripheral(_ peripheral: CBPeripheral, didUpdateValueFor descriptor: CBDescriptor, error: Error?) {
        note("descriptor:\(descriptor.uuid.uuidString):\(descriptor.value.map { "\($0)" } ?? "nil")")
    }

    func peripheral(_ peripheral: CBPeripheral, didUpdateNotificationStateFor characteristic: CBCharacteristic, error: Error?) {
        note("notifying:\(characteristic.uuid.uuidString):\(characteristic.isNotifying)")
    }

    func peripheral(_ peripheral: CBPeripheral, didWriteValueFor characteristic: CBCharacteristic, error: Error?) {
        note("wrote:\(characteristic.uuid.uuidString):\((error as NSError?).map { "\($0.domain):\($0.code)" } ?? "ok")")
    }

    func peripheral(_ peripheral: CBPeripheral, didModifyServices invalidatedServices: [CBService]) {
        note("modified:" + invalidatedServices.map(\.uuid.uuidString).joined(separator: ","))
    }

    func peripheral(_ peripheral: CBPeripheral, didOpen channel: CBL2CAPChannel?, error: Error?) {
        note("l2cap:\(channel != nil):\((error as NSError?)?.code ?? 0)")
        lock.withLock { openedChannel = channel }
    }
    var openedChannel: CBL2CAPChannel?

    /// The characteristic with this UUID on the target, if discovered.
    func characteristic(_ uuid: String) -> CBCharacteristic? {
        target?.services?.flatMap { $0.characteristics ?? [] }.first { $0.uuid.uuidString == uuid }
    }
}
