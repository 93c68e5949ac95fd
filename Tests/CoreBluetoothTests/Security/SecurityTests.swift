// Pairing as an iOS app sees it: no pairing API; a read of an encryption-required characteristic pairs and
// the app gets the value; agents answer the prompts Linux has no dialog for; a bonded peripheral that
// changes its private address stays the same CBPeripheral.
import Foundation
import Testing
import TestSupport
import CoreBluetooth
@testable import BLEHost
import BLETransport
import BLEWire

/// A user at each side: one shows the passkey, the other reads it off and types it.
final class BoardAgent: CBPairingAgent, @unchecked Sendable {
    let ioCapability: CBPairingIOCapability
    let lock = NSLock()
    /// The passkey on the displaying side's screen: written by one agent, read by the other (another
    /// thread), so behind a lock.
    static var shown: UInt32? {
        get { shownLock.withLock { shownValue } }
        set { shownLock.withLock { shownValue = newValue } }
    }
    private static let shownLock = NSLock()
    nonisolated(unsafe) private static var shownValue: UInt32?
    var calls: [String] = []
    init(_ io: CBPairingIOCapability) { ioCapability = io }
    func record(_ s: String) { lock.withLock { calls.append(s) } }
    func display(passkey: UInt32, for peer: CBPeer?) async {
        record("display:\(peer is CBCentral ? "central" : "peripheral")")
        BoardAgent.shown = passkey
    }
    func passkey(for peer: CBPeer?) async -> UInt32? {
        record("passkey:\(peer is CBPeripheral ? "peripheral" : "central")")
        for _ in 0..<3000 {   // up to 30 s: the other side shows it when its pairing gets there
            if let v = BoardAgent.shown { return v }
            try? await pause(nanoseconds: 10_000_000)
        }
        return nil
    }
}

/// Types a passkey that is off by one.
final class TypoAgent: CBPairingAgent, @unchecked Sendable {
    let ioCapability = CBPairingIOCapability.keyboardOnly
    func passkey(for peer: CBPeer?) async -> UInt32? {
        for _ in 0..<3000 {   // up to 30 s: the other side shows it when its pairing gets there
            if let v = BoardAgent.shown { return (v + 1) % 1_000_000 }
            try? await pause(nanoseconds: 10_000_000)
        }
        return nil
    }
}

@Suite(.serialized) struct CoreBluetoothSecurityTests {
    @Test func failedPairingGivesTheATTErrorWithThePairingReason() async throws {
        BoardAgent.shown = nil
        let air = TestAir()
        let (per, cen, _) = try await connectedPair(air, name: "secure-typo")
        per.manager.pairingAgent = BoardAgent(.displayOnly)
        cen.manager.pairingAgent = TypoAgent()
        per.queue.sync {
            per.onRead = { p, r in
                r.value = Data([7]); p.respond(to: r, withResult: .success)
            }
        }
        let p = try #require(cen.peripheral)
        cen.queue.sync { p.readValue(for: cen.characteristic(secretUUID.uuidString)!) }
        try await waitUntil("read error", seconds: 60) { cen.log.contains("readError:6E400005") }
        let e = try #require(cen.queue.sync { cen.errors[secretUUID.uuidString] } as? CBATTError)
        #expect(e.code == .insufficientAuthentication)
        // The peripheral found the wrong passkey (Confirm Value Failed, 0x04) and told the central.
        #expect(e.userInfo["OCBPairingFailureReason"] as? Int == 4)
        #expect((e.userInfo[NSLocalizedFailureReasonErrorKey] as? String)?.contains("Confirm Value Failed") == true)
        // The delegate never saw the read.
        #expect(per.queue.sync { per.reads.count } == 0)
    }

    @Test func encryptedReadPairsTransparentlyWithJustWorks() async throws {
        let air = TestAir()
        let (per, cen, _) = try await connectedPair(air, name: "secure-jw")
        per.queue.sync {
            per.onRead = { p, r in
                r.value = Data([0x42])
                p.respond(to: r, withResult: .success)
            }
        }
        let p = try #require(cen.peripheral)
        cen.queue.sync { p.readValue(for: cen.characteristic(secretUUID.uuidString)!) }
        try await waitUntil("secret value") { cen.log.contains("value:6E400005") }
        #expect(cen.queue.sync { cen.values[secretUUID.uuidString]?.last } == Data([0x42]))
        #expect(cen.queue.sync { cen.errors[secretUUID.uuidString] } == nil)
        // The link is encrypted on both sides, and each keeps a bond.
        let hosts = (cen.manager.leHost!, per.manager.leHost!)
        #expect(hosts.0.loop.sync { hosts.0.connections.values.first?.isEncrypted } == true)
        #expect(hosts.1.loop.sync { hosts.1.bondStore.bonds.count } == 1)
        #expect(hosts.0.loop.sync { hosts.0.bondStore.bonds.count } == 1)
    }

    @Test func passkeyEntryThroughPairingAgents() async throws {
        BoardAgent.shown = nil
        let air = TestAir()
        let (per, cen, _) = try await connectedPair(air, name: "secure-passkey")
        let showing = BoardAgent(.displayOnly), typing = BoardAgent(.keyboardOnly)
        per.manager.pairingAgent = showing
        cen.manager.pairingAgent = typing
        per.queue.sync {
            per.onRead = { p, r in
                r.value = Data([7]); p.respond(to: r, withResult: .success)
            }
        }
        let p = try #require(cen.peripheral)
        cen.queue.sync { p.readValue(for: cen.characteristic(secretUUID.uuidString)!) }
        try await waitUntil("secret value", seconds: 60) { cen.log.contains("value:6E400005") }
        #expect(showing.lock.withLock { showing.calls } == ["display:central"])
        #expect(typing.lock.withLock { typing.calls } == ["passkey:peripheral"])
        let host = cen.manager.leHost!
        #expect(host.loop.sync { host.connections.values.first?.security.authenticated } == true)
    }

    @Test func bondedPeripheralKeepsItsIdentifierAcrossPrivateAddresses() async throws {
        let air = TestAir()
        let (per, cen, _) = try await connectedPair(air, name: "private")
        per.queue.sync {
            per.onRead = { p, r in
                r.value = Data([1]); p.respond(to: r, withResult: .success)
            }
        }
        let p = try #require(cen.peripheral)
        cen.queue.sync { p.readValue(for: cen.characteristic(secretUUID.uuidString)!) }
        try await waitUntil("bonded") { cen.log.contains("value:6E400005") }
        let identifier = p.identifier
        // The peripheral turns privacy on: it now advertises from resolvable private addresses.
        let ph = per.manager.leHost!
        ph.loop.sync { ph.enablePrivacy(rotatingEvery: .milliseconds(300)) }
        cen.queue.sync { cen.manager.cancelPeripheralConnection(p) }
        try await waitUntil("disconnected") { cen.log.contains("disconnected") }
        let stream = cen.manager.discoveries(withServices: nil, options: [CBCentralManagerScanOptionAllowDuplicatesKey: true])
        // The address is read as each discovery is consumed: when other suites keep this task from running,
        // a backlog comes out at once with the latest address, so the bound is generous. It is enforced even
        // when no discovery comes at all (the consumer is cancelled, which ends the stream).
        let (seen, discoveries) = await withTaskGroup(of: (Set<BluetoothAddress>, Int)?.self) { group in
            group.addTask {
                var seen: Set<BluetoothAddress> = [], count = 0
                for await d in stream {
                    count += 1
                    // The address the advertisement came from, as the manager recorded it for this peripheral.
                    if d.peripheral.identifier == identifier { seen.insert(d.peripheral.deviceAddress) }
                    if seen.count >= 2 { break }
                }
                return (seen, count)
            }
            group.addTask {
                try? await pause(nanoseconds: 60_000_000_000); return nil
            }
            var result: (Set<BluetoothAddress>, Int) = ([], 0)
            while let next = await group.next() {
                if let next { result = next; group.cancelAll(); break }
                group.cancelAll()   // the time is up: the consumer ends with what it has
            }
            return result
        }
        cen.manager.stopScan()
        let state = ph.loop.sync { (ph.isAdvertising, ph.wantsAdvertising != nil, ph.currentPrivateAddress) }
        // Two different private addresses, one CBPeripheral.
        #expect(seen.count >= 2, "\(discoveries) discoveries; peripheral advertising \(state.0), wants to \(state.1), at \(String(describing: state.2))")
        #expect(seen.allSatisfy { $0.randomKind == .resolvablePrivate })
        // And it reconnects at its current address, encrypting with the bond: asked for a second after the scan
        // stopped, three rotations later, at an address the peripheral no longer uses. (A direct connection to
        // the last address seen waited forever: seen twice under load, every time with this pause.)
        try await pause(nanoseconds: 1_000_000_000)
        try await within("reconnected", seconds: 30) { try await cen.manager.connectAndWait(p) }
        try await waitUntil("rediscovered") { cen.log.count("characteristics:6E400001") >= 2 }
        cen.queue.sync { p.readValue(for: cen.characteristic(secretUUID.uuidString)!) }
        try await waitUntil("second value") { cen.log.count("value:6E400005") >= 2 }
        let bonds = ph.loop.sync { ph.bondStore.bonds.count }
        #expect(bonds == 1)
    }

    /// iOS 13.4 and later: connecting to a bonded device encrypts the link with the stored key at once; a device
    /// that removed its pairing information refuses the key, and the connection fails with
    /// CBError.peerRemovedPairingInformation. iOS does not pair again by itself (the user forgets the device):
    /// the bond stays; once it is forgotten, the connection succeeds and the next encrypted read pairs anew.
    @Test func aBondTheOtherSideDeletedFailsTheConnectionWithPeerRemovedPairingInformation() async throws {
        let air = TestAir()
        let (per, cen, _) = try await connectedPair(air, name: "stale-bond")
        per.queue.sync {
            per.onRead = { p, r in
                r.value = Data([0x42]); p.respond(to: r, withResult: .success)
            }
        }
        let p = try #require(cen.peripheral)
        cen.queue.sync { p.readValue(for: cen.characteristic(secretUUID.uuidString)!) }
        try await waitUntil("bonded") { cen.log.contains("value:6E400005") }
        let (ch, ph) = (cen.manager.leHost!, per.manager.leHost!)
        let centralIdentity = ch.loop.sync { ch.localAddress }
        cen.queue.sync { cen.manager.cancelPeripheralConnection(p) }
        try await waitUntil("disconnected") { cen.log.contains("disconnected") }
        // The peripheral forgets the central; the central still has its bond.
        #expect(ph.loop.sync { ph.removeBond(centralIdentity) })
        #expect(ch.loop.sync { ch.bondStore.bonds.count } == 1)
        var failure: Error?
        do {
            try await within("connection attempt", seconds: 30) { try await cen.manager.connectAndWait(p) }
        } catch { failure = error }
        let e = try #require(failure as? CBError)
        #expect(e.code == .peerRemovedPairingInformation)
        #expect(e.localizedDescription == "Peer removed pairing information")
        #expect(e.userInfo[CBHCIStatusKey] as? NSNumber == 0x06)
        #expect(p.state == .disconnected)
        // Not paired again behind the user's back: the stale bond is kept, the peripheral has none.
        #expect(ch.loop.sync { ch.bondStore.bonds.count } == 1)
        #expect(ph.loop.sync { ph.bondStore.bonds.count } == 0)
        // "Forget This Device": the connection succeeds, and the encrypted read pairs again.
        #expect(ch.loop.sync { ch.removeBond(ph.localAddress) })
        try await within("reconnected", seconds: 30) { try await cen.manager.connectAndWait(p) }
        p.delegate = cen
        cen.queue.sync { p.discoverServices(nil) }
        try await waitUntil("rediscovered") { cen.log.count("characteristics:6E400001") >= 2 }
        cen.queue.sync { p.readValue(for: cen.characteristic(secretUUID.uuidString)!) }
        try await waitUntil("read after pairing anew") { cen.log.count("value:6E400005") >= 2 }
        #expect(ch.loop.sync { ch.bondStore.bonds.count } == 1 && ph.loop.sync { ph.bondStore.bonds.count } == 1)
    }

    @Test func subscribingToNotifyEncryptionRequiredPairsFirst() async throws {
        let air = TestAir()
        let per = TestPeripheral()
        per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: try air.host("peripheral"))
        try await waitUntil("on") { per.log.contains("state:5") }
        let service = CBMutableService(type: CBUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"), primary: true)
        let secretNotify = CBMutableCharacteristic(type: notifyUUID, properties: [.notifyEncryptionRequired], value: nil, permissions: [])
        service.characteristics = [secretNotify]
        per.queue.sync { per.manager.add(service) }
        try await waitUntil("added") { per.log.contains("added:6E400001") }
        per.queue.sync { per.manager.startAdvertising([CBAdvertisementDataLocalNameKey: "secret-notify"]) }
        let cen = TestCentral(name: "secret-notify")
        cen.manager = CBCentralManager(delegate: cen, queue: cen.queue, options: nil, host: try air.host("central"))
        try await waitUntil("discovered") { cen.log.contains("characteristics:6E400001") }
        let p = try #require(cen.peripheral)
        let c = try #require(cen.characteristic(notifyUUID.uuidString))
        // On the air it is an ordinary notify characteristic.
        #expect(c.properties.contains(.notify))
        cen.queue.sync { p.setNotifyValue(true, for: c) }
        try await waitUntil("notifying") { cen.log.contains("notifying:\(notifyUUID.uuidString):true") }
        let host = cen.manager.leHost!
        #expect(host.loop.sync { host.connections.values.first?.isEncrypted } == true)
        try await waitUntil("subscribed") { per.log.contains("subscribe:\(notifyUUID.uuidString)") }
    }
}
