// What the controller reported about itself at start-up: version, the supported-commands bit map, LMP and LE
// features, buffers, its address and how the host got one. Every optional command the host sends is gated
// on these (`supports(_:)`), and `ble doctor` and `CBCentralManager.supports(_:)` read them.
import BLEWire
import BLEHCI

/// A bit of the Supported_Commands map (Vol 4 Part E §6.27): octet and bit.
public struct SupportedCommand: Sendable, Hashable {
    public let octet: Int
    public let bit: Int
    public init(octet: Int, bit: Int) { self.octet = octet; self.bit = bit }

    /// Controller-to-host flow control (Vol 4 Part E §7.3.38–§7.3.40).
    public static let setControllerToHostFlowControl = SupportedCommand(octet: 10, bit: 5)
    public static let hostBufferSize = SupportedCommand(octet: 10, bit: 6)
    public static let hostNumberOfCompletedPackets = SupportedCommand(octet: 10, bit: 7)
    public static let readLocalSupportedFeatures = SupportedCommand(octet: 14, bit: 5)
    public static let readBufferSize = SupportedCommand(octet: 14, bit: 7)
    public static let leReadLocalSupportedFeatures = SupportedCommand(octet: 25, bit: 2)
    public static let leSetRandomAddress = SupportedCommand(octet: 25, bit: 4)
    public static let leReadFilterAcceptListSize = SupportedCommand(octet: 26, bit: 6)
    public static let leSetDataLength = SupportedCommand(octet: 33, bit: 6)
    public static let leReadMaximumDataLength = SupportedCommand(octet: 35, bit: 3)
    public static let leSetDefaultPHY = SupportedCommand(octet: 35, bit: 5)
    public static let leSetPHY = SupportedCommand(octet: 35, bit: 6)
    public static let leSetAdvertisingSetRandomAddress = SupportedCommand(octet: 36, bit: 1)
    public static let leSetExtendedAdvertisingParameters = SupportedCommand(octet: 36, bit: 2)
    public static let leSetExtendedAdvertisingData = SupportedCommand(octet: 36, bit: 3)
    public static let leSetExtendedScanResponseData = SupportedCommand(octet: 36, bit: 4)
    public static let leSetExtendedAdvertisingEnable = SupportedCommand(octet: 36, bit: 5)
    public static let leReadMaximumAdvertisingDataLength = SupportedCommand(octet: 36, bit: 6)
    public static let leReadNumberOfSupportedAdvertisingSets = SupportedCommand(octet: 36, bit: 7)
    public static let leClearAdvertisingSets = SupportedCommand(octet: 37, bit: 1)
    public static let leSetExtendedScanParameters = SupportedCommand(octet: 37, bit: 5)
    public static let leSetExtendedScanEnable = SupportedCommand(octet: 37, bit: 6)
    public static let leExtendedCreateConnection = SupportedCommand(octet: 37, bit: 7)
}

/// Where the host's own address comes from.
public enum ControllerAddressKind: Sendable, Equatable, CustomStringConvertible {
    /// The controller's public address (HCI_Read_BD_ADDR).
    case `public`
    /// No public address (00:00:00:00:00:00); the factory static address from Zephyr's Read Static Addresses.
    case zephyrStatic
    /// No public address and no vendor one: a static random address the host made and keeps in `file`.
    case generatedStatic(file: String?)

    public var description: String {
        switch self {
        case .public: return "public"
        case .zephyrStatic: return "static random (the controller's factory address, Zephyr vendor command)"
        case let .generatedStatic(file): return "static random (no public address; made by the host" + (file.map { ", kept in \($0))" } ?? ", in memory)")
        }
    }
}

public struct ControllerInfo: Sendable, Equatable {
    public var version: ReadLocalVersionReturn?
    /// The 64-octet map, or nil when the controller did not answer Read Local Supported Commands.
    public var supportedCommands: [UInt8]?
    public var lmpFeatures: UInt64 = 0
    public var leFeatures = LEFeatures()
    /// The controller's public address as read (zero when it has none).
    public var publicAddress = BluetoothAddress.zero
    public var addressKind = ControllerAddressKind.public
    /// The LE ACL buffers the host uses, and whether they are the BR/EDR ones shared (LE Read Buffer Size said 0).
    public var aclBufferSize = 27
    public var aclBufferCount = 1
    public var sharedACLBuffers = false
    /// LE Read Maximum Data Length: the longest LL payload this controller sends (27 without DLE).
    public var maxTxOctets: UInt16?
    public var maxAdvertisingDataLength: UInt16?
    public var advertisingSets: UInt8?
    /// Zephyr's vendor version, when the controller answered it.
    public var zephyrVersion: ZephyrReadVersionReturn?
    /// The host's ACL buffers as announced with Host Buffer Size (nil: not announced), and whether the
    /// controller took Set Controller To Host Flow Control for ACL data (Vol 4 Part E §4.2).
    public var hostBuffers: HostBufferSize?
    public var controllerToHostFlowControl = false

    public init() {}

    /// Whether the controller lists `command`; without a map, only the Core 4.0 LE commands are assumed.
    public func supports(_ command: SupportedCommand) -> Bool {
        guard let map = supportedCommands, map.count == 64 else { return command.octet <= 28 }
        return map[command.octet] & (1 << command.bit) != 0
    }

    /// The three commands of controller-to-host flow control, listed in a map the controller gave (never
    /// assumed without one: they are optional since Bluetooth 1.1).
    public var supportsControllerToHostFlowControl: Bool {
        supportedCommands?.count == 64
            && [SupportedCommand.setControllerToHostFlowControl, .hostBufferSize, .hostNumberOfCompletedPackets].allSatisfy(supports)
    }

    /// Google's rootcanal (company identifier 0x00E0) lists Set Controller To Host Flow Control but does not
    /// implement it: rootcanal 1.10 aborts on it in its default (strict) mode and answers Unknown HCI Command
    /// otherwise. The host leaves flow control off there.
    public var listsFlowControlItLacks: Bool { version?.companyIdentifier == 0x00E0 }

    public var supportsDataLengthExtension: Bool { leFeatures.contains(.dataPacketLengthExtension) && supports(.leSetDataLength) }
    public var supportsLE2M: Bool { leFeatures.contains(.le2MPHY) && supports(.leSetPHY) }
    public var supportsLECoded: Bool { leFeatures.contains(.leCodedPHY) && supports(.leSetPHY) }

    /// Extended advertising, scanning and initiating: the feature bit and every command the host uses.
    public var supportsExtendedAdvertising: Bool {
        leFeatures.contains(.extendedAdvertising)
            && [
                SupportedCommand.leSetExtendedAdvertisingParameters, .leSetExtendedAdvertisingData, .leSetExtendedScanResponseData,
                .leSetExtendedAdvertisingEnable, .leSetExtendedScanParameters, .leSetExtendedScanEnable, .leExtendedCreateConnection,
                .leSetAdvertisingSetRandomAddress,
            ].allSatisfy(supports)
    }

    /// Core Specification version from the HCI version (Assigned Numbers: 6 = 4.0 … 13 = 5.4, 14 = 6.0).
    public static func coreVersionName(_ v: UInt8) -> String {
        let names: [UInt8: String] = [
            0: "1.0b", 1: "1.1", 2: "1.2", 3: "2.0", 4: "2.1", 5: "3.0", 6: "4.0", 7: "4.1", 8: "4.2",
            9: "5.0", 10: "5.1", 11: "5.2", 12: "5.3", 13: "5.4", 14: "6.0", 15: "6.1",
        ]
        return names[v] ?? "unknown (\(v))"
    }
}
