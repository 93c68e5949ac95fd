// Parameter structs of the LE commands that take more than one or two fields; fields in spec order.
import BLEWire

/// Advertising_Type (Vol 4 Part E §7.8.5). Unknown values are kept.
public struct LEAdvertisingType: RawRepresentable, Hashable, Sendable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    /// ADV_IND
    public static let connectableUndirected = LEAdvertisingType(rawValue: 0x00)
    /// ADV_DIRECT_IND, high duty cycle
    public static let connectableDirectedHighDuty = LEAdvertisingType(rawValue: 0x01)
    /// ADV_SCAN_IND
    public static let scannableUndirected = LEAdvertisingType(rawValue: 0x02)
    /// ADV_NONCONN_IND
    public static let nonConnectableUndirected = LEAdvertisingType(rawValue: 0x03)
    /// ADV_DIRECT_IND, low duty cycle
    public static let connectableDirectedLowDuty = LEAdvertisingType(rawValue: 0x04)
}

/// HCI_LE_Set_Advertising_Parameters (Vol 4 Part E §7.8.5). Intervals in 0.625 ms units.
public struct LESetAdvertisingParameters: Sendable, Equatable {
    public var advertisingIntervalMin: UInt16
    public var advertisingIntervalMax: UInt16
    public var advertisingType: LEAdvertisingType
    public var ownAddressType: UInt8
    public var peerAddressType: UInt8
    public var peerAddress: BluetoothAddress
    public var advertisingChannelMap: UInt8
    public var advertisingFilterPolicy: UInt8

    public init(
        advertisingIntervalMin: UInt16 = 0x0800, advertisingIntervalMax: UInt16 = 0x0800,
        advertisingType: LEAdvertisingType = .connectableUndirected, ownAddressType: UInt8 = 0,
        peerAddressType: UInt8 = 0, peerAddress: BluetoothAddress = .zero,
        advertisingChannelMap: UInt8 = 0x07, advertisingFilterPolicy: UInt8 = 0
    ) {
        self.advertisingIntervalMin = advertisingIntervalMin
        self.advertisingIntervalMax = advertisingIntervalMax
        self.advertisingType = advertisingType
        self.ownAddressType = ownAddressType
        self.peerAddressType = peerAddressType
        self.peerAddress = peerAddress
        self.advertisingChannelMap = advertisingChannelMap
        self.advertisingFilterPolicy = advertisingFilterPolicy
    }
}

/// LE_Scan_Type (Vol 4 Part E §7.8.10).
public enum LEScanType: UInt8, Sendable {
    case passive = 0x00
    case active = 0x01
}

/// HCI_LE_Set_Scan_Parameters (Vol 4 Part E §7.8.10). Interval and window in 0.625 ms units.
public struct LESetScanParameters: Sendable, Equatable {
    public var scanType: LEScanType
    public var scanInterval: UInt16
    public var scanWindow: UInt16
    public var ownAddressType: UInt8
    public var scanningFilterPolicy: UInt8

    public init(
        scanType: LEScanType = .passive, scanInterval: UInt16 = 0x0010, scanWindow: UInt16 = 0x0010,
        ownAddressType: UInt8 = 0, scanningFilterPolicy: UInt8 = 0
    ) {
        self.scanType = scanType
        self.scanInterval = scanInterval
        self.scanWindow = scanWindow
        self.ownAddressType = ownAddressType
        self.scanningFilterPolicy = scanningFilterPolicy
    }
}

/// HCI_LE_Create_Connection (Vol 4 Part E §7.8.12). Intervals in 1.25 ms, timeout in 10 ms, CE lengths in 0.625 ms.
public struct LECreateConnection: Sendable, Equatable {
    public var leScanInterval: UInt16
    public var leScanWindow: UInt16
    public var initiatorFilterPolicy: UInt8
    public var peerAddressType: UInt8
    public var peerAddress: BluetoothAddress
    public var ownAddressType: UInt8
    public var connectionIntervalMin: UInt16
    public var connectionIntervalMax: UInt16
    public var maxLatency: UInt16
    public var supervisionTimeout: UInt16
    public var minCELength: UInt16
    public var maxCELength: UInt16

    public init(
        leScanInterval: UInt16, leScanWindow: UInt16, initiatorFilterPolicy: UInt8, peerAddressType: UInt8,
        peerAddress: BluetoothAddress, ownAddressType: UInt8, connectionIntervalMin: UInt16,
        connectionIntervalMax: UInt16, maxLatency: UInt16, supervisionTimeout: UInt16,
        minCELength: UInt16, maxCELength: UInt16
    ) {
        self.leScanInterval = leScanInterval
        self.leScanWindow = leScanWindow
        self.initiatorFilterPolicy = initiatorFilterPolicy
        self.peerAddressType = peerAddressType
        self.peerAddress = peerAddress
        self.ownAddressType = ownAddressType
        self.connectionIntervalMin = connectionIntervalMin
        self.connectionIntervalMax = connectionIntervalMax
        self.maxLatency = maxLatency
        self.supervisionTimeout = supervisionTimeout
        self.minCELength = minCELength
        self.maxCELength = maxCELength
    }
}

/// HCI_LE_Connection_Update (Vol 4 Part E §7.8.18).
public struct LEConnectionUpdate: Sendable, Equatable {
    public var connectionHandle: UInt16
    public var connectionIntervalMin: UInt16
    public var connectionIntervalMax: UInt16
    public var maxLatency: UInt16
    public var supervisionTimeout: UInt16
    public var minCELength: UInt16
    public var maxCELength: UInt16

    public init(
        connectionHandle: UInt16, connectionIntervalMin: UInt16, connectionIntervalMax: UInt16,
        maxLatency: UInt16, supervisionTimeout: UInt16, minCELength: UInt16 = 0, maxCELength: UInt16 = 0
    ) {
        self.connectionHandle = connectionHandle
        self.connectionIntervalMin = connectionIntervalMin
        self.connectionIntervalMax = connectionIntervalMax
        self.maxLatency = maxLatency
        self.supervisionTimeout = supervisionTimeout
        self.minCELength = minCELength
        self.maxCELength = maxCELength
    }
}

/// HCI_LE_Set_PHY (Vol 4 Part E §7.8.49). PHY bits: 0x01 LE 1M, 0x02 LE 2M, 0x04 LE Coded.
public struct LESetPHY: Sendable, Equatable {
    public var connectionHandle: UInt16
    public var allPHYs: UInt8
    public var txPHYs: UInt8
    public var rxPHYs: UInt8
    public var phyOptions: UInt16

    public init(connectionHandle: UInt16, allPHYs: UInt8 = 0, txPHYs: UInt8, rxPHYs: UInt8, phyOptions: UInt16 = 0) {
        self.connectionHandle = connectionHandle
        self.allPHYs = allPHYs
        self.txPHYs = txPHYs
        self.rxPHYs = rxPHYs
        self.phyOptions = phyOptions
    }
}

/// HCI_Host_Buffer_Size (Vol 4 Part E §7.3.39): the largest data part of an ACL (and synchronous) packet the
/// host takes from the controller, and how many of them it holds at once. The controller fragments to the
/// length and, with flow control on (§7.3.38), never has more than the total outstanding at the host.
public struct HostBufferSize: Sendable, Equatable {
    public var aclDataPacketLength: UInt16
    public var synchronousDataPacketLength: UInt8
    public var totalNumACLDataPackets: UInt16
    public var totalNumSynchronousDataPackets: UInt16

    public init(aclDataPacketLength: UInt16, synchronousDataPacketLength: UInt8 = 0, totalNumACLDataPackets: UInt16, totalNumSynchronousDataPackets: UInt16 = 0) {
        self.aclDataPacketLength = aclDataPacketLength
        self.synchronousDataPacketLength = synchronousDataPacketLength
        self.totalNumACLDataPackets = totalNumACLDataPackets
        self.totalNumSynchronousDataPackets = totalNumSynchronousDataPackets
    }
}
