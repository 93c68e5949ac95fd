// D-Bus values: what a message body holds.

/// One entry of a `a{kv}` dictionary.
public struct DBusDictEntry: Hashable, Sendable {
    public var key: DBusValue
    public var value: DBusValue
    public init(_ key: DBusValue, _ value: DBusValue) {
        self.key = key
        self.value = value
    }
}

/// A D-Bus value with its type.
///
/// An array of bytes (`ay`, the form of every GATT value in BlueZ) decodes as `.bytes`, never as `.array(.byte, …)`;
/// both encode the same.
public indirect enum DBusValue: Hashable, Sendable, CustomStringConvertible {
    case byte(UInt8)
    case boolean(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(String)
    case signature(String)
    /// An index into the message's passed file descriptors.
    case unixFD(UInt32)
    case variant(DBusValue)
    case bytes([UInt8])
    case array(DBusType, [DBusValue])
    case dictionary(key: DBusType, value: DBusType, [DBusDictEntry])
    case structure([DBusValue])

    /// The value's complete type.
    public var type: DBusType {
        switch self {
        case .byte: return .byte
        case .boolean: return .boolean
        case .int16: return .int16
        case .uint16: return .uint16
        case .int32: return .int32
        case .uint32: return .uint32
        case .int64: return .int64
        case .uint64: return .uint64
        case .double: return .double
        case .string: return .string
        case .objectPath: return .objectPath
        case .signature: return .signature
        case .unixFD: return .unixFD
        case .variant: return .variant
        case .bytes: return .array(.byte)
        case .array(let e, _): return .array(e)
        case .dictionary(let k, let v, _): return .dictionary(key: k, value: v)
        case .structure(let m): return .structure(m.map(\.type))
        }
    }

    public var description: String {
        switch self {
        case .byte(let v): return "byte \(v)"
        case .boolean(let v): return "\(v)"
        case .int16(let v): return "int16 \(v)"
        case .uint16(let v): return "uint16 \(v)"
        case .int32(let v): return "int32 \(v)"
        case .uint32(let v): return "uint32 \(v)"
        case .int64(let v): return "int64 \(v)"
        case .uint64(let v): return "uint64 \(v)"
        case .double(let v): return "double \(v)"
        case .string(let v): return "\"\(v)\""
        case .objectPath(let v): return "path \(v)"
        case .signature(let v): return "signature \(v)"
        case .unixFD(let v): return "fd #\(v)"
        case .variant(let v): return "<\(v)>"
        case .bytes(let v): return "[" + v.map { String($0, radix: 16) }.joined(separator: " ") + "]"
        case .array(_, let v): return "[" + v.map(\.description).joined(separator: ", ") + "]"
        case .dictionary(_, _, let v): return "{" + v.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + "}"
        case .structure(let v): return "(" + v.map(\.description).joined(separator: ", ") + ")"
        }
    }

    // Reading values back, loosely (nil when the value is of another type).
    public var string: String? {
        switch self {
        case .string(let s), .objectPath(let s), .signature(let s): return s
        case .variant(let v): return v.string
        default: return nil
        }
    }
    public var bool: Bool? {
        if case .boolean(let b) = self { return b }
        if case .variant(let v) = self { return v.bool }
        return nil
    }
    /// Any integer type, widened.
    public var integer: Int64? {
        switch self {
        case .byte(let v): return Int64(v)
        case .int16(let v): return Int64(v)
        case .uint16(let v): return Int64(v)
        case .int32(let v): return Int64(v)
        case .uint32(let v): return Int64(v)
        case .int64(let v): return v
        case .uint64(let v): return v <= UInt64(Int64.max) ? Int64(v) : nil
        case .variant(let v): return v.integer
        default: return nil
        }
    }
    public var byteArray: [UInt8]? {
        switch self {
        case .bytes(let b): return b
        case .array(.byte, let items):
            var out: [UInt8] = []
            out.reserveCapacity(items.count)
            for case .byte(let b) in items { out.append(b) }
            return out.count == items.count ? out : nil
        case .variant(let v): return v.byteArray
        default: return nil
        }
    }
    public var arrayItems: [DBusValue]? {
        switch self {
        case .array(_, let items): return items
        case .bytes(let b): return b.map { .byte($0) }
        case .variant(let v): return v.arrayItems
        default: return nil
        }
    }
    /// A string-keyed dictionary (`a{sv}` and the like) as a Swift dictionary; later duplicates win.
    public var stringDictionary: [String: DBusValue]? {
        switch self {
        case .dictionary(_, _, let entries):
            var out: [String: DBusValue] = [:]
            for e in entries { if let k = e.key.string { out[k] = e.value } }
            return out
        case .variant(let v): return v.stringDictionary
        default: return nil
        }
    }
    /// The value inside any number of variants.
    public var unwrapped: DBusValue {
        if case .variant(let v) = self { return v.unwrapped }
        return self
    }

    /// `a{sv}` from a Swift dictionary, keys sorted so the octets are stable.
    public static func stringVariantDictionary(_ d: [String: DBusValue]) -> DBusValue {
        .dictionary(
            key: .string, value: .variant,
            d.keys.sorted().map { DBusDictEntry(.string($0), .variant(d[$0]!)) })
    }
}
