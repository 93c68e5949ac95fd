// Domain names as label sequences (RFC 1035 §3.1), compared case-insensitively (RFC 6762 §16).
//
// Labels are raw bytes: mDNS names are UTF-8 with any characters allowed, dots included (a DNS-SD instance
// name like "Bob's Mac.v2" is ONE label, RFC 6763 §4.3), so names are built from labels, not by splitting
// strings. Comparison folds ASCII A–Z only, as DNS does; other UTF-8 bytes compare exactly.

/// A domain name: a sequence of labels, each 1–63 bytes, together at most 255 bytes on the wire.
public struct DNSName: Hashable, Sendable, CustomStringConvertible, Comparable {
    /// The labels, most specific first, without the root.
    public private(set) var labels: [[UInt8]]

    /// Builds a name from labels; checks RFC 1035 §2.3.4 limits (label ≤ 63 bytes, name ≤ 255 bytes).
    public init(labels: [[UInt8]]) throws(DNSEncodingError) {
        var wire = 1
        for label in labels {
            if label.isEmpty { throw .emptyLabel }
            if label.count > 63 { throw .labelTooLong(String(decoding: label, as: UTF8.self)) }
            wire += label.count + 1
        }
        if wire > 255 { throw .nameTooLong(labels.map { String(decoding: $0, as: UTF8.self) }.joined(separator: ".")) }
        self.labels = labels
    }

    /// Builds a name from string labels, e.g. `["My Printer", "_ipp", "_tcp", "local"]`.
    public init(labelStrings: [String]) throws(DNSEncodingError) {
        try self.init(labels: labelStrings.map { Array($0.utf8) })
    }

    /// Parses dotted text such as `"_foo._tcp.local."`; `\.` and `\\` escape a dot or backslash inside a label.
    public init(_ text: String) throws(DNSEncodingError) {
        var labels: [[UInt8]] = []
        var current: [UInt8] = []
        var escaped = false
        for byte in text.utf8 {
            if escaped { current.append(byte); escaped = false; continue }
            if byte == UInt8(ascii: "\\") { escaped = true; continue }
            if byte == UInt8(ascii: ".") {
                if current.isEmpty { throw .emptyLabel }
                labels.append(current); current = []
                continue
            }
            current.append(byte)
        }
        if !current.isEmpty { labels.append(current) }
        try self.init(labels: labels)
    }

    /// Internal: labels already validated by the decoder.
    init(uncheckedLabels: [[UInt8]]) { self.labels = uncheckedLabels }

    /// The root name.
    public static let root = DNSName(uncheckedLabels: [])

    /// Dotted text with a trailing dot; dots and backslashes inside labels are escaped.
    public var description: String {
        if labels.isEmpty { return "." }
        var out = ""
        for label in labels {
            out += DNSName.escape(label)
            out += "."
        }
        return out
    }

    static func escape(_ label: [UInt8]) -> String {
        var bytes: [UInt8] = []
        for b in label {
            if b == UInt8(ascii: ".") || b == UInt8(ascii: "\\") { bytes.append(UInt8(ascii: "\\")) }
            bytes.append(b)
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The first label as text (a DNS-SD instance name).
    public var firstLabel: String { labels.first.map { String(decoding: $0, as: UTF8.self) } ?? "" }

    /// The name without its first label.
    public var parent: DNSName { DNSName(uncheckedLabels: Array(labels.dropFirst())) }

    /// `label` prepended to this name.
    public func prepending(_ label: String) throws(DNSEncodingError) -> DNSName {
        try DNSName(labels: [Array(label.utf8)] + labels)
    }

    /// Bytes this name takes uncompressed on the wire.
    public var wireLength: Int { labels.reduce(1) { $0 + $1.count + 1 } }

    /// ASCII-lowercased labels: the key for equality, hashing and compression.
    public var canonicalLabels: [[UInt8]] { labels.map(DNSName.fold) }

    static func fold(_ label: [UInt8]) -> [UInt8] {
        label.map { ($0 >= 0x41 && $0 <= 0x5A) ? $0 | 0x20 : $0 }
    }

    public static func == (a: DNSName, b: DNSName) -> Bool {
        guard a.labels.count == b.labels.count else { return false }
        for (x, y) in zip(a.labels, b.labels) where x.count != y.count || fold(x) != fold(y) { return false }
        return true
    }

    public func hash(into hasher: inout Hasher) {
        for label in labels { hasher.combine(DNSName.fold(label)) }
    }

    /// Canonical order (RFC 4034 §6.1 is by reversed labels; mDNS only needs a total order, so we compare
    /// the lowercased wire form, which is what §8.2's tie-break compares for names inside RDATA).
    public static func < (a: DNSName, b: DNSName) -> Bool {
        a.canonicalWire.lexicographicallyPrecedes(b.canonicalWire)
    }

    /// Uncompressed, lowercased wire form.
    public var canonicalWire: [UInt8] {
        var out: [UInt8] = []
        for label in canonicalLabels { out.append(UInt8(label.count)); out += label }
        out.append(0)
        return out
    }

    /// True when this name ends with `suffix` (case-insensitively).
    public func hasSuffix(_ suffix: DNSName) -> Bool {
        guard suffix.labels.count <= labels.count else { return false }
        return DNSName(uncheckedLabels: Array(labels.suffix(suffix.labels.count))) == suffix
    }
}
