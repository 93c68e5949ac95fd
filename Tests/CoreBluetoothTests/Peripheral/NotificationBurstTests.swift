// Long bursts of notifications through both managers on the virtual radio, with each side's delegate queue
// blocked for a while in the middle: what the batched hand-offs between the host loop and the delegate queues
// must keep. Every value arrives once, in the order sent, intact; every callback runs on its manager's queue;
// the peripheral is refused when the transmit queue is full and told when it has room again.
import Foundation
import Testing
import CoreBluetooth
import TestSupport

private let burstServiceUUID = CBUUID(string: "0B7A5E00-5B1E-4C55-9A1D-2F0C1E4D7A01")
private let burstCharacteristicUUID = CBUUID(string: "0B7A5E01-5B1E-4C55-9A1D-2F0C1E4D7A01")

/// The value carrying sequence number `n`: `n` in its first four octets (little-endian), then octets derived
/// from `n`, so a value mixed up with another or cut short is seen.
private func burstValue(_ n: Int, size: Int) -> Data {
    var d = Data(count: size)
    for i in 0..<size { d[i] = i < 4 ? UInt8(truncatingIfNeeded: n >> (8 * i)) : UInt8(truncatingIfNeeded: n &* 31 &+ i) }
    return d
}

/// Sends `total` numbered notifications as fast as the transmit queue takes them: until `updateValue` says
/// no, then again at each `peripheralManagerIsReady(toUpdateSubscribers:)`.
private final class BurstPeripheral: NSObject, CBPeripheralManagerDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "burst.peripheral")
    private let key = DispatchSpecificKey<Int>()
    let log = EventLog()
    var manager: CBPeripheralManager!
    var characteristic: CBMutableCharacteristic!
    let total: Int, size: Int
    /// After this many sent, the queue is blocked for `stall` seconds (ready arrives meanwhile).
    let stallAfter: Int, stall: Double
    var sent = 0, refusals = 0, readies = 0, callbacksOffQueue = 0

    init(total: Int, size: Int, stallAfter: Int, stall: Double) {
        self.total = total; self.size = size; self.stallAfter = stallAfter; self.stall = stall
        super.init()
        queue.setSpecific(key: key, value: 1)
    }

    private func onQueue() { if DispatchQueue.getSpecific(key: key) != 1 { callbacksOffQueue += 1 } }

    func peripheralManagerDidUpdateState(_ p: CBPeripheralManager) {
        onQueue()
        guard p.state == .poweredOn else { return }
        characteristic = CBMutableCharacteristic(type: burstCharacteristicUUID, properties: [.notify], value: nil, permissions: [])
        let s = CBMutableService(type: burstServiceUUID, primary: true)
        s.characteristics = [characteristic]
        p.add(s)
        p.startAdvertising([CBAdvertisementDataLocalNameKey: "burst"])
    }

    func peripheralManager(_ p: CBPeripheralManager, central: CBCentral, didSubscribeTo c: CBCharacteristic) {
        onQueue()
        log.add("subscribed")
        pump()
    }

    func peripheralManagerIsReady(toUpdateSubscribers p: CBPeripheralManager) {
        onQueue()
        readies += 1
        pump()
    }

    private func pump() {
        while sent < total {
            guard manager.updateValue(burstValue(sent, size: size), for: characteristic, onSubscribedCentrals: nil) else {
                refusals += 1
                return
            }
            sent += 1
            if sent == stallAfter { Thread.sleep(forTimeInterval: stall) }
        }
    }
}

/// Subscribes and records the sequence numbers in the order its delegate hears them; its queue is blocked
/// for `stall` seconds after each count in `stallAt`.
private final class BurstCentral: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "burst.central")
    private let key = DispatchSpecificKey<Int>()
    var manager: CBCentralManager!
    var peripheral: CBPeripheral?
    let size: Int, stallAt: Set<Int>, stall: Double
    var received: [Int] = []
    var damaged = 0, callbacksOffQueue = 0, disconnected = false

    init(size: Int, stallAt: Set<Int>, stall: Double) {
        self.size = size; self.stallAt = stallAt; self.stall = stall
        super.init()
        queue.setSpecific(key: key, value: 1)
    }

    private func onQueue() { if DispatchQueue.getSpecific(key: key) != 1 { callbacksOffQueue += 1 } }

    func centralManagerDidUpdateState(_ c: CBCentralManager) {
        onQueue()
        if c.state == .poweredOn { c.scanForPeripherals(withServices: nil) }
    }
    func centralManager(_ c: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
        onQueue()
        guard peripheral == nil, advertisementData[CBAdvertisementDataLocalNameKey] as? String == "burst" else { return }
        peripheral = p
        c.stopScan()
        c.connect(p)
    }
    func centralManager(_ c: CBCentralManager, didConnect p: CBPeripheral) {
        onQueue()
        p.delegate = self
        p.discoverServices([burstServiceUUID])
    }
    func centralManager(_ c: CBCentralManager, didDisconnectPeripheral p: CBPeripheral, error: Error?) {
        onQueue()
        disconnected = true
    }
    func peripheral(_ p: CBPeripheral, didDiscoverServices error: Error?) {
        onQueue()
        for s in p.services ?? [] where s.uuid == burstServiceUUID { p.discoverCharacteristics([burstCharacteristicUUID], for: s) }
    }
    func peripheral(_ p: CBPeripheral, didDiscoverCharacteristicsFor s: CBService, error: Error?) {
        onQueue()
        if let c = s.characteristics?.first(where: { $0.uuid == burstCharacteristicUUID }) { p.setNotifyValue(true, for: c) }
    }
    func peripheral(_ p: CBPeripheral, didUpdateValueFor c: CBCharacteristic, error: Error?) {
        onQueue()
        guard let v = c.value, v.count >= 4, error == nil else { damaged += 1; return }
        let n = v.prefix(4).enumerated().reduce(0) { $0 | Int($1.element) << (8 * $1.offset) }
        if v != burstValue(n, size: size) { damaged += 1 }
        received.append(n)
        if stallAt.contains(received.count) { Thread.sleep(forTimeInterval: stall) }
    }
}

@Suite(.serialized) struct NotificationBurstTests {
    /// Thousands of notifications, the central's queue blocked twice and the peripheral's once along the way:
    /// all arrive, in order, intact, each callback on its manager's queue; back-pressure was used and released.
    @Test(arguments: [20, 244])
    func aBurstArrivesWholeAndInOrderThroughBlockedDelegateQueues(size: Int) async throws {
        let total = 3000
        let air = TestAir()
        let per = BurstPeripheral(total: total, size: size, stallAfter: 1700, stall: 0.2)
        per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: try air.host("burst-peripheral"))
        let cen = BurstCentral(size: size, stallAt: [400, 1200], stall: 0.3)
        cen.manager = CBCentralManager(delegate: cen, queue: cen.queue, options: nil, host: try air.host("burst-central"))
        try await waitUntil("subscribed") { per.log.contains("subscribed") }
        try await waitUntil("all delivered", seconds: 60) { cen.queue.sync { cen.received.count } >= total }
        // Nothing more comes after the last one (no value delivered twice).
        try await pause(nanoseconds: 100_000_000)
        let received = cen.queue.sync { cen.received }
        #expect(received.count == total)
        // The first place where the sequence differs from 0, 1, 2, …: none.
        let firstWrong = zip(received, 0...).first { $0 != $1 }.map { "value \($0.0) at position \($0.1)" }
        #expect(firstWrong == nil)
        #expect(cen.queue.sync { cen.damaged } == 0)
        let (sent, refusals, readies) = per.queue.sync { (per.sent, per.refusals, per.readies) }
        #expect(sent == total)
        // The transmit queue filled (the app was refused), and each refusal was followed by a ready callback.
        #expect(refusals > 0)
        #expect(readies == refusals)
        #expect(per.queue.sync { per.callbacksOffQueue } == 0)
        #expect(cen.queue.sync { cen.callbacksOffQueue } == 0)
        if let p = cen.peripheral { cen.queue.sync { cen.manager.cancelPeripheralConnection(p) } }
        try await waitUntil("disconnected") { cen.queue.sync { cen.disconnected } }
    }
}
