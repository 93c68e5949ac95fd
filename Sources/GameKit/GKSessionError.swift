// GKSessionError (GKError.h / GKSessionError.h) in the shape of Apple's Swift overlay: a struct wrapping an
// NSError of domain GKSessionErrorDomain, the `Code` enum with Apple's Swift case names (the `Error` suffix
// kept), and one static shorthand per code, so that `catch GKSessionError.notConnectedError` matches and
// `(error as? GKSessionError)?.code == .dataTooBigError` reads as on iOS.
import Foundation

public let GKSessionErrorDomain: String = "com.apple.gamekit.GKSessionErrorDomain"

public struct GKSessionError: CustomNSError, Hashable, @unchecked Sendable {
    public let _nsError: NSError
    public init(_nsError error: NSError) { _nsError = error }
    public init(_ code: Code, userInfo: [String: Any] = [:]) {
        var info = userInfo
        if info[NSLocalizedDescriptionKey] == nil { info[NSLocalizedDescriptionKey] = code.defaultDescription }
        _nsError = NSError(domain: GKSessionErrorDomain, code: code.rawValue, userInfo: info)
    }
    public static var errorDomain: String { GKSessionErrorDomain }
    public var errorCode: Int { _nsError.code }
    public var errorUserInfo: [String: Any] { _nsError.userInfo }
    public var userInfo: [String: Any] { _nsError.userInfo }
    public var code: Code { Code(rawValue: _nsError.code) ?? .unknownError }
    public static func == (a: GKSessionError, b: GKSessionError) -> Bool { a._nsError.code == b._nsError.code }
    public func hash(into h: inout Hasher) { h.combine(_nsError.code) }

    public enum Code: Int, Hashable, Sendable {
        case invalidParameterError = 30500
        case peerNotFoundError = 30501
        case declinedError = 30502
        case timedOutError = 30503
        case cancelledError = 30504
        case connectionFailedError = 30505
        case connectionClosedError = 30506
        case dataTooBigError = 30507
        case notConnectedError = 30508
        case cannotEnableError = 30509
        case inProgressError = 30510
        case connectivityError = 30201
        case transportError = 30202
        case internalError = 30203
        case unknownError = 30204
        case systemError = 30205

        /// Matches any error whose NSError form has domain GKSessionErrorDomain and this code:
        /// `catch GKSessionError.notConnectedError` (what Foundation's `_ErrorCodeProtocol` gives Apple's overlay).
        public static func ~= (match: Code, error: any Error) -> Bool {
            let ns = error as NSError
            return ns.domain == GKSessionErrorDomain && ns.code == match.rawValue
        }

        var defaultDescription: String {
            switch self {
            case .invalidParameterError: return "Invalid parameter."
            case .peerNotFoundError: return "The peer could not be found."
            case .declinedError: return "The peer declined the connection."
            case .timedOutError: return "The connection attempt timed out."
            case .cancelledError: return "The operation was cancelled."
            case .connectionFailedError: return "The connection failed."
            case .connectionClosedError: return "The connection was closed."
            case .dataTooBigError: return "The data is too big to send."
            case .notConnectedError: return "The peer is not connected."
            case .cannotEnableError: return "The session cannot be made available."
            case .inProgressError: return "A connection is already in progress."
            case .connectivityError: return "Connectivity error."
            case .transportError: return "Transport error."
            case .internalError: return "Internal error."
            case .unknownError: return "Unknown error."
            case .systemError: return "System error."
            }
        }
    }

    public static var invalidParameterError: Code { .invalidParameterError }
    public static var peerNotFoundError: Code { .peerNotFoundError }
    public static var declinedError: Code { .declinedError }
    public static var timedOutError: Code { .timedOutError }
    public static var cancelledError: Code { .cancelledError }
    public static var connectionFailedError: Code { .connectionFailedError }
    public static var connectionClosedError: Code { .connectionClosedError }
    public static var dataTooBigError: Code { .dataTooBigError }
    public static var notConnectedError: Code { .notConnectedError }
    public static var cannotEnableError: Code { .cannotEnableError }
    public static var inProgressError: Code { .inProgressError }
    public static var connectivityError: Code { .connectivityError }
    public static var transportError: Code { .transportError }
    public static var internalError: Code { .internalError }
    public static var unknownError: Code { .unknownError }
    public static var systemError: Code { .systemError }
}
