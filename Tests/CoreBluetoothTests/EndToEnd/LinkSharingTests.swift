// Issue 21: two central managers on one host share one link to a device, as two apps on an iPhone share
// the system's link (each its own CBPeripheral, didConnect, discovery, reads and subscriptions; the
// Client Characteristic Configuration is the link's, and each manager gets the values it subscribed to;
// the link drops when the last manager lets go); and releasing a peripheral cancels its connection,
// pending or made, as iOS does.
import Foundation
import Testing
import TestSupport
import CoreBluetooth
import BLEHost
import BLEVirtualRadio

/// A peripheral manager with a notifying characteristic (FFF1) and a readable one (FFF2 = 07), recording
/// subscriptions and links.
final class NotifyingPeripheral: NSObject, CBPeripheralManagerDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "notifying.peripheral")
    var manager: CBPeripheralManager!
    var host: LEHost!
    let log = EventLog()
    let notifying = CBMutableCharacteristic(type: CBUUID(string: "FFF1"), properties: [.notify], value: nil, permissions: [])
    let readable = CBMutableCharacteristic(type: CBUUID(string: "FFF2"), properties: [.read], value: Data([7]), permissions: [.readable])
    var subscribed = 0

    func peripheralManagerDidUpdateState(_ p: CBPeripheralManager) { log.add("state:\(p.state.rawValue)") }
    func peripheralManager(_ p: CBPeripheralManager, didAdd s: CBService, error: Error?) { log.add("added") }
    func peripheralManager(_ p: CBPeripheralManager, central: CBCentral, didSubscribeTo c: CBCharacteristic) { subscribed += 1; log.add("subscribe") }
    func peripheralManager(_ p: CBPeripheralManager, central: CBCentral, didUnsubscribeFrom c: CBCharacteristic) { subscribed -= 1; log.add("unsubscribe") }

    static func start(_ air: TestAir, name: String) async throws -> NotifyingPeripheral {
        let p = NotifyingPeripheral()
        p.host = try air.host(name)
        p.manager = CBPeripheralManager(delegate: p, queue: p.queue, options: nil, host: p.host)
        try await waitUntil("peripheral on") { p.log.contains("state:5") }
        let s = CBMutableService(type: CBUUID(string: "FFF0"), primary: true)
        s.characteristics = [p.notifying, p.readable]
        p.queue.sync { p.manager.add(s) }
        try await waitUntil("added") { p.log.contains("added") }
        p.queue.sync { p.manager.startAdvertising([CBAdvertisementDataLocalNameKey: name]) }
        return p
    }

    func send(_ byte: UInt8) { queue.sync { _ = manager.updateValue(Data([byte]), for: notifying, onSubscribedCentrals: nil) } }
}

/// What one manager's peripheral object sees: discovery, reads, subscription states and values.
final class LinkUser: NSObject, CBPeripheralDelegate, @unchecked Sendable {
    var notifying: CBCharacteristic?
    var readable: CBCharacteristic?
    var read: [Data] = []
    var notifyStates: [(Bool, Error?)] = []
    var values: [Data] = []
    func peripheral(_ p: CBPeripheral, didDiscoverServices error: Error?) {
        for s in p.services ?? [] { p.discoverCharacteristics(nil, for: s) }
    }
    func peripheral(_ p: CBPeripheral, didDiscoverCharacteristicsFor s: CBService, error: Error?) {
        notifying = s.characteristics?.first { $0.uuid == CBUUID(string: "FFF1") }
        readable = s.characteristics?.first { $0.uuid == CBUUID(string: "FFF2") }
    }
    func peripheral(_ p: CBPeripheral, didUpdateNotificationStateFor c: CBCharacteristic, error: Error?) { notifyStates.append((c.isNotifying, error)) }
    func peripheral(_ p: CBPeripheral, didUpdateValueFor c: CBCharacteristic, error: Error?) {
        if c.uuid == CBUUID(string: "FFF2") { read.append(c.value ?? Data()) } else { values.append(c.value ?? Data()) }
    }
}

@Suite(.serialized) struct LinkSharingTests {
    func centralLinks(_ host: LEHost) -> Int { host.loop.sync { host.connections.values.filter { $0.role == .central }.count } }

    /// Two managers connect to one device: one link, each its own object with its own didConnect, discovery
    /// and reads; the descriptor is shared, values go to the managers that subscribed; a cancel by one keeps
    /// the link for the other, which hears didDisconnect only when it lets go itself.
    @Test func twoManagersShareOneLink() async throws {
        let air = TestAir()
        let per = try await NotifyingPeripheral.start(air, name: "SHARED")
        let host = try air.host("phone")
        let one = RecordingCentral(), two = RecordingCentral()
        try await one.start(on: host)
        try await two.start(on: host)
        let p1 = try #require(try await one.find(["SHARED"]).first)
        let p2 = try #require(try await two.find(["SHARED"]).first)
        #expect(p1 !== p2 && p1.identifier == p2.identifier)
        one.queue.sync { one.manager.connect(p1) }
        try await waitUntil("first connected") { one.queue.sync { one.connected.count } == 1 }
        two.queue.sync { two.manager.connect(p2) }
        try await waitUntil("second connected") { two.queue.sync { two.connected.count } == 1 || !two.queue.sync { two.failed.isEmpty } }
        #expect(two.queue.sync { two.failed.isEmpty })
        #expect(p1.state == .connected && p2.state == .connected)
        #expect(centralLinks(host) == 1)
        // Each object discovers and reads on its own.
        let u1 = LinkUser(), u2 = LinkUser()
        one.queue.sync {
            p1.delegate = u1; p1.discoverServices(nil)
        }
        two.queue.sync {
            p2.delegate = u2; p2.discoverServices([CBUUID(string: "FFF0")])
        }
        try await waitUntil("discovered") { one.queue.sync { u1.readable != nil } && two.queue.sync { u2.readable != nil } }
        one.queue.sync { p1.readValue(for: u1.readable!) }
        two.queue.sync { p2.readValue(for: u2.readable!) }
        try await waitUntil("read") { one.queue.sync { u1.read } == [Data([7])] && two.queue.sync { u2.read } == [Data([7])] }

        // Only the first subscribes: the peripheral sees one subscription, and only the first gets values.
        one.queue.sync { p1.setNotifyValue(true, for: u1.notifying!) }
        try await waitUntil("subscribed") { per.queue.sync { per.subscribed } == 1 && one.queue.sync { u1.notifyStates.count } == 1 }
        per.send(1)
        try await waitUntil("first value") { one.queue.sync { u1.values } == [Data([1])] }
        // The second subscribes too: the link is already configured; both get the next value.
        two.queue.sync { p2.setNotifyValue(true, for: u2.notifying!) }
        try await waitUntil("second subscribed") { two.queue.sync { u2.notifyStates.count } == 1 }
        #expect(two.queue.sync { u2.notifyStates[0].0 && u2.notifyStates[0].1 == nil })
        per.send(2)
        try await waitUntil("both got 2") { one.queue.sync { u1.values.count } == 2 && two.queue.sync { u2.values } == [Data([2])] }
        // The first unsubscribes: the descriptor stays on for the second, which alone gets values now.
        one.queue.sync { p1.setNotifyValue(false, for: u1.notifying!) }
        try await waitUntil("first unsubscribed") { one.queue.sync { u1.notifyStates.count } == 2 }
        #expect(one.queue.sync { u1.notifyStates[1].0 == false && u1.notifyStates[1].1 == nil })
        #expect(per.queue.sync { per.subscribed } == 1)
        per.send(3)
        try await waitUntil("second got 3") { two.queue.sync { u2.values.count } == 2 }
        #expect(one.queue.sync { u1.values } == [Data([1]), Data([2])])

        // The first cancels: it hears didDisconnect(nil) at once; the link stays for the second.
        one.queue.sync { one.manager.cancelPeripheralConnection(p1) }
        try await waitUntil("first disconnected") { one.queue.sync { one.disconnected.count } == 1 }
        #expect(one.queue.sync { one.disconnected[0].1 == nil })
        #expect(p1.state == .disconnected && p2.state == .connected)
        #expect(centralLinks(host) == 1)
        per.send(4)
        try await waitUntil("second got 4") { two.queue.sync { u2.values.count } == 3 }
        #expect(two.queue.sync { two.disconnected.isEmpty })
        // The first may come back on the same link.
        one.queue.sync { one.manager.connect(p1) }
        try await waitUntil("first back") { one.queue.sync { one.connected.count } == 2 }
        #expect(centralLinks(host) == 1)
        one.queue.sync { one.manager.cancelPeripheralConnection(p1) }
        try await waitUntil("first gone again") { one.queue.sync { one.disconnected.count } == 2 }
        // The last one lets go: the link drops, and the peripheral sees the subscription end.
        two.queue.sync { two.manager.cancelPeripheralConnection(p2) }
        try await waitUntil("second disconnected") { two.queue.sync { two.disconnected.count } == 1 }
        #expect(two.queue.sync { two.disconnected[0].1 == nil })
        try await waitUntil("link dropped") { centralLinks(host) == 0 }
        try await waitUntil("unsubscribed") { per.queue.sync { per.subscribed } == 0 }
    }

    /// Two managers wait for the same device: one pending connection; one manager's cancel leaves it
    /// pending for the other, which connects when the device appears; the link's loss reaches every user.
    @Test func aPendingConnectionIsSharedUntilTheLastCancel() async throws {
        let air = TestAir()
        let per = try await NotifyingPeripheral.start(air, name: "LATER")
        let host = try air.host("phone")
        let one = RecordingCentral(), two = RecordingCentral()
        try await one.start(on: host)
        try await two.start(on: host)
        let p1 = try #require(try await one.find(["LATER"]).first)
        let p2 = try #require(try await two.find(["LATER"]).first)
        per.queue.sync { per.manager.stopAdvertising() }
        one.queue.sync { one.manager.connect(p1) }
        two.queue.sync { two.manager.connect(p2) }
        try await pause(nanoseconds: 300_000_000)
        #expect(host.loop.sync { host.pendingConnections.count } == 1)
        one.queue.sync { one.manager.cancelPeripheralConnection(p1) }
        try await waitUntil("first cancelled") { one.queue.sync { one.disconnected.count } == 1 }
        #expect(host.loop.sync { host.pendingConnections.count } == 1)
        per.queue.sync { per.manager.startAdvertising([CBAdvertisementDataLocalNameKey: "LATER"]) }
        try await waitUntil("second connected") { two.queue.sync { two.connected.count } == 1 }
        #expect(one.queue.sync { one.connected.isEmpty && one.failed.isEmpty })
        #expect(p1.state == .disconnected && p2.state == .connected)
        // Both join again, then the device goes away: both hear didDisconnect with an error.
        one.queue.sync { one.manager.connect(p1) }
        try await waitUntil("first joined") { one.queue.sync { one.connected.count } == 1 }
        per.host.loop.sync { for c in per.host.connections.values { per.host.disconnect(handle: c.handle) } }
        try await waitUntil("both lost it") { one.queue.sync { one.disconnected.count } == 2 && two.queue.sync { two.disconnected.count } == 1 }
        #expect(one.queue.sync { one.disconnected[1].1 != nil } && two.queue.sync { two.disconnected[0].1 != nil })
    }

    /// A connect that arrives while the last user's cancel is closing the link waits for the link to go,
    /// then connects anew: it never joins a link that is going away.
    @Test func aConnectDuringTheLastCancelGetsANewLink() async throws {
        let air = TestAir()
        let per = try await NotifyingPeripheral.start(air, name: "AGAIN")
        let host = try air.host("phone")
        let one = RecordingCentral(), two = RecordingCentral()
        try await one.start(on: host)
        try await two.start(on: host)
        let p1 = try #require(try await one.find(["AGAIN"]).first)
        let p2 = try #require(try await two.find(["AGAIN"]).first)
        one.queue.sync { one.manager.connect(p1) }
        try await waitUntil("first connected") { one.queue.sync { one.connected.count } == 1 }
        let firstLink = host.loop.sync { host.connections.values.first { $0.role == .central }?.handle }
        // Both calls reach the host loop before the controller has closed the link.
        one.queue.sync { one.manager.cancelPeripheralConnection(p1) }
        two.queue.sync { two.manager.connect(p2) }
        try await waitUntil("second connected") { two.queue.sync { two.connected.count } == 1 || !two.queue.sync { two.failed.isEmpty } }
        #expect(two.queue.sync { two.failed.isEmpty })
        #expect(one.queue.sync { one.disconnected.count } == 1)
        let secondLink = host.loop.sync { host.connections.values.first { $0.role == .central }?.handle }
        #expect(secondLink != nil && secondLink != firstLink)
        #expect(p2.state == .connected && p1.state == .disconnected)
        _ = per
    }

    /// A manager that goes away lets go of its share only: the other keeps the link (and its values); when
    /// the other's peripheral is released too, the link drops.
    @Test func aReleasedManagerLetsGoOfItsShareOnly() async throws {
        let air = TestAir()
        let per = try await NotifyingPeripheral.start(air, name: "KEPT")
        let host = try air.host("phone")
        var one: RecordingCentral? = RecordingCentral()
        let two = RecordingCentral()
        try await one!.start(on: host)
        try await two.start(on: host)
        weak var weakP2: CBPeripheral?
        let u2 = LinkUser()
        do {
            let p1 = try #require(try await one!.find(["KEPT"]).first)
            let p2 = try #require(try await two.find(["KEPT"]).first)
            one!.queue.sync { one!.manager.connect(p1) }
            two.queue.sync { two.manager.connect(p2) }
            try await waitUntil("both connected") { one!.queue.sync { one!.connected.count } == 1 && two.queue.sync { two.connected.count } == 1 }
            #expect(centralLinks(host) == 1)
            two.queue.sync {
                p2.delegate = u2; p2.discoverServices(nil)
            }
            try await waitUntil("discovered") { two.queue.sync { u2.notifying != nil } }
            two.queue.sync { p2.setNotifyValue(true, for: u2.notifying!) }
            try await waitUntil("subscribed") { per.queue.sync { per.subscribed } == 1 }
            weakP2 = p2
            // The first manager goes away (its peripheral object outlives it).
            one!.queue.sync { one!.manager = nil }
            one = nil
            try await pause(nanoseconds: 300_000_000)
            #expect(centralLinks(host) == 1)
            #expect(p2.state == .connected && two.queue.sync { two.disconnected.isEmpty })
            per.send(9)
            try await waitUntil("value") { two.queue.sync { u2.values } == [Data([9])] }
            _ = p1
        }
        two.queue.sync { two.byName.removeAll() }
        try await waitUntil("released") { weakP2 == nil }
        try await waitUntil("link dropped") { centralLinks(host) == 0 }
    }

    /// Releasing a peripheral whose connection is pending cancels it (CBCentralManager.h: "Pending attempts
    /// are cancelled automatically upon deallocation of peripheral"); releasing a connected one drops its
    /// link, as iOS does (both with its "API MISUSE: Cancelling connection for unused peripheral").
    @Test func releasingAPeripheralCancelsItsConnection() async throws {
        let air = TestAir()
        let per = try await NotifyingPeripheral.start(air, name: "DROPPED")
        let host = try air.host("phone")
        let c = RecordingCentral()
        try await c.start(on: host)
        weak var weakPending: CBPeripheral?
        do {
            let p = try #require(try await c.find(["DROPPED"]).first)
            per.queue.sync { per.manager.stopAdvertising() }
            c.queue.sync { c.manager.connect(p) }
            weakPending = p
        }
        try await waitUntil("pending") { host.loop.sync { host.pendingConnections.count } == 1 }
        c.queue.sync { c.byName.removeAll() }
        try await waitUntil("released") { weakPending == nil }
        try await waitUntil("pending connection cancelled") { host.loop.sync { host.pendingConnections.isEmpty } }
        // The device comes back: nothing connects, and the app hears nothing (it has no peripheral to be told about).
        per.queue.sync { per.manager.startAdvertising([CBAdvertisementDataLocalNameKey: "DROPPED"]) }
        try await pause(nanoseconds: 500_000_000)
        #expect(centralLinks(host) == 0)
        #expect(c.queue.sync { c.connected.isEmpty && c.failed.isEmpty && c.disconnected.isEmpty })

        weak var weakConnected: CBPeripheral?
        do {
            let p = try #require(try await c.find(["DROPPED"]).first)
            c.queue.sync { c.manager.connect(p) }
            try await waitUntil("connected") { c.queue.sync { c.connected.count } == 1 }
            weakConnected = p
        }
        #expect(centralLinks(host) == 1)
        c.queue.sync { c.byName.removeAll() }
        try await waitUntil("released") { weakConnected == nil }
        try await waitUntil("link dropped") { centralLinks(host) == 0 }
        #expect(c.queue.sync { c.disconnected.isEmpty && c.failed.isEmpty })
    }
}
