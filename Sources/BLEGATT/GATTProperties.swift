// Characteristic properties and attribute permissions (Vol 3 Part G §3.3.1.1, §3.3.3.1;
// Vol 3 Part F §3.2.5).

/// Characteristic Properties, the first octet of a characteristic declaration (Vol 3 Part G §3.3.1.1).
public struct GATTCharacteristicProperties: OptionSet, Sendable, Hashable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let broadcast = GATTCharacteristicProperties(rawValue: 0x01)
    public static let read = GATTCharacteristicProperties(rawValue: 0x02)
    public static let writeWithoutResponse = GATTCharacteristicProperties(rawValue: 0x04)
    public static let write = GATTCharacteristicProperties(rawValue: 0x08)
    public static let notify = GATTCharacteristicProperties(rawValue: 0x10)
    public static let indicate = GATTCharacteristicProperties(rawValue: 0x20)
    public static let authenticatedSignedWrites = GATTCharacteristicProperties(rawValue: 0x40)
    public static let extendedProperties = GATTCharacteristicProperties(rawValue: 0x80)
}

/// Characteristic Extended Properties descriptor bits (Vol 3 Part G §3.3.3.1).
public struct GATTCharacteristicExtendedProperties: OptionSet, Sendable, Hashable {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public static let reliableWrite = GATTCharacteristicExtendedProperties(rawValue: 0x0001)
    public static let writableAuxiliaries = GATTCharacteristicExtendedProperties(rawValue: 0x0002)
}

/// Attribute permissions (Vol 3 Part F §3.2.5): access, encryption and authentication requirements.
/// Authentication implies encryption.
public struct AttributePermissions: OptionSet, Sendable, Hashable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let readable = AttributePermissions(rawValue: 0x01)
    public static let writeable = AttributePermissions(rawValue: 0x02)
    public static let readEncryptionRequired = AttributePermissions(rawValue: 0x04)
    public static let writeEncryptionRequired = AttributePermissions(rawValue: 0x08)
    public static let readAuthenticationRequired = AttributePermissions(rawValue: 0x10)
    public static let writeAuthenticationRequired = AttributePermissions(rawValue: 0x20)

    public static let readWrite: AttributePermissions = [.readable, .writeable]
}

/// Client Characteristic Configuration bits (Vol 3 Part G §3.3.3.3).
public struct GATTClientConfiguration: OptionSet, Sendable, Hashable {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public static let notification = GATTClientConfiguration(rawValue: 0x0001)
    public static let indication = GATTClientConfiguration(rawValue: 0x0002)
}
