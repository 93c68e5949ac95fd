// Security Manager Protocol PDUs (Core Spec Vol 3 Part H §3). Every PDU is one code octet and fixed-length
// parameters; multi-octet values travel least significant octet first, and are kept that way here
// (the session reverses them for the cryptographic functions, which work most significant octet first).
import BLEWire

/// SMP command codes (Vol 3 Part H §3.3, Table 3.3).
public enum SMPCode: UInt8, Sendable, CaseIterable {
    case pairingRequest = 0x01, pairingResponse, pairingConfirm, pairingRandom, pairingFailed
    case encryptionInformation, centralIdentification, identityInformation, identityAddressInformation
    case signingInformation, securityRequest, pairingPublicKey, pairingDHKeyCheck, keypressNotification

    /// Parameter length of each command (the code octet excluded).
    var parameterLength: Int {
        switch self {
        case .pairingRequest, .pairingResponse: return 6
        case .pairingConfirm, .pairingRandom, .encryptionInformation, .identityInformation, .signingInformation, .pairingDHKeyCheck: return 16
        case .pairingFailed, .securityRequest, .keypressNotification: return 1
        case .centralIdentification: return 10
        case .identityAddressInformation: return 7
        case .pairingPublicKey: return 64
        }
    }
}

/// IO capabilities (Vol 3 Part H §2.3.2, Table 3.4).
public enum IOCapability: UInt8, Sendable, CaseIterable, Codable {
    case displayOnly = 0, displayYesNo, keyboardOnly, noInputNoOutput, keyboardDisplay
}

/// The AuthReq field (Vol 3 Part H §3.5.1).
public struct AuthRequirements: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let bonding = AuthRequirements(rawValue: 0x01)
    public static let mitm = AuthRequirements(rawValue: 0x04)
    public static let secureConnections = AuthRequirements(rawValue: 0x08)
    public static let keypress = AuthRequirements(rawValue: 0x10)
    public static let ct2 = AuthRequirements(rawValue: 0x20)
    /// Bonding_Flags is two bits; only 0b01 means bonding.
    public var wantsBonding: Bool { rawValue & 0x03 == 0x01 }
}

/// The key distribution fields (Vol 3 Part H §3.6.1).
public struct KeyDistribution: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let encryptionKey = KeyDistribution(rawValue: 0x01)
    public static let identityKey = KeyDistribution(rawValue: 0x02)
    public static let signingKey = KeyDistribution(rawValue: 0x04)
    public static let linkKey = KeyDistribution(rawValue: 0x08)
    public static let le: KeyDistribution = [.encryptionKey, .identityKey, .signingKey]
}

/// Pairing Failed reasons (Vol 3 Part H §3.5.5, Table 3.7). A struct so that reasons from newer
/// specifications survive a round trip.
public struct PairingFailureReason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let passkeyEntryFailed = Self(rawValue: 0x01)
    public static let oobNotAvailable = Self(rawValue: 0x02)
    public static let authenticationRequirements = Self(rawValue: 0x03)
    public static let confirmValueFailed = Self(rawValue: 0x04)
    public static let pairingNotSupported = Self(rawValue: 0x05)
    public static let encryptionKeySize = Self(rawValue: 0x06)
    public static let commandNotSupported = Self(rawValue: 0x07)
    public static let unspecifiedReason = Self(rawValue: 0x08)
    public static let repeatedAttempts = Self(rawValue: 0x09)
    public static let invalidParameters = Self(rawValue: 0x0A)
    public static let dhKeyCheckFailed = Self(rawValue: 0x0B)
    public static let numericComparisonFailed = Self(rawValue: 0x0C)
    public static let brEDRPairingInProgress = Self(rawValue: 0x0D)
    public static let crossTransportKeyDerivationNotAllowed = Self(rawValue: 0x0E)
    public static let keyRejected = Self(rawValue: 0x0F)

    public var description: String {
        switch rawValue {
        case 0x01: return "Passkey Entry Failed"
        case 0x02: return "OOB Not Available"
        case 0x03: return "Authentication Requirements"
        case 0x04: return "Confirm Value Failed"
        case 0x05: return "Pairing Not Supported"
        case 0x06: return "Encryption Key Size"
        case 0x07: return "Command Not Supported"
        case 0x08: return "Unspecified Reason"
        case 0x09: return "Repeated Attempts"
        case 0x0A: return "Invalid Parameters"
        case 0x0B: return "DHKey Check Failed"
        case 0x0C: return "Numeric Comparison Failed"
        case 0x0D: return "BR/EDR Pairing In Progress"
        case 0x0E: return "Cross-transport Key Derivation/Generation Not Allowed"
        case 0x0F: return "Key Rejected"
        default: return "reason 0x" + String(rawValue, radix: 16)
        }
    }
}

/// The Pairing Request / Pairing Response parameters (Vol 3 Part H §3.5.1, §3.5.2).
public struct PairingFeatures: Sendable, Hashable {
    public var ioCapability: IOCapability
    public var oobDataPresent: Bool
    public var authRequirements: AuthRequirements
    public var maximumKeySize: UInt8
    public var initiatorKeys: KeyDistribution
    public var responderKeys: KeyDistribution

    public init(
        ioCapability: IOCapability, oobDataPresent: Bool = false, authRequirements: AuthRequirements,
        maximumKeySize: UInt8 = 16, initiatorKeys: KeyDistribution, responderKeys: KeyDistribution
    ) {
        self.ioCapability = ioCapability
        self.oobDataPresent = oobDataPresent
        self.authRequirements = authRequirements
        self.maximumKeySize = maximumKeySize
        self.initiatorKeys = initiatorKeys
        self.responderKeys = responderKeys
    }

    var bytes: [UInt8] {
        [ioCapability.rawValue, oobDataPresent ? 1 : 0, authRequirements.rawValue, maximumKeySize, initiatorKeys.rawValue, responderKeys.rawValue]
    }
}

public enum SMPPDU: Sendable, Hashable {
    case pairingRequest(PairingFeatures)
    case pairingResponse(PairingFeatures)
    /// Confirm and random values, 16 octets, least significant first.
    case pairingConfirm([UInt8])
    case pairingRandom([UInt8])
    case pairingFailed(PairingFailureReason)
    case encryptionInformation(ltk: [UInt8])
    case centralIdentification(ediv: UInt16, rand: UInt64)
    case identityInformation(irk: [UInt8])
    case identityAddressInformation(BluetoothAddress)
    case signingInformation(csrk: [UInt8])
    case securityRequest(AuthRequirements)
    /// P-256 public key coordinates, 32 octets each, least significant first.
    case pairingPublicKey(x: [UInt8], y: [UInt8])
    case pairingDHKeyCheck([UInt8])
    case keypressNotification(UInt8)

    public var code: SMPCode {
        switch self {
        case .pairingRequest: return .pairingRequest
        case .pairingResponse: return .pairingResponse
        case .pairingConfirm: return .pairingConfirm
        case .pairingRandom: return .pairingRandom
        case .pairingFailed: return .pairingFailed
        case .encryptionInformation: return .encryptionInformation
        case .centralIdentification: return .centralIdentification
        case .identityInformation: return .identityInformation
        case .identityAddressInformation: return .identityAddressInformation
        case .signingInformation: return .signingInformation
        case .securityRequest: return .securityRequest
        case .pairingPublicKey: return .pairingPublicKey
        case .pairingDHKeyCheck: return .pairingDHKeyCheck
        case .keypressNotification: return .keypressNotification
        }
    }

    /// What a decode failure owes the peer (Vol 3 Part H §3.3): an unknown code is Command Not Supported,
    /// a wrong length or an out-of-range field Invalid Parameters.
    public enum DecodeError: Error, Equatable, Sendable {
        case empty
        case unknownCode(UInt8)
        case badLength(SMPCode, Int)
        case invalidField(String)

        public var failureReason: PairingFailureReason {
            switch self {
            case .unknownCode: return .commandNotSupported
            default: return .invalidParameters
            }
        }
    }

    public static func decode(_ bytes: [UInt8]) throws(DecodeError) -> SMPPDU {
        guard let first = bytes.first else { throw .empty }
        guard let code = SMPCode(rawValue: first) else { throw .unknownCode(first) }
        let p = Array(bytes.dropFirst())
        guard p.count == code.parameterLength else { throw .badLength(code, p.count) }
        func features() throws(DecodeError) -> PairingFeatures {
            guard let io = IOCapability(rawValue: p[0]) else { throw .invalidField("IO capability 0x\(String(p[0], radix: 16))") }
            guard p[1] <= 1 else { throw .invalidField("OOB data flag \(p[1])") }
            guard (7...16).contains(p[3]) else { throw .invalidField("maximum encryption key size \(p[3])") }
            return PairingFeatures(
                ioCapability: io, oobDataPresent: p[1] == 1, authRequirements: AuthRequirements(rawValue: p[2]),
                maximumKeySize: p[3], initiatorKeys: KeyDistribution(rawValue: p[4]), responderKeys: KeyDistribution(rawValue: p[5]))
        }
        switch code {
        case .pairingRequest: return .pairingRequest(try features())
        case .pairingResponse: return .pairingResponse(try features())
        case .pairingConfirm: return .pairingConfirm(p)
        case .pairingRandom: return .pairingRandom(p)
        case .pairingFailed: return .pairingFailed(PairingFailureReason(rawValue: p[0]))
        case .encryptionInformation: return .encryptionInformation(ltk: p)
        case .centralIdentification:
            var r = ByteReader(p)
            guard let ediv = try? r.readUInt16(), let rand = try? r.readUInt64() else { throw .badLength(code, p.count) }
            return .centralIdentification(ediv: ediv, rand: rand)
        case .identityInformation: return .identityInformation(irk: p)
        case .identityAddressInformation:
            guard p[0] <= 1 else { throw .invalidField("identity address type \(p[0])") }
            return .identityAddressInformation(BluetoothAddress(bytes: Array(p[1...]), type: p[0] == 1 ? .random : .public))
        case .signingInformation: return .signingInformation(csrk: p)
        case .securityRequest: return .securityRequest(AuthRequirements(rawValue: p[0]))
        case .pairingPublicKey: return .pairingPublicKey(x: Array(p[0..<32]), y: Array(p[32..<64]))
        case .pairingDHKeyCheck: return .pairingDHKeyCheck(p)
        case .keypressNotification: return .keypressNotification(p[0])
        }
    }

    public func encode() -> [UInt8] {
        var w = ByteWriter()
        w.write(code.rawValue)
        switch self {
        case let .pairingRequest(f), let .pairingResponse(f): w.write(contentsOf: f.bytes)
        case let .pairingConfirm(v), let .pairingRandom(v), let .encryptionInformation(v), let .identityInformation(v),
            let .signingInformation(v), let .pairingDHKeyCheck(v):
            w.write(contentsOf: v)
        case let .pairingFailed(r): w.write(r.rawValue)
        case let .centralIdentification(ediv, rand): w.write(ediv); w.write(rand)
        case let .identityAddressInformation(a): w.write(a.type.isRandom ? 1 as UInt8 : 0); w.write(contentsOf: a.bytes)
        case let .securityRequest(a): w.write(a.rawValue)
        case let .pairingPublicKey(x, y): w.write(contentsOf: x); w.write(contentsOf: y)
        case let .keypressNotification(n): w.write(n)
        }
        return w.bytes
    }
}
