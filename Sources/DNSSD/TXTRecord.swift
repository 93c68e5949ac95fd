// DNS-SD TXT records (RFC 6763 §6).
//
// A TXT record is a list of character-strings of ≤ 255 bytes each. DNS-SD reads them as `key=value`
// (§6.3), `key` alone (boolean true, §6.4) or `key=` (empty value). Keys are printable ASCII without '=',
// compared case-insensitively; the first occurrence of a key wins (§6.4). An empty TXT record is sent as
// one zero-length string (§6.1).

/// One TXT record's strings, with dictionary views.
public struct TXTRecord: Hashable, Sendable {
    /// The raw character-strings, each ≤ 255 bytes.
    public private(set) var strings: [[UInt8]]

    /// From raw strings; an empty list means the empty record.
    public init(strings: [[UInt8]]) throws(DNSEncodingError) {
        for s in strings where s.count > 255 { throw .txtStringTooLong(length: s.count) }
        self.strings = strings.filter { !$0.isEmpty }
    }

    /// From a dictionary, sorted by key for a stable wire form. Each `key=value` must fit 255 bytes.
    public init(_ dictionary: [String: String]) throws(DNSEncodingError) {
        var strings: [[UInt8]] = []
        for key in dictionary.keys.sorted() {
            let s = Array(key.utf8) + [UInt8(ascii: "=")] + Array(dictionary[key]!.utf8)
            if s.count > 255 { throw .txtStringTooLong(length: s.count) }
            strings.append(s)
        }
        self.strings = strings
    }

    /// Whether `key` is acceptable: 1+ bytes of printable ASCII (0x20–0x7E) without '=' (RFC 6763 §6.4).
    public static func isValidKey(_ key: String) -> Bool {
        !key.isEmpty && key.utf8.allSatisfy { $0 >= 0x20 && $0 <= 0x7E && $0 != UInt8(ascii: "=") }
    }

    /// The record data: never empty on the wire (RFC 6763 §6.1).
    public var rdata: RData { .txt(strings.isEmpty ? [[]] : strings) }

    /// Parses RDATA strings (zero-length strings are skipped).
    public init(rdataStrings: [[UInt8]]) {
        self.strings = rdataStrings.filter { !$0.isEmpty }
    }

    /// Entries in order: key, and value (`nil` for a key without '=').
    public var entries: [(key: String, value: [UInt8]?)] {
        strings.compactMap { s in
            if let eq = s.firstIndex(of: UInt8(ascii: "=")) {
                if eq == 0 { return nil }   // §6.4: a string starting with '=' has no key; ignore it
                return (String(decoding: s[..<eq], as: UTF8.self), Array(s[(eq + 1)...]))
            }
            return (String(decoding: s, as: UTF8.self), nil)
        }
    }

    /// Key → value; a key without value maps to "". First occurrence wins, keys compared case-insensitively;
    /// the key keeps the case of its first occurrence.
    public var dictionary: [String: String] {
        var seen = Set<String>()
        var out: [String: String] = [:]
        for (key, value) in entries where seen.insert(key.lowercased()).inserted {
            out[key] = value.map { String(decoding: $0, as: UTF8.self) } ?? ""
        }
        return out
    }

    /// The value of `key` looked up case-insensitively: `.some(nil)` for a present key without value.
    public func value(forKey key: String) -> [UInt8]?? {
        let wanted = key.lowercased()
        for (k, v) in entries where k.lowercased() == wanted { return .some(v) }
        return .none
    }
}
