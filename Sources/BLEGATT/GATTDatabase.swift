// The attribute database of a GATT server (Vol 3 Part G §3, Vol 3 Part F §3.2).
//
// Attributes are kept sorted by handle in one array; look-ups are binary searches. Services are
// built from declarative definitions: the database assigns handles, writes the declarations, and
// adds a Client Characteristic Configuration descriptor to every notify/indicate characteristic and
// an Extended Properties descriptor where that property is set, unless the definition has its own or asks
// to be served as written (`addsMissingDescriptors` false).
//
// The Database Hash (Vol 3 Part G §7.3) is not computed: it needs AES-CMAC, which this module does
// not have. The Database Hash characteristic is therefore not offered.

import BLEWire
import BLEATT

/// An attribute value: stored, answered by the application, or per-client configuration.
public enum GATTAttributeValue: Sendable, Equatable {
    case stored([UInt8])
    /// The application answers reads and writes.
    case dynamic
    /// A Client Characteristic Configuration descriptor: each client has its own value.
    case clientConfiguration
}

/// One attribute (Vol 3 Part F §3.2).
public struct GATTAttribute: Sendable, Equatable {
    public var handle: UInt16
    public var type: BluetoothUUID
    public var value: GATTAttributeValue
    public var permissions: AttributePermissions
    /// The longest value a write may leave.
    public var maximumLength: Int
    /// Declarations and configuration descriptors have a fixed length: Read Blob answers
    /// Attribute Not Long when they fit in one Read Response (Vol 3 Part F §3.4.4.5).
    public var hasFixedLength: Bool

    public init(
        handle: UInt16, type: BluetoothUUID, value: GATTAttributeValue, permissions: AttributePermissions,
        maximumLength: Int = 512, hasFixedLength: Bool = false
    ) {
        self.handle = handle
        self.type = type
        self.value = value
        self.permissions = permissions
        self.maximumLength = maximumLength
        self.hasFixedLength = hasFixedLength
    }
}

/// A service as placed in the database.
public struct GATTServiceRecord: Sendable, Equatable {
    public var uuid: BluetoothUUID
    public var isPrimary: Bool
    public var range: ClosedRange<UInt16>
}

/// A characteristic as placed in the database.
public struct GATTCharacteristicRecord: Sendable, Equatable {
    public var uuid: BluetoothUUID
    public var properties: GATTCharacteristicProperties
    public var declarationHandle: UInt16
    public var valueHandle: UInt16
    public var clientConfigurationHandle: UInt16?
    public var endHandle: UInt16
}

public enum GATTDatabaseError: Error, Sendable, Equatable {
    /// The definition's handles collide with a service already present.
    case handleConflict(ClosedRange<UInt16>)
    /// No free handle range is large enough.
    case handlesExhausted
    /// An included service is not in the database.
    case includedServiceNotFound(GATTServiceReference)
    /// The definition contradicts itself (e.g. fixed handles out of order).
    case invalidDefinition(String)
    /// No service has exactly this range.
    case serviceNotFound(ClosedRange<UInt16>)
    /// Another service includes the one being removed.
    case serviceIsIncluded(by: UInt16)
}

public struct GATTDatabase: Sendable, Equatable {
    public private(set) var attributes: [GATTAttribute] = []
    public private(set) var services: [GATTServiceRecord] = []
    public private(set) var characteristics: [GATTCharacteristicRecord] = []

    public init() {}

    // MARK: Look-up

    /// The index of the attribute with `handle`, or of where it would be inserted.
    func lowerBound(_ handle: UInt16) -> Int {
        var lo = 0, hi = attributes.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if attributes[mid].handle < handle { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    public func attribute(at handle: UInt16) -> GATTAttribute? {
        let i = lowerBound(handle)
        return i < attributes.count && attributes[i].handle == handle ? attributes[i] : nil
    }

    /// The attributes with handles in `range`, in handle order.
    public func attributes(in range: ClosedRange<UInt16>) -> ArraySlice<GATTAttribute> {
        let lo = lowerBound(range.lowerBound)
        let hi = range.upperBound == .max ? attributes.count : lowerBound(range.upperBound + 1)
        return attributes[lo..<max(lo, hi)]
    }

    public func service(declaredAt handle: UInt16) -> GATTServiceRecord? {
        services.first { $0.range.lowerBound == handle }
    }

    /// The characteristic whose value or descriptor is at `handle`.
    public func characteristic(containing handle: UInt16) -> GATTCharacteristicRecord? {
        characteristics.first { ($0.declarationHandle...$0.endHandle).contains(handle) }
    }

    /// Every notification sent asks this, so it is a binary search: `characteristics` is kept in handle
    /// order and their ranges do not overlap, so the one owning `valueHandle` is the last declared before it.
    public func characteristic(valueHandle: UInt16) -> GATTCharacteristicRecord? {
        var lo = 0, hi = characteristics.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if characteristics[mid].declarationHandle < valueHandle { lo = mid + 1 } else { hi = mid }
        }
        guard lo > 0, characteristics[lo - 1].valueHandle == valueHandle else { return nil }
        return characteristics[lo - 1]
    }

    /// Replaces a stored value. Returns false when the attribute is missing or not stored.
    @discardableResult
    public mutating func setValue(_ value: [UInt8], at handle: UInt16) -> Bool {
        let i = lowerBound(handle)
        guard i < attributes.count, attributes[i].handle == handle, case .stored = attributes[i].value else { return false }
        attributes[i].value = .stored(value)
        return true
    }

    // MARK: Building

    private struct Planned {
        var type: BluetoothUUID
        var value: GATTAttributeValue
        var permissions: AttributePermissions
        var maximumLength: Int = 512
        var hasFixedLength = false
        var fixedHandle: UInt16?
    }

    /// Adds a service and returns the handles it was given.
    @discardableResult
    public mutating func add(_ service: GATTServiceDefinition) throws(GATTDatabaseError) -> GATTServiceHandles {
        // 1. Plan the attributes in order; characteristic declarations may carry fixed handles.
        var plan: [Planned] = [
            Planned(
                type: service.isPrimary ? .primaryService : .secondaryService,
                value: .stored(service.uuid.littleEndianBytes), permissions: .readable,
                hasFixedLength: true, fixedHandle: service.handle)
        ]
        var includeValues: [[UInt8]] = []
        for ref in service.includedServices {
            guard let inc = self.service(declaredAt: ref.handle) else { throw .includedServiceNotFound(ref) }
            var w = ByteWriter(capacity: 6)
            w.write(inc.range.lowerBound); w.write(inc.range.upperBound)
            if inc.uuid.wireSize == 2 { w.write(inc.uuid) }   // 128-bit UUIDs are left out (§3.2)
            includeValues.append(w.bytes)
            plan.append(Planned(type: .include, value: .stored(w.bytes), permissions: .readable, hasFixedLength: true))
        }
        struct CharacteristicPlan { var declaration: Int; var cccd: Int?; var descriptors: [Int] }
        var charPlans: [CharacteristicPlan] = []
        for c in service.characteristics {
            if c.handle != nil && service.handle == nil {
                throw .invalidDefinition("fixed characteristic handles need a fixed service handle")
            }
            guard c.maximumLength <= 512, (c.value?.count ?? 0) <= c.maximumLength else {
                throw .invalidDefinition("characteristic \(c.uuid) value longer than its maximum (512 at most)")
            }
            let declIndex = plan.count
            // The declaration's value is completed once the value handle is known.
            plan.append(
                Planned(
                    type: .characteristic, value: .stored([]), permissions: .readable,
                    hasFixedLength: true, fixedHandle: c.handle))
            plan.append(
                Planned(
                    type: c.uuid, value: c.value.map(GATTAttributeValue.stored) ?? .dynamic,
                    permissions: c.permissions, maximumLength: c.maximumLength))
            var cp = CharacteristicPlan(declaration: declIndex, cccd: nil, descriptors: [])
            let ownsExtended = c.descriptors.contains { $0.uuid == .characteristicExtendedProperties }
            if service.addsMissingDescriptors && c.properties.contains(.extendedProperties) && !ownsExtended {
                var w = ByteWriter(capacity: 2); w.write(c.extendedProperties.rawValue)
                cp.descriptors.append(plan.count)
                plan.append(
                    Planned(
                        type: .characteristicExtendedProperties, value: .stored(w.bytes),
                        permissions: .readable, hasFixedLength: true))
            }
            let ownsCCCD = c.descriptors.contains { $0.uuid == .clientCharacteristicConfiguration }
            if service.addsMissingDescriptors && !c.properties.isDisjoint(with: [.notify, .indicate]) && !ownsCCCD {
                cp.cccd = plan.count
                cp.descriptors.append(plan.count)
                plan.append(
                    Planned(
                        type: .clientCharacteristicConfiguration, value: .clientConfiguration,
                        permissions: .readWrite, maximumLength: 2, hasFixedLength: true))
            }
            for d in c.descriptors {
                guard (d.value?.count ?? 0) <= 512 else { throw .invalidDefinition("descriptor \(d.uuid) longer than 512") }
                let isCCCD = d.uuid == .clientCharacteristicConfiguration
                if isCCCD { cp.cccd = plan.count }
                cp.descriptors.append(plan.count)
                plan.append(
                    Planned(
                        type: d.uuid, value: isCCCD ? .clientConfiguration : (d.value.map(GATTAttributeValue.stored) ?? .dynamic),
                        permissions: d.permissions, maximumLength: isCCCD ? 2 : 512,
                        hasFixedLength: isCCCD || d.uuid == .characteristicExtendedProperties, fixedHandle: d.handle))
            }
            charPlans.append(cp)
        }

        // 2. Assign handles.
        let start: UInt16
        if let fixed = service.handle {
            guard fixed != 0 else { throw .invalidDefinition("handle 0x0000 is reserved") }
            start = fixed
        } else {
            start = try freeStart(count: plan.count, minimumEnd: service.endHandle)
        }
        var handles: [UInt16] = []
        handles.reserveCapacity(plan.count)
        var next = Int(start)
        for p in plan {
            if let h = p.fixedHandle, !handles.isEmpty {
                guard Int(h) >= next else { throw .invalidDefinition("fixed handle 0x\(String(h, radix: 16)) out of order") }
                next = Int(h)
            }
            guard next <= 0xFFFF else { throw .handlesExhausted }
            handles.append(UInt16(next))
            next += 1
        }
        let last = handles.last!
        let end = service.endHandle ?? last
        guard end >= last else { throw .invalidDefinition("end handle below the last attribute") }
        let range = start...end
        if let clash = services.first(where: { $0.range.overlaps(range) }) { throw .handleConflict(clash.range) }

        // 3. Complete characteristic declarations and commit.
        var result = GATTServiceHandles(uuid: service.uuid, range: range, includes: [], characteristics: [])
        result.includes = Array(handles[1..<(1 + includeValues.count)])
        var newChars: [GATTCharacteristicRecord] = []
        for (n, (c, cp)) in zip(service.characteristics, charPlans).enumerated() {
            let decl = handles[cp.declaration]
            let valueHandle = handles[cp.declaration + 1]
            var w = ByteWriter(capacity: 19)
            w.write(c.properties.rawValue); w.write(valueHandle); w.write(c.uuid)
            plan[cp.declaration].value = .stored(w.bytes)
            let nextDecl = n + 1 < charPlans.count ? charPlans[n + 1].declaration : plan.count
            let charEnd = handles[nextDecl - 1]
            let cccd = cp.cccd.map { handles[$0] }
            newChars.append(
                GATTCharacteristicRecord(
                    uuid: c.uuid, properties: c.properties, declarationHandle: decl,
                    valueHandle: valueHandle, clientConfigurationHandle: cccd,
                    endHandle: charEnd))
            result.characteristics.append(
                GATTCharacteristicHandles(
                    uuid: c.uuid, declaration: decl, value: valueHandle, clientConfiguration: cccd,
                    descriptors: cp.descriptors.map { handles[$0] }, endHandle: charEnd))
        }
        let newAttributes = zip(plan, handles).map { p, h in
            GATTAttribute(
                handle: h, type: p.type, value: p.value, permissions: p.permissions,
                maximumLength: p.maximumLength, hasFixedLength: p.hasFixedLength)
        }
        let at = lowerBound(start)
        attributes.insert(contentsOf: newAttributes, at: at)
        services.append(GATTServiceRecord(uuid: service.uuid, isPrimary: service.isPrimary, range: range))
        services.sort { $0.range.lowerBound < $1.range.lowerBound }
        characteristics.append(contentsOf: newChars)
        characteristics.sort { $0.declarationHandle < $1.declarationHandle }
        return result
    }

    /// The first handle of a free range for `count` attributes: after the last service if there is
    /// room (so handles are not reused), else the first gap that fits.
    private func freeStart(count: Int, minimumEnd: UInt16?) throws(GATTDatabaseError) -> UInt16 {
        let afterLast = Int(services.last?.range.upperBound ?? 0) + 1
        if afterLast + count - 1 <= 0xFFFF, minimumEnd.map({ Int($0) >= afterLast + count - 1 }) ?? true {
            return UInt16(afterLast)
        }
        var candidate = 1
        for s in services {
            if candidate + count - 1 < Int(s.range.lowerBound) { return UInt16(candidate) }
            candidate = Int(s.range.upperBound) + 1
        }
        throw .handlesExhausted
    }

    /// Removes the service occupying exactly `serviceRange`.
    public mutating func remove(serviceRange: ClosedRange<UInt16>) throws(GATTDatabaseError) {
        guard let index = services.firstIndex(where: { $0.range == serviceRange }) else {
            throw .serviceNotFound(serviceRange)
        }
        for a in attributes where a.type == .include && !serviceRange.contains(a.handle) {
            if case let .stored(v) = a.value, v.count >= 2, UInt16(v[0]) | UInt16(v[1]) << 8 == serviceRange.lowerBound {
                throw .serviceIsIncluded(by: a.handle)
            }
        }
        services.remove(at: index)
        attributes.removeAll { serviceRange.contains($0.handle) }
        characteristics.removeAll { serviceRange.contains($0.declarationHandle) }
    }

    // MARK: Default services

    /// A database holding the GAP service (0x1800: Device Name, Appearance, Vol 3 Part C §12) and the
    /// GATT service (0x1801: Service Changed with its CCCD, Vol 3 Part G §7.1).
    public static func withDefaultServices(deviceName: String, appearance: UInt16 = 0x0000) -> GATTDatabase {
        var db = GATTDatabase()
        var app = ByteWriter(capacity: 2); app.write(appearance)
        do {
            try db.add(
                GATTServiceDefinition(
                    uuid: .gapService,
                    characteristics: [
                        GATTCharacteristicDefinition(
                            uuid: .deviceName, properties: .read, permissions: .readable,
                            value: Array(deviceName.utf8.prefix(248)), maximumLength: 248),
                        GATTCharacteristicDefinition(
                            uuid: .appearance, properties: .read, permissions: .readable,
                            value: app.bytes, maximumLength: 2),
                    ]))
            try db.add(
                GATTServiceDefinition(
                    uuid: .gattService,
                    characteristics: [
                        GATTCharacteristicDefinition(
                            uuid: .serviceChanged, properties: .indicate, permissions: [],
                            value: [0x01, 0x00, 0xFF, 0xFF], maximumLength: 4)
                    ]))
        } catch {
            preconditionFailure("default services must fit an empty database: \(error)")
        }
        return db
    }

    /// The Service Changed characteristic's value handle, if the GATT service is present.
    public var serviceChangedHandle: UInt16? {
        characteristics.first { $0.uuid == .serviceChanged }?.valueHandle
    }
}
