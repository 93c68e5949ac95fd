// Bluetooth UUIDs in their three wire forms (Vol 3 Part B §2.5.1).
//
// 16- and 32-bit UUIDs are aliases of 128-bit UUIDs built on the Bluetooth Base UUID
// 00000000-0000-1000-8000-00805F9B34FB. Two UUIDs are equal when their 128-bit forms are equal,
// whatever form each was written in; the short form is kept so that PDUs are encoded in the form they
// were given (a GATT server advertises a 16-bit UUID as 2 bytes, never as 16).

/// A Bluetooth UUID: 16-, 32- or 128-bit.
public struct BluetoothUUID: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The 128-bit value, big-endian as written in text (byte 0 is the first hex pair).
    public let uuid128: [UInt8]
    /// How many bytes this UUID takes on the wire: 2, 4 or 16.
    public let wireSize: Int

    /// Bluetooth Base UUID, big-endian.
    public static let baseUUID: [UInt8] = [
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00,
        0x80, 0x00, 0x00, 0x80, 0x5F, 0x9B, 0x34, 0xFB,
    ]

    public init(_ short: UInt16) {
        var b = Self.baseUUID
        b[2] = UInt8(short >> 8)
        b[3] = UInt8(short & 0xFF)
        uuid128 = b
        wireSize = 2
    }

    public init(uint32 value: UInt32) {
        var b = Self.baseUUID
        b[0] = UInt8(value >> 24)
        b[1] = UInt8((value >> 16) & 0xFF)
        b[2] = UInt8((value >> 8) & 0xFF)
        b[3] = UInt8(value & 0xFF)
        uuid128 = b
        wireSize = 4
    }

    /// A 128-bit UUID from 16 big-endian bytes. If it is based on the Base UUID, it is still kept
    /// as a 128-bit UUID on the wire (use `shortened` to get the short alias).
    public init(bigEndianBytes bytes: [UInt8]) {
        precondition(bytes.count == 16, "a 128-bit UUID has 16 bytes")
        uuid128 = bytes
        wireSize = 16
    }

    /// Decodes a UUID from its little-endian wire form of 2, 4 or 16 bytes.
    public init<C: Collection>(littleEndianBytes bytes: C) throws where C.Element == UInt8 {
        let b = Array(bytes)
        switch b.count {
        case 2: self.init(UInt16(b[0]) | UInt16(b[1]) << 8)
        case 4: self.init(uint32: UInt32(b[0]) | UInt32(b[1]) << 8 | UInt32(b[2]) << 16 | UInt32(b[3]) << 24)
        case 16: self.init(bigEndianBytes: b.reversed())
        default: throw WireError.invalidValue("UUID of \(b.count) bytes (must be 2, 4 or 16)")
        }
    }

    /// Parses "180D", "0000180D", or "0000180D-0000-1000-8000-00805F9B34FB" (any case).
    public init?(string: String) {
        let hex = string.filter { $0 != "-" }
        guard let bytes = [UInt8](hexString: hex) else { return nil }
        switch bytes.count {
        case 2 where !string.contains("-"): self.init(UInt16(bytes[0]) << 8 | UInt16(bytes[1]))
        case 4 where !string.contains("-"):
            self.init(uint32: UInt32(bytes[0]) << 24 | UInt32(bytes[1]) << 16 | UInt32(bytes[2]) << 8 | UInt32(bytes[3]))
        case 16:
            // Only the canonical 8-4-4-4-12 layout (or no dashes at all) is accepted.
            if string.contains("-") {
                let parts = string.split(separator: "-", omittingEmptySubsequences: false).map(\.count)
                guard parts == [8, 4, 4, 4, 12] else { return nil }
            }
            self.init(bigEndianBytes: bytes)
        default: return nil
        }
    }

    /// True when the 128-bit value is built on the Bluetooth Base UUID.
    public var isBasedOnBaseUUID: Bool {
        uuid128[4...] == Self.baseUUID[4...]
    }

    /// The 16-bit alias, if this UUID has one.
    public var uuid16: UInt16? {
        guard isBasedOnBaseUUID, uuid128[0] == 0, uuid128[1] == 0 else { return nil }
        return UInt16(uuid128[2]) << 8 | UInt16(uuid128[3])
    }

    /// The 32-bit alias, if this UUID has one.
    public var uuid32: UInt32? {
        guard isBasedOnBaseUUID else { return nil }
        return UInt32(uuid128[0]) << 24 | UInt32(uuid128[1]) << 16 | UInt32(uuid128[2]) << 8 | UInt32(uuid128[3])
    }

    /// The shortest form: 16-bit if possible, then 32-bit, else 128-bit.
    public var shortened: BluetoothUUID {
        if let s = uuid16 { return BluetoothUUID(s) }
        if let s = uuid32 { return BluetoothUUID(uint32: s) }
        return BluetoothUUID(bigEndianBytes: uuid128)
    }

    /// The same UUID in its 128-bit wire form.
    public var expanded: BluetoothUUID { BluetoothUUID(bigEndianBytes: uuid128) }

    /// Little-endian wire bytes in this UUID's own form (2, 4 or 16 bytes).
    public var littleEndianBytes: [UInt8] {
        switch wireSize {
        case 2: return [uuid128[3], uuid128[2]]
        case 4: return [uuid128[3], uuid128[2], uuid128[1], uuid128[0]]
        default: return uuid128.reversed()
        }
    }

    /// Big-endian bytes of this UUID's own form (what CBUUID.data returns).
    public var bigEndianBytes: [UInt8] {
        switch wireSize {
        case 2: return Array(uuid128[2...3])
        case 4: return Array(uuid128[0...3])
        default: return uuid128
        }
    }

    /// "180D" for 16-bit, "0000180D" for 32-bit, the canonical upper-case form for 128-bit.
    public var uuidString: String {
        let hex = bigEndianBytes.hexString.uppercased()
        guard wireSize == 16 else { return hex }
        let c = Array(hex)
        return String(c[0..<8]) + "-" + String(c[8..<12]) + "-" + String(c[12..<16]) + "-"
            + String(c[16..<20]) + "-" + String(c[20..<32])
    }

    /// The canonical 128-bit string form, whatever the stored form.
    public var uuid128String: String { expanded.uuidString }

    public var description: String { uuidString }

    public static func == (a: BluetoothUUID, b: BluetoothUUID) -> Bool { a.uuid128 == b.uuid128 }
    public func hash(into h: inout Hasher) { h.combine(uuid128) }
    public static func < (a: BluetoothUUID, b: BluetoothUUID) -> Bool {
        a.uuid128.lexicographicallyPrecedes(b.uuid128)
    }
}

extension ByteReader {
    /// Reads a UUID of the given wire size (2, 4 or 16 bytes).
    public mutating func readUUID(size: Int) throws -> BluetoothUUID {
        try BluetoothUUID(littleEndianBytes: try readSlice(size))
    }
}

extension ByteWriter {
    public mutating func write(_ uuid: BluetoothUUID) {
        write(contentsOf: uuid.littleEndianBytes)
    }
}

extension BluetoothUUID {
    // Well-known 16-bit UUIDs used throughout the stack (Bluetooth Assigned Numbers §3.4–3.8).
    public static let gapService = BluetoothUUID(0x1800)
    public static let gattService = BluetoothUUID(0x1801)
    public static let primaryService = BluetoothUUID(0x2800)
    public static let secondaryService = BluetoothUUID(0x2801)
    public static let include = BluetoothUUID(0x2802)
    public static let characteristic = BluetoothUUID(0x2803)
    public static let characteristicExtendedProperties = BluetoothUUID(0x2900)
    public static let characteristicUserDescription = BluetoothUUID(0x2901)
    public static let clientCharacteristicConfiguration = BluetoothUUID(0x2902)
    public static let serverCharacteristicConfiguration = BluetoothUUID(0x2903)
    public static let characteristicPresentationFormat = BluetoothUUID(0x2904)
    public static let characteristicAggregateFormat = BluetoothUUID(0x2905)
    public static let deviceName = BluetoothUUID(0x2A00)
    public static let appearance = BluetoothUUID(0x2A01)
    public static let peripheralPreferredConnectionParameters = BluetoothUUID(0x2A04)
    public static let serviceChanged = BluetoothUUID(0x2A05)
    public static let centralAddressResolution = BluetoothUUID(0x2AA6)
    public static let clientSupportedFeatures = BluetoothUUID(0x2B29)
    public static let databaseHash = BluetoothUUID(0x2B2A)
    public static let serverSupportedFeatures = BluetoothUUID(0x2B3A)
}
