// Pairing from the command line: `ble pair ADDRESS` (as central), `ble bonds` (list or forget bonds), and
// the terminal agent that `ble pair` and `ble serve --io …` use to show passkeys and ask the user.
import ArgumentParser
import Foundation
import BLEWire
import BLEHCI
import BLEHost
import BLESMP
import BLETransport

/// An IO capability on the command line, by name. (IOCapability itself is CaseIterable with raw values, for
/// which ArgumentParser's help would show the raw number as the default.)
struct IOArgument: ExpressibleByArgument, Sendable, Equatable {
    let capability: IOCapability

    init(_ capability: IOCapability) { self.capability = capability }

    init?(argument: String) {
        switch argument {
        case "none": capability = .noInputNoOutput
        case "display": capability = .displayOnly
        case "yesno", "display+yes/no": capability = .displayYesNo
        case "keyboard": capability = .keyboardOnly
        case "keyboard+display", "display+keyboard": capability = .keyboardDisplay
        default: return nil
        }
    }

    static var allValueStrings: [String] { ["none", "display", "yesno", "keyboard", "keyboard+display"] }
    static var defaultCompletionKind: CompletionKind { .list(allValueStrings) }

    /// The name the command line takes, as help shows defaults ("default: keyboard+display").
    var defaultValueDescription: String {
        switch capability {
        case .noInputNoOutput: return "none"
        case .displayOnly: return "display"
        case .displayYesNo: return "yesno"
        case .keyboardOnly: return "keyboard"
        case .keyboardDisplay: return "keyboard+display"
        }
    }

    static let none = IOArgument(.noInputNoOutput)
    static let keyboardDisplay = IOArgument(.keyboardDisplay)
}

/// Asks the user on the terminal. Without a terminal (stdin closed) it refuses what needs an answer.
final class TerminalAgent: PairingAgent, @unchecked Sendable {
    let ioCapability: IOCapability
    let autoAccept: Bool
    init(_ io: IOCapability, autoAccept: Bool) { ioCapability = io; self.autoAccept = autoAccept }

    func pairing(_ connection: HostConnection, prompt: PairingPrompt, answer: @escaping @Sendable (PairingAnswer) -> Void) {
        let peer = connection.identityAddress
        let auto = autoAccept
        Thread.detachNewThread {
            func ask(_ q: String) -> String? {
                print(q, terminator: " ")
                fflush(nil)
                return readLine()?.trimmingCharacters(in: .whitespaces)
            }
            switch prompt {
            case .acceptPairing:
                if auto { print("pairing with \(peer): accepted (Just Works)"); return answer(.accept(true)) }
                answer(.accept(ask("Pair with \(peer) (Just Works)? [y/N]")?.lowercased().hasPrefix("y") == true))
            case let .displayPasskey(v):
                print(String(format: "Passkey for %@: %06u  (type it on the other device)", "\(peer)", v))
                fflush(nil)
            case .enterPasskey:
                answer(.passkey(ask("Passkey shown by \(peer):").flatMap { UInt32($0) }))
            case let .confirmNumber(n):
                if auto { print(String(format: "Comparison value %06u: accepted", n)); return answer(.accept(true)) }
                answer(.accept(ask(String(format: "Does %@ show %06u? [y/N]", "\(peer)", n))?.lowercased().hasPrefix("y") == true))
            }
            fflush(nil)
        }
    }
}

struct PairCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pair", abstract: "Connect to a device, pair (and bond), print the keys' summary.",
        discussion: "Bonds are kept in $OCB_STATE_DIR (else $XDG_STATE_HOME/OpenCoreBluetooth) for real controllers.")

    @Argument(help: "The device: its address (AA:BB:CC:DD:EE:FF, optionally followed by /P or /R) or its advertised name.")
    var address: String
    @Option(help: "Pairing: what this terminal can do.")
    var io: IOArgument = .keyboardDisplay
    @Flag(help: "Use LE legacy pairing (no Secure Connections).")
    var legacy = false
    @Flag(help: "Require MITM protection (fail rather than use Just Works).")
    var mitm = false
    @Flag(help: "Pair again even if a bond exists.")
    var force = false
    @Flag(help: "Accept Just Works and numeric comparisons without asking.")
    var yes = false
    @Option(help: "Give up after this many seconds.")
    var timeout: Double = 60

    func validate() throws {
        guard timeout > 0 else { throw ValidationError("--timeout must be more than 0 seconds") }
    }

    func run() throws {
        if let bluez = BlueZTool.options { return try BlueZTool.pair(bluez, self) }
        let device = DeviceTarget(address)
        let link = try DeviceLink(io: io, yes: yes)
        let host = link.host!
        let target: BluetoothAddress
        do { target = try link.find(device, timeout: min(timeout, 10)) } catch { Controller.close(host); throw error }
        let done = DispatchSemaphore(value: 0)
        final class Outcome: @unchecked Sendable { var code: Int32 = 1 }
        let outcome = Outcome()
        let delegate = PairDelegate(target: target) { c in
            print("connected to \(c.peerAddress); pairing…")
            let finish: (Result<LinkSecurity, PairingError>) -> Void = { r in
                switch r {
                case let .success(s):
                    print("secured: \(s)")
                    if let b = host.bondStore.bond(matching: c.peerAddress) {
                        print(
                            "bonded with \(b.identityAddress) (\(b.secureConnections ? "LE Secure Connections" : "legacy"), \(b.authenticated ? "authenticated" : "unauthenticated"), \(b.keySize)-octet key)"
                        )
                        if let f = host.bondStore.fileURL { print("bond stored in \(f.path)") }
                    }
                    outcome.code = 0
                case let .failure(e):
                    print("failed: \(e)")
                    if e == .encryptionFailed(HCIStatus.pinOrKeyMissing.rawValue), let b = host.bondStore.bond(matching: c.peerAddress) {
                        print("to pair again: `ble bonds --remove \(b.identityAddress)`, or `ble pair --force`")
                    }
                }
                done.signal()
            }
            if force { host.pair(c, mitm: mitm, completion: finish) } else { host.secure(c, mitm: mitm, completion: finish) }
        }
        host.loop.execute {
            host.securityConfiguration.secureConnections = !legacy
            host.securityConfiguration.requireMITM = mitm
            host.centralDelegate = delegate
            print("connecting to \(target) on \(host.transport.name)…")
            host.connect(to: target)
        }
        if done.wait(timeout: .now() + timeout) == .timedOut { print("timed out after \(formatSeconds(timeout))") }
        // Let the last key distribution PDUs leave, then end the link ourselves (quietly) before powering off.
        usleep(500_000)
        host.loop.sync {
            delegate.quiet = true
            for c in host.connections.values { c.disconnect() }
        }
        for _ in 0..<100 where host.loop.sync({ !host.connections.isEmpty }) { usleep(10_000) }
        Controller.close(host)
        if outcome.code != 0 { throw ExitCode(outcome.code) }
    }
}

final class PairDelegate: HostCentralDelegate, @unchecked Sendable {
    let target: BluetoothAddress
    /// Set when the command ends the link itself.
    var quiet = false
    let connected: (HostConnection) -> Void
    init(target: BluetoothAddress, connected: @escaping (HostConnection) -> Void) { self.target = target; self.connected = connected }
    func host(_ host: LEHost, didReceive report: AdvertisingReport) {}
    func host(_ host: LEHost, didConnect connection: HostConnection) { connected(connection) }
    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) { print("connection failed: \(status)") }
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) { if !quiet { print("disconnected: \(reason)") } }
    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {}
}

struct BondsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bonds", abstract: "List the bonds of the controller chosen by BLE_TRANSPORT, or forget one.")

    @Option(help: "Forget the bond with this identity address.")
    var remove: String?

    @Option(help: "Over emulators (ble radio, rootcanal): whose bonds, central (the connecting commands) or the --identity a server ran with (serve).")
    var identity = "central"

    func validate() throws {
        if let remove, BluetoothAddress(string: remove) == nil { throw ValidationError("--remove: \"\(remove)\" is not an address (AA:BB:CC:DD:EE:FF)") }
        guard !identity.isEmpty, identity.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
            throw ValidationError("--identity: letters, digits, - and _ only")
        }
    }

    func run() throws {
        if let bluez = BlueZTool.options { return try BlueZTool.bonds(bluez, remove: remove) }
        let host = try Controller.open(name: "bonds", identity: identity)
        defer { Controller.close(host) }
        if let remove {
            let a = BluetoothAddress(string: remove)!
            let removed = host.loop.sync { host.removeBond(a) || host.removeBond(BluetoothAddress(bytes: a.bytes, type: a.type.isRandom ? .public : .random)) }
            print(removed ? "forgot \(a)" : "no bond with \(a)")
            if !removed { throw ExitCode(1) }
            return
        }
        let (bonds, file) = host.loop.sync { (host.bondStore.bonds, host.bondStore.fileURL) }
        print("\(bonds.count) bond(s)" + (file.map { " in \($0.path)" } ?? " (in memory: the virtual radio keeps none across runs)"))
        for b in bonds {
            print(
                "  \(b.identityAddress)  \(b.secureConnections ? "SC" : "legacy") \(b.authenticated ? "authenticated" : "unauthenticated") key \(b.keySize)"
                    + (b.keys.peerIRK != nil ? " IRK" : "") + (b.keys.peerCSRK != nil ? " CSRK" : ""))
        }
    }
}
