// MCSession.h's enums and constants, with their raw values.
import Foundation

public enum MCSessionSendDataMode: Int, Sendable {
    /// Guaranteed delivery, in order.
    case reliable = 0
    /// Sent at once if the link can take it, else dropped; no order guarantee.
    case unreliable = 1
}

public enum MCSessionState: Int, Sendable, CustomStringConvertible {
    case notConnected = 0
    case connecting = 1
    case connected = 2
    public var description: String {
        switch self {
        case .notConnected: return "notConnected"
        case .connecting: return "connecting"
        case .connected: return "connected"
        }
    }
}

public enum MCEncryptionPreference: Int, Sendable {
    /// Encrypts when the peer can; accepts a plaintext peer.
    case optional = 0
    case required = 1
    case none = 2
}

/// The fewest peers a session has, counting the local one.
public let kMCSessionMinimumNumberOfPeers: Int = 2
/// The most peers a session has, counting the local one.
public let kMCSessionMaximumNumberOfPeers: Int = 8

/// Apple's rules for service types (MCNearbyServiceAdvertiser.h): 1–15 characters, ASCII lowercase letters,
/// digits and hyphens, at least one letter, no hyphen first, last or twice in a row. iOS raises an
/// exception for anything else; so do we (a trap with the reason), after `MCServiceType.isValid`.
public enum MCServiceType {
    /// Whether `type` is a valid service type (1–15 characters: lowercase ASCII letters, digits and hyphens, not starting or ending with a hyphen, no two hyphens in a row). Linux addition: check first, since an invalid one traps as iOS raises an exception.
    public static func isValid(_ type: String) -> Bool { validationFailure(type) == nil }

    static func validationFailure(_ type: String) -> String? {
        let chars = Array(type.unicodeScalars)
        guard (1...15).contains(chars.count) else { return "must be 1 to 15 characters" }
        guard chars.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" }) else {
            return "may contain only ASCII lowercase letters, digits and hyphens"
        }
        guard chars.contains(where: { ("a"..."z").contains($0) }) else { return "must contain at least one letter" }
        guard chars.first != "-", chars.last != "-" else { return "must not begin or end with a hyphen" }
        guard !type.contains("--") else { return "must not contain two hyphens in a row" }
        return nil
    }

    static func require(_ type: String) {
        if let why = validationFailure(type) { preconditionFailure("Invalid serviceType passed to MultipeerConnectivity: \"\(type)\" \(why)") }
    }

    /// discoveryInfo: string keys without "=", each key=value at most 255 octets (Apple's rule).
    static func discoveryInfoFailure(_ info: [String: String]?) -> String? {
        for (k, v) in info ?? [:] {
            if k.isEmpty || k.contains("=") { return "key \"\(k)\" is empty or contains \"=\"" }
            if k.utf8.count + 1 + v.utf8.count > 255 { return "\"\(k)=…\" is longer than 255 octets" }
            if k == "_d" || k == "_lx" { return "key \"\(k)\" is reserved" }
        }
        return nil
    }
}
