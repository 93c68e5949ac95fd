// What the host core tells the layers above it (the Core Bluetooth façade, the `ble` tool, tests).
//
// Threading contract: every delegate method is called on the host's loop. Implementations hop to their own
// queue if they need to; they must not block the loop.
import BLEWire
import BLEHCI
import BLEGATT

/// Whether the host has a working controller.
public enum HostPowerState: Sendable, Equatable, CustomStringConvertible {
    /// Not started, or powered off.
    case off
    /// Opening the transport and initialising the controller.
    case starting
    case on
    /// The controller cannot do LE, or it could not be reached.
    case unsupported(String)

    public var description: String {
        switch self {
        case .off: return "off"
        case .starting: return "starting"
        case .on: return "on"
        case let .unsupported(why): return "unsupported (\(why))"
        }
    }
}

/// One advertising report as the host decoded it from HCI.
public struct AdvertisingReport: Sendable, Equatable {
    public enum Kind: UInt8, Sendable {
        case connectableUndirected = 0, connectableDirected = 1, scannableUndirected = 2, nonConnectable = 3, scanResponse = 4
    }
    public var kind: Kind
    public var address: BluetoothAddress
    public var data: [UInt8]
    /// dBm; 127 means the controller did not measure it.
    public var rssi: Int8

    public init(kind: Kind, address: BluetoothAddress, data: [UInt8], rssi: Int8) {
        self.kind = kind
        self.address = address
        self.data = data
        self.rssi = rssi
    }

    public var isConnectable: Bool { kind == .connectableUndirected || kind == .connectableDirected }
}

public protocol HostCentralDelegate: AnyObject {
    func host(_ host: LEHost, didReceive report: AdvertisingReport)
    func host(_ host: LEHost, didConnect connection: HostConnection)
    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus)
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus)
    /// A notification or indication from a server we are a client of.
    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool)
    /// A notification whose value is still in the packet that carried it (a whole ATT notification in one ACL
    /// packet, the usual case): a delegate that keeps values in a form of its own (Core Bluetooth's Data)
    /// builds it from these octets, without an array in between. By default the value becomes an array and
    /// goes to `host(_:connection:didReceiveValue:forHandle:isIndication:)`.
    func host(_ host: LEHost, connection: HostConnection, didReceiveNotification value: ArraySlice<UInt8>, forHandle handle: UInt16)
    /// Buffer space freed for Write Commands after `canSendWriteWithoutResponse` was false.
    func host(_ host: LEHost, connectionIsReadyToSendWriteWithoutResponse connection: HostConnection)
    func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16)
}

public extension HostCentralDelegate {
    func host(_ host: LEHost, connection: HostConnection, didReceiveNotification value: ArraySlice<UInt8>, forHandle handle: UInt16) {
        self.host(host, connection: connection, didReceiveValue: Array(value), forHandle: handle, isIndication: false)
    }
    func host(_ host: LEHost, connectionIsReadyToSendWriteWithoutResponse connection: HostConnection) {}
    func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {}
}

/// A read of a dynamic attribute that the application answers with `LEHost.respondToRead`.
public struct HostReadRequest: Sendable {
    public var id: UInt64
    public var connectionHandle: UInt16
    public var attributeHandle: UInt16
    public var offset: UInt16
}

/// Writes that the application accepts or refuses as one batch with `LEHost.respondToWrite`.
public struct HostWriteRequest: Sendable {
    public struct Item: Sendable {
        public var attributeHandle: UInt16
        public var offset: UInt16
        public var value: [UInt8]
    }
    public var id: UInt64
    public var connectionHandle: UInt16
    public var items: [Item]
    /// False for Write Commands: no answer is sent.
    public var needsResponse: Bool
}

public protocol HostPeripheralDelegate: AnyObject {
    func host(_ host: LEHost, didConnect connection: HostConnection)
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus)
    func host(_ host: LEHost, didReceiveRead request: HostReadRequest)
    func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest)
    func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool)
    /// The notification queue has room again after `notify` returned false.
    func hostIsReadyToUpdateSubscribers(_ host: LEHost)
    func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16)
    /// A client wrote a value the database stores itself (no `didReceiveWrite` for it): already answered.
    func host(_ host: LEHost, connection: HostConnection, didWriteStoredValue value: [UInt8], forHandle handle: UInt16)
}

public extension HostPeripheralDelegate {
    func hostIsReadyToUpdateSubscribers(_ host: LEHost) {}
    func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {}
    func host(_ host: LEHost, connection: HostConnection, didWriteStoredValue value: [UInt8], forHandle handle: UInt16) {}
}

/// Errors the host reports to callers.
public enum HostError: Error, Equatable, Sendable, CustomStringConvertible {
    case notPoweredOn
    case commandFailed(opcode: HCIOpcode, status: HCIStatus)
    case commandTimedOut(HCIOpcode)
    case transportClosed
    case invalidState(String)
    case invalidParameters(String)

    public var description: String {
        switch self {
        case .notPoweredOn: return "the controller is not powered on"
        case let .commandFailed(op, st): return "\(op) failed: \(st)"
        case let .commandTimedOut(op): return "\(op) timed out"
        case .transportClosed: return "the controller went away"
        case let .invalidState(s): return "invalid state: \(s)"
        case let .invalidParameters(s): return "invalid parameters: \(s)"
        }
    }
}
