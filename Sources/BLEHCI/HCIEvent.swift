// HCI events an LE host handles (Vol 4 Part E §7.7). Unknown events and LE subevents are kept.
import BLEWire

public struct CompletedPackets: Sendable, Equatable {
    public var handle: UInt16
    public var count: UInt16
    public init(handle: UInt16, count: UInt16) { self.handle = handle; self.count = count }
}

public enum HCIEvent: Sendable, Equatable {
    /// 0x0E (§7.7.14)
    case commandComplete(numHCICommandPackets: UInt8, opcode: HCIOpcode, returnParameters: [UInt8])
    /// 0x0F (§7.7.15)
    case commandStatus(status: HCIStatus, numHCICommandPackets: UInt8, opcode: HCIOpcode)
    /// 0x05 (§7.7.5)
    case disconnectionComplete(status: HCIStatus, handle: UInt16, reason: HCIStatus)
    /// 0x13 (§7.7.19)
    case numberOfCompletedPackets([CompletedPackets])
    /// 0x08 (§7.7.8)
    case encryptionChange(status: HCIStatus, handle: UInt16, enabled: UInt8)
    /// 0x30 (§7.7.39)
    case encryptionKeyRefreshComplete(status: HCIStatus, handle: UInt16)
    /// 0x0C (§7.7.12)
    case readRemoteVersionInformationComplete(status: HCIStatus, handle: UInt16, version: UInt8, companyIdentifier: UInt16, subversion: UInt16)
    /// 0x10 (§7.7.16)
    case hardwareError(UInt8)
    /// 0x1A (§7.7.26)
    case dataBufferOverflow(UInt8)
    /// 0x3E (§7.7.65)
    case le(LEMetaEvent)
    case unknown(code: UInt8, parameters: [UInt8])

    public var code: UInt8 {
        switch self {
        case .commandComplete: return 0x0E
        case .commandStatus: return 0x0F
        case .disconnectionComplete: return 0x05
        case .numberOfCompletedPackets: return 0x13
        case .encryptionChange: return 0x08
        case .encryptionKeyRefreshComplete: return 0x30
        case .readRemoteVersionInformationComplete: return 0x0C
        case .hardwareError: return 0x10
        case .dataBufferOverflow: return 0x1A
        case .le: return 0x3E
        case let .unknown(c, _): return c
        }
    }
}

/// LE Meta subevent codes (Vol 4 Part E §7.7.65).
public enum LESubevent {
    public static let connectionComplete: UInt8 = 0x01
    public static let advertisingReport: UInt8 = 0x02
    public static let connectionUpdateComplete: UInt8 = 0x03
    public static let readRemoteFeaturesComplete: UInt8 = 0x04
    public static let longTermKeyRequest: UInt8 = 0x05
    public static let remoteConnectionParameterRequest: UInt8 = 0x06
    public static let dataLengthChange: UInt8 = 0x07
    public static let enhancedConnectionComplete: UInt8 = 0x0A
    public static let phyUpdateComplete: UInt8 = 0x0C
    public static let extendedAdvertisingReport: UInt8 = 0x0D
    public static let advertisingSetTerminated: UInt8 = 0x12
}

public enum LEMetaEvent: Sendable, Equatable {
    case connectionComplete(LEConnectionComplete)
    case enhancedConnectionComplete(LEEnhancedConnectionComplete)
    case advertisingReport([LEAdvertisingReport])
    case connectionUpdateComplete(LEConnectionUpdateComplete)
    case readRemoteFeaturesComplete(status: HCIStatus, handle: UInt16, features: UInt64)
    case longTermKeyRequest(handle: UInt16, random: UInt64, ediv: UInt16)
    case remoteConnectionParameterRequest(handle: UInt16, intervalMin: UInt16, intervalMax: UInt16, maxLatency: UInt16, timeout: UInt16)
    case dataLengthChange(LEDataLengthChange)
    case phyUpdateComplete(status: HCIStatus, handle: UInt16, txPHY: UInt8, rxPHY: UInt8)
    case extendedAdvertisingReport([LEExtendedAdvertisingReport])
    case advertisingSetTerminated(LEAdvertisingSetTerminated)
    case unknown(subevent: UInt8, parameters: [UInt8])

    public var subevent: UInt8 {
        switch self {
        case .connectionComplete: return LESubevent.connectionComplete
        case .enhancedConnectionComplete: return LESubevent.enhancedConnectionComplete
        case .advertisingReport: return LESubevent.advertisingReport
        case .connectionUpdateComplete: return LESubevent.connectionUpdateComplete
        case .readRemoteFeaturesComplete: return LESubevent.readRemoteFeaturesComplete
        case .longTermKeyRequest: return LESubevent.longTermKeyRequest
        case .remoteConnectionParameterRequest: return LESubevent.remoteConnectionParameterRequest
        case .dataLengthChange: return LESubevent.dataLengthChange
        case .phyUpdateComplete: return LESubevent.phyUpdateComplete
        case .extendedAdvertisingReport: return LESubevent.extendedAdvertisingReport
        case .advertisingSetTerminated: return LESubevent.advertisingSetTerminated
        case let .unknown(s, _): return s
        }
    }
}

/// LE Connection Complete (§7.7.65.1). Role 0 = central, 1 = peripheral. Interval in 1.25 ms,
/// timeout in 10 ms units.
public struct LEConnectionComplete: Sendable, Equatable {
    public var status: HCIStatus
    public var connectionHandle: UInt16
    public var role: UInt8
    public var peerAddressType: UInt8
    public var peerAddress: BluetoothAddress
    public var connectionInterval: UInt16
    public var peripheralLatency: UInt16
    public var supervisionTimeout: UInt16
    public var centralClockAccuracy: UInt8

    public init(
        status: HCIStatus, connectionHandle: UInt16, role: UInt8, peerAddressType: UInt8, peerAddress: BluetoothAddress,
        connectionInterval: UInt16, peripheralLatency: UInt16, supervisionTimeout: UInt16, centralClockAccuracy: UInt8
    ) {
        self.status = status; self.connectionHandle = connectionHandle; self.role = role
        self.peerAddressType = peerAddressType; self.peerAddress = peerAddress; self.connectionInterval = connectionInterval
        self.peripheralLatency = peripheralLatency; self.supervisionTimeout = supervisionTimeout; self.centralClockAccuracy = centralClockAccuracy
    }
}

/// LE Enhanced Connection Complete [v1] (§7.7.65.10).
public struct LEEnhancedConnectionComplete: Sendable, Equatable {
    public var status: HCIStatus
    public var connectionHandle: UInt16
    public var role: UInt8
    public var peerAddressType: UInt8
    public var peerAddress: BluetoothAddress
    public var localResolvablePrivateAddress: BluetoothAddress
    public var peerResolvablePrivateAddress: BluetoothAddress
    public var connectionInterval: UInt16
    public var peripheralLatency: UInt16
    public var supervisionTimeout: UInt16
    public var centralClockAccuracy: UInt8

    public init(
        status: HCIStatus, connectionHandle: UInt16, role: UInt8, peerAddressType: UInt8, peerAddress: BluetoothAddress,
        localResolvablePrivateAddress: BluetoothAddress = .zeroRandom, peerResolvablePrivateAddress: BluetoothAddress = .zeroRandom,
        connectionInterval: UInt16, peripheralLatency: UInt16, supervisionTimeout: UInt16, centralClockAccuracy: UInt8
    ) {
        self.status = status; self.connectionHandle = connectionHandle; self.role = role
        self.peerAddressType = peerAddressType; self.peerAddress = peerAddress
        self.localResolvablePrivateAddress = localResolvablePrivateAddress; self.peerResolvablePrivateAddress = peerResolvablePrivateAddress
        self.connectionInterval = connectionInterval; self.peripheralLatency = peripheralLatency
        self.supervisionTimeout = supervisionTimeout; self.centralClockAccuracy = centralClockAccuracy
    }
}

/// Event_Type of an LE Advertising Report (§7.7.65.2). Unknown values are kept.
public struct LEAdvertisingReportType: RawRepresentable, Hashable, Sendable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let advInd = LEAdvertisingReportType(rawValue: 0x00)
    public static let advDirectInd = LEAdvertisingReportType(rawValue: 0x01)
    public static let advScanInd = LEAdvertisingReportType(rawValue: 0x02)
    public static let advNonconnInd = LEAdvertisingReportType(rawValue: 0x03)
    public static let scanRsp = LEAdvertisingReportType(rawValue: 0x04)
}

/// One report of an LE Advertising Report event. RSSI 127 means "not available".
public struct LEAdvertisingReport: Sendable, Equatable {
    public var eventType: LEAdvertisingReportType
    public var addressType: UInt8
    public var address: BluetoothAddress
    public var data: [UInt8]
    public var rssi: Int8

    public init(eventType: LEAdvertisingReportType, addressType: UInt8, address: BluetoothAddress, data: [UInt8], rssi: Int8) {
        self.eventType = eventType; self.addressType = addressType; self.address = address; self.data = data; self.rssi = rssi
    }
}

/// LE Connection Update Complete (§7.7.65.3).
public struct LEConnectionUpdateComplete: Sendable, Equatable {
    public var status: HCIStatus
    public var connectionHandle: UInt16
    public var connectionInterval: UInt16
    public var peripheralLatency: UInt16
    public var supervisionTimeout: UInt16

    public init(status: HCIStatus, connectionHandle: UInt16, connectionInterval: UInt16, peripheralLatency: UInt16, supervisionTimeout: UInt16) {
        self.status = status; self.connectionHandle = connectionHandle; self.connectionInterval = connectionInterval
        self.peripheralLatency = peripheralLatency; self.supervisionTimeout = supervisionTimeout
    }
}

/// LE Data Length Change (§7.7.65.7).
public struct LEDataLengthChange: Sendable, Equatable {
    public var connectionHandle: UInt16
    public var maxTxOctets: UInt16
    public var maxTxTime: UInt16
    public var maxRxOctets: UInt16
    public var maxRxTime: UInt16

    public init(connectionHandle: UInt16, maxTxOctets: UInt16, maxTxTime: UInt16, maxRxOctets: UInt16, maxRxTime: UInt16) {
        self.connectionHandle = connectionHandle; self.maxTxOctets = maxTxOctets; self.maxTxTime = maxTxTime
        self.maxRxOctets = maxRxOctets; self.maxRxTime = maxRxTime
    }
}

extension AddressType {
    /// An HCI address type octet (0 public, 1 random, 2 public identity, 3 random identity; others read as random).
    public init(hciAddressType t: UInt8) {
        self = AddressType(rawValue: t) ?? .random
    }
}

extension BluetoothAddress {
    /// 00:00:00:00:00:00 as a random address (an absent resolvable private address in HCI events).
    public static let zeroRandom = BluetoothAddress(bytes: [0, 0, 0, 0, 0, 0], type: .random)
}

extension ByteReader {
    /// Reads a 6-octet address whose type is the octet just read (Peer_Address_Type precedes Peer_Address).
    mutating func readAddressTypedByPreviousOctet() throws -> BluetoothAddress {
        let t = index > bytes.startIndex ? bytes[index - 1] : 0
        return try readAddress(type: AddressType(hciAddressType: t))
    }
}
