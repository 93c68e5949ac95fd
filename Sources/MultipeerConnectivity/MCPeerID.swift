// MCPeerID (MCPeerID.h): a peer's identity — a random 64-bit token, unique per init even when display names
// repeat, and the display name. Equal and hashable by token; NSCopying and NSSecureCoding, so an archived
// peer ID comes back equal (the way to keep one identity across launches).
import Foundation

open class MCPeerID: NSObject, NSCopying, NSSecureCoding, @unchecked Sendable {
    public let displayName: String
    /// The hidden identity: base36 of it names the peer's mDNS instance; GameKit uses it as the peer ID.
    package let token: UInt64

    /// Creates the local peer. As on iOS, a display name that is empty or longer than 63 octets of UTF-8 is
    /// a programming error: iOS raises NSInvalidArgumentException, which ends the app; here it traps with
    /// the same message. Check with `MCPeerID.isValidDisplayName(_:)` first when the name comes from a user.
    public init(displayName myDisplayName: String) {
        precondition(Self.isValidDisplayName(myDisplayName), "Invalid displayName passed to MCPeerID (must be 1 to 63 octets of UTF-8)")
        displayName = myDisplayName
        var t: UInt64 = 0
        while t == 0 { t = UInt64.random(in: 1...UInt64.max) }
        token = t
        super.init()
    }

    package init(token: UInt64, displayName: String) {
        self.token = token
        self.displayName = displayName
        super.init()
    }

    /// Whether `name` is a display name iOS accepts: 1 to 63 octets of UTF-8.
    public static func isValidDisplayName(_ name: String) -> Bool {
        let n = name.utf8.count
        return n >= 1 && n <= 63
    }

    public static var supportsSecureCoding: Bool { true }

    public func encode(with coder: NSCoder) {
        coder.encode(displayName as NSString, forKey: "MCPeerIDDisplayName")
        coder.encode(Int64(bitPattern: token), forKey: "MCPeerIDToken")
    }

    public required init?(coder: NSCoder) {
        guard let name = coder.decodeObject(of: NSString.self, forKey: "MCPeerIDDisplayName") as String?,
            Self.isValidDisplayName(name)
        else { return nil }
        let t = UInt64(bitPattern: coder.decodeInt64(forKey: "MCPeerIDToken"))
        guard t != 0 else { return nil }
        displayName = name
        token = t
        super.init()
    }

    public func copy(with zone: NSZone? = nil) -> Any { self }

    open override func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? MCPeerID else { return false }
        return other.token == token
    }

    open override var hash: Int { Int(truncatingIfNeeded: token) }

    open override var description: String { "<MCPeerID: \(Unmanaged.passUnretained(self).toOpaque()) DisplayName = \(displayName)>" }

    /// base36 of the token: the mDNS instance name.
    package var instanceName: String { String(token, radix: 36) }

    package static func token(fromInstance name: String) -> UInt64? { UInt64(name, radix: 36) }
}
