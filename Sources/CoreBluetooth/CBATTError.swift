// ATT errors (CBError.h, Core Spec Vol 3 Part F §3.4.1.1 Table 3.4) in the shape of Apple's Swift overlay.
//
// iOS passes application (0x80–0x9F) and common profile (0xE0–0xFF) error codes through as raw numbers
// (e.g. `CBATTErrorDomain Code=242 "Unknown ATT error."`), so `Code(rawValue:)` accepts every value:
// codes without a named case are kept in `.other(rawValue)` instead of being rejected.
import Foundation

/// The domain of `CBATTError`.
public let CBATTErrorDomain: String = "CBATTErrorDomain"

public struct CBATTError: CustomNSError, Hashable, @unchecked Sendable {
    /// The wrapped NSError (domain `CBATTErrorDomain`).
    public let _nsError: NSError

    /// Wraps an NSError of domain `CBATTErrorDomain`. Traps on another domain, like Apple's overlay.
    public init(_nsError error: NSError) {
        precondition(error.domain == CBATTErrorDomain, "CBATTError(_nsError:) needs domain \(CBATTErrorDomain), got \(error.domain)")
        _nsError = error
    }

    /// An error with the given code. Without a localized description in `userInfo`, Apple's text for the
    /// code is supplied.
    public init(_ code: Code, userInfo: [String: Any] = [:]) {
        var info = userInfo
        if info[NSLocalizedDescriptionKey] == nil {
            info[NSLocalizedDescriptionKey] = code.defaultDescription
        }
        _nsError = NSError(domain: CBATTErrorDomain, code: code.rawValue, userInfo: info)
    }

    public static var errorDomain: String { CBATTErrorDomain }

    public var errorCode: Int { _nsError.code }
    public var errorUserInfo: [String: Any] { _nsError.userInfo }
    public var userInfo: [String: Any] { _nsError.userInfo }
    public var code: Code { Code(rawValue: _nsError.code) ?? .other(_nsError.code) }

    public static func == (a: CBATTError, b: CBATTError) -> Bool { a._nsError.code == b._nsError.code }
    public func hash(into h: inout Hasher) { h.combine(_nsError.code) }

    /// ATT error codes. Every raw value is accepted (see the file comment).
    public enum Code: RawRepresentable, Hashable, Sendable {
        case success
        case invalidHandle
        case readNotPermitted
        case writeNotPermitted
        case invalidPdu
        case insufficientAuthentication
        case requestNotSupported
        case invalidOffset
        case insufficientAuthorization
        case prepareQueueFull
        case attributeNotFound
        case attributeNotLong
        case insufficientEncryptionKeySize
        case invalidAttributeValueLength
        case unlikelyError
        case insufficientEncryption
        case unsupportedGroupType
        case insufficientResources
        /// Any other ATT error code, kept as received (application and profile errors).
        case other(Int)

        private static let named: [Code] = [
            .success, .invalidHandle, .readNotPermitted, .writeNotPermitted, .invalidPdu,
            .insufficientAuthentication, .requestNotSupported, .invalidOffset, .insufficientAuthorization,
            .prepareQueueFull, .attributeNotFound, .attributeNotLong, .insufficientEncryptionKeySize,
            .invalidAttributeValueLength, .unlikelyError, .insufficientEncryption, .unsupportedGroupType,
            .insufficientResources,
        ]

        /// Failable in its signature, as the imported NS_ENUM is (so `if let` and `guard let` compile), but
        /// like Apple's non-frozen enums it accepts every value: a named case for 0x00…0x11, `.other(rawValue)`
        /// otherwise.
        public init?(rawValue: Int) {
            if rawValue >= 0, rawValue < Self.named.count {
                self = Self.named[rawValue]
            } else {
                self = .other(rawValue)
            }
        }

        public var rawValue: Int {
            switch self {
            case .success: return 0x00
            case .invalidHandle: return 0x01
            case .readNotPermitted: return 0x02
            case .writeNotPermitted: return 0x03
            case .invalidPdu: return 0x04
            case .insufficientAuthentication: return 0x05
            case .requestNotSupported: return 0x06
            case .invalidOffset: return 0x07
            case .insufficientAuthorization: return 0x08
            case .prepareQueueFull: return 0x09
            case .attributeNotFound: return 0x0A
            case .attributeNotLong: return 0x0B
            case .insufficientEncryptionKeySize: return 0x0C
            case .invalidAttributeValueLength: return 0x0D
            case .unlikelyError: return 0x0E
            case .insufficientEncryption: return 0x0F
            case .unsupportedGroupType: return 0x10
            case .insufficientResources: return 0x11
            case .other(let raw): return raw
            }
        }

        // Equality and hashing by raw value, so `.other(1) == .invalidHandle`.
        public static func == (a: Code, b: Code) -> Bool { a.rawValue == b.rawValue }
        public func hash(into h: inout Hasher) { h.combine(rawValue) }

        /// Matches any error whose NSError form has domain `CBATTErrorDomain` and this code:
        /// `catch CBATTError.insufficientEncryption`.
        public static func ~= (match: Code, error: any Error) -> Bool {
            let ns = error as NSError
            return ns.domain == CBATTErrorDomain && ns.code == match.rawValue
        }

        /// The localized description iOS shows. Texts marked (seen) were observed on devices; the others
        /// follow the same style.
        var defaultDescription: String {
            switch self {
            case .success: return "The operation completed successfully."
            case .invalidHandle: return "The handle is invalid."
            case .readNotPermitted: return "Reading is not permitted."
            case .writeNotPermitted: return "Writing is not permitted."   // (seen)
            case .invalidPdu: return "The command is invalid."
            case .insufficientAuthentication: return "Authentication is insufficient."   // (seen)
            case .requestNotSupported: return "The request is not supported."
            case .invalidOffset: return "The offset is invalid."
            case .insufficientAuthorization: return "Authorization is insufficient."
            case .prepareQueueFull: return "The prepare queue is full."
            case .attributeNotFound: return "The attribute could not be found."   // (seen)
            case .attributeNotLong: return "The attribute is not long."
            case .insufficientEncryptionKeySize: return "The encryption key size is insufficient."
            case .invalidAttributeValueLength: return "The value's length is invalid."
            case .unlikelyError: return "Unlikely error."
            case .insufficientEncryption: return "Encryption is insufficient."   // (seen)
            case .unsupportedGroupType: return "The group type is not supported."
            case .insufficientResources: return "Resources are insufficient."
            case .other: return "Unknown ATT error."   // (seen, code 242)
            }
        }
    }

    public static var success: Code { .success }
    public static var invalidHandle: Code { .invalidHandle }
    public static var readNotPermitted: Code { .readNotPermitted }
    public static var writeNotPermitted: Code { .writeNotPermitted }
    public static var invalidPdu: Code { .invalidPdu }
    public static var insufficientAuthentication: Code { .insufficientAuthentication }
    public static var requestNotSupported: Code { .requestNotSupported }
    public static var invalidOffset: Code { .invalidOffset }
    public static var insufficientAuthorization: Code { .insufficientAuthorization }
    public static var prepareQueueFull: Code { .prepareQueueFull }
    public static var attributeNotFound: Code { .attributeNotFound }
    public static var attributeNotLong: Code { .attributeNotLong }
    public static var insufficientEncryptionKeySize: Code { .insufficientEncryptionKeySize }
    public static var invalidAttributeValueLength: Code { .invalidAttributeValueLength }
    public static var unlikelyError: Code { .unlikelyError }
    public static var insufficientEncryption: Code { .insufficientEncryption }
    public static var unsupportedGroupType: Code { .unsupportedGroupType }
    public static var insufficientResources: Code { .insufficientResources }
}
