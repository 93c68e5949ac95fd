// What a command does when its controller goes away after it came up: a USB dongle pulled out, an adapter the
// kernel removed (on Linux the HCI user channel then fails with EPIPE), a serial adapter unplugged, an emulator
// stopped. The host reports `.off` at once, fails what was in flight, and retries every second.
//
// - A command with an end (read, write, gatt, pair, bonds, scan with a duration…) says on standard error that the
//   adapter is gone and exits 1: its result would be incomplete.
// - A command whose job is to keep running (`ble serve`, `ble scan --duration 0`) says so, waits while the host
//   retries, says why it cannot have the adapter yet when that changes (gone, or taken by bluetoothd), says when
//   it is back (naming it when it came back at another index: a dongle plugged in again as hci2), and carries
//   on: `onReturn` starts again what a new controller does not know (scanning).
//
// Threading: `install` runs on the command's thread; the observer and `onReturn` run on the host's loop.
import Foundation
import BLEHost
import BLETransport

enum AdapterWatch {
    enum Mode: Sendable { case exit, wait }

    private struct Settings: @unchecked Sendable {
        var mode: Mode = .exit
        var onReturn: ((LEHost) -> Void)?
        var closing: Set<ObjectIdentifier> = []
    }
    private static let settings = LockedBox(Settings())

    /// Set by long-running commands before they open the controller.
    static func keepRunning(onReturn: ((LEHost) -> Void)? = nil) {
        settings.update {
            $0.mode = .wait; $0.onReturn = onReturn
        }
    }

    /// Called by Controller.close before it powers the host off: that `.off` is the command's own doing.
    static func closing(_ host: LEHost) {
        settings.update { _ = $0.closing.insert(ObjectIdentifier(host)) }
    }

    /// Watches `host` (already on) for the rest of the command.
    static func install(_ host: LEHost, spec: TransportSpec) {
        let id = ObjectIdentifier(host)
        final class Watch: @unchecked Sendable { var lost = false; var lastReason: String? }
        let watch = Watch()
        host.loop.execute {
            _ = host.addPowerObserver { [weak host] state in
                guard let host else { return }
                let s = settings.read { $0 }
                if s.closing.contains(id) { return }
                switch state {
                case .off where !watch.lost:
                    watch.lost = true
                    switch s.mode {
                    case .exit:
                        warn("Error: \(spec): the adapter went away (unplugged, powered down or removed by its driver); stopping.")
                        Foundation.exit(1)
                    case .wait:
                        warn("\(spec): the adapter went away (unplugged, powered down or removed by its driver); waiting for it to come back (Ctrl-C stops)…")
                    }
                case let .unsupported(why) where watch.lost && why != watch.lastReason:
                    watch.lastReason = why
                    warn("\(spec): still waiting: \(why)")
                case .on where watch.lost:
                    watch.lost = false
                    watch.lastReason = nil
                    // An adapter that came back at another index (see HCISocketTransport) is named.
                    let now = host.transport.name
                    if case .hciSocket = spec, now != spec.description {
                        warn("\(spec): the adapter is back, as \(now)")
                    } else {
                        warn("\(spec): the adapter is back")
                    }
                    s.onReturn?(host)
                default:
                    break
                }
            }
        }
    }
}

/// A value behind a lock.
final class LockedBox<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func read<T>(_ body: (Value) -> T) -> T { lock.withLock { body(value) } }
    func update(_ body: (inout Value) -> Void) { lock.withLock { body(&value) } }
}
