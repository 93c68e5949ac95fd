// CBManager (CBManager.h): the abstract base of the central and peripheral managers.
//
// Threading contract of the managers: the host core runs on its own loop; a manager's delegate methods run
// on the queue given at init (the main queue when nil), always asynchronously with respect to the call
// that caused them. Model objects (CBPeripheral, CBService, …) are updated on the delegate queue right
// before the callback that announces the change, so the app never sees a value change under its feet.
import Foundation
import BLEHost
import Logging
import StackLog

open class CBManager: NSObject, @unchecked Sendable {
    package let managerLock = CBLock()
    private var storedState: CBManagerState = .unknown
    package var storedPairingAgent: (any CBPairingAgent)?

    /// The current state; `.unknown` until the first `…DidUpdateState`.
    open var state: CBManagerState { managerLock.withLock { storedState } }

    package func setState(_ s: CBManagerState) { managerLock.withLock { storedState = s } }

    /// Whether this process may use Bluetooth. Linux asks no question: a process may use any controller
    /// the operating system lets it open, so this is `.allowedAlways`, except while a manager of this
    /// process is refused its controller for lack of permission (an HCI user channel without
    /// CAP_NET_ADMIN, a serial port outside the user's groups): then `.denied`, and that manager reads
    /// `.unauthorized`.
    open class var authorization: CBManagerAuthorization {
        unauthorizedManagers.withLock { $0.values.contains { $0.manager != nil } } ? .denied : .allowedAlways
    }

    @available(*, deprecated, message: "Use the class property authorization instead")
    open var authorization: CBManagerAuthorization { Self.authorization }

    /// The managers of this process refused their controller by the operating system, each under the
    /// identity of a reference made for it at `start`. That reference lives as long as the host's observer
    /// that files it, so its identity is never another manager's: a manager's own address can be reused
    /// by a newer manager while the old one's observer still hears its host. An entry whose manager is
    /// gone counts for nothing and is dropped at the next manager's end.
    package static let unauthorizedManagers = CBMutex([ObjectIdentifier: WeakManager]())

    package final class WeakManager: @unchecked Sendable {
        weak var manager: CBManager?
        init(_ manager: CBManager) { self.manager = manager }
    }

    deinit { Self.unauthorizedManagers.withLock { $0 = $0.filter { $0.value.manager != nil } } }

    /// Starts a manager on its host: without one, the state becomes `.unsupported` (announced on `queue`);
    /// with one, `register` installs the manager as the host's delegate, power changes are observed, and the
    /// host is powered on (or its current state reported).
    package func start(
        on host: LEHost?, queue: DispatchQueue, failure: String?,
        announceUnsupported: @escaping @Sendable () -> Void,
        register: @escaping @Sendable (LEHost) -> Void,
        powerChanged: @escaping @Sendable (CBManagerState) -> Void
    ) {
        guard let host else {
            queue.async { [self] in
                CBLog.warning("no Bluetooth controller: \(failure ?? "unknown error")")
                setState(.unsupported)
                announceUnsupported()
            }
            return
        }
        let me = WeakManager(self)
        final class Announced: @unchecked Sendable { var state: CBManagerState? }
        let announced = Announced()
        // On the loop: a controller the operating system refused reads as .unauthorized, not .unsupported.
        // The host keeps this observer: it holds the host weakly, or the host would keep itself alive.
        let observe: @Sendable (HostPowerState) -> Void = { [weak host] s in
            var state = s.managerState
            if case .unsupported = s, host?.controllerAccessDenied == true { state = .unauthorized }
            // A controller that went away (a dongle pulled out) is retried every second: each attempt
            // (.starting) and each failure (.off again) is no news. As on iOS, the app hears .poweredOff once,
            // then .poweredOn when the controller is back.
            if announced.state == .poweredOff, state == .unknown || state == .poweredOff { return }
            announced.state = state
            // A retry (.unknown while the controller is tried again) leaves the process's authorization
            // as the last answer left it.
            if state != .unknown {
                CBManager.unauthorizedManagers.withLock {
                    $0[ObjectIdentifier(me)] = state == .unauthorized && me.manager != nil ? me : nil
                }
            }
            powerChanged(state)
        }
        host.loop.execute {
            register(host)
            host.addPowerObserver { s in observe(s) }
            // A refused controller the host still tries is reported as it stands; one the host gave up when its
            // last manager went (.off) is tried again, and refused again: .unauthorized, not .poweredOff.
            if host.powerState == .on || (host.controllerAccessDenied && host.powerState != .off) {
                observe(host.powerState)
            } else {
                host.powerOn()
            }
        }
    }

    /// Logs Apple's "API MISUSE" line for a call made outside `.poweredOn`, and returns true if so.
    package func misusedOutsidePoweredOn() -> Bool {
        guard state != .poweredOn else { return false }
        CBLog.misuse("<\(type(of: self)): \(address(of: self))> can only accept this command while in the powered on state")
        return true
    }
}

/// Diagnostics in Core Bluetooth's words (iOS's "API MISUSE" lines and warnings), through swift-log with the
/// label `opencorebluetooth.corebluetooth`: misuse at `error`, warnings at `warning`. The logger is made at
/// each call (these are rare), so it follows whatever backend the application has bootstrapped by then.
package enum CBLog {
    package static func misuse(_ message: @autoclosure () -> String) {
        Logger(.coreBluetooth).error("API MISUSE: \(message())")
    }

    package static func warning(_ message: @autoclosure () -> String) {
        Logger(.coreBluetooth).warning("\(message())")
    }
}

extension HostPowerState {
    /// How a host state reads through Core Bluetooth.
    var managerState: CBManagerState {
        switch self {
        case .off: return .poweredOff
        case .starting: return .unknown
        case .on: return .poweredOn
        case .unsupported: return .unsupported
        }
    }
}
