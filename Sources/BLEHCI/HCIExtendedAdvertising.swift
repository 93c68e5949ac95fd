// Extended advertising, scanning and initiating (Core Spec 5.0+, Vol 4 Part E §7.8.53–§7.8.66), the
// Extended Advertising Report and Advertising Set Terminated events (§7.7.65.13, §7.7.65.18), and
// Zephyr's vendor commands (OGF 0x3F, zephyr/include/zephyr/bluetooth/hci_vs.h) that a host uses to find
// the factory static address of a controller that has no public one.
//
// A controller accepts either the legacy advertising/scanning/initiating commands or these, never both in
// one session (§3.1.1: after the first extended command, legacy ones get Command Disallowed); the host
// picks one set at start-up.
import BLEWire

/// Advertising_Event_Properties (§7.8.53).
public struct LEAdvertisingEventProperties: OptionSet, Sendable, Hashable {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public static let connectable = LEAdvertisingEventProperties(rawValue: 1 << 0)
    public static let scannable = LEAdvertisingEventProperties(rawValue: 1 << 1)
    public static let directed = LEAdvertisingEventProperties(rawValue: 1 << 2)
    public static let highDutyCycleDirected = LEAdvertisingEventProperties(rawValue: 1 << 3)
    /// Legacy PDUs (ADV_IND …), seen by 4.x scanners; data up to 31 octets.
    public static let legacy = LEAdvertisingEventProperties(rawValue: 1 << 4)
    public static let anonymous = LEAdvertisingEventProperties(rawValue: 1 << 5)
    public static let includeTxPower = LEAdvertisingEventProperties(rawValue: 1 << 6)
}

/// HCI_LE_Set_Extended_Advertising_Parameters [v1] (§7.8.53). Intervals in 0.625 ms units (3 octets on the wire).
public struct LESetExtendedAdvertisingParameters: Sendable, Equatable {
    public var advertisingHandle: UInt8
    public var eventProperties: LEAdvertisingEventProperties
    public var primaryIntervalMin: UInt32
    public var primaryIntervalMax: UInt32
    public var primaryChannelMap: UInt8
    public var ownAddressType: UInt8
    public var peerAddressType: UInt8
    public var peerAddress: BluetoothAddress
    public var filterPolicy: UInt8
    /// 127: no preference.
    public var txPower: Int8
    /// 1 = LE 1M, 3 = LE Coded.
    public var primaryPHY: UInt8
    public var secondaryMaxSkip: UInt8
    /// 1 = LE 1M, 2 = LE 2M, 3 = LE Coded.
    public var secondaryPHY: UInt8
    public var advertisingSID: UInt8
    public var scanRequestNotificationEnable: UInt8

    public init(
        advertisingHandle: UInt8 = 0, eventProperties: LEAdvertisingEventProperties, primaryIntervalMin: UInt32 = 0xA0,
        primaryIntervalMax: UInt32 = 0xA0, primaryChannelMap: UInt8 = 0x07, ownAddressType: UInt8 = 0, peerAddressType: UInt8 = 0,
        peerAddress: BluetoothAddress = .zero, filterPolicy: UInt8 = 0, txPower: Int8 = 127, primaryPHY: UInt8 = 1,
        secondaryMaxSkip: UInt8 = 0, secondaryPHY: UInt8 = 1, advertisingSID: UInt8 = 0, scanRequestNotificationEnable: UInt8 = 0
    ) {
        self.advertisingHandle = advertisingHandle; self.eventProperties = eventProperties
        self.primaryIntervalMin = primaryIntervalMin; self.primaryIntervalMax = primaryIntervalMax
        self.primaryChannelMap = primaryChannelMap; self.ownAddressType = ownAddressType; self.peerAddressType = peerAddressType
        self.peerAddress = peerAddress; self.filterPolicy = filterPolicy; self.txPower = txPower; self.primaryPHY = primaryPHY
        self.secondaryMaxSkip = secondaryMaxSkip; self.secondaryPHY = secondaryPHY; self.advertisingSID = advertisingSID
        self.scanRequestNotificationEnable = scanRequestNotificationEnable
    }
}

/// HCI_LE_Set_Extended_Advertising_Data and _Scan_Response_Data (§7.8.54, §7.8.55): one fragment of at most 251 octets.
public struct LESetExtendedAdvertisingData: Sendable, Equatable {
    /// Operation: 0 intermediate fragment, 1 first, 2 last, 3 complete data, 4 unchanged data.
    public enum Operation: UInt8, Sendable { case intermediate = 0, first = 1, last = 2, complete = 3, unchanged = 4 }
    public static let maximumFragmentLength = 251
    public var advertisingHandle: UInt8
    public var operation: Operation
    /// 0: the controller may fragment; 1: it should not.
    public var fragmentPreference: UInt8
    public var data: [UInt8]

    public init(advertisingHandle: UInt8 = 0, operation: Operation = .complete, fragmentPreference: UInt8 = 1, data: [UInt8]) {
        self.advertisingHandle = advertisingHandle; self.operation = operation
        self.fragmentPreference = fragmentPreference; self.data = data
    }

    /// The commands that carry `data` for a set: one when it fits, else first/intermediate/last fragments.
    public static func fragments(handle: UInt8, data: [UInt8]) -> [LESetExtendedAdvertisingData] {
        if data.count <= maximumFragmentLength { return [LESetExtendedAdvertisingData(advertisingHandle: handle, data: data)] }
        var out: [LESetExtendedAdvertisingData] = []
        var start = 0
        while start < data.count {
            let end = min(start + maximumFragmentLength, data.count)
            let op: Operation = start == 0 ? .first : (end == data.count ? .last : .intermediate)
            out.append(LESetExtendedAdvertisingData(advertisingHandle: handle, operation: op, data: Array(data[start..<end])))
            start = end
        }
        return out
    }
}

/// One set of HCI_LE_Set_Extended_Advertising_Enable (§7.8.56). Duration in 10 ms units, 0 = until disabled.
public struct LEExtendedAdvertisingSet: Sendable, Equatable {
    public var advertisingHandle: UInt8
    public var duration: UInt16
    public var maxExtendedAdvertisingEvents: UInt8
    public init(advertisingHandle: UInt8, duration: UInt16 = 0, maxExtendedAdvertisingEvents: UInt8 = 0) {
        self.advertisingHandle = advertisingHandle; self.duration = duration; self.maxExtendedAdvertisingEvents = maxExtendedAdvertisingEvents
    }
}

/// The per-PHY part of HCI_LE_Set_Extended_Scan_Parameters (§7.8.64).
public struct LEExtendedScanPHY: Sendable, Equatable {
    public var scanType: LEScanType
    public var scanInterval: UInt16
    public var scanWindow: UInt16
    public init(scanType: LEScanType, scanInterval: UInt16, scanWindow: UInt16) {
        self.scanType = scanType; self.scanInterval = scanInterval; self.scanWindow = scanWindow
    }
}

/// HCI_LE_Set_Extended_Scan_Parameters (§7.8.64). `scanningPHYs` bit 0 LE 1M, bit 2 LE Coded; one entry per bit set.
public struct LESetExtendedScanParameters: Sendable, Equatable {
    public var ownAddressType: UInt8
    public var scanningFilterPolicy: UInt8
    public var scanningPHYs: UInt8
    public var phys: [LEExtendedScanPHY]
    public init(ownAddressType: UInt8, scanningFilterPolicy: UInt8 = 0, scanningPHYs: UInt8, phys: [LEExtendedScanPHY]) {
        self.ownAddressType = ownAddressType; self.scanningFilterPolicy = scanningFilterPolicy
        self.scanningPHYs = scanningPHYs; self.phys = phys
    }
}

/// The per-PHY part of HCI_LE_Extended_Create_Connection [v1] (§7.8.66).
public struct LEExtendedInitiatingPHY: Sendable, Equatable {
    public var scanInterval: UInt16
    public var scanWindow: UInt16
    public var connectionIntervalMin: UInt16
    public var connectionIntervalMax: UInt16
    public var maxLatency: UInt16
    public var supervisionTimeout: UInt16
    public var minCELength: UInt16
    public var maxCELength: UInt16
    public init(
        scanInterval: UInt16, scanWindow: UInt16, connectionIntervalMin: UInt16, connectionIntervalMax: UInt16,
        maxLatency: UInt16, supervisionTimeout: UInt16, minCELength: UInt16 = 0, maxCELength: UInt16 = 0
    ) {
        self.scanInterval = scanInterval; self.scanWindow = scanWindow; self.connectionIntervalMin = connectionIntervalMin
        self.connectionIntervalMax = connectionIntervalMax; self.maxLatency = maxLatency; self.supervisionTimeout = supervisionTimeout
        self.minCELength = minCELength; self.maxCELength = maxCELength
    }
}

/// HCI_LE_Extended_Create_Connection [v1] (§7.8.66). `initiatingPHYs` bit 0 LE 1M, bit 1 LE 2M, bit 2 LE Coded.
public struct LEExtendedCreateConnection: Sendable, Equatable {
    public var initiatorFilterPolicy: UInt8
    public var ownAddressType: UInt8
    public var peerAddressType: UInt8
    public var peerAddress: BluetoothAddress
    public var initiatingPHYs: UInt8
    public var phys: [LEExtendedInitiatingPHY]
    public init(
        initiatorFilterPolicy: UInt8, ownAddressType: UInt8, peerAddressType: UInt8, peerAddress: BluetoothAddress,
        initiatingPHYs: UInt8, phys: [LEExtendedInitiatingPHY]
    ) {
        self.initiatorFilterPolicy = initiatorFilterPolicy; self.ownAddressType = ownAddressType
        self.peerAddressType = peerAddressType; self.peerAddress = peerAddress; self.initiatingPHYs = initiatingPHYs; self.phys = phys
    }

    /// The same connection request as a legacy LE Create Connection, on LE 1M.
    public init(_ p: LECreateConnection) {
        self.init(
            initiatorFilterPolicy: p.initiatorFilterPolicy, ownAddressType: p.ownAddressType, peerAddressType: p.peerAddressType,
            peerAddress: p.peerAddress, initiatingPHYs: 0x01,
            phys: [
                LEExtendedInitiatingPHY(
                    scanInterval: p.leScanInterval, scanWindow: p.leScanWindow,
                    connectionIntervalMin: p.connectionIntervalMin, connectionIntervalMax: p.connectionIntervalMax,
                    maxLatency: p.maxLatency, supervisionTimeout: p.supervisionTimeout,
                    minCELength: p.minCELength, maxCELength: p.maxCELength)
            ])
    }
}

/// Event_Type of an LE Extended Advertising Report (§7.7.65.13).
public struct LEExtendedAdvertisingEventType: OptionSet, Sendable, Hashable {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public static let connectable = LEExtendedAdvertisingEventType(rawValue: 1 << 0)
    public static let scannable = LEExtendedAdvertisingEventType(rawValue: 1 << 1)
    public static let directed = LEExtendedAdvertisingEventType(rawValue: 1 << 2)
    public static let scanResponse = LEExtendedAdvertisingEventType(rawValue: 1 << 3)
    public static let legacy = LEExtendedAdvertisingEventType(rawValue: 1 << 4)

    /// Data_Status (bits 5–6): 0 complete, 1 incomplete with more to come, 2 incomplete and truncated.
    public var dataStatus: UInt8 { UInt8((rawValue >> 5) & 0x3) }
}

/// One report of an LE Extended Advertising Report event (§7.7.65.13). RSSI 127: not available.
public struct LEExtendedAdvertisingReport: Sendable, Equatable {
    public var eventType: LEExtendedAdvertisingEventType
    public var addressType: UInt8
    public var address: BluetoothAddress
    public var primaryPHY: UInt8
    public var secondaryPHY: UInt8
    public var advertisingSID: UInt8
    public var txPower: Int8
    public var rssi: Int8
    public var periodicAdvertisingInterval: UInt16
    public var directAddressType: UInt8
    public var directAddress: BluetoothAddress
    public var data: [UInt8]

    public init(
        eventType: LEExtendedAdvertisingEventType, addressType: UInt8, address: BluetoothAddress, primaryPHY: UInt8 = 1,
        secondaryPHY: UInt8 = 0, advertisingSID: UInt8 = 0xFF, txPower: Int8 = 127, rssi: Int8, periodicAdvertisingInterval: UInt16 = 0,
        directAddressType: UInt8 = 0, directAddress: BluetoothAddress = .zero, data: [UInt8]
    ) {
        self.eventType = eventType; self.addressType = addressType; self.address = address; self.primaryPHY = primaryPHY
        self.secondaryPHY = secondaryPHY; self.advertisingSID = advertisingSID; self.txPower = txPower; self.rssi = rssi
        self.periodicAdvertisingInterval = periodicAdvertisingInterval; self.directAddressType = directAddressType
        self.directAddress = directAddress; self.data = data
    }
}

/// LE Advertising Set Terminated (§7.7.65.18): a set stopped (a connection was made, or its duration ran out).
public struct LEAdvertisingSetTerminated: Sendable, Equatable {
    public var status: HCIStatus
    public var advertisingHandle: UInt8
    public var connectionHandle: UInt16
    public var numCompletedExtendedAdvertisingEvents: UInt8
    public init(status: HCIStatus, advertisingHandle: UInt8, connectionHandle: UInt16, numCompletedExtendedAdvertisingEvents: UInt8) {
        self.status = status; self.advertisingHandle = advertisingHandle; self.connectionHandle = connectionHandle
        self.numCompletedExtendedAdvertisingEvents = numCompletedExtendedAdvertisingEvents
    }
}

// MARK: Return parameters

/// HCI_LE_Read_Maximum_Advertising_Data_Length (§7.8.57).
public struct LEReadMaximumAdvertisingDataLengthReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var maxLength: UInt16
    public init(status: HCIStatus, maxLength: UInt16) { self.status = status; self.maxLength = maxLength }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) { LEReadMaximumAdvertisingDataLengthReturn(status: HCIStatus(rawValue: try $0.readUInt8()), maxLength: try $0.readUInt16()) }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(maxLength)
        }
    }
}

/// HCI_LE_Read_Number_of_Supported_Advertising_Sets (§7.8.58).
public struct LEReadNumberOfSupportedAdvertisingSetsReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var count: UInt8
    public init(status: HCIStatus, count: UInt8) { self.status = status; self.count = count }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) { LEReadNumberOfSupportedAdvertisingSetsReturn(status: HCIStatus(rawValue: try $0.readUInt8()), count: try $0.readUInt8()) }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(count)
        }
    }
}

/// Zephyr's vendor Read Version Information (0xFC01): 13 octets exactly, which is how a host tells a Zephyr
/// controller from one that answers vendor commands differently.
public struct ZephyrReadVersionReturn: HCIReturnParameters {
    public var status: HCIStatus
    /// 1 Intel, 2 Nordic, 3 NXP.
    public var hardwarePlatform: UInt16
    public var hardwareVariant: UInt16
    /// 1 standard controller, 2 vendor-specific controller, 3 firmware loader, 4 rescue image.
    public var firmwareVariant: UInt8
    public var firmwareVersion: UInt8
    public var firmwareRevision: UInt16
    public var firmwareBuild: UInt32
    public init(
        status: HCIStatus, hardwarePlatform: UInt16, hardwareVariant: UInt16, firmwareVariant: UInt8, firmwareVersion: UInt8,
        firmwareRevision: UInt16, firmwareBuild: UInt32
    ) {
        self.status = status; self.hardwarePlatform = hardwarePlatform; self.hardwareVariant = hardwareVariant
        self.firmwareVariant = firmwareVariant; self.firmwareVersion = firmwareVersion; self.firmwareRevision = firmwareRevision
        self.firmwareBuild = firmwareBuild
    }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) {
            ZephyrReadVersionReturn(
                status: HCIStatus(rawValue: try $0.readUInt8()), hardwarePlatform: try $0.readUInt16(),
                hardwareVariant: try $0.readUInt16(), firmwareVariant: try $0.readUInt8(), firmwareVersion: try $0.readUInt8(),
                firmwareRevision: try $0.readUInt16(), firmwareBuild: try $0.readUInt32())
        }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(hardwarePlatform); $0.write(hardwareVariant); $0.write(firmwareVariant)
            $0.write(firmwareVersion); $0.write(firmwareRevision); $0.write(firmwareBuild)
        }
    }
}

/// Zephyr's vendor Read Static Addresses (0xFC09): the controller's factory static random addresses, each
/// with an identity root (16 octets) that the host may ignore.
public struct ZephyrReadStaticAddressesReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var addresses: [BluetoothAddress]
    public var identityRoots: [[UInt8]]
    public init(status: HCIStatus, addresses: [BluetoothAddress], identityRoots: [[UInt8]]) {
        self.status = status; self.addresses = addresses; self.identityRoots = identityRoots
    }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) {
            let st = HCIStatus(rawValue: try $0.readUInt8())
            guard st == .success else { return ZephyrReadStaticAddressesReturn(status: st, addresses: [], identityRoots: []) }
            let n = Int(try $0.readUInt8())
            var a: [BluetoothAddress] = [], r: [[UInt8]] = []
            for _ in 0..<n { a.append(try $0.readAddress(type: .random)); r.append(try $0.readBytes(16)) }
            return ZephyrReadStaticAddressesReturn(status: st, addresses: a, identityRoots: r)
        }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(UInt8(addresses.count))
            for (a, r) in zip(addresses, identityRoots) { $0.write(a); $0.write(contentsOf: r) }
        }
    }
}

/// The 64-octet supported-commands bit map of a Read (Local) Supported Commands answer, Zephyr's vendor one included.
public struct SupportedCommandsReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var bits: [UInt8]
    public init(status: HCIStatus, bits: [UInt8]) { self.status = status; self.bits = bits }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) {
            let st = HCIStatus(rawValue: try $0.readUInt8())
            return SupportedCommandsReturn(status: st, bits: st == .success ? try $0.readBytes(64) : $0.readRemaining())
        }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(contentsOf: bits)
        }
    }
}
