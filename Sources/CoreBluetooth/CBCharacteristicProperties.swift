// Characteristic properties (CBCharacteristic.h). The low eight bits are the GATT Characteristic
// Properties field (Core Spec Vol 3 Part G §3.3.1.1); the two high bits are Core Bluetooth's own.

public struct CBCharacteristicProperties: OptionSet, Hashable, Sendable {
    public let rawValue: UInt

    public init(rawValue: UInt) { self.rawValue = rawValue }

    /// The value may be broadcast (Server Characteristic Configuration). Not allowed on local characteristics.
    public static let broadcast = CBCharacteristicProperties(rawValue: 0x01)
    public static let read = CBCharacteristicProperties(rawValue: 0x02)
    public static let writeWithoutResponse = CBCharacteristicProperties(rawValue: 0x04)
    public static let write = CBCharacteristicProperties(rawValue: 0x08)
    public static let notify = CBCharacteristicProperties(rawValue: 0x10)
    public static let indicate = CBCharacteristicProperties(rawValue: 0x20)
    public static let authenticatedSignedWrites = CBCharacteristicProperties(rawValue: 0x40)
    /// Extended properties exist (descriptor 0x2900). Not allowed on local characteristics.
    public static let extendedProperties = CBCharacteristicProperties(rawValue: 0x80)
    /// Local characteristics only: notify, and only trusted (encrypted) centrals may subscribe.
    public static let notifyEncryptionRequired = CBCharacteristicProperties(rawValue: 0x100)
    /// Local characteristics only: indicate, and only trusted (encrypted) centrals may subscribe.
    public static let indicateEncryptionRequired = CBCharacteristicProperties(rawValue: 0x200)
}
