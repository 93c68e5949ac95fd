// The seeds' heart-rate monitor (the Core Bluetooth Programming Guide's central tasks, seeds 003 and 004):
// scan for the Heart Rate service, connect, discover, subscribe to the Heart Rate Measurement, read the Body
// Sensor Location, decode each measurement. Written as an iOS app is, against the Core Bluetooth API only,
// with one addition every real monitor needs: when the sensor goes away it asks to connect again, and iOS
// (and this stack) keep that request pending until the sensor is back.
import Foundation
import CoreBluetooth

public let heartRateServiceUUID = CBUUID(string: "180D")
public let heartRateMeasurementUUID = CBUUID(string: "2A37")
public let bodySensorLocationUUID = CBUUID(string: "2A38")

/// One Heart Rate Measurement (Heart Rate Service 1.0, §3.1.1).
public struct HeartRateMeasurement: Equatable, Sendable {
    public var beatsPerMinute: Int
    /// nil when the sensor does not report contact.
    public var sensorContact: Bool?
    /// Kilojoules, when present.
    public var energyExpended: Int?
    /// RR intervals in seconds (1/1024 s resolution on the wire).
    public var rrIntervals: [Double]

    /// Decodes the characteristic's value; nil when it is too short for what its flags announce.
    public init?(_ data: Data) {
        let b = [UInt8](data)
        guard let flags = b.first else { return nil }
        var i = 1
        if flags & 0x01 == 0 {
            guard b.count >= 2 else { return nil }
            beatsPerMinute = Int(b[1]); i = 2
        } else {
            guard b.count >= 3 else { return nil }
            beatsPerMinute = Int(b[1]) | Int(b[2]) << 8; i = 3
        }
        sensorContact = flags & 0x04 != 0 ? flags & 0x02 != 0 : nil
        energyExpended = nil
        if flags & 0x08 != 0 {
            guard b.count >= i + 2 else { return nil }
            energyExpended = Int(b[i]) | Int(b[i + 1]) << 8; i += 2
        }
        rrIntervals = []
        if flags & 0x10 != 0 {
            while i + 1 < b.count {
                rrIntervals.append(Double(Int(b[i]) | Int(b[i + 1]) << 8) / 1024)
                i += 2
            }
        }
    }
}

public final class HeartRateMonitor: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate, @unchecked Sendable {
    public enum Status: Equatable, Sendable { case off, scanning, connecting, connected, waitingForSensor }

    private let lock = NSLock()
    private var _status: Status = .off
    private var _measurement: HeartRateMeasurement?
    private var _location: String?
    private var _events: [String] = []
    private var central: CBCentralManager!
    private var sensor: CBPeripheral?
    private let queue: DispatchQueue?

    /// What the app shows.
    public var status: Status { lock.withLock { _status } }
    public var measurement: HeartRateMeasurement? { lock.withLock { _measurement } }
    public var sensorLocation: String? { lock.withLock { _location } }
    /// What happened, in order (as the seeds' NSLog lines).
    public var events: [String] { lock.withLock { _events } }
    public var sensorName: String? { lock.withLock { sensor?.name } }

    /// `queue` nil: delegate calls on the main queue, as in the seeds.
    public init(queue: DispatchQueue? = nil) {
        self.queue = queue
        super.init()
    }

    public func start() {
        central = CBCentralManager(delegate: self, queue: queue)
    }

    /// Reads the Body Sensor Location again (the app's "refresh" button).
    public func refreshSensorLocation() {
        let work: @Sendable () -> Void = { [self] in
            guard let sensor,
                let c = sensor.services?.first(where: { $0.uuid == heartRateServiceUUID })?
                    .characteristics?.first(where: { $0.uuid == bodySensorLocationUUID })
            else { return }
            sensor.readValue(for: c)
        }
        (queue ?? .main).async(execute: work)
    }

    private func log(_ s: String) { lock.withLock { _events.append(s) } }
    private func set(_ s: Status) { lock.withLock { _status = s } }

    public func centralManagerDidUpdateState(_ central: CBCentralManager) {
        log("state \(central.state.rawValue)")
        guard central.state == .poweredOn else { return set(.off) }
        if let sensor {
            // Bluetooth came back: the sensor we know, wherever it is.
            set(.waitingForSensor)
            central.connect(sensor)
        } else {
            set(.scanning)
            central.scanForPeripherals(withServices: [heartRateServiceUUID], options: nil)
        }
    }

    public func centralManager(
        _ central: CBCentralManager, didDiscover peripheral: CBPeripheral,
        advertisementData: [String: Any], rssi RSSI: NSNumber
    ) {
        log("discovered \(peripheral.name ?? "?") \(RSSI)")
        guard lock.withLock({ sensor == nil }) else { return }
        lock.withLock { sensor = peripheral }
        central.stopScan()
        set(.connecting)
        central.connect(peripheral, options: nil)
    }

    public func centralManager(_ central: CBCentralManager, didConnect peripheral: CBPeripheral) {
        log("connected")
        set(.connected)
        peripheral.delegate = self
        peripheral.discoverServices([heartRateServiceUUID])
    }

    public func centralManager(_ central: CBCentralManager, didFailToConnect peripheral: CBPeripheral, error: Error?) {
        log("failed to connect: \(error.map { "\($0)" } ?? "?")")
        set(.waitingForSensor)
        central.connect(peripheral)
    }

    public func centralManager(_ central: CBCentralManager, didDisconnectPeripheral peripheral: CBPeripheral, error: Error?) {
        log("disconnected: \((error as? CBError)?.code.rawValue.description ?? "nil")")
        lock.withLock { _measurement = nil }
        // Ask again: the request stays pending until the sensor is back in range.
        set(.waitingForSensor)
        central.connect(peripheral)
    }

    public func peripheral(_ peripheral: CBPeripheral, didDiscoverServices error: Error?) {
        guard error == nil, let s = peripheral.services?.first(where: { $0.uuid == heartRateServiceUUID }) else { return log("no heart-rate service") }
        peripheral.discoverCharacteristics([heartRateMeasurementUUID, bodySensorLocationUUID], for: s)
    }

    public func peripheral(_ peripheral: CBPeripheral, didDiscoverCharacteristicsFor service: CBService, error: Error?) {
        for c in service.characteristics ?? [] {
            if c.uuid == heartRateMeasurementUUID { peripheral.setNotifyValue(true, for: c) }
            if c.uuid == bodySensorLocationUUID { peripheral.readValue(for: c) }
        }
    }

    public func peripheral(_ peripheral: CBPeripheral, didUpdateNotificationStateFor characteristic: CBCharacteristic, error: Error?) {
        log("notifying \(characteristic.isNotifying)\(error.map { " error \($0)" } ?? "")")
    }

    public func peripheral(_ peripheral: CBPeripheral, didUpdateValueFor characteristic: CBCharacteristic, error: Error?) {
        if let error { return log("read \(characteristic.uuid.uuidString) failed: \((error as NSError).domain) \((error as NSError).code)") }
        guard let value = characteristic.value else { return }
        switch characteristic.uuid {
        case heartRateMeasurementUUID:
            guard let m = HeartRateMeasurement(value) else { return log("malformed measurement") }
            lock.withLock { _measurement = m }
            log("heart rate \(m.beatsPerMinute)")
        case bodySensorLocationUUID:
            let places = ["Other", "Chest", "Wrist", "Finger", "Hand", "Ear Lobe", "Foot"]
            let i = Int(value.first ?? 0)
            lock.withLock { _location = i < places.count ? places[i] : "Unknown" }
            log("location \(i)")
        default:
            break
        }
    }
}
