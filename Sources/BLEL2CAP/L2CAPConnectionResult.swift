// Result codes of the credit-based connection procedures (Vol 3 Part A §4.23 Table 4.19, §4.26 Table 4.22)
// and of Reconfigure (§4.28 Table 4.24), and how a channel may be secured. Unknown values are kept.

public struct L2CAPConnectionResult: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let success = L2CAPConnectionResult(rawValue: 0x0000)
    public static let spsmNotSupported = L2CAPConnectionResult(rawValue: 0x0002)
    public static let noResources = L2CAPConnectionResult(rawValue: 0x0004)
    public static let insufficientAuthentication = L2CAPConnectionResult(rawValue: 0x0005)
    public static let insufficientAuthorization = L2CAPConnectionResult(rawValue: 0x0006)
    public static let encryptionKeySizeTooShort = L2CAPConnectionResult(rawValue: 0x0007)
    public static let insufficientEncryption = L2CAPConnectionResult(rawValue: 0x0008)
    public static let invalidSourceCID = L2CAPConnectionResult(rawValue: 0x0009)
    public static let sourceCIDAlreadyAllocated = L2CAPConnectionResult(rawValue: 0x000A)
    public static let unacceptableParameters = L2CAPConnectionResult(rawValue: 0x000B)
    /// Enhanced procedure only.
    public static let invalidParameters = L2CAPConnectionResult(rawValue: 0x000C)

    /// The link must be encrypted or better before the peer accepts.
    public var asksForSecurity: Bool {
        self == .insufficientAuthentication || self == .insufficientEncryption || self == .encryptionKeySizeTooShort
    }

    public var description: String {
        switch self {
        case .success: return "success"
        case .spsmNotSupported: return "SPSM not supported"
        case .noResources: return "no resources available"
        case .insufficientAuthentication: return "insufficient authentication"
        case .insufficientAuthorization: return "insufficient authorization"
        case .encryptionKeySizeTooShort: return "encryption key size too short"
        case .insufficientEncryption: return "insufficient encryption"
        case .invalidSourceCID: return "invalid source CID"
        case .sourceCIDAlreadyAllocated: return "source CID already allocated"
        case .unacceptableParameters: return "unacceptable parameters"
        case .invalidParameters: return "invalid parameters"
        default: return "result 0x" + String(rawValue, radix: 16)
        }
    }
}

/// Reconfigure results (§4.28).
public enum L2CAPReconfigureResult: UInt16, Sendable {
    case success = 0x0000
    case mtuReductionNotAllowed = 0x0001
    case mpsReductionNotAllowed = 0x0002
    case invalidDestinationCID = 0x0003
    case unacceptableParameters = 0x0004
}

/// What a published SPSM asks of the link before it accepts a channel.
public enum L2CAPSecurityRequirement: Sendable, Equatable {
    case none
    /// Encrypted with a key of at least `minimumKeySize` octets.
    case encryption(minimumKeySize: UInt8 = 16)
    /// Encrypted with a key from an authenticated (MITM-protected) pairing.
    case authentication(minimumKeySize: UInt8 = 16)
}

/// The link's security as the signalling layer needs to know it.
public struct L2CAPLinkSecurity: Sendable, Equatable {
    public var encrypted: Bool
    public var authenticated: Bool
    public var keySize: UInt8
    public init(encrypted: Bool = false, authenticated: Bool = false, keySize: UInt8 = 0) {
        self.encrypted = encrypted
        self.authenticated = authenticated
        self.keySize = keySize
    }

    /// nil when the link satisfies `requirement`, else the refusal to send (§4.23).
    public func refusal(for requirement: L2CAPSecurityRequirement) -> L2CAPConnectionResult? {
        switch requirement {
        case .none:
            return nil
        case let .encryption(size):
            guard encrypted else { return .insufficientAuthentication }
            return keySize < size ? .encryptionKeySizeTooShort : nil
        case let .authentication(size):
            guard encrypted, authenticated else { return .insufficientAuthentication }
            return keySize < size ? .encryptionKeySizeTooShort : nil
        }
    }
}

/// A published SPSM: who may open channels to it and with which receive parameters.
public struct L2CAPServerPolicy: Sendable, Equatable {
    public var security: L2CAPSecurityRequirement
    public var parameters: L2CAPChannelParameters
    public init(security: L2CAPSecurityRequirement = .none, parameters: L2CAPChannelParameters = .init()) {
        self.security = security
        self.parameters = parameters
    }
}

/// Our receiving side of a channel: the largest SDU (MTU) and K-frame payload (MPS) we accept, and the
/// receive window in octets that our credits cover.
public struct L2CAPChannelParameters: Sendable, Equatable {
    public var mtu: UInt16
    public var mps: UInt16
    public var window: Int
    public init(mtu: UInt16 = 2048, mps: UInt16 = 247, window: Int = 64 * 1024) {
        self.mtu = mtu
        self.mps = mps
        self.window = window
    }
}
