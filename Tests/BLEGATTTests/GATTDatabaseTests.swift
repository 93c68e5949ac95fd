import Testing
import BLEATT
import BLEWire
@testable import BLEGATT

@Test func databaseLayoutHandleByHandle() throws {
    let (db, battery, custom) = try makeDatabase()
    let expected: [(UInt16, BluetoothUUID, GATTAttributeValue)] = [
        (1, .primaryService, .stored([0x00, 0x18])),
        (2, .characteristic, .stored([0x02, 0x03, 0x00, 0x00, 0x2A])),
        (3, .deviceName, .stored(Array("Test".utf8))),
        (4, .characteristic, .stored([0x02, 0x05, 0x00, 0x01, 0x2A])),
        (5, .appearance, .stored([0x40, 0x03])),
        (6, .primaryService, .stored([0x01, 0x18])),
        (7, .characteristic, .stored([0x20, 0x08, 0x00, 0x05, 0x2A])),
        (8, .serviceChanged, .stored([0x01, 0x00, 0xFF, 0xFF])),
        (9, .clientCharacteristicConfiguration, .clientConfiguration),
        (10, .secondaryService, .stored([0x0F, 0x18])),
        (11, .characteristic, .stored([0x12, 0x0C, 0x00, 0x19, 0x2A])),
        (12, BluetoothUUID(0x2A19), .stored([100])),
        (13, .clientCharacteristicConfiguration, .clientConfiguration),
        (14, .primaryService, .stored(customService.littleEndianBytes)),
        // Include: service handle 10, end 13, 16-bit UUID 0x180F.
        (15, .include, .stored([0x0A, 0x00, 0x0D, 0x00, 0x0F, 0x18])),
        (16, .characteristic, .stored([0xAA, 0x11, 0x00] + greetingUUID.littleEndianBytes)),
        (17, greetingUUID, .stored(Array("hello".utf8))),
        (18, .characteristicExtendedProperties, .stored([0x01, 0x00])),
        (19, .clientCharacteristicConfiguration, .clientConfiguration),
        (20, .characteristicUserDescription, .stored(Array("Greeting".utf8))),
        (21, .characteristic, .stored([0x0E, 0x16, 0x00, 0x3D, 0x2A])),
        (22, BluetoothUUID(0x2A3D), .dynamic),
        (23, .characteristic, .stored([0x02, 0x18, 0x00, 0x3E, 0x2A])),
        (24, BluetoothUUID(0x2A3E), .stored(longValue)),
    ]
    #expect(db.attributes.count == expected.count)
    for (a, e) in zip(db.attributes, expected) {
        #expect(a.handle == e.0)
        #expect(a.type == e.1, "handle \(a.handle)")
        #expect(a.value == e.2, "handle \(a.handle)")
    }
    // The 128-bit UUID in the declaration is little-endian: its last text byte (0x9E) first.
    #expect(customService.littleEndianBytes.first == 0x9E)
    #expect(db.services.map(\.range) == [1...5, 6...9, 10...13, 14...24])
    #expect(battery.characteristics[0].clientConfiguration == 13)
    #expect(custom.includes == [15])
    #expect(custom.characteristics.map(\.value) == [17, 22, 24])
    #expect(custom.characteristics[0].descriptors == [18, 19, 20])
    #expect(custom.characteristics[0].clientConfiguration == 19)
    #expect(custom.characteristics[0].endHandle == 20)
    #expect(db.characteristic(containing: 19)?.valueHandle == 17)
    #expect(db.serviceChangedHandle == 8)
    // Permissions: declarations readable only; Service Changed not readable.
    #expect(db.attribute(at: 1)?.permissions == .readable)
    #expect(db.attribute(at: 8)?.permissions == [])
}

@Test func fixedHandlesConflictsAndRemoval() throws {
    var db = GATTDatabase()
    let fixed = try db.add(
        GATTServiceDefinition(
            uuid: BluetoothUUID(0x1234),
            characteristics: [
                GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A00), properties: .read, permissions: .readable, value: [1], handle: 0x0105),
                GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A01), properties: [.read, .notify], permissions: .readable, value: [2]),
            ], handle: 0x0100, endHandle: 0x010F))
    #expect(fixed.range == 0x0100...0x010F)
    #expect(fixed.characteristics[0].declaration == 0x0105 && fixed.characteristics[0].value == 0x0106)
    #expect(fixed.characteristics[1].declaration == 0x0107 && fixed.characteristics[1].clientConfiguration == 0x0109)
    #expect(db.attributes.map(\.handle) == [0x0100, 0x0105, 0x0106, 0x0107, 0x0108, 0x0109])

    // Overlap with the fixed range.
    #expect(throws: GATTDatabaseError.handleConflict(0x0100...0x010F)) {
        try db.add(GATTServiceDefinition(uuid: BluetoothUUID(0x1235), characteristics: [], handle: 0x010F))
    }
    // Fixed characteristic handles out of order, and without a fixed service handle.
    #expect(throws: GATTDatabaseError.self) {
        try db.add(
            GATTServiceDefinition(
                uuid: BluetoothUUID(0x1236),
                characteristics: [
                    GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A00), properties: .read, permissions: .readable, value: [1], handle: 0x0200)
                ], handle: 0x0201))
    }
    #expect(throws: GATTDatabaseError.invalidDefinition("fixed characteristic handles need a fixed service handle")) {
        try db.add(
            GATTServiceDefinition(
                uuid: BluetoothUUID(0x1236),
                characteristics: [
                    GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A00), properties: .read, permissions: .readable, value: [1], handle: 0x0300)
                ]))
    }
    // Automatic placement goes after the last service.
    let next = try db.add(GATTServiceDefinition(uuid: BluetoothUUID(0x1237), characteristics: []))
    #expect(next.range == 0x0110...0x0110)
    // An included service cannot be removed while included.
    let includer = try db.add(GATTServiceDefinition(uuid: BluetoothUUID(0x1238), includedServices: [next.reference], characteristics: []))
    #expect(throws: GATTDatabaseError.serviceIsIncluded(by: 0x0112)) { try db.remove(serviceRange: next.range) }
    #expect(throws: GATTDatabaseError.includedServiceNotFound(GATTServiceReference(handle: 0x0500))) {
        try db.add(GATTServiceDefinition(uuid: BluetoothUUID(0x1239), includedServices: [GATTServiceReference(handle: 0x0500)], characteristics: []))
    }
    try db.remove(serviceRange: includer.range)
    try db.remove(serviceRange: fixed.range)
    #expect(db.attributes.map(\.handle) == [0x0110])
    #expect(db.characteristics.isEmpty)
    #expect(throws: GATTDatabaseError.serviceNotFound(1...2)) { try db.remove(serviceRange: 1...2) }
}

@Test func ownDescriptorsReplaceAutomaticOnes() throws {
    var db = GATTDatabase()
    let s = try db.add(
        GATTServiceDefinition(
            uuid: BluetoothUUID(0x1234),
            characteristics: [
                GATTCharacteristicDefinition(
                    uuid: BluetoothUUID(0x2A00), properties: [.notify, .extendedProperties], permissions: [],
                    value: [],
                    descriptors: [
                        GATTDescriptorDefinition(uuid: .characteristicExtendedProperties, value: [0x02, 0x00]),
                        GATTDescriptorDefinition(
                            uuid: .clientCharacteristicConfiguration,
                            permissions: [.readable, .writeable, .writeEncryptionRequired], value: nil),
                    ])
            ]))
    #expect(
        db.attributes.map(\.type) == [
            .primaryService, .characteristic, BluetoothUUID(0x2A00),
            .characteristicExtendedProperties, .clientCharacteristicConfiguration,
        ])
    #expect(db.attribute(at: 4)?.value == .stored([0x02, 0x00]))
    #expect(db.attribute(at: 5)?.value == .clientConfiguration)
    #expect(db.attribute(at: 5)?.permissions.contains(.writeEncryptionRequired) == true)
    #expect(s.characteristics[0].clientConfiguration == 5)
}

@Test func handlesRunOutCleanly() {
    var db = GATTDatabase()
    #expect(throws: GATTDatabaseError.self) {
        try db.add(
            GATTServiceDefinition(
                uuid: BluetoothUUID(0x1234),
                characteristics: [
                    GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A00), properties: .read, permissions: .readable, value: [1])
                ], handle: 0xFFFE))
    }
    #expect(throws: GATTDatabaseError.self) {
        try db.add(
            GATTServiceDefinition(
                uuid: BluetoothUUID(0x1234),
                characteristics: [
                    GATTCharacteristicDefinition(
                        uuid: BluetoothUUID(0x2A00), properties: .read, permissions: .readable,
                        value: Array(repeating: 0, count: 513))
                ]))
    }
    #expect(db.attributes.isEmpty)
}

/// The value-handle look-up every notification makes is a binary search: at every handle of a database with
/// fixed handles, gaps and a service added after a lower one, and after a removal, it answers what a scan of
/// every characteristic answers.
@Test func characteristicByValueHandleMatchesAScan() throws {
    var (db, _, _) = try makeDatabase()
    let late = try db.add(
        GATTServiceDefinition(
            uuid: BluetoothUUID(0x1240),
            characteristics: [
                GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A00), properties: .read, permissions: .readable, value: [1], handle: 0x0205),
                GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A01), properties: [.read, .notify], permissions: .readable, value: [2]),
            ], handle: 0x0200, endHandle: 0x020F))
    let low = try db.add(
        GATTServiceDefinition(
            uuid: BluetoothUUID(0x1241),
            characteristics: [
                GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A02), properties: .notify, permissions: [], value: nil, handle: 0x0031)
            ], handle: 0x0030, endHandle: 0x0034))
    func check(_ what: String) {
        for h in UInt16(0)...0x0300 {
            #expect(db.characteristic(valueHandle: h) == db.characteristics.first { $0.valueHandle == h }, "\(what): handle \(h)")
        }
    }
    #expect(db.characteristic(valueHandle: 0x0032)?.uuid == BluetoothUUID(0x2A02))
    #expect(db.characteristic(valueHandle: 0x0206)?.uuid == BluetoothUUID(0x2A00))
    #expect(db.characteristic(valueHandle: 0x0205) == nil)   // a declaration, not a value
    check("built")
    try db.remove(serviceRange: low.range)
    #expect(db.characteristic(valueHandle: 0x0032) == nil)
    check("after a removal")
    try db.remove(serviceRange: late.range)
    check("after another")
}
