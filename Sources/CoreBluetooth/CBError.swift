// Core Bluetooth errors (CBError.h) in the shape of Apple's Swift overlay: a struct wrapping an NSError
// of domain "CBErrorDomain", with a nested `Code` enum and one static member per code so that
// `catch CBError.peripheralDisconnected` and `(error as? CBError)?.code == .peripheralDisconnected` work.
//
// On Linux an NSError does not bridge to this struct with `as?`; use `CBError(_nsError:)` for that.
import Foundation

/// The domain of `CBError`.
public let CBErrorDomain: String = "CBErrorDomain"

public struct CBError: CustomNSError, Hashable, @unchecked Sendable {
    /// The wrapped NSError (domain `CBErrorDomain`).
    public let _nsError: NSError

    /// Wraps an NSError of domain `CBErrorDomain`. Traps on another domain, like Apple's overlay.
    public init(_nsError error: NSError) {
        precondition(error.domain == CBErrorDomain, "CBError(_nsError:) needs domain \(CBErrorDomain), got \(error.domain)")
        _nsError = error
    }

    /// An error with the given code. Without a localized description in `userInfo`, Apple's text for the
    /// code (where known) is supplied.
    public init(_ code: Code, userInfo: [String: Any] = [:]) {
        var info = userInfo
        if info[NSLocalizedDescriptionKey] == nil {
            info[NSLocalizedDescriptionKey] = code.defaultDescription
        }
        _nsError = NSError(domain: CBErrorDomain, code: code.rawValue, userInfo: info)
    }

    public static var errorDomain: String { CBErrorDomain }

    public var errorCode: Int { _nsError.code }
    public var errorUserInfo: [String: Any] { _nsError.userInfo }
    public var userInfo: [String: Any] { _nsError.userInfo }

    /// The code; a code this module does not know reads as `.unknown`.
    public var code: Code { Code(rawValue: _nsError.code) ?? .unknown }

    public static func == (a: CBError, b: CBError) -> Bool { a._nsError.code == b._nsError.code }
    public func hash(into h: inout Hasher) { h.combine(_nsError.code) }

    /// CBError.h codes (NSInteger).
    public enum Code: Int, Hashable, Sendable {
        case unknown = 0
        case invalidParameters = 1
        case invalidHandle = 2
        case notConnected = 3
        case outOfSpace = 4
        case operationCancelled = 5
        case connectionTimeout = 6
        case peripheralDisconnected = 7
        case uuidNotAllowed = 8
        case alreadyAdvertising = 9
        case connectionFailed = 10
        case connectionLimitReached = 11
        case unknownDevice = 12
        case operationNotSupported = 13
        case peerRemovedPairingInformation = 14
        case encryptionTimedOut = 15
        case tooManyLEPairedDevices = 16
        case leGattExceededBackgroundNotificationLimit = 17
        case leGattNearBackgroundNotificationLimit = 18

        /// The misspelt name of `.unknownDevice` from iOS 9.
        @available(*, deprecated, renamed: "unknownDevice")
        public static var unkownDevice: Code { .unknownDevice }

        /// Matches any error whose NSError form has domain `CBErrorDomain` and this code:
        /// `catch CBError.peripheralDisconnected`.
        public static func ~= (match: Code, error: any Error) -> Bool {
            let ns = error as NSError
            return ns.domain == CBErrorDomain && ns.code == match.rawValue
        }

        /// The localized description iOS shows. Texts marked (seen) were observed on devices; the others
        /// follow the same style.
        var defaultDescription: String {
            switch self {
            case .unknown: return "Unknown error."   // (seen)
            case .invalidParameters: return "The specified parameters are invalid."
            case .invalidHandle: return "The specified attribute handle is invalid."
            case .notConnected: return "The specified device is not connected."   // (seen)
            case .outOfSpace: return "The device has run out of space to complete the intended operation."
            case .operationCancelled: return "The operation was cancelled."
            case .connectionTimeout: return "The connection has timed out unexpectedly."   // (seen)
            case .peripheralDisconnected: return "The specified device has disconnected from us."   // (seen)
            case .uuidNotAllowed: return "The specified UUID is not allowed for this operation."
            case .alreadyAdvertising: return "The peripheral is already advertising."
            case .connectionFailed: return "The connection has failed unexpectedly."
            case .connectionLimitReached: return "The device has reached the maximum number of connections."
            case .unknownDevice: return "The device is unknown."
            case .operationNotSupported: return "The operation is not supported."
            case .peerRemovedPairingInformation: return "Peer removed pairing information"   // (seen)
            case .encryptionTimedOut: return "The encryption has timed out."
            case .tooManyLEPairedDevices: return "Too many LE devices are paired."
            case .leGattExceededBackgroundNotificationLimit: return "The background notification limit has been exceeded."
            case .leGattNearBackgroundNotificationLimit: return "The background notification limit is nearly reached."
            }
        }
    }

    public static var unknown: Code { .unknown }
    public static var invalidParameters: Code { .invalidParameters }
    public static var invalidHandle: Code { .invalidHandle }
    public static var notConnected: Code { .notConnected }
    public static var outOfSpace: Code { .outOfSpace }
    public static var operationCancelled: Code { .operationCancelled }
    public static var connectionTimeout: Code { .connectionTimeout }
    public static var peripheralDisconnected: Code { .peripheralDisconnected }
    public static var uuidNotAllowed: Code { .uuidNotAllowed }
    public static var alreadyAdvertising: Code { .alreadyAdvertising }
    public static var connectionFailed: Code { .connectionFailed }
    public static var connectionLimitReached: Code { .connectionLimitReached }
    public static var unknownDevice: Code { .unknownDevice }
    @available(*, deprecated, renamed: "unknownDevice")
    public static var unkownDevice: Code { .unknownDevice }
    public static var operationNotSupported: Code { .operationNotSupported }
    public static var peerRemovedPairingInformation: Code { .peerRemovedPairingInformation }
    public static var encryptionTimedOut: Code { .encryptionTimedOut }
    public static var tooManyLEPairedDevices: Code { .tooManyLEPairedDevices }
    public static var leGattExceededBackgroundNotificationLimit: Code { .leGattExceededBackgroundNotificationLimit }
    public static var leGattNearBackgroundNotificationLimit: Code { .leGattNearBackgroundNotificationLimit }
}
