// The connection state of a remote peripheral (CBPeripheral.h).

/// `connect` moves a peripheral to `.connecting`, success to `.connected`; cancelling a connected
/// peripheral passes through `.disconnecting`, a cancelled pending connect goes straight to `.disconnected`.
public enum CBPeripheralState: Int, Sendable {
    case disconnected = 0
    case connecting = 1
    case connected = 2
    case disconnecting = 3
}
