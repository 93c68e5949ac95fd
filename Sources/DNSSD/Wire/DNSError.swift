// Errors of the DNS message codec.
//
// Decoding (RFC 1035 §4) is a complete-message contract: a UDP datagram is either a whole DNS message or
// garbage, so every shortfall throws `.truncated` rather than asking for more bytes. The mDNS engine logs
// the error and drops the packet (RFC 6762 §18: malformed messages are silently ignored).

/// Why bytes could not be decoded as a DNS message.
public enum DNSDecodingError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The message ended at `offset` while `expected` was being read.
    case truncated(offset: Int, expected: String)
    /// A compression pointer at `offset` points at or after itself (RFC 1035 §4.1.4 allows only earlier
    /// positions; forward pointers and self-pointers are how loops are built).
    case badPointer(offset: Int, target: Int)
    /// More compression pointers than any valid name can need.
    case tooManyPointers(offset: Int)
    /// The label length byte at `offset` uses the reserved 0b01/0b10 prefixes (RFC 6891 §5).
    case badLabelType(offset: Int, byte: UInt8)
    /// A decoded name exceeds 255 bytes on the wire (RFC 1035 §3.1).
    case nameTooLong(offset: Int)
    /// An RDATA's length disagrees with its type's layout.
    case badRData(type: UInt16, offset: Int, reason: String)

    public var description: String {
        switch self {
        case .truncated(let offset, let expected): return "message truncated at byte \(offset) reading \(expected)"
        case .badPointer(let offset, let target): return "compression pointer at byte \(offset) points forward or to itself (\(target))"
        case .tooManyPointers(let offset): return "too many compression pointers in the name at byte \(offset)"
        case .badLabelType(let offset, let byte): return "reserved label type 0x\(String(byte, radix: 16)) at byte \(offset)"
        case .nameTooLong(let offset): return "name at byte \(offset) is longer than 255 bytes"
        case .badRData(let type, let offset, let reason): return "bad RDATA for type \(type) at byte \(offset): \(reason)"
        }
    }
}

/// Why a message or record could not be encoded (a caller's misuse).
public enum DNSEncodingError: Error, Equatable, Sendable, CustomStringConvertible {
    case labelTooLong(String)
    case emptyLabel
    case nameTooLong(String)
    case txtStringTooLong(length: Int)

    public var description: String {
        switch self {
        case .labelTooLong(let l): return "label '\(l)' is longer than 63 bytes"
        case .emptyLabel: return "empty label inside a name"
        case .nameTooLong(let n): return "name '\(n)' is longer than 255 bytes"
        case .txtStringTooLong(let length): return "TXT string of \(length) bytes; at most 255 allowed"
        }
    }
}
