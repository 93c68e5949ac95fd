// CBManager (CBManager.h): the abstract base of the central and peripheral managers.
//
// Threading contract of the managers: the host core runs on its own loop; a manager's delegate methods run
// on the queue given at init (the main queue when nil), always asynchronously with respect to the call
// that caused them. Model objects (CBPeripheral, CBService, …) are updated on the delegate queue right
// before the callback that announces the change, so the app never sees a value change under its feet.
import Foundation
import BLEHost

open class CBManager: NSObject, @unchecked Sendable {
    package let managerLock = CBLock()
    private var storedState: CBManagerState = .unknown
    package var storedPairingAgent: (any CBPairingAgent)?

    /// The current state; `.unknown` until the first `…DidUpdateState`.
    open var state: CBManagerState { managerLock.withLock { storedState } }

    package func setState(_ s: CBManagerState) { managerLock.withLock { storedState = s } }

    /// On Linux every process may use the controller it can open.
    open class var authorization: CBManagerAuthorization { .allowedAlways }

    @available(*, deprecated, message: "Use the class property authorization instead")
    open var authorization: CBManagerAuthorization { .allowedAlways }

    /// Starts a manager on its host: without one, the state becomes `.unsupported` (announced on `queue`);
    /// with one, `register` installs the manager as the host's delegate, power changes are observed, and the
    /// host is powered on (or its current state reported).
    package func start(on host: LEHost?, queue: DispatchQueue, failure: String?,
                       announceUnsupported: @escaping @Sendable () -> Void,
                       register: @escaping @Sendable (LEHost) -> Void,
                       powerChanged: @escaping @Sendable (HostPowerState) -> Void) {
        guard let host else {
            queue.async { [self] in
                CBLog.warning("no Bluetooth controller: \(failure ?? "unknown error")")
                setState(.unsupported)
                announceUnsupported()
            }
            return
        }
        host.loop.execute {
            register(host)
            host.addPowerObserver { s in powerChanged(s) }
            if host.powerState == .on { powerChanged(.on) } else { host.powerOn() }
        }
    }

    /// Logs Apple's "API MISUSE" line for a call made outside `.poweredOn`, and returns true if so.
    package func misusedOutsidePoweredOn() -> Bool {
        guard state != .poweredOn else { return false }
        CBLog.misuse("<\(type(of: self)): \(address(of: self))> can only accept this command while in the powered on state")
        return true
    }
}

/// Diagnostics in Core Bluetooth's words, on standard error.
package enum CBLog {
    package static func misuse(_ message: String) {
        FileHandle.standardError.write(Data("[CoreBluetooth] API MISUSE: \(message)\n".utf8))
    }

    package static func warning(_ message: String) {
        FileHandle.standardError.write(Data("[CoreBluetooth] WARNING: \(message)\n".utf8))
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
