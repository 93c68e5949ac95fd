// The peripheral side of the heart-rate demo (seed 000: publish a service, advertise, answer requests,
// notify subscribers).
import Foundation
import CoreBluetooth

let heartRateServiceUUID = CBUUID(string: "180D")
let heartRateMeasurementUUID = CBUUID(string: "2A37")
let bodySensorLocationUUID = CBUUID(string: "2A38")
let heartRateControlPointUUID = CBUUID(string: "2A39")

final class HeartRatePeripheral: NSObject, CBPeripheralManagerDelegate, @unchecked Sendable {
    private var manager: CBPeripheralManager!
    private var measurement: CBMutableCharacteristic!
    private var timer: DispatchSourceTimer?
    private var beat: UInt8 = 60
    private var energyExpended: UInt16 = 0

    func start() {
        manager = CBPeripheralManager(delegate: self, queue: nil)
    }

    func peripheralManagerDidUpdateState(_ peripheral: CBPeripheralManager) {
        step("peripheral", "state \(peripheral.state.name)")
        guard peripheral.state == .poweredOn else { return }
        measurement = CBMutableCharacteristic(type: heartRateMeasurementUUID, properties: [.notify], value: nil, permissions: [])
        measurement.descriptors = [CBMutableDescriptor(type: CBUUID(string: CBUUIDCharacteristicUserDescriptionString), value: "Heart Rate Measurement")]
        let location = CBMutableCharacteristic(type: bodySensorLocationUUID, properties: [.read], value: Data([0x01]), permissions: [.readable])
        let controlPoint = CBMutableCharacteristic(type: heartRateControlPointUUID, properties: [.write], value: nil, permissions: [.writeable])
        let service = CBMutableService(type: heartRateServiceUUID, primary: true)
        service.characteristics = [measurement, location, controlPoint]
        peripheral.add(service)
    }

    func peripheralManager(_ peripheral: CBPeripheralManager, didAdd service: CBService, error: Error?) {
        if let error { return step("peripheral", "could not publish \(service.uuid): \(error)") }
        step("peripheral", "published service \(service.uuid) with \(service.characteristics?.count ?? 0) characteristics")
        peripheral.startAdvertising([
            CBAdvertisementDataLocalNameKey: "OCB Heart Rate",
            CBAdvertisementDataServiceUUIDsKey: [heartRateServiceUUID],
        ])
    }

    func peripheralManagerDidStartAdvertising(_ peripheral: CBPeripheralManager, error: Error?) {
        step("peripheral", error.map { "advertising failed: \($0)" } ?? "advertising as \"OCB Heart Rate\" with service 180D")
    }

    func peripheralManager(_ peripheral: CBPeripheralManager, central: CBCentral, didSubscribeTo characteristic: CBCharacteristic) {
        step("peripheral", "central \(central.identifier.uuidString.prefix(8))… subscribed to \(characteristic.uuid) (max update \(central.maximumUpdateValueLength) bytes)")
        let t = DispatchSource.makeTimerSource(queue: .main)
        t.schedule(deadline: .now() + .milliseconds(100), repeating: .milliseconds(250))
        t.setEventHandler { [weak self] in self?.sendMeasurement() }
        t.resume()
        timer = t
    }

    func peripheralManager(_ peripheral: CBPeripheralManager, central: CBCentral, didUnsubscribeFrom characteristic: CBCharacteristic) {
        step("peripheral", "central unsubscribed from \(characteristic.uuid)")
        timer?.cancel()
        timer = nil
    }

    private func sendMeasurement() {
        beat = beat >= 90 ? 60 : beat + 3
        energyExpended &+= 1
        // Flags: 8-bit heart rate, energy expended present (Heart Rate Service §3.1).
        let value = Data([0x08, beat, UInt8(energyExpended & 0xFF), UInt8(energyExpended >> 8)])
        if !manager.updateValue(value, for: measurement, onSubscribedCentrals: nil) {
            step("peripheral", "transmit queue full; waiting")
        }
    }

    func peripheralManager(_ peripheral: CBPeripheralManager, didReceiveWrite requests: [CBATTRequest]) {
        for r in requests where r.characteristic.uuid == heartRateControlPointUUID {
            if r.value == Data([0x01]) {
                energyExpended = 0
                step("peripheral", "control point: reset energy expended")
            } else {
                step("peripheral", "control point: unsupported value \(r.value.map { [UInt8]($0) } ?? [])")
                peripheral.respond(to: requests[0], withResult: .requestNotSupported)
                return
            }
        }
        peripheral.respond(to: requests[0], withResult: .success)
    }
}

extension CBManagerState {
    var name: String {
        switch self {
        case .unknown: return "unknown"
        case .resetting: return "resetting"
        case .unsupported: return "unsupported"
        case .unauthorized: return "unauthorized"
        case .poweredOff: return "poweredOff"
        case .poweredOn: return "poweredOn"
        @unknown default: return "?"
        }
    }
}
