// Manager state and authorization (CBManager.h). Raw values are Apple's NSInteger constants.

/// The state of a central or peripheral manager. A new manager starts at `.unknown`; every change is
/// announced through the delegate's `…DidUpdateState` callback.
public enum CBManagerState: Int, Sendable {
    /// The initial state, until the first state update is delivered.
    case unknown = 0
    /// The connection with the system service was momentarily lost; an update is imminent.
    case resetting = 1
    /// The platform does not support this role (no controller, or a controller without LE).
    case unsupported = 2
    /// The app is not authorized to use Bluetooth Low Energy.
    case unauthorized = 3
    /// Bluetooth is off: scanning and advertising stopped, links dropped.
    case poweredOff = 4
    /// Bluetooth is on and available; the only state in which commands are accepted.
    case poweredOn = 5
}

/// Whether the app may use Bluetooth (CBManager.authorization).
public enum CBManagerAuthorization: Int, Sendable {
    case notDetermined = 0
    case restricted = 1
    case denied = 2
    case allowedAlways = 3
}

/// The central manager state before iOS 10 (same raw values as `CBManagerState`).
@available(*, deprecated, message: "Use CBManagerState instead")
public enum CBCentralManagerState: Int, Sendable {
    case unknown = 0
    case resetting = 1
    case unsupported = 2
    case unauthorized = 3
    case poweredOff = 4
    case poweredOn = 5
}

/// The peripheral manager state before iOS 10 (same raw values as `CBManagerState`).
@available(*, deprecated, message: "Use CBManagerState instead")
public enum CBPeripheralManagerState: Int, Sendable {
    case unknown = 0
    case resetting = 1
    case unsupported = 2
    case unauthorized = 3
    case poweredOff = 4
    case poweredOn = 5
}

/// Returned by the deprecated class method `CBPeripheralManager.authorizationStatus()`.
@available(*, deprecated, message: "Use CBManagerAuthorization instead")
public enum CBPeripheralManagerAuthorizationStatus: Int, Sendable {
    case notDetermined = 0
    case restricted = 1
    case denied = 2
    case authorized = 3
}
