// Return parameters carried by Command Complete (Vol 4 Part E §7.7.14), one struct per command that
// returns more than a status. Each decodes from and encodes to the Return_Parameters bytes.
import BLEWire

public protocol HCIReturnParameters: Sendable, Equatable {
    init(decoding bytes: [UInt8]) throws
    func encode() -> [UInt8]
}

extension HCIReturnParameters {
    static func decoding(_ bytes: [UInt8], _ body: (inout ByteReader) throws -> Self) throws -> Self {
        var r = ByteReader(bytes)
        do {
            let v = try body(&r)
            try r.expectEnd()
            return v
        } catch let e as WireError {
            throw HCIDecodeError("\(Self.self): \(e)")
        }
    }

    static func encoding(_ body: (inout ByteWriter) -> Void) -> [UInt8] {
        var w = ByteWriter()
        body(&w)
        return w.bytes
    }
}

/// Status only: most commands (Vol 4 Part E §7).
public struct StatusReturn: HCIReturnParameters {
    public var status: HCIStatus
    public init(status: HCIStatus) { self.status = status }
    public init(decoding b: [UInt8]) throws { self = try Self.decoding(b) { StatusReturn(status: HCIStatus(rawValue: try $0.readUInt8())) } }
    public func encode() -> [UInt8] { [status.rawValue] }
}

/// Status and a connection handle (LTK replies, LE Set Data Length, …).
public struct ConnectionHandleReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var handle: UInt16
    public init(status: HCIStatus, handle: UInt16) { self.status = status; self.handle = handle }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) { ConnectionHandleReturn(status: HCIStatus(rawValue: try $0.readUInt8()), handle: try $0.readUInt16()) }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(handle)
        }
    }
}

/// HCI_Read_Local_Version_Information (§7.4.1).
public struct ReadLocalVersionReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var hciVersion: UInt8
    public var hciSubversion: UInt16
    public var lmpVersion: UInt8
    public var companyIdentifier: UInt16
    public var lmpSubversion: UInt16
    public init(status: HCIStatus, hciVersion: UInt8, hciSubversion: UInt16, lmpVersion: UInt8, companyIdentifier: UInt16, lmpSubversion: UInt16) {
        self.status = status; self.hciVersion = hciVersion; self.hciSubversion = hciSubversion
        self.lmpVersion = lmpVersion; self.companyIdentifier = companyIdentifier; self.lmpSubversion = lmpSubversion
    }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) {
            ReadLocalVersionReturn(
                status: HCIStatus(rawValue: try $0.readUInt8()), hciVersion: try $0.readUInt8(), hciSubversion: try $0.readUInt16(),
                lmpVersion: try $0.readUInt8(), companyIdentifier: try $0.readUInt16(), lmpSubversion: try $0.readUInt16())
        }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(hciVersion); $0.write(hciSubversion); $0.write(lmpVersion); $0.write(companyIdentifier); $0.write(lmpSubversion)
        }
    }
}

/// HCI_Read_BD_ADDR (§7.4.6).
public struct ReadBDADDRReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var address: BluetoothAddress
    public init(status: HCIStatus, address: BluetoothAddress) { self.status = status; self.address = address }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) { ReadBDADDRReturn(status: HCIStatus(rawValue: try $0.readUInt8()), address: try $0.readAddress()) }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(address)
        }
    }
}

/// HCI_Read_Local_Supported_Commands (§7.4.2): a 64-octet bit map.
public struct ReadLocalSupportedCommandsReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var supportedCommands: [UInt8]
    public init(status: HCIStatus, supportedCommands: [UInt8]) {
        precondition(supportedCommands.count == 64, "the supported commands bit map has 64 octets")
        self.status = status; self.supportedCommands = supportedCommands
    }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) { ReadLocalSupportedCommandsReturn(status: HCIStatus(rawValue: try $0.readUInt8()), supportedCommands: try $0.readBytes(64)) }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(contentsOf: supportedCommands)
        }
    }
    /// Whether bit `bit` of octet `octet` is set (Vol 4 Part E §6.27).
    public func supports(octet: Int, bit: Int) -> Bool { supportedCommands[octet] & (1 << bit) != 0 }
}

/// HCI_Read_Local_Supported_Features and HCI_LE_Read_Local_Supported_Features (§7.4.3, §7.8.3): 8 octets.
public struct ReadLocalSupportedFeaturesReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var features: UInt64
    public init(status: HCIStatus, features: UInt64) { self.status = status; self.features = features }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) { ReadLocalSupportedFeaturesReturn(status: HCIStatus(rawValue: try $0.readUInt8()), features: try $0.readUInt64()) }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(features)
        }
    }
}

public typealias LEReadLocalSupportedFeaturesReturn = ReadLocalSupportedFeaturesReturn

/// LE feature bits (Vol 6 Part B §4.6).
public struct LEFeatures: OptionSet, Sendable, Hashable {
    public var rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public static let encryption = LEFeatures(rawValue: 1 << 0)
    public static let connectionParametersRequest = LEFeatures(rawValue: 1 << 1)
    public static let extendedRejectIndication = LEFeatures(rawValue: 1 << 2)
    public static let peripheralInitiatedFeaturesExchange = LEFeatures(rawValue: 1 << 3)
    public static let ping = LEFeatures(rawValue: 1 << 4)
    public static let dataPacketLengthExtension = LEFeatures(rawValue: 1 << 5)
    public static let llPrivacy = LEFeatures(rawValue: 1 << 6)
    public static let extendedScannerFilterPolicies = LEFeatures(rawValue: 1 << 7)
    public static let le2MPHY = LEFeatures(rawValue: 1 << 8)
    public static let stableModulationIndexTx = LEFeatures(rawValue: 1 << 9)
    public static let stableModulationIndexRx = LEFeatures(rawValue: 1 << 10)
    public static let leCodedPHY = LEFeatures(rawValue: 1 << 11)
    public static let extendedAdvertising = LEFeatures(rawValue: 1 << 12)
}

/// HCI_LE_Read_Buffer_Size [v1] (§7.8.2). A length of 0 means "use the shared ACL buffers".
public struct LEReadBufferSizeReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var aclDataPacketLength: UInt16
    public var totalNumACLDataPackets: UInt8
    public init(status: HCIStatus, aclDataPacketLength: UInt16, totalNumACLDataPackets: UInt8) {
        self.status = status; self.aclDataPacketLength = aclDataPacketLength; self.totalNumACLDataPackets = totalNumACLDataPackets
    }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) {
            LEReadBufferSizeReturn(
                status: HCIStatus(rawValue: try $0.readUInt8()), aclDataPacketLength: try $0.readUInt16(),
                totalNumACLDataPackets: try $0.readUInt8())
        }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(aclDataPacketLength); $0.write(totalNumACLDataPackets)
        }
    }
}

/// HCI_Read_Buffer_Size (§7.4.5): the shared ACL buffers, used when LE reports none of its own.
public struct ReadBufferSizeReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var aclDataPacketLength: UInt16
    public var syncDataPacketLength: UInt8
    public var totalNumACLDataPackets: UInt16
    public var totalNumSyncDataPackets: UInt16
    public init(status: HCIStatus, aclDataPacketLength: UInt16, syncDataPacketLength: UInt8, totalNumACLDataPackets: UInt16, totalNumSyncDataPackets: UInt16) {
        self.status = status; self.aclDataPacketLength = aclDataPacketLength; self.syncDataPacketLength = syncDataPacketLength
        self.totalNumACLDataPackets = totalNumACLDataPackets; self.totalNumSyncDataPackets = totalNumSyncDataPackets
    }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) {
            ReadBufferSizeReturn(
                status: HCIStatus(rawValue: try $0.readUInt8()), aclDataPacketLength: try $0.readUInt16(),
                syncDataPacketLength: try $0.readUInt8(), totalNumACLDataPackets: try $0.readUInt16(),
                totalNumSyncDataPackets: try $0.readUInt16())
        }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(aclDataPacketLength); $0.write(syncDataPacketLength); $0.write(totalNumACLDataPackets); $0.write(totalNumSyncDataPackets)
        }
    }
}

/// HCI_LE_Rand (§7.8.23).
public struct LERandReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var randomNumber: UInt64
    public init(status: HCIStatus, randomNumber: UInt64) { self.status = status; self.randomNumber = randomNumber }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) { LERandReturn(status: HCIStatus(rawValue: try $0.readUInt8()), randomNumber: try $0.readUInt64()) }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(randomNumber)
        }
    }
}

/// HCI_LE_Encrypt (§7.8.22).
public struct LEEncryptReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var encryptedData: [UInt8]
    public init(status: HCIStatus, encryptedData: [UInt8]) { self.status = status; self.encryptedData = encryptedData }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) { LEEncryptReturn(status: HCIStatus(rawValue: try $0.readUInt8()), encryptedData: try $0.readBytes(16)) }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(contentsOf: encryptedData)
        }
    }
}

/// HCI_Read_RSSI (§7.5.4).
public struct ReadRSSIReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var handle: UInt16
    public var rssi: Int8
    public init(status: HCIStatus, handle: UInt16, rssi: Int8) { self.status = status; self.handle = handle; self.rssi = rssi }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) { ReadRSSIReturn(status: HCIStatus(rawValue: try $0.readUInt8()), handle: try $0.readUInt16(), rssi: try $0.readInt8()) }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(handle); $0.write(rssi)
        }
    }
}

/// HCI_LE_Read_PHY (§7.8.47).
public struct LEReadPHYReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var handle: UInt16
    public var txPHY: UInt8
    public var rxPHY: UInt8
    public init(status: HCIStatus, handle: UInt16, txPHY: UInt8, rxPHY: UInt8) { self.status = status; self.handle = handle; self.txPHY = txPHY; self.rxPHY = rxPHY }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) {
            LEReadPHYReturn(status: HCIStatus(rawValue: try $0.readUInt8()), handle: try $0.readUInt16(), txPHY: try $0.readUInt8(), rxPHY: try $0.readUInt8())
        }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(handle); $0.write(txPHY); $0.write(rxPHY)
        }
    }
}

/// HCI_LE_Read_Maximum_Data_Length (§7.8.46).
public struct LEReadMaximumDataLengthReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var supportedMaxTxOctets: UInt16
    public var supportedMaxTxTime: UInt16
    public var supportedMaxRxOctets: UInt16
    public var supportedMaxRxTime: UInt16
    public init(status: HCIStatus, supportedMaxTxOctets: UInt16, supportedMaxTxTime: UInt16, supportedMaxRxOctets: UInt16, supportedMaxRxTime: UInt16) {
        self.status = status; self.supportedMaxTxOctets = supportedMaxTxOctets; self.supportedMaxTxTime = supportedMaxTxTime
        self.supportedMaxRxOctets = supportedMaxRxOctets; self.supportedMaxRxTime = supportedMaxRxTime
    }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) {
            LEReadMaximumDataLengthReturn(
                status: HCIStatus(rawValue: try $0.readUInt8()), supportedMaxTxOctets: try $0.readUInt16(),
                supportedMaxTxTime: try $0.readUInt16(), supportedMaxRxOctets: try $0.readUInt16(),
                supportedMaxRxTime: try $0.readUInt16())
        }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(supportedMaxTxOctets); $0.write(supportedMaxTxTime); $0.write(supportedMaxRxOctets); $0.write(supportedMaxRxTime)
        }
    }
}

/// HCI_LE_Read_Suggested_Default_Data_Length (§7.8.34).
public struct LEReadSuggestedDefaultDataLengthReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var suggestedMaxTxOctets: UInt16
    public var suggestedMaxTxTime: UInt16
    public init(status: HCIStatus, suggestedMaxTxOctets: UInt16, suggestedMaxTxTime: UInt16) {
        self.status = status; self.suggestedMaxTxOctets = suggestedMaxTxOctets; self.suggestedMaxTxTime = suggestedMaxTxTime
    }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) {
            LEReadSuggestedDefaultDataLengthReturn(
                status: HCIStatus(rawValue: try $0.readUInt8()), suggestedMaxTxOctets: try $0.readUInt16(),
                suggestedMaxTxTime: try $0.readUInt16())
        }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(suggestedMaxTxOctets); $0.write(suggestedMaxTxTime)
        }
    }
}

/// HCI_LE_Read_Advertising_Physical_Channel_Tx_Power (§7.8.6).
public struct LEReadAdvertisingTxPowerReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var txPowerLevel: Int8
    public init(status: HCIStatus, txPowerLevel: Int8) { self.status = status; self.txPowerLevel = txPowerLevel }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) { LEReadAdvertisingTxPowerReturn(status: HCIStatus(rawValue: try $0.readUInt8()), txPowerLevel: try $0.readInt8()) }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(txPowerLevel)
        }
    }
}

/// HCI_LE_Read_Filter_Accept_List_Size (§7.8.14): how many devices the controller's accept list holds.
public struct LEReadFilterAcceptListSizeReturn: HCIReturnParameters {
    public var status: HCIStatus
    public var size: UInt8
    public init(status: HCIStatus, size: UInt8) { self.status = status; self.size = size }
    public init(decoding b: [UInt8]) throws {
        self = try Self.decoding(b) { LEReadFilterAcceptListSizeReturn(status: HCIStatus(rawValue: try $0.readUInt8()), size: try $0.readUInt8()) }
    }
    public func encode() -> [UInt8] {
        Self.encoding {
            $0.write(status.rawValue); $0.write(size)
        }
    }
}
