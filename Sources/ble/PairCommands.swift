// Pairing from the command line: `ble pair ADDRESS` (as central), `ble bonds` (list or forget bonds), and
// the terminal agent that `ble pair` and `ble serve --io …` use to show passkeys and ask the user.
import ArgumentParser
import Foundation
import BLEWire
import BLEHCI
import BLEHost
import BLESMP
import BLETransport

extension IOCapability: ExpressibleByArgument {
    public init?(argument: String) {
        switch argument {
        case "none": self = .noInputNoOutput
        case "display": self = .displayOnly
        case "yesno", "display+yes/no": self = .displayYesNo
        case "keyboard": self = .keyboardOnly
        case "keyboard+display", "display+keyboard": self = .keyboardDisplay
        default: return nil
        }
    }
    public static var allValueStrings: [String] { ["none", "display", "yesno", "keyboard", "keyboard+display"] }
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

    @Argument(help: "The device address, AA:BB:CC:DD:EE:FF, optionally followed by /P or /R.")
    var address: String
    @Option(help: "What this terminal can do: none, display, yesno, keyboard, keyboard+display.")
    var io: IOCapability = .keyboardDisplay
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

    func run() throws {
        guard let target = BluetoothAddress(string: address) else { throw ValidationError("not an address: \(address)") }
        let host = try HostFactory.makeHostFromEnvironment(name: "pair")
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
                        print("bonded with \(b.identityAddress) (\(b.secureConnections ? "LE Secure Connections" : "legacy"), \(b.authenticated ? "authenticated" : "unauthenticated"), \(b.keySize)-octet key)")
                        if let f = host.bondStore.fileURL { print("bond stored in \(f.path)") }
                    }
                    outcome.code = 0
                case let .failure(e):
                    print("failed: \(e)")
                }
                done.signal()
            }
            if force { host.pair(c, mitm: mitm, completion: finish) } else { host.secure(c, mitm: mitm, completion: finish) }
        }
        host.loop.execute {
            host.pairingAgent = TerminalAgent(io, autoAccept: yes)
            host.securityConfiguration.secureConnections = !legacy
            host.securityConfiguration.requireMITM = mitm
            host.centralDelegate = delegate
            host.addPowerObserver { s in
                if s == .on { print("connecting to \(target) on \(host.transport.name)…"); host.connect(to: target) }
                if case let .unsupported(why) = s { print("no controller: \(why)"); done.signal() }
            }
            host.powerOn()
        }
        if done.wait(timeout: .now() + timeout) == .timedOut { print("timed out") }
        // Let the last key distribution PDUs leave before the link goes down.
        usleep(500_000)
        host.loop.sync { host.powerOff() }
        if outcome.code != 0 { throw ExitCode(outcome.code) }
    }
}

final class PairDelegate: HostCentralDelegate, @unchecked Sendable {
    let target: BluetoothAddress
    let connected: (HostConnection) -> Void
    init(target: BluetoothAddress, connected: @escaping (HostConnection) -> Void) { self.target = target; self.connected = connected }
    func host(_ host: LEHost, didReceive report: AdvertisingReport) {}
    func host(_ host: LEHost, didConnect connection: HostConnection) { connected(connection) }
    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) { print("connection failed: \(status)") }
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) { print("disconnected: \(reason)") }
    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {}
}

struct BondsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bonds", abstract: "List the bonds of the controller chosen by BLE_TRANSPORT, or forget one.")

    @Option(help: "Forget the bond with this identity address.")
    var remove: String?

    func run() throws {
        let host = try HostFactory.makeHostFromEnvironment(name: "bonds")
        let up = DispatchSemaphore(value: 0)
        host.loop.execute {
            host.addPowerObserver { s in if s == .on { up.signal() } }
            host.powerOn()
        }
        guard up.wait(timeout: .now() + 10) == .success else { throw ValidationError("the controller did not come up") }
        defer { host.loop.sync { host.powerOff() } }
        if let remove {
            guard let a = BluetoothAddress(string: remove) else { throw ValidationError("not an address: \(remove)") }
            let removed = host.loop.sync { host.removeBond(a) || host.removeBond(BluetoothAddress(bytes: a.bytes, type: a.type.isRandom ? .public : .random)) }
            print(removed ? "forgot \(a)" : "no bond with \(a)")
            if !removed { throw ExitCode(1) }
            return
        }
        let (bonds, file) = host.loop.sync { (host.bondStore.bonds, host.bondStore.fileURL) }
        print("\(bonds.count) bond(s)" + (file.map { " in \($0.path)" } ?? " (in memory: the virtual radio keeps none across runs)"))
        for b in bonds {
            print("  \(b.identityAddress)  \(b.secureConnections ? "SC" : "legacy") \(b.authenticated ? "authenticated" : "unauthenticated") key \(b.keySize)"
                  + (b.keys.peerIRK != nil ? " IRK" : "") + (b.keys.peerCSRK != nil ? " CSRK" : ""))
        }
    }
}
