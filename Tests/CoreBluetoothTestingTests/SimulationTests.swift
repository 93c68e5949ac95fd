// The kit against an app that uses nothing but Core Bluetooth: simulated peripherals declared in code,
// their handlers (data, ATT errors, delays, silence), and the virtual clock.
import Foundation
import Testing
import CoreBluetooth
import CoreBluetoothTesting

let customService = CBUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")
let readable = CBUUID(string: "6E400002-B5A3-F393-E0A9-E50E24DCCA9E")
let writable = CBUUID(string: "6E400003-B5A3-F393-E0A9-E50E24DCCA9E")
let notifying = CBUUID(string: "6E400004-B5A3-F393-E0A9-E50E24DCCA9E")

/// A device with a readable, a writable and a notifying characteristic.
func sampleDevice(name: String = "Sample", proximity: Proximity = .immediate) -> PeripheralSpec.Builder {
    let service = CBMutableService(type: customService, primary: true)
    let r = CBMutableCharacteristic(type: readable, properties: [.read], value: nil, permissions: [.readable])
    r.descriptors = [CBMutableDescriptor(type: CBUUID(string: CBUUIDCharacteristicUserDescriptionString), value: "The value")]
    service.characteristics = [
        r,
        CBMutableCharacteristic(type: writable, properties: [.write, .writeWithoutResponse], value: nil, permissions: [.writeable]),
        CBMutableCharacteristic(type: notifying, properties: [.notify, .indicate], value: nil, permissions: []),
    ]
    return PeripheralSpec.simulatePeripheral(proximity: proximity)
        .advertising(
            advertisementData: [
                CBAdvertisementDataLocalNameKey: name, CBAdvertisementDataServiceUUIDsKey: [customService],
                CBAdvertisementDataManufacturerDataKey: Data([0x59, 0x00, 0x2A]),
            ],
            withInterval: 0.1
        )
        .connectable(name: name, services: [service])
}

@Suite(.serialized) struct SimulationTests {
    @Test func anAppDiscoversConnectsAndReadsOnTheVirtualClock() throws {
        let sim = try BluetoothSimulation(seed: 1, installing: false)
        defer { sim.finish() }
        let device = try sim.add(sampleDevice().onRead { r in .value(Data("hello".utf8).dropFirst(0)) }.build())
        let app = ExplorerApp(service: customService)
        app.start(in: sim)
        #expect(sim.run(until: { app.values[readable.uuidString] != nil && app.has("notifying:\(notifying.uuidString):true") }, within: .seconds(5)))
        #expect(app.values[readable.uuidString] == Data("hello".utf8))
        #expect(app.has("descriptor:2901:The value"))
        #expect(app.advertisement[CBAdvertisementDataLocalNameKey] as? String == "Sample")
        #expect(app.advertisement[CBAdvertisementDataManufacturerDataKey] as? Data == Data([0x59, 0x00, 0x2A]))
        // Proximity .immediate: one metre, −40 dBm.
        #expect(app.rssi.first == -40)
        #expect(device.connectionCount == 1)
        // Discovery took advertising events of virtual time, not real time.
        #expect(sim.now > .zero && sim.now < .seconds(2))
        // Notifications reach the app.
        device.simulateValueUpdate(Data([1, 2, 3]), for: notifying)
        #expect(app.updates[notifying.uuidString] == [Data([1, 2, 3])])
    }

    @Test func anAppWithANilQueueGetsItsCallbacks() throws {
        let sim = try BluetoothSimulation(seed: 2, installing: false)
        defer { sim.finish() }
        try sim.add(sampleDevice().build())
        let app = ExplorerApp(service: customService, queue: nil)
        app.start(in: sim)
        #expect(sim.run(until: { app.has("connected") }, within: .seconds(5)), "\(app.log)")
    }
}
