// What bluetoothd knows of a device it has seen advertising (org.bluez.Device1's properties, doc/org.bluez.Device.rst)
// as the dictionary of centralManager(_:didDiscover:advertisementData:rssi:), with the keys and value types of the
// native path (AdvertisementFields): Name → local name; UUIDs → service UUIDs; ServiceData a{sv} → [CBUUID: Data];
// ManufacturerData a{qv} → Data whose first two octets are the company identifier, little-endian, as on the air
// and on iOS; TxPower → TX power level. BlueZ merges advertisements and scan responses itself.
import Foundation
import BLEWire
import DBus

enum BlueZAdvertisement {
    static func dictionary(_ device: BlueZObjectTree.Properties) -> [String: Any] {
        // BlueZ does not say whether the last advertisement was connectable; a device it lists is one it would try.
        var d: [String: Any] = [CBAdvertisementDataIsConnectable: NSNumber(value: true)]
        if let name = device["Name"]?.string { d[CBAdvertisementDataLocalNameKey] = name }
        let uuids = (device["UUIDs"]?.arrayItems ?? []).compactMap { $0.string.flatMap(cbUUID) }
        if !uuids.isEmpty { d[CBAdvertisementDataServiceUUIDsKey] = uuids }
        if case .dictionary(_, _, let entries) = device["ServiceData"] ?? .bytes([]) {
            var m: [CBUUID: Data] = [:]
            for e in entries {
                if let u = e.key.string.flatMap(cbUUID), let b = e.value.byteArray { m[u] = Data(b) }
            }
            if !m.isEmpty { d[CBAdvertisementDataServiceDataKey] = m }
        }
        if case .dictionary(_, _, let entries) = device["ManufacturerData"] ?? .bytes([]),
            let first = entries.min(by: { ($0.key.integer ?? 0) < ($1.key.integer ?? 0) }),
            let company = first.key.integer, let bytes = first.value.byteArray
        {
            d[CBAdvertisementDataManufacturerDataKey] = Data([UInt8(company & 0xFF), UInt8((company >> 8) & 0xFF)] + bytes)
        }
        if let tx = device["TxPower"]?.integer { d[CBAdvertisementDataTxPowerLevelKey] = NSNumber(value: Int(tx)) }
        d["kCBAdvDataRxPrimaryPHY"] = NSNumber(value: 1)
        d["kCBAdvDataRxSecondaryPHY"] = NSNumber(value: 0)
        d["kCBAdvDataTimestamp"] = NSNumber(value: CFAbsoluteTimeGetCurrent())
        return d
    }

    /// Whether Device1.UUIDs is the device's GATT database rather than its advertisement: BlueZ lists the services it
    /// resolved once it has (a device it connected to, also as stored across restarts), and every GATT server has the
    /// GAP service (Vol 3 Part C §12), which devices do not advertise.
    static func listsDatabaseServices(_ device: BlueZObjectTree.Properties) -> Bool {
        (device["UUIDs"]?.arrayItems ?? []).contains { $0.string.flatMap(cbUUID) == CBUUID(string: "1800") }
    }

    /// A UUID as BlueZ writes it (128-bit, lower case) as a CBUUID, in its short form when it is a SIG UUID.
    static func cbUUID(_ s: String) -> CBUUID? {
        BluetoothUUID(string: s).map { CBUUID($0.shortened) }
    }

    /// The device's address (`Address`, `AddressType` "public" / "random").
    static func address(_ device: BlueZObjectTree.Properties) -> BluetoothAddress? {
        device["Address"]?.string.flatMap { address($0, type: device["AddressType"]?.string) }
    }

    /// An address as BlueZ writes it, with its `AddressType` ("random"; anything else is public).
    static func address(_ text: String, type: String?) -> BluetoothAddress? {
        BluetoothAddress(string: text, type: type == "random" ? .random : .public)
    }

    /// A stable identifier for a device at an address: the same across runs, as iOS keeps a device's identifier.
    static func identifier(for address: BluetoothAddress, adapter: String) -> UUID {
        var bytes = [UInt8](repeating: 0, count: 16)
        let salt = Array("ocb-bluez:\(adapter)".utf8)
        for (i, b) in salt.enumerated() { bytes[i % 10] = bytes[i % 10] &* 31 &+ b }
        for (i, b) in address.bytes.reversed().enumerated() { bytes[10 + i] = b }
        bytes[6] = (bytes[6] & 0x0F) | 0x80   // version 8 (custom)
        bytes[8] = (bytes[8] & 0x3F) | 0x80   // RFC 4122 variant
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
    }

    /// GattCharacteristic1.Flags (doc/org.bluez.GattCharacteristic.rst) as Core Bluetooth's properties.
    static func properties(flags: [String]) -> CBCharacteristicProperties {
        var p: CBCharacteristicProperties = []
        for f in flags {
            switch f {
            case "broadcast": p.insert(.broadcast)
            case "read", "encrypt-read", "encrypt-authenticated-read", "secure-read": p.insert(.read)
            case "write-without-response": p.insert(.writeWithoutResponse)
            case "write", "encrypt-write", "encrypt-authenticated-write", "secure-write", "reliable-write": p.insert(.write)
            case "notify": p.insert(.notify)
            case "indicate": p.insert(.indicate)
            case "authenticated-signed-writes": p.insert(.authenticatedSignedWrites)
            case "extended-properties": p.insert(.extendedProperties)
            default: break
            }
        }
        return p
    }
}
