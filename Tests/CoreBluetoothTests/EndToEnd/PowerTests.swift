// The controller going away and coming back, as the managers report it: a virtual radio switched off and
// on, and a TCP controller (`ble radio`) that disappears and returns on the same port.
import Foundation
import Testing
import CoreBluetooth
import BLEHost
import BLEVirtualRadio
import BLETransport

final class StateLog: NSObject, CBCentralManagerDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "power.test")
    var states: [CBManagerState] = []
    var disconnects: [Error?] = []
    var found: CBPeripheral?
    func centralManagerDidUpdateState(_ c: CBCentralManager) { states.append(c.state) }
    func centralManager(_ c: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
        if found == nil, advertisementData[CBAdvertisementDataLocalNameKey] as? String == "HR Sensor" {
            found = p
            c.stopScan()
            c.connect(p)
        }
    }
    func centralManager(_ c: CBCentralManager, didDisconnectPeripheral p: CBPeripheral, error: Error?) { disconnects.append(error) }
}

@Suite(.serialized) struct PowerTests {
    @Test func virtualRadioOffAndOnAgain() async throws {
        let air = TestAir()
        let host = try air.host("central")
        let log = StateLog()
        let manager = CBCentralManager(delegate: log, queue: log.queue, options: nil, host: host)
        try await waitUntil("on") { log.queue.sync { log.states } == [.poweredOn] }
        manager.scanForPeripherals(withServices: nil)
        #expect(manager.isScanning)
        (host.transport as! VirtualController).powerOff()
        try await waitUntil("off") { log.queue.sync { log.states } == [.poweredOn, .poweredOff] }
        // Scanning stopped, and calls are API misuse until the radio is back.
        #expect(!manager.isScanning)
        manager.scanForPeripherals(withServices: nil)
        #expect(!manager.isScanning)
        (host.transport as! VirtualController).powerOn()
        do { try await waitUntil("on again") { log.queue.sync { log.states } == [.poweredOn, .poweredOff, .poweredOn] } } catch {
            Issue.record("states: \(log.queue.sync { log.states.map(\.rawValue) }) host: \(host.loop.sync { host.powerState })"); throw error
        }
        manager.scanForPeripherals(withServices: nil)
        #expect(manager.isScanning)
    }

    @Test func peripheralPowerOffDropsTheLinkWithATimeout() async throws {
        let air = TestAir()
        let per = HRPeripheral()
        let pHost = try air.host("peripheral")
        per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: pHost)
        try await waitUntil("advertising") { per.log.contains("advertising:true") }
        let log = StateLog()
        let manager = CBCentralManager(delegate: log, queue: log.queue, options: nil, host: try air.host("central"))
        try await waitUntil("on") { log.queue.sync { log.states } == [.poweredOn] }
        log.queue.sync { manager.scanForPeripherals(withServices: nil) }
        try await waitUntil("connected") { log.queue.sync { log.found?.state } == .connected }
        (pHost.transport as! VirtualController).powerOff()
        try await waitUntil("peripheral off") { per.log.contains("state:4") }
        // The central loses the link after the supervision timeout (5 s), with CBError.connectionTimeout.
        try await waitUntil("timeout", seconds: 10) { log.queue.sync { log.disconnects.count } == 1 }
        let e = try #require(log.queue.sync { log.disconnects.first } ?? nil)
        #expect((e as? CBError)?.code == .connectionTimeout)
        #expect((e as NSError).domain == CBErrorDomain && (e as NSError).code == 6)
    }

    @Test func tcpControllerLostAndBack() async throws {
        let air = VirtualAir(loop: EventLoop(label: "tcp.power", clock: .real))
        let server = try RadioServer(air: air, port: 0)
        let port = server.port
        server.start()
        let log = StateLog()
        _ = testStateDirectory   // a real transport keeps its state (device cache, bonds) on disk: in the test's folder
        let host = try HostFactory.makeHost(spec: .tcpClient(host: "127.0.0.1", port: port), name: "tcp")
        let manager = CBCentralManager(delegate: log, queue: log.queue, options: nil, host: host)
        try await waitUntil("on") { log.queue.sync { log.states } == [.poweredOn] }
        server.stop()
        try await waitUntil("off") { log.queue.sync { log.states } == [.poweredOn, .poweredOff] }
        // The controller comes back on the same port: the host reconnects by itself.
        let again = try RadioServer(air: air, port: port)
        again.start()
        defer { again.stop() }
        try await waitUntil("on again", seconds: 10) { log.queue.sync { log.states } == [.poweredOn, .poweredOff, .poweredOn] }
        #expect(manager.state == .poweredOn)
    }
}
