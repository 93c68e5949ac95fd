// Handlers answering with data, ATT errors, delays and silence; and what only a real stack can simulate:
// link loss mid-procedure, ATT timeouts, lost packets, pairing and bond loss, address rotation, L2CAP.
import Foundation
import Testing
import CoreBluetooth
import CoreBluetoothTesting
import BLEHost

/// Answers reads and writes by the characteristic's last octet, so that one device shows every answer.
final class Script: @unchecked Sendable {
    private let lock = NSLock()
    private var _read: SimulatedReadResponse = .value(Data([1]))
    private var _write: SimulatedWriteResponse = .success
    private var _writes: [Data] = []
    var read: SimulatedReadResponse {
        get { lock.withLock { _read } }
        set { lock.withLock { _read = newValue } }
    }
    var write: SimulatedWriteResponse {
        get { lock.withLock { _write } }
        set { lock.withLock { _write = newValue } }
    }
    var writes: [Data] { lock.withLock { _writes } }
    func wrote(_ d: Data) { lock.withLock { _writes.append(d) } }
}

func scriptedDevice(_ script: Script) -> PeripheralSpec {
    sampleDevice()
        .onRead { r in r.characteristic == readable ? script.read : .value(r.currentValue) }
        .onWrite { w in
            script.wrote(w.value); return script.write
        }
        .build()
}

@Suite(.serialized) struct HandlerTests {
    @Test func readsAnswerWithDataErrorsDelaysOrNothing() throws {
        let script = Script()
        let (sim, _, app) = try connectedApp(seed: 11, spec: scriptedDevice(script))
        defer { sim.finish() }
        let c = try #require(app.characteristic(readable.uuidString))
        #expect(app.values[readable.uuidString] == Data([1]))
        // An ATT error reaches the app as CBATTError.
        script.read = .error(.insufficientResources)
        app.onQueue { app.target!.readValue(for: c) }
        sim.runUntilIdle()
        #expect(app.log.last == "readError:\(readable.uuidString):CBATTErrorDomain:\(CBATTError.Code.insufficientResources.rawValue)")
        // A delayed answer arrives after its delay of virtual time, not before.
        script.read = .delayed(3, .value(Data([2, 2])))
        let t0 = sim.now
        app.onQueue { app.target!.readValue(for: c) }
        sim.advance(by: .milliseconds(2999))
        #expect(app.values[readable.uuidString] == Data([1]))
        #expect(sim.run(until: { app.values[readable.uuidString] == Data([2, 2]) }, within: .seconds(1)))
        #expect(sim.now - t0 >= .seconds(3))
        // A long value is read whole (Read Blob at ATT_MTU 23 ... the stack negotiates 517, so use 600 octets).
        let long = Data((0..<512).map { UInt8($0 & 0xFF) })
        script.read = .value(long)
        app.onQueue { app.target!.readValue(for: c) }
        sim.runUntilIdle()
        #expect(app.values[readable.uuidString] == long)
        // No answer at all: ATT's 30-second transaction timeout ends the link (Vol 3 Part F §3.3.3).
        script.read = .noResponse
        let t1 = sim.now
        app.onQueue { app.target!.readValue(for: c) }
        #expect(sim.run(until: { app.has("disconnected") }, within: .seconds(60)))
        #expect(sim.now - t1 >= .seconds(30) && sim.now - t1 < .seconds(31), "\(sim.now - t1)")
    }

    @Test func writesAreStoredOrRefused() throws {
        let script = Script()
        let (sim, device, app) = try connectedApp(seed: 12, spec: scriptedDevice(script))
        defer { sim.finish() }
        let c = try #require(app.characteristic(writable.uuidString))
        app.onQueue { app.target!.writeValue(Data([9, 8]), for: c, type: .withResponse) }
        sim.runUntilIdle()
        #expect(app.log.last == "wrote:\(writable.uuidString):ok")
        #expect(device.value(of: writable) == Data([9, 8]))
        script.write = .error(.writeNotPermitted)
        app.onQueue { app.target!.writeValue(Data([7]), for: c, type: .withResponse) }
        sim.runUntilIdle()
        #expect(app.log.last == "wrote:\(writable.uuidString):CBATTErrorDomain:\(CBATTError.Code.writeNotPermitted.rawValue)")
        #expect(device.value(of: writable) == Data([9, 8]))
        // A write without response: the handler sees it, nothing is answered.
        script.write = .success
        app.onQueue { app.target!.writeValue(Data([6]), for: c, type: .withoutResponse) }
        sim.runUntilIdle()
        #expect(script.writes.last == Data([6]))
        #expect(device.value(of: writable) == Data([6]))
    }

    @Test func subscriptionsAreReported() throws {
        final class Seen: @unchecked Sendable { let lock = NSLock(); var list: [String] = [] }
        let seen = Seen()
        let spec = sampleDevice().onSubscriptionChange { uuid, on in seen.lock.withLock { seen.list.append("\(uuid.uuidString):\(on)") } }.build()
        let (sim, _, app) = try connectedApp(seed: 13, spec: spec)
        defer { sim.finish() }
        #expect(seen.lock.withLock { seen.list } == ["\(notifying.uuidString):true"])
        app.onQueue { app.target!.setNotifyValue(false, for: app.characteristic(notifying.uuidString)!) }
        sim.runUntilIdle()
        #expect(seen.lock.withLock { seen.list } == ["\(notifying.uuidString):true", "\(notifying.uuidString):false"])
    }

    @Test func anL2CAPChannelEchoes() throws {
        let spec = sampleDevice().l2capChannel(psm: 0x0081) { channel in channel.echo() }.build()
        let (sim, _, app) = try connectedApp(seed: 14, spec: spec)
        defer { sim.finish() }
        app.onQueue { app.target!.openL2CAPChannel(0x0081) }
        #expect(sim.run(until: { app.has("l2cap:true") }, within: .seconds(5)), "\(app.log)")
        let channel = try #require(app.openedChannel)
        let input = channel.inputStream!, output = channel.outputStream!
        input.open(); output.open()
        let sent: [UInt8] = Array("ping over L2CAP".utf8)
        #expect(output.write(sent, maxLength: sent.count) == sent.count)
        var got: [UInt8] = []
        #expect(
            sim.run(
                until: {
                    var buf = [UInt8](repeating: 0, count: 64)
                    while input.hasBytesAvailable { let n = input.read(&buf, maxLength: 64); if n <= 0 { break }; got += buf[0..<n] }
                    return got == sent
                }, within: .seconds(5)))
        input.close(); output.close()
    }
}

@Suite(.serialized) struct FaultTests {
    @Test func aLinkLostMidProcedureFailsWhatWasInFlight() throws {
        let script = Script()
        let (sim, device, app) = try connectedApp(seed: 15, spec: scriptedDevice(script))
        defer { sim.finish() }
        script.read = .delayed(10, .value(Data([5])))
        let before = app.values[readable.uuidString]
        let c = try #require(app.characteristic(readable.uuidString))
        app.onQueue { app.target!.readValue(for: c) }
        sim.advance(by: .seconds(1))
        device.simulateLinkLoss()
        #expect(sim.run(until: { app.has("disconnected") }, within: .seconds(30)))
        #expect(app.has("disconnected:CBErrorDomain:\(CBError.Code.connectionTimeout.rawValue)"))
        // The answer due at 10 s never arrives.
        sim.advance(by: .seconds(20))
        #expect(app.values[readable.uuidString] == before)
    }

    @Test func aDeviceThatStopsAnsweringTimesOutAndAnswersAgainLater() throws {
        let (sim, device, app) = try connectedApp(seed: 16, reconnect: true)
        defer { sim.finish() }
        device.simulateUnresponsiveness()
        let c = try #require(app.characteristic(readable.uuidString))
        let t0 = sim.now
        app.onQueue { app.target!.readValue(for: c) }
        #expect(sim.run(until: { app.has("disconnected") }, within: .seconds(60)))
        #expect(sim.now - t0 >= .seconds(30))
        device.simulateUnresponsiveness(false)
        #expect(sim.run(until: { app.count("connected") == 2 }, within: .seconds(10)))
    }

    @Test func lostAdvertisementsAreDeterministicForASeed() throws {
        func run(seed: UInt64) throws -> (Duration, [Int]) {
            let sim = try BluetoothSimulation(seed: seed, installing: false)
            defer { sim.finish() }
            sim.simulateAdvertisingLoss(0.9)
            try sim.add(sampleDevice(proximity: .near).build())
            let app = ExplorerApp(service: customService)
            app.subscribe = false
            app.start(in: sim)
            #expect(sim.run(until: { app.has("connected") }, within: .seconds(60)))
            return (sim.now, app.rssi)
        }
        let a = try run(seed: 100), b = try run(seed: 100), c = try run(seed: 101)
        #expect(a.0 == b.0 && a.1 == b.1)
        #expect(a.0 != c.0)
        // With 90 % of the advertisements lost, finding the device takes several advertising intervals.
        let clean = try {
            let sim = try BluetoothSimulation(seed: 100, installing: false)
            defer { sim.finish() }
            try sim.add(sampleDevice(proximity: .near).build())
            let app = ExplorerApp(service: customService)
            app.start(in: sim)
            _ = sim.run(until: { app.has("connected") }, within: .seconds(60))
            return sim.now
        }()
        #expect(a.0 > clean)
    }

    @Test func pairingThenBondLossPairsAgain() throws {
        let service = CBMutableService(type: customService, primary: true)
        service.characteristics = [CBMutableCharacteristic(type: readable, properties: [.read], value: nil, permissions: [.readEncryptionRequired])]
        let spec = PeripheralSpec.simulatePeripheral()
            .advertising(advertisementData: [CBAdvertisementDataServiceUUIDsKey: [customService]])
            .connectable(name: "Secure", services: [service])
            .onRead { _ in .value(Data("secret".utf8)) }
            .build()
        let sim = try BluetoothSimulation(seed: 17, installing: false)
        defer { sim.finish() }
        let device = try sim.add(spec)
        var paired = 0
        let lock = NSLock()
        sim.phone.loop.sync { sim.phone.addSecurityObserver { _, e in if case .paired = e { lock.withLock { paired += 1 } } } }
        let app = ExplorerApp(service: customService)
        app.reconnect = true
        app.start(in: sim)
        // The read is refused for lack of encryption; the stack pairs (Just Works) and reads again.
        #expect(sim.run(until: { app.values[readable.uuidString] == Data("secret".utf8) }, within: .seconds(30)), "\(app.log)")
        #expect(lock.withLock { paired } == 1)
        // Reconnected (the app reads again on each connection) on the stored bond: no new pairing.
        device.simulateDisconnection()
        #expect(sim.run(until: { app.count("read:\(readable.uuidString)") == 2 }, within: .seconds(30)), "\(app.log)")
        #expect(lock.withLock { paired } == 1)
        // The device forgets its keys: as on iOS, the phone encrypts with its stored key on reconnecting, the
        // device refuses it, and the connection fails with CBError.peerRemovedPairingInformation (14). No pairing
        // behind the user's back: the phone keeps its bond.
        device.simulateBondLoss()
        device.simulateDisconnection()
        #expect(sim.run(until: { app.has("failed:14") }, within: .seconds(60)), "\(app.log)")
        #expect(lock.withLock { paired } == 1)
        #expect(sim.phone.loop.sync { sim.phone.bondStore.bonds.count } == 1)
        // The user forgets the device; the app connects again, the read pairs anew and succeeds.
        sim.phone.loop.sync { for b in sim.phone.bondStore.bonds { _ = sim.phone.removeBond(b.identityAddress) } }
        app.queue?.sync { if let p = app.target { app.central.connect(p) } }
        #expect(sim.run(until: { app.count("read:\(readable.uuidString)") == 3 }, within: .seconds(60)), "\(app.log)")
        #expect(lock.withLock { paired } == 2)
        #expect(!app.has("readError"))
    }

    @Test func privateAddressRotationMakesNewPeripheralsForAStranger() throws {
        let sim = try BluetoothSimulation(seed: 18, installing: false)
        defer { sim.finish() }
        let device = try sim.add(sampleDevice().build())
        device.simulatePrivateAddressRotation(every: 60)
        let app = ExplorerApp(service: customService)
        app.start(in: sim)
        app.subscribe = false
        sim.advance(by: .seconds(1))
        let first = device.address
        #expect(first.randomKind == .resolvablePrivate)
        // The app is connected to the first; a second scanner of the test's own sees the rotation.
        sim.advance(by: .seconds(181))
        #expect(device.address != first)
        #expect(device.address.randomKind == .resolvablePrivate)
    }

    @Test func aDayOfReconnectionsOnTheVirtualClock() throws {
        let (sim, device, app) = try connectedApp(seed: 19, reconnect: true)
        defer { sim.finish() }
        let started = Date(), steps0 = sim.clockSteps
        sim.advance(by: .seconds(60))
        print("a connected minute: \(sim.clockSteps - steps0) clock steps")
        // The device drops the link every ten minutes for 24 hours; the app reconnects each time.
        for _ in 0..<144 {
            sim.advance(by: .seconds(600))
            device.simulateDisconnection()
        }
        #expect(sim.run(until: { app.count("connected") == 145 }, within: .seconds(10)))
        #expect(sim.now >= .seconds(86_400))
        print("a simulated day of 144 reconnections took \(Date().timeIntervalSince(started)) s, \(sim.clockSteps - steps0) clock steps")
    }

    @Test func theSameSeedGivesTheSameRun() throws {
        func run() throws -> ([String], Duration) {
            let (sim, device, app) = try connectedApp(seed: 20, reconnect: true)
            defer { sim.finish() }
            device.simulateProximityChange(.outOfRange)
            sim.advance(by: .seconds(30))
            device.simulateProximityChange(.far)
            _ = sim.run(until: { app.count("connected") == 2 }, within: .seconds(30))
            return (app.log, sim.now)
        }
        let a = try run(), b = try run()
        #expect(a.0 == b.0)
        #expect(a.1 == b.1)
    }
}
