// Permissions of a local attribute (CBCharacteristic.h). Note Apple's spelling `writeable`.

public struct CBAttributePermissions: OptionSet, Hashable, Sendable {
    public let rawValue: UInt

    public init(rawValue: UInt) { self.rawValue = rawValue }

    public static let readable = CBAttributePermissions(rawValue: 0x01)
    public static let writeable = CBAttributePermissions(rawValue: 0x02)
    /// Reading needs an encrypted link (ATT Insufficient Encryption / Authentication otherwise).
    public static let readEncryptionRequired = CBAttributePermissions(rawValue: 0x04)
    /// Writing needs an encrypted link (ATT Insufficient Encryption / Authentication otherwise).
    public static let writeEncryptionRequired = CBAttributePermissions(rawValue: 0x08)
}
