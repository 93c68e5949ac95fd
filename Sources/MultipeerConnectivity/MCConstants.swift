// MCSession.h's enums and constants, with their raw values.
import Foundation

public enum MCSessionSendDataMode: Int, Sendable {
    /// Guaranteed delivery, in order.
    case reliable = 0
    /// Sent at once if the link can take it, else dropped; no order guarantee.
    case unreliable = 1
}

/// No CustomStringConvertible of ours (Apple's has none, and apps add their own): interpolation prints the
/// case name.
public enum MCSessionState: Int, Sendable {
    case notConnected = 0
    case connecting = 1
    case connected = 2
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

/// Service types (MCNearbyServiceAdvertiser.h, RFC 6335 §5.1): 1–15 characters, ASCII letters, digits and
/// hyphens, at least one letter, no hyphen first, last or twice in a row. Apple's page asks for lowercase
/// letters, but iOS accepts upper-case ones and apps ship with them ("MKSVC"): DNS-SD compares service names
/// without regard to case (RFC 6763 §4.1.2), so "MKSVC" and "mksvc" are the same service, and this package
/// uses the lowercased form on the wire (mDNS and the Bluetooth service UUID).
///
/// What iOS refuses is refused without a crash, as there: the advertiser or browser reports it to its
/// delegate (`didNotStartAdvertisingPeer` / `didNotStartBrowsingForPeers`) with an NSError of domain
/// `NSNetServicesErrorDomain`, code -72008 (bad argument), whose failure reason names the rule.
public enum MCServiceType {
    /// Whether `type` is a valid service type (1–15 characters: lowercase ASCII letters, digits and hyphens, not starting or ending with a hyphen, no two hyphens in a row). Linux addition: check first, since an invalid one traps as iOS raises an exception.
    public static func isValid(_ type: String) -> Bool { validationFailure(type) == nil }

    static func validationFailure(_ type: String) -> String? {
        let chars = Array(type.unicodeScalars)
        func isLetter(_ c: Unicode.Scalar) -> Bool { ("a"..."z").contains(c) || ("A"..."Z").contains(c) }
        guard (1...15).contains(chars.count) else { return "must be 1 to 15 characters" }
        guard chars.allSatisfy({ isLetter($0) || ("0"..."9").contains($0) || $0 == "-" }) else {
            return "may contain only ASCII letters, digits and hyphens"
        }
        guard chars.contains(where: isLetter) else { return "must contain at least one letter" }
        guard chars.first != "-", chars.last != "-" else { return "must not begin or end with a hyphen" }
        guard !type.contains("--") else { return "must not contain two hyphens in a row" }
        return nil
    }

    /// The form used on the wire: DNS-SD service names compare without case, so one canonical spelling.
    static func canonical(_ type: String) -> String { type.lowercased() }

    /// The error an advertiser or browser reports for what iOS refuses (NSNetServicesBadArgumentError).
    static func badArgument(_ what: String) -> NSError {
        NSError(
            domain: "NSNetServicesErrorDomain", code: -72008,
            userInfo: [
                NSLocalizedDescriptionKey: "The operation couldn’t be completed. (NSNetServicesErrorDomain error -72008.)",
                NSLocalizedFailureReasonErrorKey: what,
            ])
    }

    /// Why iOS would refuse this service type, as an error for the delegate; nil when it is valid.
    static func refusal(_ type: String) -> NSError? {
        validationFailure(type).map { badArgument("Invalid serviceType \"\(type)\": it \($0) (RFC 6335 §5.1)") }
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
