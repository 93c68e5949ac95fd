// D-Bus type signatures (D-Bus Specification, "Type System" and "Valid Signatures").
//
// A signature is a string of single complete types: basic types (one character each), ARRAY `a` followed by
// one complete type, STRUCT `(...)` of one or more complete types, DICT_ENTRY `{kv}` (only directly inside an
// array, with a basic key), and VARIANT `v`. A signature is at most 255 octets; arrays and structs may each be
// nested at most 32 deep (64 in all, the spec's limits; a variant's content starts a new count).

/// One complete D-Bus type.
public indirect enum DBusType: Hashable, Sendable, CustomStringConvertible {
    case byte, boolean, int16, uint16, int32, uint32, int64, uint64, double
    case string, objectPath, signature, unixFD
    case variant
    case array(DBusType)
    /// `a{kv}`: an array of dictionary entries; `key` is a basic type.
    case dictionary(key: DBusType, value: DBusType)
    case structure([DBusType])

    /// The alignment of the type's marshalled form, in octets.
    public var alignment: Int {
        switch self {
        case .byte, .signature, .variant: return 1
        case .int16, .uint16: return 2
        case .boolean, .int32, .uint32, .string, .objectPath, .unixFD, .array, .dictionary: return 4
        case .int64, .uint64, .double, .structure: return 8
        }
    }

    /// Basic types: the ones allowed as dictionary keys.
    public var isBasic: Bool {
        switch self {
        case .variant, .array, .dictionary, .structure: return false
        default: return true
        }
    }

    /// The type's signature.
    public var signature: String {
        switch self {
        case .byte: return "y"
        case .boolean: return "b"
        case .int16: return "n"
        case .uint16: return "q"
        case .int32: return "i"
        case .uint32: return "u"
        case .int64: return "x"
        case .uint64: return "t"
        case .double: return "d"
        case .string: return "s"
        case .objectPath: return "o"
        case .signature: return "g"
        case .unixFD: return "h"
        case .variant: return "v"
        case .array(let e): return "a" + e.signature
        case .dictionary(let k, let v): return "a{" + k.signature + v.signature + "}"
        case .structure(let m): return "(" + m.map(\.signature).joined() + ")"
        }
    }

    public var description: String { signature }

    /// The complete types of a signature, in order.
    public static func parse(_ signature: String) throws(DBusError) -> [DBusType] {
        let octets = Array(signature.utf8)
        guard octets.count <= 255 else { throw .invalidSignature(signature, "longer than 255 octets") }
        var parser = SignatureParser(octets: octets, text: signature)
        var types: [DBusType] = []
        while parser.position < octets.count { types.append(try parser.complete(arrays: 0, structs: 0)) }
        return types
    }

    /// Exactly one complete type (a variant's signature, say).
    public static func parseSingle(_ signature: String) throws(DBusError) -> DBusType {
        let types = try parse(signature)
        guard types.count == 1 else { throw .invalidSignature(signature, "not a single complete type") }
        return types[0]
    }
}

/// Signature of a list of types.
public func dbusSignature(_ types: [DBusType]) -> String { types.map(\.signature).joined() }

private struct SignatureParser {
    let octets: [UInt8]
    let text: String
    var position = 0
    static let maxDepth = 32

    mutating func complete(arrays: Int, structs: Int) throws(DBusError) -> DBusType {
        guard position < octets.count else { throw .invalidSignature(text, "ends inside a type") }
        let c = octets[position]
        position += 1
        switch c {
        case UInt8(ascii: "y"): return .byte
        case UInt8(ascii: "b"): return .boolean
        case UInt8(ascii: "n"): return .int16
        case UInt8(ascii: "q"): return .uint16
        case UInt8(ascii: "i"): return .int32
        case UInt8(ascii: "u"): return .uint32
        case UInt8(ascii: "x"): return .int64
        case UInt8(ascii: "t"): return .uint64
        case UInt8(ascii: "d"): return .double
        case UInt8(ascii: "s"): return .string
        case UInt8(ascii: "o"): return .objectPath
        case UInt8(ascii: "g"): return .signature
        case UInt8(ascii: "h"): return .unixFD
        case UInt8(ascii: "v"): return .variant
        case UInt8(ascii: "a"):
            guard arrays < Self.maxDepth else { throw .invalidSignature(text, "arrays nested deeper than 32") }
            if position < octets.count, octets[position] == UInt8(ascii: "{") {
                position += 1
                let key = try complete(arrays: arrays + 1, structs: structs + 1)
                guard key.isBasic else { throw .invalidSignature(text, "a dictionary key must be a basic type") }
                guard position < octets.count, octets[position] != UInt8(ascii: "}") else {
                    throw .invalidSignature(text, "a dictionary entry needs a key and a value")
                }
                let value = try complete(arrays: arrays + 1, structs: structs + 1)
                guard position < octets.count, octets[position] == UInt8(ascii: "}") else {
                    throw .invalidSignature(text, "a dictionary entry has exactly two types")
                }
                position += 1
                return .dictionary(key: key, value: value)
            }
            return .array(try complete(arrays: arrays + 1, structs: structs))
        case UInt8(ascii: "("):
            guard structs < Self.maxDepth else { throw .invalidSignature(text, "structs nested deeper than 32") }
            var members: [DBusType] = []
            while true {
                guard position < octets.count else { throw .invalidSignature(text, "unclosed struct") }
                if octets[position] == UInt8(ascii: ")") { position += 1; break }
                members.append(try complete(arrays: arrays, structs: structs + 1))
            }
            guard !members.isEmpty else { throw .invalidSignature(text, "empty struct") }
            return .structure(members)
        case UInt8(ascii: "{"):
            throw .invalidSignature(text, "a dictionary entry outside an array")
        default:
            throw .invalidSignature(text, "unknown type code \(Unicode.Scalar(c))")
        }
    }
}
