// A simulated peripheral from a `ble serve` JSON file: the same database, handles and advertising.
import Foundation
import Testing
import XCTest
import CoreBluetooth
import CoreBluetoothTesting

let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

@Suite(.serialized) struct FileSpecTests {
    @Test func theExampleDatabaseFileIsServedAsBleServeServesIt() throws {
        let spec = try PeripheralSpec(contentsOfFile: repositoryRoot.appendingPathComponent("examples/heart-rate.json").path)
        let sim = try BluetoothSimulation(seed: 21)
        defer { sim.finish() }
        let device = try sim.add(spec)
        let app = ExplorerApp(name: "Served HR")
        app.subscribe = false
        app.start()
        #expect(sim.run(until: { app.has("database discovered") && app.values["6E400002-B5A3-F393-E0A9-E50E24DCCA9E"] != nil }, within: .seconds(10)), "\(app.log)")
        // Primary services in handle order (180F is secondary: not listed), the fixed handles kept.
        #expect(app.has("services:1800,1801,180D,6E400001-B5A3-F393-E0A9-E50E24DCCA9E"))
        #expect(device.handle(of: CBUUID(string: "2A37")) == 51)
        #expect(app.characteristic("2A37")?.handle == 50)
        #expect(app.values["2A38"] == Data([0x01]))
        #expect(app.values["6E400002-B5A3-F393-E0A9-E50E24DCCA9E"].map { String(decoding: $0, as: UTF8.self) }?.hasPrefix("A long value") == true)
        #expect(app.has("descriptor:2901:Heart Rate Measurement"))
        // The encrypted characteristic made the stack pair, then read.
        #expect(sim.run(until: { app.values["6E400005-B5A3-F393-E0A9-E50E24DCCA9E"] == Data("secret".utf8) }, within: .seconds(30)), "\(app.log)")
    }

    @Test func aBrokenFileNamesItsPlace() {
        let json = Data(#"{"advertise": {"name": "X"}, "services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "properties": ["reed"]}]}]}"#.utf8)
        #expect(throws: (any Error).self) { try PeripheralSpec(json: json) }
        do { _ = try PeripheralSpec(json: json) } catch { #expect("\(error)".contains("services[0].characteristics[0].properties[0]")) }
    }
}

/// The kit under XCTest: tests run on the main thread, and an app with a nil queue gets its delegate calls.
final class SimulationXCTests: XCTestCase {
    func testAnAppWithANilQueueOnTheMainThread() throws {
        XCTAssertTrue(Thread.isMainThread)
        let sim = try BluetoothSimulation(seed: 22)
        defer { sim.finish() }
        let device = try sim.add(sampleDevice().onRead { _ in .value(Data([42])) }.build())
        let app = ExplorerApp(service: customService, queue: nil)
        app.start()
        XCTAssertTrue(sim.run(until: { app.values[readable.uuidString] == Data([42]) }, within: .seconds(5)), "\(app.log)")
        device.simulateValueUpdate(Data([7]), for: notifying)
        XCTAssertEqual(app.updates[notifying.uuidString], [Data([7])])
    }
}
