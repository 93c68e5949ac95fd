// Pairing and bonds on the BlueZ backend against the fake bluetoothd: the manager's CBPairingAgent registered as an
// org.bluez.Agent1 (AgentManager1.RegisterAgent + RequestDefaultAgent) and answering each of BlueZ's prompts, the
// registration coming back when bluetoothd does, and BlueZDevices (what `ble pair` and `ble bonds` run on bluez):
// Device1.Pair through the agent, Paired/Bonded as the list of bonds, Adapter1.RemoveDevice to forget one.
import Foundation
import Testing
import TestSupport
import BLEWire
import DBus
@testable import CoreBluetooth

/// An agent whose answers the test decides, recording what it was asked (any thread).
final class ScriptedAgent: CBPairingAgent, @unchecked Sendable {
    let ioCapability: CBPairingIOCapability
    let expectedNumber: UInt32
    let typedPasskey: UInt32?
    private let lock = NSLock()
    private var log: [String] = []
    private var seen: [UUID?] = []
    var asked: [String] { lock.withLock { log } }
    var peers: [UUID?] { lock.withLock { seen } }

    init(_ io: CBPairingIOCapability, confirms: UInt32 = 123_456, types: UInt32? = 654_321) {
        ioCapability = io
        expectedNumber = confirms
        typedPasskey = types
    }
    private func note(_ s: String, _ peer: CBPeer?) {
        lock.withLock {
            log.append(s)
            seen.append(peer?.identifier)
        }
    }
    func shouldPair(with peer: CBPeer?) async -> Bool {
        note("should pair", peer)
        return true
    }
    func display(passkey: UInt32, for peer: CBPeer?) async { note("display \(passkey)", peer) }
    func passkey(for peer: CBPeer?) async -> UInt32? {
        note("passkey", peer)
        return typedPasskey
    }
    func confirm(number: UInt32, with peer: CBPeer?) async -> Bool {
        note("confirm \(number)", peer)
        return number == expectedNumber
    }
}

extension ScriptedAgent: EventLog {
    var events: [String] { asked }
}

/// Runs blocking work (BlueZDevices waits on semaphores) on a thread of its own, not on a task's thread.
func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, any Error>) in
        Thread.detachNewThread { c.resume(with: Result { try body() }) }
    }
}

@Suite(
    .enabled(if: PrivateBus.available, "needs dbus-daemon (Debian package dbus-daemon; scripts/test installs it)"),
    .timeLimit(.minutes(2)))
struct BlueZPairingTests {
    @Test func aPairingAgentAnswersBlueZsPromptsAsTheAppDecides() async throws {
        let bus = try await PrivateBus()
        let fake = try await FakeBlueZ(address: bus.address)
        fake.addAdapter()
        let device = fake.addDevice(address: "C0:FF:EE:00:00:07", random: true, ["Name": .string("Lock"), "RSSI": .int16(-40)])
        let r = Recorder()
        let m = CBCentralManager(delegate: r, queue: DispatchQueue(label: "bluez-pairing"), bluez: BlueZOptions(busAddress: bus.address))
        try await r.wait(for: "state \(CBManagerState.poweredOn.rawValue)")
        let agent = ScriptedAgent(.displayYesNo)
        m.pairingAgent = agent
        #expect(m.pairingAgent === agent)
        try await r.wait("the agent's registration") { _ in fake.defaultAgent != nil }
        let path = try #require(fake.defaultAgent)
        #expect(fake.registeredAgents == [path: "DisplayYesNo"])

        // Numeric comparison: the app's answer is BlueZ's.
        _ = try await fake.askAgent("RequestConfirmation", [.objectPath(device), .uint32(123_456)])
        await #expect(throws: DBusError.remote(name: "org.bluez.Error.Rejected", message: "the user did not confirm 111111")) {
            try await fake.askAgent("RequestConfirmation", [.objectPath(device), .uint32(111_111)])
        }
        // Passkey entry, we type.
        let typed = try await fake.askAgent("RequestPasskey", [.objectPath(device)])
        #expect(typed.body == [.uint32(654_321)])
        // Passkey entry, the peer types: BlueZ calls again for each digit typed; the app shows the passkey once.
        for entered in 0..<3 { _ = try await fake.askAgent("DisplayPasskey", [.objectPath(device), .uint32(24_680), .uint16(UInt16(entered))]) }
        // Just Works the peer started.
        _ = try await fake.askAgent("RequestAuthorization", [.objectPath(device)])
        try await agent.wait("every prompt") { $0.count == 5 }
        #expect(agent.asked == ["confirm 123456", "confirm 111111", "passkey", "display 24680", "should pair"])
        // Each prompt names the device as the app knows it: its CBPeripheral.
        let expected = BlueZAdvertisement.identifier(for: .init(string: "C0:FF:EE:00:00:07", type: .random)!, adapter: "")
        #expect(agent.peers == Array(repeating: expected, count: 5))
        #expect(m.retrievePeripherals(withIdentifiers: [expected]).count == 1)

        // What LE pairing never asks, and bad input, are refused without reaching the app.
        await #expect(throws: DBusError.self) { try await fake.askAgent("RequestPinCode", [.objectPath(device)]) }
        await #expect(throws: DBusError.self) { try await fake.askAgent("DisplayPasskey", [.objectPath(device), .uint32(1_000_000), .uint16(0)]) }
        await #expect(throws: DBusError.self) { try await fake.askAgent("RequestConfirmation", [.objectPath(device)]) }
        _ = try await fake.askAgent("Cancel", [])
        #expect(agent.asked.count == 5)

        // A passkey of more than six digits from the app is refused too.
        let sloppy = ScriptedAgent(.keyboardOnly, types: 1_234_567)
        m.pairingAgent = sloppy
        try await r.wait("the second registration") { _ in fake.registeredAgents.values.sorted() == ["KeyboardOnly"] }
        try await r.wait("the second default") { _ in fake.defaultAgent != nil && fake.defaultAgent != path }
        await #expect(throws: DBusError.self) { try await fake.askAgent("RequestPasskey", [.objectPath(device)]) }

        // No agent: the registration is withdrawn (bluetoothd returns to the system's agent).
        m.pairingAgent = nil
        try await r.wait("the unregistration") { _ in fake.registeredAgents.isEmpty && fake.defaultAgent == nil }
    }

    @Test func theAgentIsRegisteredAgainWhenBluetoothdComesBack() async throws {
        let bus = try await PrivateBus()
        var fake: FakeBlueZ? = try await FakeBlueZ(address: bus.address)
        fake!.addAdapter()
        let r = Recorder()
        let m = CBPeripheralManager(delegate: nil, queue: DispatchQueue(label: "bluez-pairing-p"), bluez: BlueZOptions(busAddress: bus.address))
        try await r.wait("powered on") { _ in m.state == .poweredOn }
        m.pairingAgent = ScriptedAgent(.keyboardDisplay)
        try await r.wait("the registration") { _ in fake!.registeredAgents.values.sorted() == ["KeyboardDisplay"] }
        // bluetoothd restarts: it forgot every agent; the new one hears from ours again.
        fake!.connection.close()
        fake = nil
        try await r.wait("bluetoothd gone") { _ in m.state == .unsupported }
        let again = try await FakeBlueZ(address: bus.address)
        again.addAdapter()
        try await r.wait("registered again") { _ in again.registeredAgents.values.sorted() == ["KeyboardDisplay"] && again.defaultAgent != nil }
        // The peripheral role names the central by its identifier on this adapter.
        let device = again.addDevice(address: "C0:FF:EE:00:00:08", ["Name": .string("Phone")])
        _ = try await again.askAgent("RequestAuthorization", [.objectPath(device)])
        let agent = try #require(m.pairingAgent as? ScriptedAgent)
        #expect(agent.asked == ["should pair"])
        #expect(agent.peers == [BlueZAdvertisement.identifier(for: .init(string: "C0:FF:EE:00:00:08", type: .public)!, adapter: "")])
    }

    @Test func bondsAreBlueZsAndPairGoesThroughTheAgent() async throws {
        let bus = try await PrivateBus()
        let fake = try await FakeBlueZ(address: bus.address)
        fake.addAdapter()
        let old = fake.addDevice(address: "C0:FF:EE:00:00:0A", ["Name": .string("Keyboard"), "Paired": .boolean(true), "Bonded": .boolean(true)])
        fake.addDevice(address: "C0:FF:EE:00:00:0B", random: true, ["Name": .string("Tag")])
        fake.addDevice(address: "C0:FF:EE:00:00:0C", ["Name": .string("Stranger")])
        let options = BlueZOptions(busAddress: bus.address)
        let bluez = try await onThread { try BlueZDevices(options: options) }
        defer { bluez.close() }

        #expect(bluez.devices().map(\.address) == ["C0:FF:EE:00:00:0A", "C0:FF:EE:00:00:0B", "C0:FF:EE:00:00:0C"])
        #expect(bluez.bonds().map(\.address) == ["C0:FF:EE:00:00:0A"])
        let tag = try await onThread { try bluez.find("Tag", discover: 0) }
        #expect(tag.addressType == "random" && !tag.paired)
        #expect(try await onThread { try bluez.find("c0:ff:ee:00:00:0b", discover: 0) } == tag)
        await #expect(throws: BlueZDevices.Failure.self) { try await onThread { try bluez.find("Nobody", discover: 0.3) } }

        // Device1.Pair asks our agent (numeric comparison here); the keys are BlueZ's.
        fake.pairingPrompt = ("RequestConfirmation", [.uint32(123_456)])
        let agent = ScriptedAgent(.keyboardDisplay)
        try await onThread { try bluez.install(agent: agent, asDefault: false) }
        // (`ble pair`'s agent: registered, not the default one; Pair asks it as the caller's agent.)
        #expect(fake.registeredAgents.values.sorted() == ["KeyboardDisplay"])
        #expect(fake.defaultAgent == nil)
        let paired = try await onThread { try bluez.pair(tag) }
        #expect(paired.paired && paired.bonded && paired.connected)
        #expect(agent.asked == ["confirm 123456"])
        #expect(fake.answersFromAgent.count == 1 && fake.answersFromAgent[0].hasPrefix("RequestConfirmation"))
        #expect(Set(bluez.bonds().map(\.address)) == ["C0:FF:EE:00:00:0A", "C0:FF:EE:00:00:0B"])
        try await onThread { try bluez.disconnect(paired) }

        // A comparison the user refuses fails the pairing, with BlueZ's reason.
        fake.pairingPrompt = ("RequestConfirmation", [.uint32(999_999)])
        let stranger = try await onThread { try bluez.find("Stranger", discover: 0) }
        await #expect(throws: BlueZDevices.Failure.bluez("Pair failed: org.bluez.Error.AuthenticationFailed: Authentication Failed")) {
            try await onThread { try bluez.pair(stranger) }
        }
        #expect(!bluez.bonds().contains { $0.address == stranger.address })

        // Forgetting a bond: Adapter1.RemoveDevice; once gone, it cannot be removed again.
        let keyboard = try #require(bluez.bonds().first { $0.path == old })
        try await onThread { try bluez.remove(keyboard) }
        try await fake.wait("the removal") { _ in !bluez.bonds().contains { $0.path == old } }
        #expect(bluez.bonds().map(\.address) == ["C0:FF:EE:00:00:0B"])
        await #expect(throws: BlueZDevices.Failure.self) { try await onThread { try bluez.remove(keyboard) } }
    }

    @Test func theToolSessionSaysWhatIsMissing() async throws {
        let bus = try await PrivateBus()
        let options = BlueZOptions(busAddress: bus.address)
        await #expect(throws: BlueZDevices.Failure.self) { try await onThread { try BlueZDevices(options: options, timeout: 5) } }
        let fake = try await FakeBlueZ(address: bus.address)
        fake.addAdapter(powered: false)
        let outcome = try await onThread { () -> BlueZDevices.Failure? in
            do {
                _ = try BlueZDevices(options: options, timeout: 5)
                return nil
            } catch { return error as? BlueZDevices.Failure }
        }
        guard case .adapterOff = outcome else {
            Issue.record("expected adapterOff, got \(String(describing: outcome))")
            return
        }
    }
}

extension FakeBlueZ: EventLog {
    var events: [String] { calls }
}
