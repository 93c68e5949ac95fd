// Little-endian writing of Bluetooth PDUs.

/// An append-only little-endian byte buffer.
public struct ByteWriter: Sendable {
    public var bytes: [UInt8]

    public init(capacity: Int = 32) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    public var count: Int { bytes.count }

    @inlinable public mutating func write(_ v: UInt8) { bytes.append(v) }

    public mutating func write(_ v: UInt16) {
        bytes.append(UInt8(truncatingIfNeeded: v))
        bytes.append(UInt8(truncatingIfNeeded: v >> 8))
    }

    public mutating func writeUInt24(_ v: UInt32) {
        for i in 0..<3 { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * UInt32(i)))) }
    }

    public mutating func write(_ v: UInt32) {
        for i in 0..<4 { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * UInt32(i)))) }
    }

    public mutating func write(_ v: UInt64) {
        for i in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * UInt64(i)))) }
    }

    public mutating func write(_ v: Int8) { bytes.append(UInt8(bitPattern: v)) }

    public mutating func write<C: Collection>(contentsOf c: C) where C.Element == UInt8 {
        bytes.append(contentsOf: c)
    }

    /// Overwrites a 16-bit little-endian value at `offset` (for length fields written after the body).
    public mutating func patchUInt16(_ v: UInt16, at offset: Int) {
        bytes[offset] = UInt8(truncatingIfNeeded: v)
        bytes[offset + 1] = UInt8(truncatingIfNeeded: v >> 8)
    }
}

extension Array where Element == UInt8 {
    /// Lower-case hex, no separators: `[0x0a, 0xff]` → `"0aff"`.
    public var hexString: String {
        var s = ""
        s.reserveCapacity(count * 2)
        for b in self {
            s.append(hexDigits[Int(b >> 4)])
            s.append(hexDigits[Int(b & 0xF)])
        }
        return s
    }

    /// Parses hex, ignoring spaces, colons and dashes. Returns nil on any other character or an odd digit count.
    public init?(hexString: String) {
        var out: [UInt8] = []
        var high: UInt8?
        for ch in hexString.unicodeScalars {
            if ch == " " || ch == ":" || ch == "-" { continue }
            guard let v = hexValue(ch) else { return nil }
            if let h = high { out.append(h << 4 | v); high = nil } else { high = v }
        }
        if high != nil { return nil }
        self = out
    }
}

extension ArraySlice where Element == UInt8 {
    public var hexString: String { Array(self).hexString }
}

private let hexDigits: [Character] = Array("0123456789abcdef")

private func hexValue(_ c: Unicode.Scalar) -> UInt8? {
    switch c.value {
    case 0x30...0x39: return UInt8(c.value - 0x30)
    case 0x41...0x46: return UInt8(c.value - 0x41 + 10)
    case 0x61...0x66: return UInt8(c.value - 0x61 + 10)
    default: return nil
    }
}
