// Saved state for state restoration: a manager created with a restore identifier saves what it publishes
// and advertises, and a later manager with the same identifier (another run of the process) gets it back
// through willRestoreState. Files live in $OCB_STATE_DIR, else $XDG_STATE_HOME/OpenCoreBluetooth, else
// ~/.local/state/OpenCoreBluetooth; written atomically.
import Foundation
import BLEWire

struct RestoredPeripheralState {
    var services: [CBMutableService]
    var advertisement: [String: Any]?
}

struct RestoredCentralState {
    var peripherals: [CBPeripheral]
    var scanning: Bool
    var scanServices: [CBUUID]?
    var scanOptions: [String: Any]?
}

struct SavedCentralState {
    /// The peripherals, with the identifiers they had (nil in files written before identifiers were saved).
    var peripherals: [(address: BluetoothAddress, identifier: UUID?)]
    var scanning: Bool
    var scanServices: [CBUUID]?
    var scanOptions: [String: Any]?
}

enum RestorationStore {
    static func saveCentral(
        id: String, peripherals: [(address: BluetoothAddress, identifier: UUID)], scanning: Bool,
        scanServices: [CBUUID]?, scanOptions: [String: Any]?
    ) {
        var root: [String: Any] = [
            "version": 1, "scanning": scanning,
            "peripherals": peripherals.map {
                [
                    "address": $0.address.string, "random": $0.address.type.isRandom,
                    "identifier": $0.identifier.uuidString,
                ]
            },
        ]
        if let scanServices { root["scanServices"] = scanServices.map(\.uuidString) }
        if let dup = scanOptions?[CBCentralManagerScanOptionAllowDuplicatesKey] as? Bool { root["allowDuplicates"] = dup }
        write(root, to: file("central", id), id: id)
    }

    static func loadCentral(id: String) -> SavedCentralState? {
        guard let data = try? Data(contentsOf: file("central", id)),
            let root = try? JSONSerialization.jsonObject(with: data) as? [String: Any], root["version"] as? Int == 1
        else { return nil }
        let peripherals = ((root["peripherals"] as? [[String: Any]]) ?? []).compactMap { p -> (address: BluetoothAddress, identifier: UUID?)? in
            guard let s = p["address"] as? String,
                let a = BluetoothAddress(string: s, type: (p["random"] as? Bool ?? false) ? .random : .public)
            else { return nil }
            return (a, (p["identifier"] as? String).flatMap(UUID.init(uuidString:)))
        }
        let services = (root["scanServices"] as? [String])?.compactMap { CBUUID.bluetoothUUID(parsing: $0).map { CBUUID($0) } }
        let options: [String: Any]? = (root["allowDuplicates"] as? Bool).map { [CBCentralManagerScanOptionAllowDuplicatesKey: $0] }
        // willRestoreState only when something was saved: no peripheral and no scan is no state.
        guard !peripherals.isEmpty || root["scanning"] as? Bool == true else { return nil }
        return SavedCentralState(peripherals: peripherals, scanning: root["scanning"] as? Bool ?? false, scanServices: services, scanOptions: options)
    }

    static func write(_ root: [String: Any], to url: URL, id: String) {
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let data = try JSONSerialization.data(withJSONObject: root, options: [.sortedKeys])
            try data.write(to: url, options: .atomic)
        } catch {
            CBLog.warning("could not save the restoration state \(id): \(error)")
        }
    }

    static var directory: URL {
        let env = ProcessInfo.processInfo.environment
        if let d = env["OCB_STATE_DIR"] { return URL(fileURLWithPath: d) }
        if let x = env["XDG_STATE_HOME"] { return URL(fileURLWithPath: x).appendingPathComponent("OpenCoreBluetooth") }
        return FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".local/state/OpenCoreBluetooth")
    }

    static func file(_ kind: String, _ id: String) -> URL {
        let safe = id.map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." ? $0 : "_" }
        return directory.appendingPathComponent("\(kind)-\(String(safe)).json")
    }

    static func savePeripheral(id: String, services: [CBMutableService], advertisement: [String: Any]?) {
        func hex(_ d: Data?) -> Any { d.map { [UInt8]($0).hexString } ?? NSNull() }
        let list: [[String: Any]] = services.map { s in
            [
                "uuid": s.uuid.uuidString, "primary": s.isPrimary,
                "includes": (s.includedServices ?? []).compactMap { inc in services.firstIndex { $0 === inc } },
                "characteristics": (s.characteristics ?? []).compactMap { $0 as? CBMutableCharacteristic }.map { c -> [String: Any] in
                    [
                        "uuid": c.uuid.uuidString, "properties": Int(c.properties.rawValue), "permissions": Int(c.permissions.rawValue),
                        "value": hex(c.value),
                        "descriptors": (c.descriptors ?? []).map { d -> [String: Any] in
                            if let text = d.value as? String { return ["uuid": d.uuid.uuidString, "string": text] }
                            return ["uuid": d.uuid.uuidString, "data": hex(d.value as? Data)]
                        },
                    ]
                },
            ]
        }
        var root: [String: Any] = ["version": 1, "services": list]
        if let a = advertisement {
            var adv: [String: Any] = [:]
            if let n = a[CBAdvertisementDataLocalNameKey] as? String { adv["name"] = n }
            adv["serviceUUIDs"] = ((a[CBAdvertisementDataServiceUUIDsKey] as? [CBUUID]) ?? []).map(\.uuidString)
            root["advertisement"] = adv
        }
        write(root, to: file("peripheral", id), id: id)
    }

    static func loadPeripheral(id: String) -> RestoredPeripheralState? {
        guard let data = try? Data(contentsOf: file("peripheral", id)),
            let root = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            root["version"] as? Int == 1, let list = root["services"] as? [[String: Any]]
        else { return nil }
        func uuid(_ v: Any?) -> CBUUID? { (v as? String).flatMap { CBUUID.bluetoothUUID(parsing: $0) }.map { CBUUID($0) } }
        func bytes(_ v: Any?) -> Data? { (v as? String).flatMap { [UInt8](hexString: $0) }.map { Data($0) } }
        var services: [CBMutableService] = []
        for s in list {
            guard let u = uuid(s["uuid"]) else { return nil }
            let service = CBMutableService(type: u, primary: s["primary"] as? Bool ?? true)
            service.characteristics = ((s["characteristics"] as? [[String: Any]]) ?? []).compactMap { c in
                guard let cu = uuid(c["uuid"]) else { return nil }
                let ch = CBMutableCharacteristic(
                    type: cu, properties: CBCharacteristicProperties(rawValue: UInt(c["properties"] as? Int ?? 0)),
                    value: bytes(c["value"]), permissions: CBAttributePermissions(rawValue: UInt(c["permissions"] as? Int ?? 0)))
                ch.descriptors = ((c["descriptors"] as? [[String: Any]]) ?? []).compactMap { d in
                    guard let du = uuid(d["uuid"]) else { return nil }
                    if let text = d["string"] as? String { return CBMutableDescriptor(type: du, value: text) }
                    return CBMutableDescriptor(type: du, value: bytes(d["data"]) ?? Data())
                }
                return ch
            }
            services.append(service)
        }
        for (i, s) in list.enumerated() {
            services[i].includedServices = ((s["includes"] as? [Int]) ?? []).filter { $0 < i }.map { services[$0] }
        }
        var advertisement: [String: Any]?
        if let a = root["advertisement"] as? [String: Any] {
            var adv: [String: Any] = [CBAdvertisementDataServiceUUIDsKey: ((a["serviceUUIDs"] as? [String]) ?? []).compactMap { uuid($0) }]
            if let n = a["name"] as? String { adv[CBAdvertisementDataLocalNameKey] = n }
            advertisement = adv
        }
        // willRestoreState only when something was saved: nothing published and no advertising is no state.
        guard !services.isEmpty || advertisement != nil else { return nil }
        return RestoredPeripheralState(services: services, advertisement: advertisement)
    }
}
