// The heart-rate monitor app, tested on CI with no hardware: a simulated sensor on a simulated air, on a
// clock the test owns. The app is unchanged (it creates its CBCentralManager with a nil queue, as on iOS);
// only the test touches CoreBluetoothTesting. XCTest runs on the main thread, where the simulation runs
// the main queue for the app's delegate calls.
import XCTest
import Foundation
import CoreBluetooth
import CoreBluetoothTesting
#if OCB_EXAMPLE_INSIDE_PACKAGE
import HeartRateMonitorExample   // the same sources, built inside OpenCoreBluetooth's own test run
#else
import HeartRateMonitor
#endif

final class HeartRateMonitorTests: XCTestCase {
    private var sim: BluetoothSimulation!
    private var sensor: SimulatedPeripheral!
    private let reads = Counter()

    /// A chest strap: advertises the Heart Rate service, notifies measurements, answers the Body Sensor
    /// Location (Chest) — the first read at once, later ones after `slowReads` seconds.
    private func heartRateSensor(slowReads: TimeInterval = 0) -> PeripheralSpec {
        let measurement = CBMutableCharacteristic(type: heartRateMeasurementUUID, properties: [.notify], value: nil, permissions: [])
        let location = CBMutableCharacteristic(type: bodySensorLocationUUID, properties: [.read], value: nil, permissions: [.readable])
        let service = CBMutableService(type: heartRateServiceUUID, primary: true)
        service.characteristics = [measurement, location]
        let reads = self.reads
        return PeripheralSpec.simulatePeripheral(proximity: .near)
            .advertising(
                advertisementData: [
                    CBAdvertisementDataLocalNameKey: "Polar H10",
                    CBAdvertisementDataServiceUUIDsKey: [heartRateServiceUUID],
                ],
                withInterval: 0.25
            )
            .connectable(name: "Polar H10", services: [service], connectionInterval: 0.045, mtu: 23)
            .onRead { request in
                guard request.characteristic == bodySensorLocationUUID else { return .error(.readNotPermitted) }
                return reads.next() == 0 || slowReads == 0 ? .value(Data([0x01])) : .delayed(slowReads, .value(Data([0x01])))
            }
            .build()
    }

    override func setUpWithError() throws {
        sim = try BluetoothSimulation(seed: 24)
    }

    override func tearDown() {
        sim.finish()
        sim = nil
        sensor = nil
    }

    /// Starts the app and runs until it is subscribed to the sensor's measurements.
    private func startMonitoring(_ monitor: HeartRateMonitor, slowReads: TimeInterval = 0) throws {
        sensor = try sim.add(heartRateSensor(slowReads: slowReads))
        monitor.start()
        XCTAssertTrue(sim.run(until: { monitor.events.contains("notifying true") }, within: .seconds(10)), "\(monitor.events)")
    }

    func testDiscoversSubscribesAndDecodesAMeasurement() throws {
        let monitor = HeartRateMonitor()
        try startMonitoring(monitor)
        XCTAssertEqual(monitor.status, .connected)
        XCTAssertEqual(monitor.sensorName, "Polar H10")
        XCTAssertEqual(monitor.sensorLocation, "Chest")
        // Flags: 8-bit value, contact detected, energy expended, one RR interval.
        sensor.simulateValueUpdate(Data([0x1E, 72, 0x34, 0x12, 0x00, 0x04]), for: heartRateMeasurementUUID)
        XCTAssertEqual(monitor.measurement, HeartRateMeasurement(Data([0x1E, 72, 0x34, 0x12, 0x00, 0x04])))
        XCTAssertEqual(monitor.measurement?.beatsPerMinute, 72)
        XCTAssertEqual(monitor.measurement?.sensorContact, true)
        XCTAssertEqual(monitor.measurement?.energyExpended, 0x1234)
        XCTAssertEqual(monitor.measurement?.rrIntervals, [1.0])
        // A 16-bit value.
        sensor.simulateValueUpdate(Data([0x01, 0x2C, 0x01]), for: heartRateMeasurementUUID)
        XCTAssertEqual(monitor.measurement?.beatsPerMinute, 300)
    }

    func testTheSensorWalksOutOfRangeAndComesBack() throws {
        let monitor = HeartRateMonitor()
        try startMonitoring(monitor)
        let start = sim.now
        sensor.simulateProximityChange(.outOfRange)
        // The link is lost after its supervision timeout; the app asks to connect again and waits.
        XCTAssertTrue(sim.run(until: { monitor.status == .waitingForSensor }, within: .seconds(10)))
        XCTAssertEqual(monitor.events.last(where: { $0.hasPrefix("disconnected") }), "disconnected: \(CBError.Code.connectionTimeout.rawValue)")
        XCTAssertGreaterThanOrEqual(sim.now - start, .seconds(1))
        // A whole hour away: nothing connects, nothing is decoded.
        sim.advance(by: .seconds(3600))
        XCTAssertEqual(monitor.status, .waitingForSensor)
        XCTAssertNil(monitor.measurement)
        // Back in range: the pending connection completes by itself and the app subscribes again.
        sensor.simulateProximityChange(.near)
        XCTAssertTrue(sim.run(until: { monitor.events.filter { $0 == "notifying true" }.count == 2 }, within: .seconds(10)), "\(monitor.events)")
        XCTAssertEqual(monitor.status, .connected)
        sensor.simulateValueUpdate(Data([0x00, 65]), for: heartRateMeasurementUUID)
        XCTAssertEqual(monitor.measurement?.beatsPerMinute, 65)
        // The hour took no real hour.
        XCTAssertGreaterThan(sim.now - start, .seconds(3600))
    }

    func testADisconnectionDuringARead() throws {
        let monitor = HeartRateMonitor()
        try startMonitoring(monitor, slowReads: 5)
        monitor.refreshSensorLocation()
        sim.advance(by: .seconds(1))
        XCTAssertEqual(reads.value, 2, "the second read is in flight")
        // The sensor drops the link while the answer is still two seconds away.
        sensor.simulateDisconnection()
        XCTAssertEqual(monitor.status, .waitingForSensor)
        XCTAssertEqual(monitor.events.last(where: { $0.hasPrefix("disconnected") }), "disconnected: \(CBError.Code.peripheralDisconnected.rawValue)")
        // The delayed answer never reaches the app; the app reconnects (the sensor advertises again) and
        // reads the location afresh.
        XCTAssertTrue(sim.run(until: { monitor.events.filter { $0 == "notifying true" }.count == 2 }, within: .seconds(10)), "\(monitor.events)")
        XCTAssertEqual(monitor.sensorLocation, "Chest")
    }

    func testASensorThatStopsAnsweringTimesOutAfterThirtySeconds() throws {
        let monitor = HeartRateMonitor()
        try startMonitoring(monitor)
        sensor.simulateUnresponsiveness()
        let start = sim.now
        monitor.refreshSensorLocation()
        // ATT's 30-second transaction timeout (Vol 3 Part F §3.3.3): the link is closed.
        XCTAssertTrue(sim.run(until: { monitor.status == .waitingForSensor }, within: .seconds(60)), "\(monitor.events)")
        XCTAssertGreaterThanOrEqual(sim.now - start, .seconds(30))
        XCTAssertLessThan(sim.now - start, .seconds(40))
    }

    func testBluetoothSwitchedOffAndOnAgain() throws {
        let monitor = HeartRateMonitor()
        try startMonitoring(monitor)
        sim.simulateStateChange(.poweredOff)
        XCTAssertEqual(monitor.status, .off, "\(monitor.events)")
        sim.simulateStateChange(.poweredOn)
        XCTAssertTrue(sim.run(until: { monitor.events.filter { $0 == "notifying true" }.count == 2 }, within: .seconds(10)), "\(monitor.events)")
    }
}

/// A counter the sensor's handler (on the simulation's loop) and the test share.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    /// Returns the count before this call, then counts it.
    func next() -> Int { lock.lock(); defer { lock.unlock() }; n += 1; return n - 1 }
    var value: Int { lock.lock(); defer { lock.unlock() }; return n }
}
