// The security state of the link an ATT bearer runs on, as attribute permission checks need it
// (Vol 3 Part F §3.2.5; Vol 3 Part C §10.3).

/// What the link offers: encryption, whether its key came from authenticated (MITM-protected)
/// pairing, the key size, and whether a long-term key for the peer exists (a bond).
public struct ATTSecurity: Sendable, Hashable {
    public var encrypted: Bool
    public var authenticated: Bool
    /// Encryption key size in octets (7…16); meaningless while not encrypted.
    public var keySize: UInt8
    /// A long-term key for this peer exists, so the link could be encrypted without pairing.
    public var hasLongTermKey: Bool

    public init(encrypted: Bool = false, authenticated: Bool = false, keySize: UInt8 = 0, hasLongTermKey: Bool = false) {
        self.encrypted = encrypted
        self.authenticated = authenticated
        self.keySize = keySize
        self.hasLongTermKey = hasLongTermKey
    }

    /// A fresh, unencrypted link with no bond.
    public static let none = ATTSecurity()
    public static let encryptedUnauthenticated = ATTSecurity(encrypted: true, keySize: 16, hasLongTermKey: true)
    public static let encryptedAuthenticated = ATTSecurity(encrypted: true, authenticated: true, keySize: 16, hasLongTermKey: true)

    /// The error owed to an access that needs encryption (and maybe authentication), or nil when the
    /// link suffices. An unencrypted link gets Insufficient Encryption when a key exists to encrypt
    /// with, else Insufficient Authentication so that the client pairs (Vol 3 Part C §10.3.1);
    /// an encrypted but unauthenticated link gets Insufficient Authentication when authentication is
    /// needed; a key shorter than `minimumKeySize` gets Encryption Key Size Too Short.
    public func check(encryption: Bool, authentication: Bool, minimumKeySize: UInt8 = 7) -> ATTErrorCode? {
        guard encryption || authentication else { return nil }
        guard encrypted else { return hasLongTermKey ? .insufficientEncryption : .insufficientAuthentication }
        if authentication && !authenticated { return .insufficientAuthentication }
        if keySize < minimumKeySize { return .encryptionKeySizeTooShort }
        return nil
    }
}
