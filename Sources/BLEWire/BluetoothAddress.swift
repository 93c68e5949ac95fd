// Bluetooth device addresses (Vol 6 Part B §1.3).

/// The kind of a device address as HCI reports it (Vol 4 Part E §7.7.65.1, Peer_Address_Type).
public enum AddressType: UInt8, Sendable, Hashable, CustomStringConvertible {
    case `public` = 0x00
    case random = 0x01
    case publicIdentity = 0x02
    case randomIdentity = 0x03

    public var description: String {
        switch self {
        case .public: return "public"
        case .random: return "random"
        case .publicIdentity: return "public-identity"
        case .randomIdentity: return "random-identity"
        }
    }

    /// True for random and random-identity addresses (the TxAdd/RxAdd bit on air).
    public var isRandom: Bool { self == .random || self == .randomIdentity }
}

/// A 48-bit device address and its type. `bytes` are little-endian as on the wire: `bytes[5]` is the
/// most significant byte, printed first.
public struct BluetoothAddress: Hashable, Sendable, CustomStringConvertible {
    public var bytes: [UInt8]
    public var type: AddressType

    public init(bytes: [UInt8], type: AddressType = .public) {
        precondition(bytes.count == 6, "a device address has 6 bytes")
        self.bytes = bytes
        self.type = type
    }

    /// Parses "AA:BB:CC:DD:EE:FF" (most significant byte first), optionally followed by "/P" or "/R".
    public init?(string: String, type: AddressType = .public) {
        var text = Substring(string)
        var t = type
        if text.hasSuffix("/P") { t = .public; text = text.dropLast(2) } else if text.hasSuffix("/R") { t = .random; text = text.dropLast(2) }
        let parts = text.split(separator: ":")
        guard parts.count == 6 else { return nil }
        var be: [UInt8] = []
        for p in parts {
            guard p.count == 2, let v = UInt8(p, radix: 16) else { return nil }
            be.append(v)
        }
        self.init(bytes: be.reversed(), type: t)
    }

    public static let zero = BluetoothAddress(bytes: [0, 0, 0, 0, 0, 0])

    /// "AA:BB:CC:DD:EE:FF", most significant byte first.
    public var string: String {
        bytes.reversed().map { b in
            let s = String(b, radix: 16, uppercase: true)
            return b < 16 ? "0" + s : s
        }.joined(separator: ":")
    }

    public var description: String { string + (type.isRandom ? "/R" : "/P") }

    /// Random address sub-type from the two most significant bits (Vol 6 Part B §1.3.2).
    public enum RandomKind: Sendable { case staticAddress, resolvablePrivate, nonResolvablePrivate, reserved }

    public var randomKind: RandomKind? {
        guard type.isRandom else { return nil }
        switch bytes[5] >> 6 {
        case 0b11: return .staticAddress
        case 0b01: return .resolvablePrivate
        case 0b00: return .nonResolvablePrivate
        default: return .reserved
        }
    }

    /// The address as a 48-bit integer.
    public var value: UInt64 {
        var v: UInt64 = 0
        for (i, b) in bytes.enumerated() { v |= UInt64(b) << (8 * UInt64(i)) }
        return v
    }
}

extension ByteReader {
    /// Reads a 6-byte address (the type is given separately in HCI and SMP).
    public mutating func readAddress(type: AddressType = .public) throws -> BluetoothAddress {
        BluetoothAddress(bytes: try readBytes(6), type: type)
    }
}

extension ByteWriter {
    public mutating func write(_ address: BluetoothAddress) {
        write(contentsOf: address.bytes)
    }
}
