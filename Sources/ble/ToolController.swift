// Opening the controller that BLE_TRANSPORT names, for every command that uses one. The command waits
// until the host is up; when it cannot be (nothing listening, no adapter, no permission, a controller that
// never answers), it fails at once with the one-line reason the host already has, and exits non-zero.
//
// Threading: `open` is called from the command's thread (usually the main one) and blocks; the host's
// callbacks run on its loop.
import Foundation
import ArgumentParser
import BLEWire
import BLEHost
import BLETransport

/// A failure after parsing: ArgumentParser prints "Error: <description>" and exits with 1.
struct ToolError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

enum Controller {
    /// Seconds a command waits for the controller to come up by default.
    static let defaultTimeout = 20.0

    /// The transport BLE_TRANSPORT names, or a failure that says what is wrong with it.
    static func spec() throws -> TransportSpec {
        if let bluez = BlueZTool.options { throw ToolError(BlueZTool.needsOwnController(bluez)) }
        do { return try TransportSpec.fromEnvironment() } catch { throw ToolError("BLE_TRANSPORT: \(error)") }
    }

    /// Makes a host for BLE_TRANSPORT, lets `prepare` configure it on its loop (delegates, database, agent),
    /// powers it on and returns once it is on. `identity` names the persistent identity the host uses where
    /// the controller's own address changes from run to run (see ToolIdentity). Throws the host's reason
    /// when the controller cannot be opened.
    static func open(
        name: String, identity: String? = nil, timeout: Double = defaultTimeout,
        prepare: @escaping @Sendable (LEHost) -> Void = { _ in }
    ) throws -> LEHost {
        let spec = try spec()
        let host: LEHost
        do { host = try HostFactory.makeHost(spec: spec, name: name) } catch { throw ToolError("\(spec): \(error)") }
        let identityPlan = identity.flatMap { ToolIdentity.plan(for: spec, name: $0) }
        if let identityPlan { identityPlan.prepare(host) }
        // A tcp-server transport waits for its controller to connect: waiting is not a failure there.
        let waitsForPeer: Bool
        if case .tcpServer = spec { waitsForPeer = true } else { waitsForPeer = false }
        final class Outcome: @unchecked Sendable {
            let lock = NSLock()
            var failure: String?
            var token: UInt64 = 0
        }
        let outcome = Outcome()
        let done = DispatchSemaphore(value: 0)
        host.loop.execute {
            prepare(host)
            var started = false
            outcome.token = host.addPowerObserver { [weak host] s in
                guard let host else { return }
                switch s {
                case .on:
                    host.removePowerObserver(outcome.token)
                    done.signal()
                case .starting:
                    started = true
                case let .unsupported(why) where !waitsForPeer:
                    outcome.lock.withLock { outcome.failure = why }
                    host.removePowerObserver(outcome.token)
                    host.powerOff()
                    done.signal()
                case .off where started && !waitsForPeer:
                    outcome.lock.withLock { outcome.failure = "the controller closed the connection during start-up" }
                    host.removePowerObserver(outcome.token)
                    host.powerOff()
                    done.signal()
                default:
                    break
                }
            }
            host.powerOn()
        }
        if waitsForPeer { FileHandle.standardError.write(Data("waiting for a controller to connect (\(spec))…\n".utf8)) }
        let deadline: DispatchTime = waitsForPeer ? .distantFuture : .now() + timeout
        if done.wait(timeout: deadline) == .timedOut {
            host.loop.sync {
                host.removePowerObserver(outcome.token); host.powerOff()
            }
            throw ToolError("\(spec): the controller did not come up within \(formatSeconds(timeout))")
        }
        if let why = outcome.lock.withLock({ outcome.failure }) { throw ToolError("\(spec): \(why)") }
        if let identityPlan { try identityPlan.apply(host) }
        if !waitsForPeer && spec != .virtual { AdapterWatch.install(host, spec: spec) }
        return host
    }

    /// For "nothing found" on the default transport: the in-process air has only this process's devices.
    static var virtualHint: String? {
        guard (try? spec()) == .virtual else { return nil }
        return
            "(the default virtual radio is inside this process: to reach a device served by another process, run `ble radio` and set BLE_TRANSPORT=tcp-client:127.0.0.1:6402 in both)"
    }

    /// Whether a controller of our own is to be opened first (not on the virtual radio, nor on BlueZ, where
    /// bluetoothd keeps the adapter and the Core Bluetooth managers reach it over D-Bus).
    static var needsCheck: Bool {
        (try? spec()) != .virtual && ProcessInfo.processInfo.environment["BLE_TRANSPORT"]?.hasPrefix("bluez") != true
    }

    /// Powers the host off on its loop (links are dropped, the transport closed).
    static func close(_ host: LEHost) {
        AdapterWatch.closing(host)
        host.loop.sync { host.powerOff() }
    }
}

func formatSeconds(_ s: Double) -> String {
    s == s.rounded() ? "\(Int(s)) s" : String(format: "%.1f s", s)
}

/// Writes a line to standard output at once (output is often a pipe read line by line).
func say(_ s: String) {
    print(s)
    fflush(nil)
}

/// Writes a line to standard error.
func warn(_ s: String) {
    FileHandle.standardError.write(Data((s + "\n").utf8))
}

/// What the terminal can show: colours and in-place updates only on a terminal, never with NO_COLOR.
enum Terminal {
    static var isTerminal: Bool { isatty(STDOUT_FILENO) == 1 }
    static var usesColour: Bool {
        guard isTerminal else { return false }
        if let v = ProcessInfo.processInfo.environment["NO_COLOR"], !v.isEmpty { return false }
        return ProcessInfo.processInfo.environment["TERM"] != "dumb"
    }
    static func paint(_ s: String, _ code: String) -> String { usesColour ? "\u{1B}[\(code)m\(s)\u{1B}[0m" : s }
    static func bold(_ s: String) -> String { paint(s, "1") }
    static func dim(_ s: String) -> String { paint(s, "2") }
    static func cyan(_ s: String) -> String { paint(s, "36") }
    static func green(_ s: String) -> String { paint(s, "32") }
    static func yellow(_ s: String) -> String { paint(s, "33") }
    static func red(_ s: String) -> String { paint(s, "31") }
}
