// Little-endian reading of Bluetooth PDUs.
//
// Every multi-octet field in the Bluetooth Core Specification is little-endian (Vol 3 Part F §3.2.9,
// Vol 4 Part E §5.2), so the plain `read` methods here are little-endian. A reader never traps on short
// input: it throws `WireError.truncated`, which complete-message decoders map to the spec's answer.

/// An error raised while decoding bytes.
public enum WireError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The input ended before a field was complete.
    case truncated(needed: Int, available: Int)
    /// A field held a value the format does not allow.
    case invalidValue(String)
    /// Bytes were left over after a message that has a fixed length.
    case trailingBytes(Int)

    public var description: String {
        switch self {
        case let .truncated(needed, available): return "truncated: needed \(needed) byte(s), \(available) available"
        case let .invalidValue(what): return "invalid value: \(what)"
        case let .trailingBytes(n): return "\(n) unexpected trailing byte(s)"
        }
    }
}

/// A cursor over a byte buffer that reads little-endian fields.
public struct ByteReader: Sendable {
    public let bytes: ArraySlice<UInt8>
    public var index: Int

    public init(_ bytes: [UInt8]) {
        self.bytes = bytes[...]
        self.index = self.bytes.startIndex
    }

    public init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        self.index = bytes.startIndex
    }

    /// Number of bytes not yet read.
    @inlinable public var remaining: Int { bytes.endIndex - index }
    @inlinable public var isAtEnd: Bool { index >= bytes.endIndex }
    /// Offset of the cursor from the start of the buffer.
    public var offset: Int { index - bytes.startIndex }

    @usableFromInline mutating func need(_ n: Int) throws {
        if remaining < n { throw WireError.truncated(needed: n, available: remaining) }
    }

    public mutating func readUInt8() throws -> UInt8 {
        try need(1)
        defer { index += 1 }
        return bytes[index]
    }

    public mutating func readUInt16() throws -> UInt16 {
        try need(2)
        defer { index += 2 }
        return UInt16(bytes[index]) | UInt16(bytes[index + 1]) << 8
    }

    public mutating func readUInt24() throws -> UInt32 {
        try need(3)
        defer { index += 3 }
        return UInt32(bytes[index]) | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2]) << 16
    }

    public mutating func readUInt32() throws -> UInt32 {
        try need(4)
        var v: UInt32 = 0
        for i in 0..<4 { v |= UInt32(bytes[index + i]) << (8 * i) }
        index += 4
        return v
    }

    public mutating func readUInt64() throws -> UInt64 {
        try need(8)
        var v: UInt64 = 0
        for i in 0..<8 { v |= UInt64(bytes[index + i]) << (8 * i) }
        index += 8
        return v
    }

    public mutating func readInt8() throws -> Int8 { Int8(bitPattern: try readUInt8()) }

    /// Reads `count` bytes as an array.
    public mutating func readBytes(_ count: Int) throws -> [UInt8] {
        precondition(count >= 0, "negative byte count")
        try need(count)
        defer { index += count }
        return Array(bytes[index..<index + count])
    }

    /// Reads `count` bytes without copying.
    public mutating func readSlice(_ count: Int) throws -> ArraySlice<UInt8> {
        precondition(count >= 0, "negative byte count")
        try need(count)
        defer { index += count }
        return bytes[index..<index + count]
    }

    /// Reads everything left.
    public mutating func readRemaining() -> [UInt8] {
        defer { index = bytes.endIndex }
        return Array(bytes[index...])
    }

    public mutating func skip(_ count: Int) throws {
        try need(count)
        index += count
    }

    /// Throws if bytes remain; for messages of fixed length.
    public func expectEnd() throws {
        if remaining != 0 { throw WireError.trailingBytes(remaining) }
    }
}
