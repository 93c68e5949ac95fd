// `ble pair` and `ble bonds` on BLE_TRANSPORT=bluez[:hciN]: bluetoothd keeps the adapter and the bonds, so these
// commands ask it over D-Bus (CoreBluetooth's BlueZDevices) instead of opening a controller of our own. Pairing
// prompts reach the terminal through an org.bluez.Agent1 this process registers as the default agent while it runs.
import ArgumentParser
import CoreBluetooth
import Foundation
import BLESMP

enum BlueZTool {
    /// The BlueZ options BLE_TRANSPORT names, or nil when it names another transport.
    static var options: BlueZOptions? { BlueZOptions.fromEnvironment() }

    static func open(_ o: BlueZOptions) throws -> BlueZDevices {
        do { return try BlueZDevices(options: o) } catch { throw ToolError("BLE_TRANSPORT=\(transportName(o)): \(error)") }
    }

    static func transportName(_ o: BlueZOptions) -> String { o.adapter.map { "bluez:\($0)" } ?? "bluez" }

    static func describe(_ d: BlueZDevices.Device) -> String {
        "\(d.address) (\(d.addressType))" + (d.name.map { " \($0)" } ?? "") + (d.bonded || !d.paired ? "" : " paired")
            + (d.bonded ? " bonded" : "") + (d.trusted ? " trusted" : "") + (d.connected ? " connected" : "")
    }

    /// `ble pair` through bluetoothd.
    static func pair(_ o: BlueZOptions, _ c: PairCommand) throws {
        if c.legacy { throw ValidationError("--legacy: bluetoothd chooses LE Secure Connections itself when both sides support it (BLE_TRANSPORT=bluez)") }
        if c.mitm {
            throw ValidationError(
                "--mitm: bluetoothd decides MITM protection from the agent's IO capability (--io), not per pairing (BLE_TRANSPORT=bluez)")
        }
        let bluez = try open(o)
        defer { bluez.close() }
        var device: BlueZDevices.Device
        do {
            device = try bluez.find(c.address, discover: min(c.timeout, 10))
            if device.paired, c.force {
                print("forgetting the bond with \(device.address) first (--force)")
                try bluez.remove(device)
                device = try bluez.find(c.address, discover: min(c.timeout, 10))
            }
            if device.paired {
                print("already bonded with \(describe(device)) (BlueZ keeps the keys; --force pairs again)")
                return
            }
            try bluez.install(agent: TerminalPairingAgent(capability(c.io.capability), autoAccept: c.yes))
            let wasConnected = device.connected
            print("pairing with \(device.address) through bluetoothd (\(transportName(o)))…")
            device = try bluez.pair(device, timeout: c.timeout)
            print("bonded with \(describe(device))")
            if !wasConnected { try? bluez.disconnect(device) }
        } catch {
            print("failed: \(error)")
            throw ExitCode(1)
        }
    }

    /// `ble bonds` through bluetoothd: list, or forget one (Adapter1.RemoveDevice).
    static func bonds(_ o: BlueZOptions, remove: String?) throws {
        let bluez = try open(o)
        defer { bluez.close() }
        if let remove {
            guard let d = bluez.bonds().first(where: { $0.address.caseInsensitiveCompare(remove) == .orderedSame }) else {
                print("no bond with \(remove)")
                throw ExitCode(1)
            }
            do { try bluez.remove(d) } catch {
                print("failed: \(error)")
                throw ExitCode(1)
            }
            print("forgot \(d.address)")
            return
        }
        let bonds = bluez.bonds()
        print("\(bonds.count) bond(s) kept by bluetoothd (\(transportName(o)))")
        for d in bonds { print("  " + describe(d)) }
    }

    static func capability(_ io: IOCapability) -> CBPairingIOCapability {
        switch io {
        case .noInputNoOutput: return .noInputNoOutput
        case .displayOnly: return .displayOnly
        case .displayYesNo: return .displayYesNo
        case .keyboardOnly: return .keyboardOnly
        case .keyboardDisplay: return .keyboardDisplay
        }
    }
}

/// The terminal as a CBPairingAgent (the BlueZ path; TerminalAgent is the same for our own host). Without a terminal
/// (stdin closed) it refuses what needs an answer.
final class TerminalPairingAgent: CBPairingAgent, @unchecked Sendable {
    let ioCapability: CBPairingIOCapability
    let autoAccept: Bool
    init(_ io: CBPairingIOCapability, autoAccept: Bool) {
        ioCapability = io
        self.autoAccept = autoAccept
    }

    /// Reads a line on a thread of its own, so no task's thread waits for the user.
    private func ask(_ question: String) async -> String? {
        await withCheckedContinuation { (c: CheckedContinuation<String?, Never>) in
            Thread.detachNewThread {
                print(question, terminator: " ")
                fflush(nil)
                c.resume(returning: readLine()?.trimmingCharacters(in: .whitespaces))
            }
        }
    }

    func shouldPair(with peer: CBPeer?) async -> Bool {
        if autoAccept {
            say("pairing: accepted (Just Works)")
            return true
        }
        return await ask("Pair (Just Works)? [y/N]")?.lowercased().hasPrefix("y") == true
    }

    func display(passkey: UInt32, for peer: CBPeer?) async {
        say(String(format: "Passkey: %06u  (type it on the other device)", passkey))
    }

    func passkey(for peer: CBPeer?) async -> UInt32? {
        await ask("Passkey shown by the other device:").flatMap { UInt32($0) }
    }

    func confirm(number: UInt32, with peer: CBPeer?) async -> Bool {
        if autoAccept {
            say(String(format: "Comparison value %06u: accepted", number))
            return true
        }
        return await ask(String(format: "Does the other device show %06u? [y/N]", number))?.lowercased().hasPrefix("y") == true
    }
}
