// GameKit's peer-session enums and errors (GKPublicConstants.h, GKSessionError.h), with their raw values.
@_exported import Foundation

public enum GKSessionMode: Int, Sendable {
    /// Advertises; receives connection requests.
    case server = 0
    /// Browses; sees servers as available or unavailable.
    case client = 1
    /// Both.
    case peer = 2
}

public enum GKPeerConnectionState: Int, Sendable, CustomStringConvertible {
    case available = 0
    case unavailable = 1
    case connected = 2
    case disconnected = 3
    case connecting = 4
    case connectedRelay = 5
    public var description: String {
        ["available", "unavailable", "connected", "disconnected", "connecting", "connectedRelay"][rawValue]
    }
}

public enum GKSendDataMode: Int, Sendable {
    /// As soon as possible, fragmented and reassembled, in order; may stall under congestion.
    case reliable = 0
    /// Best effort and immediate: no delivery or order guarantee; never stalls.
    case unreliable = 1
}

public struct GKPeerPickerConnectionType: OptionSet, Sendable {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }
    public static let online = GKPeerPickerConnectionType(rawValue: 1 << 0)
    public static let nearby = GKPeerPickerConnectionType(rawValue: 1 << 1)
}

public let GKSessionErrorDomain: String = "com.apple.gamekit.GKSessionErrorDomain"

public struct GKSessionError: CustomNSError, Hashable, @unchecked Sendable {
    public let _nsError: NSError
    public init(_nsError error: NSError) { _nsError = error }
    public init(_ code: Code, userInfo: [String: Any] = [:]) {
        var info = userInfo
        if info[NSLocalizedDescriptionKey] == nil { info[NSLocalizedDescriptionKey] = "\(code)" }
        _nsError = NSError(domain: GKSessionErrorDomain, code: code.rawValue, userInfo: info)
    }
    public static var errorDomain: String { GKSessionErrorDomain }
    public var errorCode: Int { _nsError.code }
    public var errorUserInfo: [String: Any] { _nsError.userInfo }
    public var code: Code { Code(rawValue: _nsError.code) ?? .unknown }
    public static func == (a: GKSessionError, b: GKSessionError) -> Bool { a._nsError.code == b._nsError.code }
    public func hash(into h: inout Hasher) { h.combine(_nsError.code) }

    public enum Code: Int, Sendable {
        case invalidParameter = 30500, peerNotFound = 30501, declined = 30502, timedOut = 30503, cancelled = 30504
        case connectionFailed = 30505, connectionClosed = 30506, dataTooBig = 30507, notConnected = 30508
        case cannotEnable = 30509, inProgress = 30510
        case connectivity = 30201, transport = 30202, `internal` = 30203, unknown = 30204, system = 30205
    }
}
