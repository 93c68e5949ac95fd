// AttributeTable: a GATT database as the list of its attributes (handle, type, value), the form in which a
// capture reveals a device's database and in which a database compares byte for byte; and its conversion
// back into service definitions with every handle fixed, so our server rebuilds the very same database.
import BLEWire
import BLEATT
import BLEGATT

public struct CapturedAttribute: Sendable, Equatable, CustomStringConvertible {
    public var handle: UInt16
    public var type: BluetoothUUID
    /// The value as the device gave it; nil when it was never read.
    public var value: [UInt8]?
    /// The permissions, when known (a database of ours); a capture cannot see them (they follow the properties).
    public var permissions: AttributePermissions?
    public init(handle: UInt16, type: BluetoothUUID, value: [UInt8]?, permissions: AttributePermissions? = nil) {
        self.handle = handle; self.type = type; self.value = value; self.permissions = permissions
    }
    public var description: String {
        "0x" + String(handle, radix: 16) + " " + type.uuidString + " " + (value.map { $0.map { String(format: "%02x", $0) }.joined() } ?? "-")
    }
}

public struct AttributeTable: Sendable, Equatable {
    /// Attributes in handle order.
    public var attributes: [CapturedAttribute]
    /// Service ranges as the device declared them (Read By Group Type end handles); a service without one
    /// ends where the next begins.
    public var serviceEnds: [UInt16: UInt16]

    public init(attributes: [CapturedAttribute], serviceEnds: [UInt16: UInt16] = [:]) {
        self.attributes = attributes.sorted { $0.handle < $1.handle }
        self.serviceEnds = serviceEnds
    }

    /// The attributes of a database our server holds (dynamic values read as nil, CCCDs as nil).
    public init(_ db: GATTDatabase) {
        var list: [CapturedAttribute] = []
        for a in db.attributes {
            var v: [UInt8]?
            if case let .stored(s) = a.value { v = s }
            list.append(CapturedAttribute(handle: a.handle, type: a.type, value: v, permissions: a.permissions))
        }
        var ends: [UInt16: UInt16] = [:]
        for s in db.services { ends[s.range.lowerBound] = s.range.upperBound }
        self.init(attributes: list, serviceEnds: ends)
    }

    public enum RebuildError: Error, Equatable, CustomStringConvertible {
        case malformedDeclaration(handle: UInt16)
        case attributeOutsideService(handle: UInt16)
        case cannotPlace(String)
        public var description: String {
            switch self {
            case let .malformedDeclaration(h): return "malformed declaration at handle 0x\(String(h, radix: 16))"
            case let .attributeOutsideService(h): return "attribute 0x\(String(h, radix: 16)) lies outside every service"
            case let .cannotPlace(why): return "cannot rebuild the database: \(why)"
            }
        }
    }

    /// Service definitions with fixed handles that rebuild this table, in an order that adds every included
    /// service before the services that include it. Characteristic values are the recorded ones (empty when
    /// never read); permissions follow the declared properties.
    public func serviceDefinitions() throws -> [GATTServiceDefinition] {
        let declarations = attributes.filter { $0.type == .primaryService || $0.type == .secondaryService }
        var defs: [GATTServiceDefinition] = []
        for (i, decl) in declarations.enumerated() {
            guard let raw = decl.value, raw.count == 2 || raw.count == 16 else { throw RebuildError.malformedDeclaration(handle: decl.handle) }
            let uuid = try BluetoothUUID(littleEndianBytes: raw)
            let nextStart = i + 1 < declarations.count ? declarations[i + 1].handle : UInt16.max
            let end = serviceEnds[decl.handle] ?? (nextStart == .max ? (attributes.last?.handle ?? decl.handle) : nextStart - 1)
            let inside = attributes.filter { $0.handle > decl.handle && $0.handle <= end }
            var includes: [GATTServiceReference] = []
            var characteristics: [GATTCharacteristicDefinition] = []
            var k = 0
            while k < inside.count {
                let a = inside[k]
                if a.type == .include {
                    guard let v = a.value, v.count >= 4 else { throw RebuildError.malformedDeclaration(handle: a.handle) }
                    includes.append(GATTServiceReference(handle: UInt16(v[0]) | UInt16(v[1]) << 8))
                    k += 1
                    continue
                }
                guard a.type == .characteristic else {
                    throw RebuildError.cannotPlace("attribute 0x\(String(a.handle, radix: 16)) (\(a.type)) precedes every characteristic of its service")
                }
                guard let v = a.value, v.count == 5 || v.count == 19 else { throw RebuildError.malformedDeclaration(handle: a.handle) }
                let properties = GATTCharacteristicProperties(rawValue: v[0])
                let valueHandle = UInt16(v[1]) | UInt16(v[2]) << 8
                let cuuid = try BluetoothUUID(littleEndianBytes: v[3...])
                guard valueHandle == a.handle &+ 1 else {
                    throw RebuildError.cannotPlace("characteristic 0x\(String(a.handle, radix: 16)) has its value at 0x\(String(valueHandle, radix: 16)), not right after it")
                }
                var permissions: AttributePermissions = []
                if properties.contains(.read) { permissions.insert(.readable) }
                if !properties.isDisjoint(with: [.write, .writeWithoutResponse, .authenticatedSignedWrites]) { permissions.insert(.writeable) }
                let valueAttribute = inside.first { $0.handle == valueHandle }
                if let known = valueAttribute?.permissions { permissions = known }
                let value = valueAttribute?.value ?? []
                var descriptors: [GATTDescriptorDefinition] = []
                var d = k + 1
                while d < inside.count, inside[d].type != .characteristic, inside[d].type != .include {
                    let x = inside[d]
                    if x.handle != valueHandle {
                        let writable = x.type == .clientCharacteristicConfiguration || x.type == BluetoothUUID(0x2903)
                        descriptors.append(
                            GATTDescriptorDefinition(
                                uuid: x.type, permissions: x.permissions ?? (writable ? [.readable, .writeable] : .readable),
                                value: x.value ?? [], handle: x.handle))
                    }
                    d += 1
                }
                var extended: GATTCharacteristicExtendedProperties = []
                if let e = descriptors.first(where: { $0.uuid == .characteristicExtendedProperties })?.value, let b = e.first {
                    extended = GATTCharacteristicExtendedProperties(rawValue: UInt16(b) | UInt16(e.count > 1 ? e[1] : 0) << 8)
                }
                characteristics.append(
                    GATTCharacteristicDefinition(
                        uuid: cuuid, properties: properties, permissions: permissions, value: value,
                        descriptors: descriptors, extendedProperties: extended, handle: a.handle))
                k = d
            }
            defs.append(
                GATTServiceDefinition(
                    uuid: uuid, isPrimary: decl.type == .primaryService, includedServices: includes,
                    characteristics: characteristics, handle: decl.handle, endHandle: end))
        }
        if let stray = attributes.first(where: { a in
            !defs.contains { ($0.handle!...$0.endHandle!).contains(a.handle) }
        }) {
            throw RebuildError.attributeOutsideService(handle: stray.handle)
        }
        // Included services first.
        var ordered: [GATTServiceDefinition] = []
        var placed = Set<UInt16>()
        var left = defs
        while !left.isEmpty {
            guard let i = left.firstIndex(where: { $0.includedServices.allSatisfy { placed.contains($0.handle) } }) else {
                throw RebuildError.cannotPlace("services include each other in a cycle, or include a service the capture does not show")
            }
            let s = left.remove(at: i)
            placed.insert(s.handle!)
            ordered.append(s)
        }
        return ordered
    }
}
