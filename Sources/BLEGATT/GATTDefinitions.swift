// Declarative service definitions a GATTDatabase is built from (Vol 3 Part G §3).

import BLEWire

/// A reference to a service already in a database: its declaration handle.
public struct GATTServiceReference: Hashable, Sendable {
    public var handle: UInt16
    public init(handle: UInt16) { self.handle = handle }
}

/// A descriptor of a characteristic. `value == nil` means the application answers reads and
/// writes. A Client Characteristic Configuration descriptor (0x2902) is always answered by the
/// server from per-client state; its `value` is ignored.
public struct GATTDescriptorDefinition: Sendable, Equatable {
    public var uuid: BluetoothUUID
    public var permissions: AttributePermissions
    public var value: [UInt8]?
    /// A fixed handle (needs fixed handles on its service); must follow the attributes before it.
    public var handle: UInt16?
    public init(uuid: BluetoothUUID, permissions: AttributePermissions = .readable, value: [UInt8]?, handle: UInt16? = nil) {
        self.uuid = uuid
        self.permissions = permissions
        self.value = value
        self.handle = handle
    }

    /// A Characteristic User Description (0x2901), read-only.
    public static func userDescription(_ text: String) -> GATTDescriptorDefinition {
        GATTDescriptorDefinition(uuid: .characteristicUserDescription, value: Array(text.utf8))
    }
}

/// A characteristic: declaration, value and descriptors (Vol 3 Part G §3.3).
public struct GATTCharacteristicDefinition: Sendable, Equatable {
    public var uuid: BluetoothUUID
    public var properties: GATTCharacteristicProperties
    /// Permissions of the value attribute.
    public var permissions: AttributePermissions
    /// The value; nil means dynamic (the application answers each read and write).
    public var value: [UInt8]?
    public var descriptors: [GATTDescriptorDefinition]
    /// Bits of the Extended Properties descriptor added when `properties` has `.extendedProperties`.
    public var extendedProperties: GATTCharacteristicExtendedProperties
    /// The longest value a write may leave (at most 512, Vol 3 Part F §3.2.9).
    public var maximumLength: Int
    /// A fixed handle for the declaration (the value follows at +1); needs a fixed service handle.
    public var handle: UInt16?

    public init(
        uuid: BluetoothUUID, properties: GATTCharacteristicProperties, permissions: AttributePermissions,
        value: [UInt8]?, descriptors: [GATTDescriptorDefinition] = [],
        extendedProperties: GATTCharacteristicExtendedProperties = [], maximumLength: Int = 512,
        handle: UInt16? = nil
    ) {
        self.uuid = uuid
        self.properties = properties
        self.permissions = permissions
        self.value = value
        self.descriptors = descriptors
        self.extendedProperties = extendedProperties
        self.maximumLength = maximumLength
        self.handle = handle
    }
}

/// A primary or secondary service (Vol 3 Part G §3.1–§3.2).
public struct GATTServiceDefinition: Sendable, Equatable {
    public var uuid: BluetoothUUID
    public var isPrimary: Bool
    public var includedServices: [GATTServiceReference]
    public var characteristics: [GATTCharacteristicDefinition]
    /// A fixed handle for the service declaration.
    public var handle: UInt16?
    /// A fixed last handle, reserving room for the service to grow.
    public var endHandle: UInt16?
    /// Whether the database adds what the definition leaves out and the specification expects: a Client
    /// Characteristic Configuration descriptor for each notify/indicate characteristic, an Extended Properties
    /// descriptor where that property is set. False serves the definition as written (a copy of a real device).
    public var addsMissingDescriptors: Bool

    public init(
        uuid: BluetoothUUID, isPrimary: Bool = true, includedServices: [GATTServiceReference] = [],
        characteristics: [GATTCharacteristicDefinition], handle: UInt16? = nil, endHandle: UInt16? = nil,
        addsMissingDescriptors: Bool = true
    ) {
        self.uuid = uuid
        self.isPrimary = isPrimary
        self.includedServices = includedServices
        self.characteristics = characteristics
        self.handle = handle
        self.endHandle = endHandle
        self.addsMissingDescriptors = addsMissingDescriptors
    }
}

/// The handles a database assigned to one characteristic.
public struct GATTCharacteristicHandles: Sendable, Equatable {
    public var uuid: BluetoothUUID
    public var declaration: UInt16
    public var value: UInt16
    /// The Client Characteristic Configuration descriptor, if any.
    public var clientConfiguration: UInt16?
    /// Handles of the descriptors, in definition order (automatic ones included, in database order).
    public var descriptors: [UInt16]
    /// The last handle of the characteristic.
    public var endHandle: UInt16
}

/// The handles a database assigned to one service.
public struct GATTServiceHandles: Sendable, Equatable {
    public var uuid: BluetoothUUID
    public var range: ClosedRange<UInt16>
    public var includes: [UInt16]
    public var characteristics: [GATTCharacteristicHandles]
    public var reference: GATTServiceReference { GATTServiceReference(handle: range.lowerBound) }
}
