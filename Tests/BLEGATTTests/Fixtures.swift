import BLEATT
import BLEWire
@testable import BLEGATT

let customService = BluetoothUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!
let greetingUUID = BluetoothUUID(string: "6E400002-B5A3-F393-E0A9-E50E24DCCA9E")!
let longValue: [UInt8] = (0..<60).map { UInt8($0) }

/// Handles (worked out by hand from the definitions below):
///  1 GAP service        2 decl  3 Device Name "Test"   4 decl  5 Appearance 0x0340
///  6 GATT service       7 decl  8 Service Changed      9 CCCD
/// 10 Battery (secondary) 11 decl 12 Battery Level [100] (read, notify) 13 CCCD
/// 14 custom primary, includes 10
///    15 include  16 decl  17 Greeting "hello" (read/write/indicate/ext)  18 ext props  19 CCCD  20 user desc
///    21 decl 22 dynamic 0x2A3D (read/write/write without response)
///    23 decl 24 long value 0x2A3E, read needs encryption
func makeDatabase() throws -> (GATTDatabase, battery: GATTServiceHandles, custom: GATTServiceHandles) {
    var db = GATTDatabase.withDefaultServices(deviceName: "Test", appearance: 0x0340)
    let battery = try db.add(
        GATTServiceDefinition(
            uuid: BluetoothUUID(0x180F), isPrimary: false,
            characteristics: [
                GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify], permissions: .readable, value: [100])
            ]))
    let custom = try db.add(
        GATTServiceDefinition(
            uuid: customService, includedServices: [battery.reference],
            characteristics: [
                GATTCharacteristicDefinition(
                    uuid: greetingUUID, properties: [.read, .write, .indicate, .extendedProperties],
                    permissions: .readWrite, value: Array("hello".utf8),
                    descriptors: [.userDescription("Greeting")],
                    extendedProperties: .reliableWrite, maximumLength: 20),
                GATTCharacteristicDefinition(
                    uuid: BluetoothUUID(0x2A3D), properties: [.read, .write, .writeWithoutResponse],
                    permissions: .readWrite, value: nil),
                GATTCharacteristicDefinition(
                    uuid: BluetoothUUID(0x2A3E), properties: [.read],
                    permissions: [.readable, .readEncryptionRequired], value: longValue),
            ]))
    return (db, battery, custom)
}

let alice = GATTClientID(1)
let bob = GATTClientID(2)

func makeServer(_ configuration: GATTServerConfiguration = GATTServerConfiguration()) throws -> GATTServer {
    var server = GATTServer(database: try makeDatabase().0, configuration: configuration)
    server.clientConnected(alice)
    server.clientConnected(bob)
    return server
}

extension GATTServer {
    /// Feeds raw request octets and returns the octets of the single PDU sent back, if exactly one.
    mutating func exchange(_ hex: String, from client: GATTClientID = alice) -> String? {
        let actions = handle(bytes: [UInt8](hexString: hex)!, from: client)
        let sent = actions.compactMap { a -> ATTPDU? in
            if case let .send(p, c) = a, c == client { return p }; return nil
        }
        return sent.count == 1 ? sent[0].encode().hexString : nil
    }
}

/// An ATT_ERROR_RSP in hex.
func err(_ opcode: UInt8, _ handle: UInt16, _ code: UInt8) -> String {
    [0x01, opcode, UInt8(handle & 0xFF), UInt8(handle >> 8), code].hexString
}
