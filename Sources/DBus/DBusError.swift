// Errors of the D-Bus codec and connection.

public enum DBusError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A signature that breaks the spec's grammar or limits.
    case invalidSignature(String, String)
    /// Octets that do not decode as the spec requires (offset, what was wrong).
    case malformed(Int, String)
    /// A value that cannot be sent (a bad object path, a string with NUL, a message over the size limit…).
    case invalidValue(String)
    /// The peer's authentication answer was not what the SASL exchange allows.
    case authenticationFailed(String)
    /// A D-Bus error reply: its name (org.bluez.Error.Failed…) and message.
    case remote(name: String, message: String)
    /// No reply within the call's timeout.
    case timedOut
    /// The connection is closed (by us, the bus, or an I/O error whose text is kept).
    case disconnected(String)
    /// A bus address that cannot be used.
    case badAddress(String)
    /// A system call failed while connecting.
    case system(String, Int32)

    public var description: String {
        switch self {
        case .invalidSignature(let s, let why): return "invalid D-Bus signature \"\(s)\": \(why)"
        case .malformed(let at, let why): return "malformed D-Bus message at octet \(at): \(why)"
        case .invalidValue(let why): return "invalid D-Bus value: \(why)"
        case .authenticationFailed(let why): return "D-Bus authentication failed: \(why)"
        case .remote(let name, let message): return message.isEmpty ? name : "\(name): \(message)"
        case .timedOut: return "no D-Bus reply in time"
        case .disconnected(let why): return "D-Bus connection closed: \(why)"
        case .badAddress(let a): return "unusable D-Bus address: \(a)"
        case .system(let call, let errno): return "\(call) failed: errno \(errno)"
        }
    }
}
