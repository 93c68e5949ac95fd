// Long bursts of notifications through both managers on the virtual radio, with each side's delegate queue
// blocked for a while in the middle: what the batched hand-offs between the host loop and the delegate queues
// must keep. Every value arrives once, in the order sent, intact; every callback runs on its manager's queue;
// the peripheral is refused when the transmit queue is full and told when it has room again.
import Foundation
import Testing
import CoreBluetooth
import TestSupport
import BLEHost
import BLEVirtualRadio

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
    var total: Int
    let size: Int
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

    func pump() {
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
    /// After this many values, the callback hands the peripheral to `next` as its delegate.
    var switchAt: Int?
    var next: (any CBPeripheralDelegate)?

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
        if received.count == switchAt { p.delegate = next }
    }
}

/// A second delegate that takes over a peripheral in the middle of a burst: the sequence numbers it hears.
private final class TakingOverDelegate: NSObject, CBPeripheralDelegate, @unchecked Sendable {
    var received: [Int] = []
    func peripheral(_ p: CBPeripheral, didUpdateValueFor c: CBCharacteristic, error: Error?) {
        guard let v = c.value, v.count >= 4 else { return }
        received.append(v.prefix(4).enumerated().reduce(0) { $0 | Int($1.element) << (8 * $1.offset) })
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

    /// The delegate is read once for a burst of values, not once per value: a callback that sets another one
    /// in the middle of a burst (the central's queue was blocked, so the values wait in one batch) hands every
    /// later value of that batch to the new delegate and none to the old one; setting nil stops them all.
    @Test func aDelegateSetDuringABurstTakesTheRestOfIt() async throws {
        let total = 1500
        let air = TestAir()
        let per = BurstPeripheral(total: total, size: 20, stallAfter: total + 1, stall: 0)
        per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: try air.host("switch-peripheral"))
        let cen = BurstCentral(size: 20, stallAt: [300], stall: 0.3)
        let second = TakingOverDelegate(), third = TakingOverDelegate()
        cen.switchAt = 350
        cen.next = second
        cen.manager = CBCentralManager(delegate: cen, queue: cen.queue, options: nil, host: try air.host("switch-central"))
        try await waitUntil("subscribed") { per.log.contains("subscribed") }
        try await waitUntil("the rest delivered to the second delegate", seconds: 60) { cen.queue.sync { second.received.count } >= total - 350 }
        try await pause(nanoseconds: 100_000_000)
        #expect(cen.queue.sync { cen.received } == Array(0..<350))
        #expect(cen.queue.sync { second.received } == Array(350..<total))
        #expect(cen.queue.sync { cen.callbacksOffQueue } == 0)

        // Set from another thread while values flow: the delegate at the time of each callback gets it.
        cen.queue.sync { second.received.removeAll() }
        per.queue.sync {
            per.sent = 0
            per.total = 200
            per.pump()
        }
        try await waitUntil("values to the second delegate") { cen.queue.sync { second.received.count } > 0 }
        let p = try #require(cen.peripheral)
        p.delegate = third
        try await pause(nanoseconds: 300_000_000)
        let (toSecond, toThird) = cen.queue.sync { (second.received, third.received) }
        // Every value once, in order, the second delegate's before the third's.
        #expect(toSecond + toThird == Array(0..<(toSecond.count + toThird.count)))
        // Set to nil: nothing more is delivered.
        p.delegate = nil
        per.queue.sync {
            per.sent = 0
            per.total = 50
            per.pump()
        }
        try await waitUntil("sent") { per.queue.sync { per.sent } == 50 }
        try await pause(nanoseconds: 300_000_000)
        #expect(cen.queue.sync { (second.received.count, third.received.count) } == (toSecond.count, toThird.count))
        cen.queue.sync { cen.manager.cancelPeripheralConnection(p) }
        try await waitUntil("disconnected") { cen.queue.sync { cen.disconnected } }
    }

    /// The objects of a link are freed once the app lets go of them after a burst: both managers, the
    /// peripheral, both hosts, and (with the air) the virtual controllers. The per-value path holds some of
    /// them strongly where Core Bluetooth's API holds them weakly; nothing may keep them alive afterwards.
    @Test func theObjectsOfALinkAreFreedAfterABurst() async throws {
        weak var centralManager: CBCentralManager?, peripheralManager: CBPeripheralManager?, peripheral: CBPeripheral?
        weak var centralHost: LEHost?, peripheralHost: LEHost?, air: VirtualAir?
        weak var controller: VirtualController?
        let total = 2000
        do {
            let testAir = TestAir()
            let per = BurstPeripheral(total: total, size: 20, stallAfter: total + 1, stall: 0)
            let ph = try testAir.host("freed-peripheral"), ch = try testAir.host("freed-central")
            per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: ph)
            let cen = BurstCentral(size: 20, stallAt: [100], stall: 0.1)
            cen.manager = CBCentralManager(delegate: cen, queue: cen.queue, options: nil, host: ch)
            try await waitUntil("all delivered", seconds: 60) { cen.queue.sync { cen.received.count } >= total }
            #expect(cen.queue.sync { cen.received } == Array(0..<total))
            centralManager = cen.manager; peripheralManager = per.manager; peripheral = cen.peripheral
            centralHost = ch; peripheralHost = ph; air = testAir.air
            controller = ch.transport as? VirtualController
            cen.queue.sync {
                cen.manager.cancelPeripheralConnection(cen.peripheral!)
            }
            try await waitUntil("disconnected") { cen.queue.sync { cen.disconnected } }
            cen.queue.sync {
                cen.peripheral = nil
                cen.manager = nil
            }
            per.queue.sync { per.manager = nil }
        }
        // Each is waited for on its own, so that a failure names every object still alive.
        func freed(_ gone: () -> Bool) async -> Bool { (try? await waitUntil("freed", seconds: 10, gone)) != nil }
        #expect(await freed { centralManager == nil }, "the central manager")
        #expect(await freed { peripheralManager == nil }, "the peripheral manager")
        #expect(await freed { peripheral == nil }, "the peripheral")
        #expect(await freed { centralHost == nil }, "the central's host")
        #expect(await freed { peripheralHost == nil }, "the peripheral's host")
        #expect(await freed { air == nil }, "the air")
        #expect(await freed { controller == nil }, "the central's controller")
    }
}
