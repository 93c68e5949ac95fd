// Validation of Bonjour service types ("foo" in "_foo._tcp").
//
// RFC 6335 §5.1 (service names): 1–15 characters, ASCII letters, digits and hyphens only, at least one
// letter, no hyphen at the start or end, no two hyphens in a row. Multipeer Connectivity applies the same
// rules to its `serviceType` (conformance/multipeer.md §1.3). Apple documents lowercase only, but its runtime
// seems to accept uppercase (DNS labels are case-insensitive); callers choose with `allowUppercase`.

/// Checks Bonjour service types such as `"chat-1"` (without the leading underscore and protocol).
public enum BonjourServiceType {
    /// Why a service type was refused.
    public enum ValidationError: Error, Equatable, Sendable, CustomStringConvertible {
        case empty
        case tooLong(length: Int)
        case invalidCharacter(Character)
        case noLetter
        case leadingHyphen
        case trailingHyphen
        case doubleHyphen

        public var description: String {
            switch self {
            case .empty: return "service type is empty"
            case .tooLong(let length): return "service type has \(length) characters; at most 15 are allowed"
            case .invalidCharacter(let c): return "service type contains '\(c)'; only ASCII letters, digits and '-' are allowed"
            case .noLetter: return "service type needs at least one letter"
            case .leadingHyphen: return "service type may not start with '-'"
            case .trailingHyphen: return "service type may not end with '-'"
            case .doubleHyphen: return "service type may not contain '--'"
            }
        }
    }

    /// Throws the first rule `type` breaks (RFC 6335 §5.1). `type` is the bare name, e.g. `"chat"`.
    public static func validate(_ type: String, allowUppercase: Bool = true) throws(ValidationError) {
        let scalars = Array(type.unicodeScalars)
        if scalars.isEmpty { throw .empty }
        var letters = 0
        var previousHyphen = false
        for s in scalars {
            let v = s.value
            let lower = v >= 0x61 && v <= 0x7A
            let upper = v >= 0x41 && v <= 0x5A
            let digit = v >= 0x30 && v <= 0x39
            let hyphen = v == 0x2D
            guard lower || (upper && allowUppercase) || digit || hyphen else {
                throw .invalidCharacter(Character(s))
            }
            if lower || upper { letters += 1 }
            if hyphen && previousHyphen { throw .doubleHyphen }
            previousHyphen = hyphen
        }
        if scalars.count > 15 { throw .tooLong(length: scalars.count) }
        if scalars.first == "-" { throw .leadingHyphen }
        if scalars.last == "-" { throw .trailingHyphen }
        if letters == 0 { throw .noLetter }
    }

    /// True when `validate` would accept `type`.
    public static func isValid(_ type: String, allowUppercase: Bool = true) -> Bool {
        do { try validate(type, allowUppercase: allowUppercase); return true } catch { return false }
    }
}
