// Every CoreBluetoothMock simulate-operation, with its meaning, on the peripheral and on the manager side.
import Foundation
import Testing
import CoreBluetooth
import CoreBluetoothTesting
import TestSupport

/// An app connected to a sample device and subscribed, on a fresh simulation.
func connectedApp(seed: UInt64 = 3, spec: PeripheralSpec? = nil, reconnect: Bool = false) throws -> (BluetoothSimulation, SimulatedPeripheral, ExplorerApp) {
    let sim = try BluetoothSimulation(seed: seed, installing: false)
    let device = try sim.add(spec ?? sampleDevice().build())
    let app = ExplorerApp(service: customService)
    app.reconnect = reconnect
    app.start(in: sim)
    guard sim.run(until: { app.has("notifying:\(notifying.uuidString):true") }, within: .seconds(5)) else {
        sim.finish()
        throw SetupFailed(log: app.log)
    }
    return (sim, device, app)
}

struct SetupFailed: Error { let log: [String] }

@Suite(.serialized) struct SimulateOperationTests {
    @Test func proximityChangesTheRSSIAndOutOfRangeLosesTheLink() throws {
        let sim = try BluetoothSimulation(seed: 4, installing: false)
        defer { sim.finish() }
        let device = try sim.add(sampleDevice(proximity: .far).build())
        let app = ExplorerApp(service: customService)
        app.start(in: sim)
        #expect(sim.run(until: { app.has("connected") }, within: .seconds(5)))
        #expect(app.rssi.first == -90)
        device.simulateProximityChange(.outOfRange)
        let t0 = sim.now
        #expect(sim.run(until: { app.has("disconnected") }, within: .seconds(30)))
        // Lost after the supervision timeout (5 s, the host's LE Create Connection default), with its error.
        #expect(sim.now - t0 >= .seconds(4) && sim.now - t0 <= .seconds(6), "\(sim.now - t0)")
        #expect(app.has("disconnected:CBErrorDomain:\(CBError.Code.connectionTimeout.rawValue)"))
        // Out of range, a connection request stays pending for as long as we wait.
        app.onQueue { app.central.connect(app.target!) }
        sim.advance(by: .seconds(600))
        #expect(app.count("connected") == 1)
        device.simulateProximityChange(.immediate)
        #expect(sim.run(until: { app.count("connected") == 2 }, within: .seconds(5)))
    }

    @Test func disconnectionWithAndWithoutError() throws {
        let (sim, device, app) = try connectedApp()
        defer { sim.finish() }
        device.simulateDisconnection()
        #expect(app.has("disconnected:CBErrorDomain:\(CBError.Code.peripheralDisconnected.rawValue)"))
        app.onQueue { app.central.connect(app.target!) }
        #expect(sim.run(until: { app.count("connected") == 2 }, within: .seconds(5)))
        let t0 = sim.now
        device.simulateDisconnection(withError: CBError(.connectionTimeout))
        #expect(sim.run(until: { app.count("disconnected") == 2 }, within: .seconds(30)))
        #expect(app.log.last(where: { $0.hasPrefix("disconnected") }) == "disconnected:CBErrorDomain:\(CBError.Code.connectionTimeout.rawValue)")
        #expect(sim.now - t0 >= .seconds(4))
    }

    @Test func resetDropsTheLinkAndTheDeviceAdvertisesAgain() throws {
        let (sim, device, app) = try connectedApp(reconnect: true)
        defer { sim.finish() }
        device.simulateReset()
        #expect(sim.run(until: { app.count("connected") == 2 }, within: .seconds(30)), "\(app.log)")
        #expect(app.has("disconnected:CBErrorDomain:\(CBError.Code.connectionTimeout.rawValue)"))
    }

    @Test func serviceChangeReachesTheApp() throws {
        let (sim, device, app) = try connectedApp()
        defer { sim.finish() }
        let battery = CBMutableService(type: CBUUID(string: "180F"), primary: true)
        battery.characteristics = [CBMutableCharacteristic(type: CBUUID(string: "2A19"), properties: [.read], value: Data([77]), permissions: [.readable])]
        try device.simulateServiceChange(newServices: [battery])
        #expect(sim.run(until: { app.has("modified:") }, within: .seconds(5)), "\(app.log)")
        app.onQueue { app.target!.discoverServices(nil) }
        #expect(sim.run(until: { app.values["2A19"] == Data([77]) }, within: .seconds(5)), "\(app.log)")
    }

    @Test func valueUpdatesAdvertisementChangesAndCaching() throws {
        let sim = try BluetoothSimulation(seed: 5, installing: false)
        defer { sim.finish() }
        let device = try sim.add(sampleDevice().build())
        // simulateCaching: the app retrieves the device by identifier, with no scan.
        let id = try #require(device.simulateCaching())
        let central = sim.scope { CBCentralManager(delegate: nil, queue: DispatchQueue(label: "retrieving")) }
        #expect(sim.run(until: { central.state == .poweredOn }, within: .seconds(1)))
        #expect(central.retrievePeripherals(withIdentifiers: [id]).map(\.identifier) == [id])
        // simulateAdvertisementChange: a scanner sees the new data.
        device.simulateAdvertisementChange([CBAdvertisementDataLocalNameKey: "Renamed", CBAdvertisementDataServiceUUIDsKey: [customService]])
        let app = ExplorerApp(service: customService)
        app.subscribe = false
        app.start(in: sim)
        #expect(sim.run(until: { app.has("connected") }, within: .seconds(5)))
        #expect(app.advertisement[CBAdvertisementDataLocalNameKey] as? String == "Renamed")
        #expect(app.discovered == [id])
        _ = central
    }

    @Test func macChangeMakesANewPeripheral() throws {
        let sim = try BluetoothSimulation(seed: 6, installing: false)
        defer { sim.finish() }
        let device = try sim.add(sampleDevice().build())
        let before = try #require(device.identifier)
        device.simulateMacChange()
        let after = try #require(device.identifier)
        #expect(before != after)
        let app = ExplorerApp(service: customService)
        app.subscribe = false
        app.start(in: sim)
        #expect(sim.run(until: { app.has("connected") }, within: .seconds(5)))
        #expect(app.discovered == [after])
    }

    @Test func anotherAppConnectsAndTheAppRetrievesTheConnectedPeripheral() throws {
        let sim = try BluetoothSimulation(seed: 7, installing: false)
        defer { sim.finish() }
        let device = try sim.add(sampleDevice().build())
        #expect(device.simulateConnection())
        #expect(device.connectionCount == 1)
        let central = sim.scope { CBCentralManager(delegate: nil, queue: DispatchQueue(label: "app")) }
        #expect(sim.run(until: { central.state == .poweredOn }, within: .seconds(1)))
        let found = central.retrieveConnectedPeripherals(withServices: [customService])
        #expect(found.map(\.identifier) == [device.identifier!])
    }

    // MARK: The manager side

    // CBManager.authorization is the process's: these hold the gate that tests asserting it share.
    @Test func initialStates() async throws {
        try await ProcessGate.authorization.run {
            for (state, expected) in [
                (CBManagerState.poweredOff, CBManagerState.poweredOff), (.unauthorized, .unauthorized),
                (.unsupported, .unsupported), (.poweredOn, .poweredOn),
            ] {
                let sim = try BluetoothSimulation(seed: 8, installing: false)
                sim.simulateInitialState(state)
                let app = ExplorerApp()
                app.start(in: sim)
                sim.advance(by: .seconds(2))
                #expect(app.log.first == "state:\(expected.rawValue)", "\(state.rawValue): \(app.log)")
                #expect(CBManager.authorization == (expected == .unauthorized ? .denied : .allowedAlways))
                app.central = nil
                sim.finish()
            }
        }
    }

    @Test func stateChangesAndAuthorization() async throws {
        try await ProcessGate.authorization.run {
            let (sim, _, app) = try connectedApp(seed: 9)
            defer { sim.finish() }
            sim.simulateStateChange(.poweredOff)
            #expect(app.log.last == "state:\(CBManagerState.poweredOff.rawValue)")
            #expect(app.target?.state == .disconnected)
            sim.simulateStateChange(.poweredOn)
            #expect(app.log.last == "state:\(CBManagerState.poweredOn.rawValue)")
            sim.simulateAuthorization(.denied)
            #expect(app.central.state == .unauthorized)
            #expect(CBManager.authorization == .denied)
            sim.simulateAuthorization(.allowedAlways)
            #expect(app.central.state == .poweredOn)
            #expect(CBManager.authorization == .allowedAlways)
        }
    }

    @Test func aHardwareErrorOnOurSideResetsTheControllerAndLinksDrop() throws {
        let (sim, device, app) = try connectedApp(seed: 10)
        defer { sim.finish() }
        sim.simulateHardwareError()
        #expect(app.log.contains("state:\(CBManagerState.poweredOff.rawValue)"))
        #expect(app.log.last == "state:\(CBManagerState.poweredOn.rawValue)")
        #expect(app.target?.state == .disconnected)
        // The device finds out after its supervision timeout, and advertises again.
        #expect(sim.run(until: { device.connectionCount == 0 }, within: .seconds(10)))
        app.onQueue { app.central.connect(app.target!) }
        #expect(sim.run(until: { app.count("connected") == 2 }, within: .seconds(5)))
    }
}
