// CBPeripheralManager on the BlueZ backend against the fake bluetoothd: a service published as a registered
// application (GattManager1), an advertisement (LEAdvertisingManager1), and a remote central's requests, which
// bluetoothd turns into calls on our exported objects: reads of cached and dynamic values, writes with and without
// response, subscriptions and value updates, and an error answered with respond(to:withResult:).
import Foundation
import Testing
import TestSupport
import DBus
@testable import CoreBluetooth

private let heartRate = "0000180d-0000-1000-8000-00805f9b34fb"
private let sensorLocation = "00002a38-0000-1000-8000-00805f9b34fb"
private let measurement = "00002a37-0000-1000-8000-00805f9b34fb"
private let control = "00002a39-0000-1000-8000-00805f9b34fb"
private let counter = "6e400002-b5a3-f393-e0a9-e50e24dcca9e"

final class PeripheralRecorder: NSObject, CBPeripheralManagerDelegate, EventLog, @unchecked Sendable {
    private let lock = NSLock()
    private var log: [String] = []
    private var errors: [String: any Error] = [:]
    var readAnswer: (CBATTError.Code, Data?) = (.success, Data([42]))
    var events: [String] { lock.withLock { log } }
    func error(_ key: String) -> (any Error)? { lock.withLock { errors[key] } }
    private func note(_ s: String, _ e: (any Error)? = nil) {
        lock.withLock {
            log.append(s)
            if let e { errors[s] = e }
        }
    }

    func peripheralManagerDidUpdateState(_ peripheral: CBPeripheralManager) { note("state \(peripheral.state.rawValue)") }
    func peripheralManager(_ peripheral: CBPeripheralManager, didAdd service: CBService, error: (any Error)?) {
        note(error == nil ? "added \(service.uuid.uuidString)" : "add error", error)
    }
    func peripheralManagerDidStartAdvertising(_ peripheral: CBPeripheralManager, error: (any Error)?) {
        note(error == nil ? "advertising" : "advertising error", error)
    }
    func peripheralManager(_ peripheral: CBPeripheralManager, didReceiveRead request: CBATTRequest) {
        note("read \(request.characteristic.uuid.uuidString) at \(request.offset)")
        let (code, value) = lock.withLock { readAnswer }
        request.value = value
        peripheral.respond(to: request, withResult: code)
    }
    func peripheralManager(_ peripheral: CBPeripheralManager, didReceiveWrite requests: [CBATTRequest]) {
        for r in requests { note("write \(r.characteristic.uuid.uuidString) \([UInt8](r.value ?? Data()))") }
        peripheral.respond(to: requests[0], withResult: .success)
    }
    func peripheralManager(_ peripheral: CBPeripheralManager, central: CBCentral, didSubscribeTo characteristic: CBCharacteristic) {
        note("subscribed \(characteristic.uuid.uuidString) mtu \(central.maximumUpdateValueLength + 3)")
    }
    func peripheralManager(_ peripheral: CBPeripheralManager, central: CBCentral, didUnsubscribeFrom characteristic: CBCharacteristic) {
        note("unsubscribed \(characteristic.uuid.uuidString)")
    }
    func peripheralManagerIsReady(toUpdateSubscribers peripheral: CBPeripheralManager) { note("ready") }

}

@Suite(
    .enabled(if: PrivateBus.available, "needs dbus-daemon (Debian package dbus-daemon; scripts/test installs it)"),
    .timeLimit(.minutes(2)))
struct BlueZPeripheralTests {
    /// A private bus, the fake bluetoothd with one adapter, and a peripheral manager on it, powered on.
    static func poweredOnManager() async throws -> (PrivateBus, FakeBlueZ, PeripheralRecorder, CBPeripheralManager) {
        let bus = try await PrivateBus()
        let fake = try await FakeBlueZ(address: bus.address)
        fake.addAdapter()
        let r = PeripheralRecorder()
        let pm = CBPeripheralManager(delegate: r, queue: DispatchQueue(label: "pm"), bluez: BlueZOptions(busAddress: bus.address))
        try await r.wait(for: "state \(CBManagerState.poweredOn.rawValue)")
        return (bus, fake, r, pm)
    }

    @Test func aPublishedServiceAnswersBlueZsCallsAndAdvertises() async throws {
        let (bus, fake, r, pm) = try await Self.poweredOnManager()
        defer { withExtendedLifetime(bus) {} }

        let service = CBMutableService(type: CBUUID(string: "180D"), primary: true)
        let location = CBMutableCharacteristic(type: CBUUID(string: "2A38"), properties: [.read], value: Data([1]), permissions: [.readable])
        let hr = CBMutableCharacteristic(type: CBUUID(string: "2A37"), properties: [.notify], value: nil, permissions: [])
        hr.descriptors = [CBMutableDescriptor(type: CBUUID(string: CBUUIDCharacteristicUserDescriptionString), value: "Heart Rate Measurement")]
        let cp = CBMutableCharacteristic(type: CBUUID(string: "2A39"), properties: [.write, .writeWithoutResponse], value: nil, permissions: [.writeable])
        let count = CBMutableCharacteristic(type: CBUUID(string: counter), properties: [.read], value: nil, permissions: [.readable])
        service.characteristics = [location, hr, cp, count]
        pm.add(service)
        try await r.wait(for: "added 180D")
        // What bluetoothd read from our application: the service and its characteristics with BlueZ's flags.
        let app = try #require(fake.registeredApplications.values.first)
        #expect(app.values.contains { $0["org.bluez.GattService1"]?["UUID"] == .string(heartRate) })
        let flags = app.values.compactMap { $0["org.bluez.GattCharacteristic1"] }
            .reduce(into: [String: [String]]()) { $0[$1["UUID"]!.string!] = $1["Flags"]!.arrayItems!.compactMap(\.string) }
        #expect(flags[sensorLocation] == ["read"])
        #expect(flags[measurement] == ["notify"])
        #expect(flags[control] == ["write-without-response", "write"])
        #expect(app.values.contains { $0["org.bluez.GattDescriptor1"]?["UUID"] == .string("00002901-0000-1000-8000-00805f9b34fb") })

        pm.startAdvertising([CBAdvertisementDataLocalNameKey: "OCB HR", CBAdvertisementDataServiceUUIDsKey: [CBUUID(string: "180D")]])
        try await r.wait(for: "advertising")
        #expect(pm.isAdvertising)
        let ad = try #require(fake.advertisements.values.first)
        #expect(ad["Type"] == .string("peripheral"))
        #expect(ad["LocalName"] == .string("OCB HR"))
        #expect(ad["ServiceUUIDs"]?.arrayItems == [.string(heartRate)])

        // A cached value is answered without the app; a dynamic one through didReceiveRead and respond.
        let cached = try await fake.callApplication(sensorLocation, "ReadValue", [FakeBlueZ.requestOptions()])
        #expect(cached.body.first?.byteArray == [1])
        let dynamic = try await fake.callApplication(counter, "ReadValue", [FakeBlueZ.requestOptions(offset: 0)])
        #expect(dynamic.body.first?.byteArray == [42])
        #expect(r.events.contains("read \(CBUUID(string: counter).uuidString) at 0"))
        r.readAnswer = (.readNotPermitted, nil)
        await #expect(throws: DBusError.remote(name: "org.bluez.Error.NotPermitted", message: "Not permitted")) {
            try await fake.callApplication(counter, "ReadValue", [FakeBlueZ.requestOptions()])
        }
        r.readAnswer = (.insufficientResources, nil)
        await #expect(throws: DBusError.remote(name: "org.bluez.Error.Failed", message: "0x11")) {
            try await fake.callApplication(counter, "ReadValue", [FakeBlueZ.requestOptions()])
        }

        _ = try await fake.callApplication(control, "WriteValue", [.bytes([1]), FakeBlueZ.requestOptions(type: "request")])
        _ = try await fake.callApplication(control, "WriteValue", [.bytes([2, 3]), FakeBlueZ.requestOptions(type: "command")])
        try await r.wait(for: "write 2A39 [2, 3]")
        #expect(r.events.contains("write 2A39 [1]"))

        _ = try await fake.callApplication(measurement, "StartNotify", [])
        try await r.wait(for: "subscribed 2A37 mtu 185")
        #expect(hr.isNotifying)
        #expect(pm.updateValue(Data([6, 70]), for: hr, onSubscribedCentrals: nil))
        try await r.wait("the value change") { _ in fake.notifiedValues.contains { $0.value == [6, 70] } }
        #expect(fake.notifiedValues.first?.path == fake.applicationCharacteristic(measurement)?.path)
        _ = try await fake.callApplication(measurement, "StopNotify", [])
        try await r.wait(for: "unsubscribed 2A37")

        pm.stopAdvertising()
        pm.remove(service)
        try await r.wait("unregistered") { _ in fake.advertisements.isEmpty && fake.registeredApplications.isEmpty }
        #expect(!pm.isAdvertising)
        withExtendedLifetime(pm) {}
    }

    /// An app that sends until updateValue says false (the seeds' way) is paced by bluetoothd: a window of values it
    /// has not yet handled, then false, then peripheralManagerIsReady once it has; nothing is lost or reordered.
    @Test func updatesArePacedByBluetoothdAndReadyFollows() async throws {
        let (bus, fake, r, pm) = try await Self.poweredOnManager()
        defer { withExtendedLifetime(bus) {} }
        let service = CBMutableService(type: CBUUID(string: "180D"), primary: true)
        let hr = CBMutableCharacteristic(type: CBUUID(string: "2A37"), properties: [.notify], value: nil, permissions: [])
        service.characteristics = [hr]
        pm.add(service)
        try await r.wait(for: "added 180D")
        _ = try await fake.callApplication(measurement, "StartNotify", [])
        try await r.wait(for: "subscribed 2A37 mtu 23")

        // bluetoothd is busy: the app's loop stops at the window instead of queueing without end.
        fake.holdValueChanges(true)
        var accepted = 0
        while accepted < 1000, pm.updateValue(Data([UInt8(accepted)]), for: hr, onSubscribedCentrals: nil) { accepted += 1 }
        #expect(accepted == BlueZPeripheral.updateWindow)
        try await pause(nanoseconds: 300_000_000)
        #expect(!r.events.contains("ready"))
        #expect(!pm.updateValue(Data([0xFF]), for: hr, onSubscribedCentrals: nil))
        // It catches up: ready follows, and every accepted value reached it, in order.
        fake.holdValueChanges(false)
        try await r.wait(for: "ready")
        try await r.wait("the values") { _ in fake.notifiedValues.count >= accepted }
        #expect(fake.notifiedValues.map(\.value) == (0..<accepted).map { [UInt8($0)] })
        // Room again; a long run with bluetoothd keeping up loses nothing either.
        var sent = accepted
        let start = ContinuousClock.now
        while sent < 500, ContinuousClock.now - start < .seconds(30) {
            if pm.updateValue(Data([UInt8(truncatingIfNeeded: sent)]), for: hr, onSubscribedCentrals: nil) { sent += 1 } else { try await pause(nanoseconds: 1_000_000) }
        }
        #expect(sent == 500)
        try await r.wait("all 500") { _ in fake.notifiedValues.count >= 500 }
        #expect(fake.notifiedValues.map(\.value) == (0..<500).map { [UInt8(truncatingIfNeeded: $0)] })
        withExtendedLifetime(pm) {}
    }

    @Test func aRefusedRegistrationIsDidAddWithTheError() async throws {
        let (bus, fake, r, pm) = try await Self.poweredOnManager()
        defer { withExtendedLifetime(bus) {} }
        fake.failNext("RegisterApplication", name: "org.bluez.Error.Failed", message: "Failed to register application")
        let service = CBMutableService(type: CBUUID(string: "180F"), primary: true)
        service.characteristics = [CBMutableCharacteristic(type: CBUUID(string: "2A19"), properties: [.read], value: Data([90]), permissions: [.readable])]
        pm.add(service)
        try await r.wait(for: "add error")
        #expect((r.error("add error") as NSError?)?.localizedDescription.contains("Failed to register application") == true)
        fake.failNext("RegisterAdvertisement", name: "org.bluez.Error.Failed", message: "Maximum advertisements reached")
        pm.startAdvertising([CBAdvertisementDataLocalNameKey: "X"])
        try await r.wait(for: "advertising error")
        #expect(!pm.isAdvertising)
        withExtendedLifetime(pm) {}
    }
}
