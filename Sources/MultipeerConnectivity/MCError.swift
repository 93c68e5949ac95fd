// MCError (MCError.h): domain "MCErrorDomain", codes 0–6, in the shape of Apple's Swift overlay: the struct,
// its `Code`, one static shorthand per code, and the `~=` that lets `catch MCError.notConnected` match.
import Foundation

public let MCErrorDomain: String = "MCErrorDomain"

public struct MCError: CustomNSError, Hashable, @unchecked Sendable {
    public let _nsError: NSError

    public init(_nsError error: NSError) {
        precondition(error.domain == MCErrorDomain, "MCError(_nsError:) needs domain \(MCErrorDomain)")
        _nsError = error
    }

    public init(_ code: Code, userInfo: [String: Any] = [:]) {
        var info = userInfo
        if info[NSLocalizedDescriptionKey] == nil { info[NSLocalizedDescriptionKey] = code.defaultDescription }
        _nsError = NSError(domain: MCErrorDomain, code: code.rawValue, userInfo: info)
    }

    public static var errorDomain: String { MCErrorDomain }
    public var errorCode: Int { _nsError.code }
    public var errorUserInfo: [String: Any] { _nsError.userInfo }
    public var userInfo: [String: Any] { _nsError.userInfo }
    public var code: Code { Code(rawValue: _nsError.code) ?? .unknown }

    public static func == (a: MCError, b: MCError) -> Bool { a._nsError.code == b._nsError.code }
    public func hash(into h: inout Hasher) { h.combine(_nsError.code) }

    public enum Code: Int, Hashable, Sendable {
        case unknown = 0
        case notConnected = 1
        case invalidParameter = 2
        case unsupported = 3
        case timedOut = 4
        case cancelled = 5
        case unavailable = 6

        /// Matches any error whose NSError form has domain MCErrorDomain and this code: `catch MCError.notConnected`
        /// (on Apple platforms Foundation's `_ErrorCodeProtocol` gives the overlay this operator).
        public static func ~= (match: Code, error: any Error) -> Bool {
            let ns = error as NSError
            return ns.domain == MCErrorDomain && ns.code == match.rawValue
        }

        var defaultDescription: String {
            switch self {
            case .unknown: return "Unknown error."
            case .notConnected: return "Peers (…) not connected"
            case .invalidParameter: return "Invalid parameter."
            case .unsupported: return "Unsupported."
            case .timedOut: return "Timed out."
            case .cancelled: return "Cancelled."
            case .unavailable: return "Unavailable."
            }
        }
    }

    public static var unknown: MCError.Code { .unknown }
    public static var notConnected: MCError.Code { .notConnected }
    public static var invalidParameter: MCError.Code { .invalidParameter }
    public static var unsupported: MCError.Code { .unsupported }
    public static var timedOut: MCError.Code { .timedOut }
    public static var cancelled: MCError.Code { .cancelled }
    public static var unavailable: MCError.Code { .unavailable }
}
