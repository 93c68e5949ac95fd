// The D-Bus marshalling format (D-Bus Specification, "Marshaling (Wire Format)").
//
// Every value is aligned to its type's alignment, counted from the start of the message (a body starts on an
// 8-octet boundary, so offsets inside the body align the same). Padding octets are zero. Strings and object
// paths are a UINT32 length, the UTF-8 octets and a NUL; signatures a BYTE length, the octets and a NUL. An
// array is a UINT32 length in octets (at most 2^26), padding to its element's alignment (not counted in the
// length), then the elements. A variant is a signature of one complete type followed by the value.
// We write little-endian; we read either order, as the message's first octet says.

/// Marshals values into octets. `base` is the offset of the first octet within its message, for alignment.
public struct DBusEncoder {
    public internal(set) var octets: [UInt8] = []
    let base: Int
    /// Indexes of file descriptors already referenced, for validation.
    public init(base: Int = 0, reserve: Int = 0) {
        self.base = base
        octets.reserveCapacity(reserve)
    }

    mutating func pad(to alignment: Int) {
        let misalign = (base + octets.count) % alignment
        if misalign != 0 { octets.append(contentsOf: repeatElement(0, count: alignment - misalign)) }
    }

    mutating func put<T: FixedWidthInteger>(_ value: T) {
        pad(to: MemoryLayout<T>.size)
        withUnsafeBytes(of: value.littleEndian) { octets.append(contentsOf: $0) }
    }

    public mutating func encode(_ value: DBusValue) throws(DBusError) {
        try encode(value, depth: 0)
    }

    mutating func encode(_ value: DBusValue, depth: Int) throws(DBusError) {
        guard depth <= 64 else { throw .invalidValue("nested deeper than 64") }
        switch value {
        case .byte(let v): octets.append(v)
        case .boolean(let v): put(UInt32(v ? 1 : 0))
        case .int16(let v): put(v)
        case .uint16(let v): put(v)
        case .int32(let v): put(v)
        case .uint32(let v): put(v)
        case .int64(let v): put(v)
        case .uint64(let v): put(v)
        case .double(let v): put(v.bitPattern)
        case .unixFD(let v): put(v)
        case .string(let s):
            try putString(s)
        case .objectPath(let s):
            guard isValidObjectPath(s) else { throw .invalidValue("object path \"\(s)\"") }
            try putString(s)
        case .signature(let s):
            _ = try DBusType.parse(s)
            putSignature(s)
        case .variant(let inner):
            putSignature(inner.type.signature)
            try encode(inner, depth: depth + 1)
        case .bytes(let b):
            guard b.count <= DBusLimits.maxArrayLength else { throw .invalidValue("array over 64 MiB") }
            put(UInt32(b.count))
            octets.append(contentsOf: b)
        case .array(let elementType, let items):
            try putArray(alignment: elementType.alignment) { (e: inout DBusEncoder) throws(DBusError) in
                for item in items {
                    guard item.type == elementType else {
                        throw .invalidValue("array of \(elementType) holds a \(item.type)")
                    }
                    try e.encode(item, depth: depth + 1)
                }
            }
        case .dictionary(let keyType, let valueType, let entries):
            guard keyType.isBasic else { throw .invalidValue("dictionary key of type \(keyType)") }
            try putArray(alignment: 8) { (e: inout DBusEncoder) throws(DBusError) in
                for entry in entries {
                    guard entry.key.type == keyType, entry.value.type == valueType else {
                        throw .invalidValue("dictionary of {\(keyType)\(valueType)} holds {\(entry.key.type)\(entry.value.type)}")
                    }
                    e.pad(to: 8)
                    try e.encode(entry.key, depth: depth + 1)
                    try e.encode(entry.value, depth: depth + 1)
                }
            }
        case .structure(let members):
            guard !members.isEmpty else { throw .invalidValue("empty struct") }
            pad(to: 8)
            for m in members { try encode(m, depth: depth + 1) }
        }
    }

    mutating func putString(_ s: String) throws(DBusError) {
        let utf8 = s.utf8
        guard !utf8.contains(0) else { throw .invalidValue("string with a NUL octet") }
        put(UInt32(utf8.count))
        octets.append(contentsOf: utf8)
        octets.append(0)
    }

    mutating func putSignature(_ s: String) {
        octets.append(UInt8(s.utf8.count))
        octets.append(contentsOf: s.utf8)
        octets.append(0)
    }

    mutating func putArray(alignment: Int, _ body: (inout DBusEncoder) throws(DBusError) -> Void) throws(DBusError) {
        put(UInt32(0))
        let lengthAt = octets.count - 4
        pad(to: alignment)
        let start = octets.count
        try body(&self)
        let length = octets.count - start
        guard length <= DBusLimits.maxArrayLength else { throw .invalidValue("array over 64 MiB") }
        withUnsafeBytes(of: UInt32(length).littleEndian) { raw in
            for i in 0..<4 { octets[lengthAt + i] = raw[i] }
        }
    }
}

public enum DBusLimits {
    /// Spec: an array's length is at most 2^26 octets.
    public static let maxArrayLength = 1 << 26
    /// Spec: a whole message is at most 2^27 octets.
    public static let maxMessageLength = 1 << 27
    /// Spec: arrays and structs each nest at most 32 deep; all containers together, variants included, 64.
    public static let maxDepth = 64
}

/// Reads values from octets in either byte order, checking what the spec requires of each.
public struct DBusDecoder {
    let octets: [UInt8]
    public private(set) var position: Int
    let end: Int
    let bigEndian: Bool
    /// `octets[0]` is the message's first octet (alignment is counted from it).
    public init(octets: [UInt8], from position: Int, to end: Int, bigEndian: Bool) {
        self.octets = octets
        self.position = position
        self.end = end
        self.bigEndian = bigEndian
    }

    public var atEnd: Bool { position >= end }

    mutating func skipPadding(to alignment: Int) throws(DBusError) {
        let misalign = position % alignment
        guard misalign != 0 else { return }
        let target = position + alignment - misalign
        guard target <= end else { throw .malformed(position, "padding runs past the end") }
        for i in position..<target where octets[i] != 0 {
            throw .malformed(i, "non-zero padding")
        }
        position = target
    }

    mutating func get<T: FixedWidthInteger>(_: T.Type) throws(DBusError) -> T {
        let size = MemoryLayout<T>.size
        try skipPadding(to: size)
        guard position + size <= end else { throw .malformed(position, "a \(size)-octet value runs past the end") }
        var raw: T = 0
        withUnsafeMutableBytes(of: &raw) { dst in
            for i in 0..<size { dst[i] = octets[position + i] }
        }
        position += size
        return bigEndian ? T(bigEndian: raw) : T(littleEndian: raw)
    }

    public mutating func decode(_ type: DBusType) throws(DBusError) -> DBusValue {
        try decode(type, depth: 0)
    }

    mutating func decode(_ type: DBusType, depth: Int) throws(DBusError) -> DBusValue {
        guard depth <= DBusLimits.maxDepth else { throw .malformed(position, "nested deeper than 64") }
        switch type {
        case .byte:
            guard position < end else { throw .malformed(position, "a byte runs past the end") }
            defer { position += 1 }
            return .byte(octets[position])
        case .boolean:
            let at = position
            switch try get(UInt32.self) {
            case 0: return .boolean(false)
            case 1: return .boolean(true)
            case let v: throw .malformed(at, "boolean \(v)")
            }
        case .int16: return .int16(try get(Int16.self))
        case .uint16: return .uint16(try get(UInt16.self))
        case .int32: return .int32(try get(Int32.self))
        case .uint32: return .uint32(try get(UInt32.self))
        case .int64: return .int64(try get(Int64.self))
        case .uint64: return .uint64(try get(UInt64.self))
        case .double: return .double(Double(bitPattern: try get(UInt64.self)))
        case .unixFD: return .unixFD(try get(UInt32.self))
        case .string: return .string(try getString())
        case .objectPath:
            let at = position
            let s = try getString()
            guard isValidObjectPath(s) else { throw .malformed(at, "invalid object path \"\(s)\"") }
            return .objectPath(s)
        case .signature:
            let at = position
            let s = try getSignature()
            do { _ = try DBusType.parse(s) } catch { throw .malformed(at, "\(error)") }
            return .signature(s)
        case .variant:
            let at = position
            let s = try getSignature()
            let inner: DBusType
            do { inner = try DBusType.parseSingle(s) } catch { throw .malformed(at, "variant: \(error)") }
            return .variant(try decode(inner, depth: depth + 1))
        case .array(.byte):
            let length = try arrayLength()
            defer { position += length }
            return .bytes(Array(octets[position..<position + length]))
        case .array(let element):
            let length = try arrayLength()
            try skipPadding(to: element.alignment)
            let stop = position + length
            guard stop <= end else { throw .malformed(position, "array runs past the end") }
            var items: [DBusValue] = []
            while position < stop {
                items.append(try decode(element, depth: depth + 1))
                guard position <= stop else { throw .malformed(position, "array element runs past the array") }
            }
            return .array(element, items)
        case .dictionary(let keyType, let valueType):
            let length = try arrayLength()
            try skipPadding(to: 8)
            let stop = position + length
            guard stop <= end else { throw .malformed(position, "array runs past the end") }
            var entries: [DBusDictEntry] = []
            while position < stop {
                try skipPadding(to: 8)
                let key = try decode(keyType, depth: depth + 1)
                let value = try decode(valueType, depth: depth + 1)
                guard position <= stop else { throw .malformed(position, "dictionary entry runs past the array") }
                entries.append(DBusDictEntry(key, value))
            }
            return .dictionary(key: keyType, value: valueType, entries)
        case .structure(let members):
            try skipPadding(to: 8)
            var values: [DBusValue] = []
            values.reserveCapacity(members.count)
            for m in members { values.append(try decode(m, depth: depth + 1)) }
            return .structure(values)
        }
    }

    /// An array's length, checked against the limit and what is left.
    mutating func arrayLength() throws(DBusError) -> Int {
        let at = position
        let length = Int(try get(UInt32.self))
        guard length <= DBusLimits.maxArrayLength else { throw .malformed(at, "array of \(length) octets") }
        guard position + length <= end else { throw .malformed(at, "array of \(length) octets runs past the end") }
        return length
    }

    mutating func getString() throws(DBusError) -> String {
        let at = position
        let length = Int(try get(UInt32.self))
        guard length < end - position else { throw .malformed(at, "string of \(length) octets runs past the end") }
        return try text(at: at, length: length)
    }

    mutating func getSignature() throws(DBusError) -> String {
        guard position < end else { throw .malformed(position, "signature runs past the end") }
        let at = position
        let length = Int(octets[position])
        position += 1
        guard length < end - position else { throw .malformed(at, "signature runs past the end") }
        return try text(at: at, length: length)
    }

    /// `length` octets of UTF-8 at `position` followed by a NUL, none inside.
    mutating func text(at: Int, length: Int) throws(DBusError) -> String {
        let slice = octets[position..<position + length]
        guard octets[position + length] == 0 else { throw .malformed(at, "string without its NUL") }
        guard !slice.contains(0) else { throw .malformed(at, "string with a NUL inside") }
        guard let s = String(validating: slice, as: UTF8.self) else { throw .malformed(at, "string not UTF-8") }
        position += length + 1
        return s
    }
}

/// Spec: "/" or "/" followed by elements of [A-Za-z0-9_], separated by single "/", no trailing "/".
public func isValidObjectPath(_ s: String) -> Bool {
    let o = Array(s.utf8)
    guard o.first == UInt8(ascii: "/") else { return false }
    if o.count == 1 { return true }
    guard o.last != UInt8(ascii: "/") else { return false }
    var previousSlash = false
    for c in o {
        if c == UInt8(ascii: "/") {
            if previousSlash { return false }
            previousSlash = true
        } else {
            previousSlash = false
            guard isNameOctet(c) else { return false }
        }
    }
    return true
}

func isNameOctet(_ c: UInt8) -> Bool {
    (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || (c >= 0x30 && c <= 0x39) || c == UInt8(ascii: "_")
}
