// BlueZ's object tree as bluetoothd publishes it through org.freedesktop.DBus.ObjectManager (doc/org.bluez.*.rst):
// object paths, each with its interfaces (org.bluez.Adapter1, Device1, GattService1, GattCharacteristic1,
// GattDescriptor1 …) and their properties. A pure value: GetManagedObjects loads it, InterfacesAdded /
// InterfacesRemoved / PropertiesChanged update it; the backend reads adapters, devices and GATT objects from it.
//
// Paths follow BlueZ's documented scheme: /org/bluez/hciN for an adapter, …/dev_AA_BB_CC_DD_EE_FF for a device,
// …/serviceXXXX, …/charYYYY, …/descZZZZ for its GATT attributes, XXXX being the attribute's handle in hex.
import DBus

struct BlueZObjectTree {
    typealias Properties = [String: DBusValue]
    /// path → interface → property → value (variants unwrapped).
    private(set) var objects: [String: [String: Properties]] = [:]

    static let adapterInterface = "org.bluez.Adapter1"
    static let deviceInterface = "org.bluez.Device1"
    static let serviceInterface = "org.bluez.GattService1"
    static let characteristicInterface = "org.bluez.GattCharacteristic1"
    static let descriptorInterface = "org.bluez.GattDescriptor1"

    /// Replaces everything with a GetManagedObjects answer (`a{oa{sa{sv}}}`); values of other shapes are ignored.
    mutating func load(managedObjects value: DBusValue) {
        objects = [:]
        guard case .dictionary(_, _, let entries) = value.unwrapped else { return }
        for e in entries {
            guard let path = e.key.string else { continue }
            add(path: path, interfaces: e.value)
        }
    }

    /// InterfacesAdded (`o`, `a{sa{sv}}`): new interfaces of an object, or more of them.
    mutating func add(path: String, interfaces: DBusValue) {
        guard case .dictionary(_, _, let entries) = interfaces.unwrapped else { return }
        for e in entries {
            guard let name = e.key.string else { continue }
            objects[path, default: [:]][name] = Self.properties(e.value)
        }
    }

    /// InterfacesRemoved (`o`, `as`); an object with no interface left is gone.
    mutating func remove(path: String, interfaces: [String]) {
        for i in interfaces { objects[path]?[i] = nil }
        if objects[path]?.isEmpty == true { objects[path] = nil }
    }

    /// PropertiesChanged (`s`, `a{sv}`, `as`) on an interface the tree knows (others are ignored, as they would be
    /// announced by InterfacesAdded first).
    mutating func change(path: String, interface: String, changed: DBusValue, invalidated: [String]) {
        guard objects[path]?[interface] != nil else { return }
        for (k, v) in Self.properties(changed) { objects[path]![interface]![k] = v }
        for k in invalidated { objects[path]![interface]![k] = nil }
    }

    /// Forgets everything (bluetoothd left the bus).
    mutating func clear() { objects = [:] }

    subscript(path: String, interface: String) -> Properties? { objects[path]?[interface] }

    /// The paths that have `interface`, sorted.
    func paths(with interface: String) -> [String] {
        objects.compactMap { $0.value[interface] != nil ? $0.key : nil }.sorted()
    }

    /// The paths that have `interface` and whose property `key` is the object path `parent`, sorted (a device's
    /// services by `Device`, a service's characteristics by `Service`, a characteristic's descriptors by
    /// `Characteristic`).
    func paths(with interface: String, where key: String, is parent: String) -> [String] {
        objects.compactMap { path, ifaces in ifaces[interface]?[key]?.string == parent ? path : nil }.sorted()
    }

    /// The attribute handle at the end of a GATT object's path (`service000c` → 0x000c), or 0.
    static func handle(of path: String) -> UInt16 {
        guard let last = path.split(separator: "/").last, last.count > 4 else { return 0 }
        return UInt16(last.suffix(4), radix: 16) ?? 0
    }

    private static func properties(_ value: DBusValue) -> Properties {
        (value.unwrapped.stringDictionary ?? [:]).mapValues(\.unwrapped)
    }
}
