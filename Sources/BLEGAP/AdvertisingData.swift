// Advertising and scan response data (Core Spec Vol 3 Part C §11; Core Specification Supplement Part A §1):
// a sequence of AD structures, each a length octet, an AD type and data. A zero length octet ends the
// significant part.
import BLEWire

/// AD types (Bluetooth Assigned Numbers §2.3). Unknown values are kept.
public struct ADType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public init(_ v: UInt8) { rawValue = v }

    public static let flags = ADType(0x01)
    public static let incompleteList16 = ADType(0x02)
    public static let completeList16 = ADType(0x03)
    public static let incompleteList32 = ADType(0x04)
    public static let completeList32 = ADType(0x05)
    public static let incompleteList128 = ADType(0x06)
    public static let completeList128 = ADType(0x07)
    public static let shortenedLocalName = ADType(0x08)
    public static let completeLocalName = ADType(0x09)
    public static let txPowerLevel = ADType(0x0A)
    public static let peripheralConnectionIntervalRange = ADType(0x12)
    public static let solicited16 = ADType(0x14)
    public static let solicited128 = ADType(0x15)
    public static let serviceData16 = ADType(0x16)
    public static let publicTargetAddress = ADType(0x17)
    public static let randomTargetAddress = ADType(0x18)
    public static let appearance = ADType(0x19)
    public static let advertisingInterval = ADType(0x1A)
    public static let leRole = ADType(0x1C)
    public static let solicited32 = ADType(0x1F)
    public static let serviceData32 = ADType(0x20)
    public static let serviceData128 = ADType(0x21)
    public static let uri = ADType(0x24)
    public static let manufacturerSpecificData = ADType(0xFF)

    public var description: String { "AD type 0x" + String(rawValue, radix: 16) }

    /// The UUID width of a service list, solicitation list or service data type.
    var uuidWidth: Int? {
        switch rawValue {
        case 0x02, 0x03, 0x14, 0x16: return 2
        case 0x04, 0x05, 0x1F, 0x20: return 4
        case 0x06, 0x07, 0x15, 0x21: return 16
        default: return nil
        }
    }
}

/// Flags AD data (Supplement Part A §1.3).
public struct ADFlags: OptionSet, Sendable, Hashable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let leLimitedDiscoverable = ADFlags(rawValue: 0x01)
    public static let leGeneralDiscoverable = ADFlags(rawValue: 0x02)
    public static let brEdrNotSupported = ADFlags(rawValue: 0x04)
}

public struct ADStructure: Sendable, Equatable {
    public var type: ADType
    public var data: [UInt8]
    public init(type: ADType, data: [UInt8]) { self.type = type; self.data = data }
}

public enum AdvertisingDataError: Error, Equatable, Sendable {
    /// A structure's length runs past the end of the data.
    case truncatedStructure(offset: Int)
}

public struct ServiceDataEntry: Sendable, Equatable {
    public var uuid: BluetoothUUID
    public var data: [UInt8]
    public init(uuid: BluetoothUUID, data: [UInt8]) { self.uuid = uuid; self.data = data }
}

public struct AdvertisingData: Sendable, Equatable {
    public var structures: [ADStructure]

    public init(_ structures: [ADStructure] = []) { self.structures = structures }

    /// Strict decoding: a structure that runs past the end is an error.
    public init(decoding bytes: [UInt8]) throws {
        let (s, damage) = Self.parse(bytes)
        if let damage { throw AdvertisingDataError.truncatedStructure(offset: damage) }
        structures = s
    }

    /// Lenient decoding: keeps every complete structure before any damage (scanners must survive garbage).
    public init(lenient bytes: [UInt8]) {
        structures = Self.parse(bytes).0
    }

    private static func parse(_ bytes: [UInt8]) -> ([ADStructure], Int?) {
        var out: [ADStructure] = []
        var i = 0
        while i < bytes.count {
            let len = Int(bytes[i])
            if len == 0 { break }   // the rest is non-significant padding
            guard i + 1 + len <= bytes.count else { return (out, i) }
            out.append(ADStructure(type: ADType(bytes[i + 1]), data: Array(bytes[i + 2..<i + 1 + len])))
            i += 1 + len
        }
        return (out, nil)
    }

    public func encode() -> [UInt8] {
        var out: [UInt8] = []
        for s in structures {
            out.append(UInt8(s.data.count + 1))
            out.append(s.type.rawValue)
            out.append(contentsOf: s.data)
        }
        return out
    }

    public func first(_ type: ADType) -> [UInt8]? { structures.first { $0.type == type }?.data }

    // MARK: Typed accessors

    public var flags: ADFlags? { first(.flags).flatMap { $0.first }.map(ADFlags.init(rawValue:)) }

    /// The complete local name, or the shortened one.
    public var localName: String? {
        guard let d = first(.completeLocalName) ?? first(.shortenedLocalName) else { return nil }
        return String(decoding: d, as: UTF8.self)
    }

    public var isLocalNameComplete: Bool { first(.completeLocalName) != nil }

    private func uuids(in types: [ADType]) -> [BluetoothUUID] {
        var out: [BluetoothUUID] = []
        for s in structures where types.contains(s.type) {
            guard let w = s.type.uuidWidth, s.data.count % w == 0 else { continue }
            var i = 0
            while i < s.data.count {
                if let u = try? BluetoothUUID(littleEndianBytes: s.data[i..<i + w]) { out.append(u) }
                i += w
            }
        }
        return out
    }

    /// Complete and incomplete service UUID lists of every width, in order of appearance.
    public var serviceUUIDs: [BluetoothUUID] {
        uuids(in: [.incompleteList16, .completeList16, .incompleteList32, .completeList32, .incompleteList128, .completeList128])
    }

    public var solicitedServiceUUIDs: [BluetoothUUID] { uuids(in: [.solicited16, .solicited32, .solicited128]) }

    public var serviceData: [ServiceDataEntry] {
        structures.compactMap { s in
            guard [ADType.serviceData16, .serviceData32, .serviceData128].contains(s.type), let w = s.type.uuidWidth, s.data.count >= w,
                let u = try? BluetoothUUID(littleEndianBytes: s.data[0..<w])
            else { return nil }
            return ServiceDataEntry(uuid: u, data: Array(s.data[w...]))
        }
    }

    /// The data of the first manufacturer-specific structure, company identifier first (little-endian).
    public var manufacturerData: [UInt8]? { first(.manufacturerSpecificData) }

    public var txPowerLevel: Int8? { first(.txPowerLevel).flatMap { $0.count == 1 ? Int8(bitPattern: $0[0]) : nil } }

    public var appearance: UInt16? {
        guard let d = first(.appearance), d.count == 2 else { return nil }
        return UInt16(d[0]) | UInt16(d[1]) << 8
    }

    /// Peripheral connection interval range in 1.25 ms units (0xFFFF: no specific value).
    public var connectionIntervalRange: ClosedRange<UInt16>? {
        guard let d = first(.peripheralConnectionIntervalRange), d.count == 4 else { return nil }
        let lo = UInt16(d[0]) | UInt16(d[1]) << 8, hi = UInt16(d[2]) | UInt16(d[3]) << 8
        return lo <= hi ? lo...hi : nil
    }
}
