// The initialisers apps use, including plain init(), work and start in .unknown.
import Foundation
import Testing
import CoreBluetooth

@Suite struct ManagerInitTests {
    @Test func plainInitialisersStartUnknownThenReportAsynchronously() async throws {
        let c = CBCentralManager()
        let p = CBPeripheralManager()
        #expect([.unknown, .poweredOn].contains(c.state) && [.unknown, .poweredOn].contains(p.state))
        #expect(c.delegate == nil && p.delegate == nil)
        #expect(!c.isScanning && !p.isAdvertising)
        let q = DispatchQueue(label: "init.test")
        final class D: NSObject, CBCentralManagerDelegate, @unchecked Sendable {
            var states: [CBManagerState] = []
            func centralManagerDidUpdateState(_ central: CBCentralManager) { states.append(central.state) }
        }
        let d = D()
        // The first state update arrives after init returns, on the given queue: created while that queue is
        // busy, the manager cannot have called its delegate yet.
        let m = q.sync { () -> CBCentralManager in
            let m = CBCentralManager(delegate: d, queue: q)
            Thread.sleep(forTimeInterval: 0.05)
            #expect(d.states.isEmpty && m.state == .unknown)
            return m
        }
        try await waitUntil("poweredOn") { q.sync { d.states } == [.poweredOn] }
        #expect(m.state == .poweredOn)
    }
}
