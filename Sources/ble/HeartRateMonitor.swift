// The central side of the heart-rate demo (seeds 003 and 004: scan, connect, discover, subscribe, read,
// write, disconnect), printing every step.
import Foundation
import CoreBluetooth

final class HeartRateMonitor: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate, @unchecked Sendable {
    private var manager: CBCentralManager!
    private var heartRatePeripheral: CBPeripheral?
    private let notificationsWanted: Int
    private var notificationsSeen = 0
    private let finish: (Int32) -> Void

    init(notificationsWanted: Int, finish: @escaping (Int32) -> Void) {
        self.notificationsWanted = notificationsWanted
        self.finish = finish
    }

    func start() {
        manager = CBCentralManager(delegate: self, queue: nil)
    }

    func centralManagerDidUpdateState(_ central: CBCentralManager) {
        step("central", "state \(central.state.name)")
        guard central.state == .poweredOn else { return }
        step("central", "scanning for heart-rate monitors (service 180D)")
        central.scanForPeripherals(withServices: [heartRateServiceUUID], options: nil)
    }

    func centralManager(
        _ central: CBCentralManager, didDiscover peripheral: CBPeripheral,
        advertisementData: [String: Any], rssi RSSI: NSNumber
    ) {
        step("central", "discovered \(peripheral.name ?? "unnamed") RSSI \(RSSI) dBm, id \(peripheral.identifier.uuidString.prefix(8))…")
        for key in advertisementData.keys.sorted() {
            step("central", "  \(key) = \(describe(advertisementData[key]!))")
        }
        guard heartRatePeripheral == nil else { return }
        heartRatePeripheral = peripheral
        central.stopScan()
        step("central", "connecting")
        central.connect(peripheral, options: nil)
    }

    func centralManager(_ central: CBCentralManager, didConnect peripheral: CBPeripheral) {
        step("central", "connected to \(peripheral.name ?? "?"); max write without response \(peripheral.maximumWriteValueLength(for: .withoutResponse)) bytes")
        peripheral.delegate = self
        peripheral.discoverServices(nil)
    }

    func centralManager(_ central: CBCentralManager, didFailToConnect peripheral: CBPeripheral, error: Error?) {
        step("central", "failed to connect: \(error.map { "\($0)" } ?? "?")")
        finish(1)
    }

    func centralManager(_ central: CBCentralManager, didDisconnectPeripheral peripheral: CBPeripheral, error: Error?) {
        step("central", "disconnected (\(error.map { "\($0.localizedDescription)" } ?? "by us"))")
        finish(notificationsSeen >= notificationsWanted ? 0 : 1)
    }

    func peripheral(_ peripheral: CBPeripheral, didDiscoverServices error: Error?) {
        if let error { return step("central", "service discovery failed: \(error)") }
        for s in peripheral.services ?? [] {
            step("central", "service \(s.uuid) (\(s.uuid.uuidString))")
            peripheral.discoverCharacteristics(nil, for: s)
        }
    }

    func peripheral(_ peripheral: CBPeripheral, didDiscoverCharacteristicsFor service: CBService, error: Error?) {
        if let error { return step("central", "characteristic discovery failed: \(error)") }
        for c in service.characteristics ?? [] {
            step("central", "  characteristic \(c.uuid) properties \(describe(c.properties))")
            peripheral.discoverDescriptors(for: c)
        }
    }

    func peripheral(_ peripheral: CBPeripheral, didDiscoverDescriptorsFor characteristic: CBCharacteristic, error: Error?) {
        for d in characteristic.descriptors ?? [] {
            step("central", "    descriptor \(d.uuid) of \(characteristic.uuid)")
            if d.uuid.uuidString == CBUUIDCharacteristicUserDescriptionString { peripheral.readValue(for: d) }
        }
        guard characteristic.service?.uuid == heartRateServiceUUID else { return }
        switch characteristic.uuid {
        case heartRateMeasurementUUID:
            step("central", "subscribing to heart-rate measurements")
            peripheral.setNotifyValue(true, for: characteristic)
        case bodySensorLocationUUID:
            peripheral.readValue(for: characteristic)
        default:
            break
        }
    }

    func peripheral(_ peripheral: CBPeripheral, didUpdateValueFor descriptor: CBDescriptor, error: Error?) {
        step("central", "    descriptor \(descriptor.uuid) = \(describe(descriptor.value as Any))")
    }

    func peripheral(_ peripheral: CBPeripheral, didUpdateNotificationStateFor characteristic: CBCharacteristic, error: Error?) {
        step("central", "notifications for \(characteristic.uuid): \(characteristic.isNotifying ? "on" : "off")\(error.map { " error \($0)" } ?? "")")
    }

    func peripheral(_ peripheral: CBPeripheral, didUpdateValueFor characteristic: CBCharacteristic, error: Error?) {
        if let error { return step("central", "reading \(characteristic.uuid) failed: \(error)") }
        guard let value = characteristic.value else { return }
        switch characteristic.uuid {
        case bodySensorLocationUUID:
            let places = ["other", "chest", "wrist", "finger", "hand", "ear lobe", "foot"]
            let i = Int(value.first ?? 0)
            step("central", "read body sensor location: \(i < places.count ? places[i] : "unknown") (0x\(String(i, radix: 16)))")
        case heartRateMeasurementUUID:
            notificationsSeen += 1
            step("central", "heart rate \(decodeHeartRate(value)) bpm (notification \(notificationsSeen), bytes \(hex(value)))")
            if notificationsSeen == notificationsWanted,
                let cp = characteristic.service?.characteristics?.first(where: { $0.uuid == heartRateControlPointUUID })
            {
                step("central", "writing 0x01 (reset energy expended) to the control point")
                peripheral.writeValue(Data([0x01]), for: cp, type: .withResponse)
            }
        default:
            step("central", "value of \(characteristic.uuid): \(hex(value))")
        }
    }

    func peripheral(_ peripheral: CBPeripheral, didWriteValueFor characteristic: CBCharacteristic, error: Error?) {
        step("central", "write to \(characteristic.uuid) \(error.map { "failed: \($0)" } ?? "acknowledged")")
        step("central", "disconnecting")
        manager.cancelPeripheralConnection(peripheral)
    }

    /// Heart Rate Measurement (Heart Rate Service §3.1): flags bit 0 selects a UInt8 or UInt16 value.
    private func decodeHeartRate(_ d: Data) -> Int {
        let b = [UInt8](d)
        guard b.count >= 2 else { return 0 }
        if b[0] & 0x01 == 0 { return Int(b[1]) }
        return b.count >= 3 ? Int(b[1]) | Int(b[2]) << 8 : 0
    }
}

func hex(_ d: Data) -> String { d.map { String(format: "%02x", $0) }.joined() }

func describe(_ v: Any) -> String {
    switch v {
    case let d as Data: return "<\(hex(d))>"
    case let a as [CBUUID]: return "[" + a.map { $0.uuidString }.joined(separator: ", ") + "]"
    case let m as [CBUUID: Data]: return "{" + m.map { "\($0.key.uuidString): <\(hex($0.value))>" }.joined(separator: ", ") + "}"
    case let n as NSNumber: return n.stringValue
    case let s as String: return "\"\(s)\""
    default: return "\(v)"
    }
}

func describe(_ p: CBCharacteristicProperties) -> String {
    let names: [(CBCharacteristicProperties, String)] = [
        (.broadcast, "broadcast"), (.read, "read"), (.writeWithoutResponse, "writeWithoutResponse"), (.write, "write"),
        (.notify, "notify"), (.indicate, "indicate"), (.authenticatedSignedWrites, "authenticatedSignedWrites"),
        (.extendedProperties, "extendedProperties"),
    ]
    return "[" + names.filter { p.contains($0.0) }.map(\.1).joined(separator: ", ") + "]"
}
