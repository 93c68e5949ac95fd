// `ble serve FILE.json` on BLE_TRANSPORT=bluez[:hciN]: the file's services through a Core Bluetooth peripheral
// manager on the bluez backend (each service an application registered with GattManager1.RegisterApplication), the
// advertisement through LEAdvertisingManager1. bluetoothd keeps the adapter, its own GAP and GATT services and the
// handles: a file's fixed handles, its include declarations and descriptors other than 2901/2904 (Core Bluetooth's
// rule for local descriptors) are not served, each with a warning. Every value is answered here from the file's value
// and what clients wrote (CBATTRequest), so that writes are read back, as on hci-socket.
import ArgumentParser
import CoreBluetooth
import Foundation
import BLEWire
import BLEGATT

extension BlueZTool {
    static func serve(_ o: BlueZOptions, _ c: ServeCommand, _ description: GATTDatabaseFile, file: String) throws {
        // (The parsed file keeps its includes to itself until it builds a database: read them from the JSON.)
        let raw = (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: file)))) as? [String: Any]
        let including = Set(
            ((raw?["services"] as? [[String: Any]]) ?? []).enumerated().compactMap { i, s in ((s["includes"] as? [Any])?.isEmpty == false) ? i : nil })
        let plan = BlueZServePlan(description, including: including)
        for w in plan.warnings { warn("warning: \(file): \(w)") }
        guard !plan.services.isEmpty else { throw ToolError("\(file): no service to serve through bluetoothd (its GAP and GATT services are its own)") }
        // bluetoothd there and the adapter on, with the address it advertises from.
        let devices = try open(o)
        let address = devices.adapterAddress
        devices.close()
        let server = BlueZServer(
            plan: plan, name: description.advertise.name, services: description.advertise.serviceUUIDs.map { CBUUID($0) }, transport: transportName(o), address: address)
        let manager = CBPeripheralManager(delegate: server, queue: server.queue, options: nil, bluez: o)
        manager.pairingAgent = TerminalPairingAgent(capability(c.io.capability), autoAccept: c.yes || c.io.capability == .noInputNoOutput)
        server.notifyEvery = c.notifyEvery
        if c.duration > 0 { DispatchQueue.main.asyncAfter(deadline: .now() + c.duration) { Foundation.exit(0) } }
        withExtendedLifetime(manager) { dispatchMain() }
    }
}

/// What of a database file bluetoothd can serve, as Core Bluetooth services, and what it cannot, as warnings.
struct BlueZServePlan {
    struct Characteristic {
        var uuid: BluetoothUUID
        var properties: CBCharacteristicProperties
        var permissions: CBAttributePermissions
        var value: [UInt8]
        var descriptors: [(BluetoothUUID, [UInt8])]
    }
    struct Service {
        var uuid: BluetoothUUID
        var primary: Bool
        var characteristics: [Characteristic]
    }

    var services: [Service] = []
    var warnings: [String] = []

    /// `including`: the indexes of the services whose includes the file names.
    init(_ file: GATTDatabaseFile, including: Set<Int> = []) {
        if file.isExact { warnings.append("bluetoothd chooses the handles: the file's fixed handles are not kept") }
        for (i, s) in file.services.enumerated() {
            let at = "services[\(i)]"
            // bluetoothd serves GAP and GATT itself.
            if s.uuid == BluetoothUUID(0x1800) || s.uuid == BluetoothUUID(0x1801) {
                warnings.append("\(at): \(s.uuid.uuidString) is bluetoothd's own service: not served from the file")
                continue
            }
            if !s.includedServices.isEmpty || including.contains(i) {
                warnings.append("\(at): its includes are not served (each service is an application of its own for bluetoothd)")
            }
            // A secondary service is reached only through an include, which bluetoothd cannot make across applications.
            if !s.isPrimary { warnings.append("\(at): served as a primary service (nothing can include it through bluetoothd)") }
            var service = Service(uuid: s.uuid, primary: true, characteristics: [])
            for (j, c) in s.characteristics.enumerated() {
                let cat = "\(at).characteristics[\(j)]"
                var props = CBCharacteristicProperties(rawValue: UInt(c.properties.rawValue))
                // Core Bluetooth refuses both on local characteristics; bluetoothd writes the declaration itself.
                props.remove(.broadcast)
                props.remove(.extendedProperties)
                var permissions = CBAttributePermissions(rawValue: UInt(c.permissions.rawValue & 0x0F))
                if c.permissions.contains(.readAuthenticationRequired) { permissions.insert(.readEncryptionRequired) }
                if c.permissions.contains(.writeAuthenticationRequired) { permissions.insert(.writeEncryptionRequired) }
                var descriptors: [(BluetoothUUID, [UInt8])] = []
                for (k, d) in c.descriptors.enumerated() {
                    if d.uuid == BluetoothUUID(0x2901) || d.uuid == BluetoothUUID(0x2904) {
                        descriptors.append((d.uuid, d.value ?? []))
                    } else if d.uuid != BluetoothUUID(0x2902) && d.uuid != BluetoothUUID(0x2900) {
                        // (2902 and 2900: bluetoothd adds them from the flags.)
                        warnings.append("\(cat).descriptors[\(k)]: \(d.uuid.uuidString) is not served (a local descriptor is 2901 or 2904 in Core Bluetooth)")
                    }
                }
                service.characteristics.append(Characteristic(uuid: c.uuid, properties: props, permissions: permissions, value: c.value ?? [], descriptors: descriptors))
            }
            services.append(service)
        }
    }
}

/// The peripheral manager's delegate for `ble serve` on bluez: adds the services, advertises once they are in,
/// answers reads and writes from the values it keeps, logs what clients do, and notifies every --notify-every seconds.
final class BlueZServer: NSObject, CBPeripheralManagerDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "ble-serve-bluez")
    let plan: BlueZServePlan
    let name: String?
    let advertised: [CBUUID]
    let transport: String
    let address: String?
    var notifyEvery: Double = 0

    // On `queue`.
    private var values: [ObjectIdentifier: [UInt8]] = [:]
    private var characteristics: [CBMutableCharacteristic] = []
    private var services: [CBMutableService] = []
    private var pending = 0
    private var counter: UInt8 = 0
    private var ticking = false
    private var wasOn = false

    init(plan: BlueZServePlan, name: String?, services: [CBUUID], transport: String, address: String?) {
        self.plan = plan
        self.name = name
        advertised = services
        self.transport = transport
        self.address = address
    }

    func peripheralManagerDidUpdateState(_ pm: CBPeripheralManager) {
        switch pm.state {
        case .poweredOn:
            // (Again, after the adapter came back: bluetoothd forgot our applications and advertisement.)
            if wasOn { say("controller on") }
            wasOn = true
            publish(pm)
        case .poweredOff, .unsupported, .unauthorized:
            if wasOn {
                say("controller \(pm.state == .poweredOff ? "off" : "gone")")
            } else if pm.state != .poweredOff {
                warn("Error: \(transport): no bluetoothd with this adapter on the system bus")
                Foundation.exit(1)
            } else {
                warn("Error: \(transport): the adapter is powered off (bluetoothctl power on)")
                Foundation.exit(1)
            }
        default:
            break
        }
    }

    private func publish(_ pm: CBPeripheralManager) {
        services = []
        characteristics = []
        values = [:]
        for s in plan.services {
            let service = CBMutableService(type: CBUUID(s.uuid), primary: s.primary)
            var list: [CBMutableCharacteristic] = []
            for c in s.characteristics {
                // Dynamic (value nil): reads and writes come here, so that what a client writes is read back.
                let ch = CBMutableCharacteristic(type: CBUUID(c.uuid), properties: c.properties, value: nil, permissions: c.permissions)
                ch.descriptors = c.descriptors.map { uuid, value in
                    CBMutableDescriptor(type: CBUUID(uuid), value: uuid == BluetoothUUID(0x2901) ? String(decoding: value, as: UTF8.self) as Any : Data(value) as Any)
                }
                values[ObjectIdentifier(ch)] = c.value
                list.append(ch)
            }
            service.characteristics = list
            characteristics += list
            services.append(service)
        }
        pending = services.count
        for s in services { pm.add(s) }
    }

    func peripheralManager(_ pm: CBPeripheralManager, didAdd service: CBService, error: (any Error)?) {
        if let error { say("adding service \(service.uuid.uuidString) failed: \((error as NSError).localizedDescription)") }
        pending -= 1
        guard pending == 0 else { return }
        var ad: [String: Any] = [CBAdvertisementDataServiceUUIDsKey: advertised]
        if let name { ad[CBAdvertisementDataLocalNameKey] = name }
        pm.startAdvertising(ad)
        if notifyEvery > 0 && !ticking {
            ticking = true
            tick(pm)
        }
    }

    func peripheralManagerDidStartAdvertising(_ pm: CBPeripheralManager, error: (any Error)?) {
        if let error { return say("advertising failed: \((error as NSError).localizedDescription)") }
        say("advertising \"\(name ?? "(no name)")\"" + (address.map { " as \($0)" } ?? "") + " on \(transport) (through bluetoothd)")
    }

    func peripheralManager(_ pm: CBPeripheralManager, didReceiveRead request: CBATTRequest) {
        let value = values[ObjectIdentifier(request.characteristic)] ?? []
        guard request.offset <= value.count else { return pm.respond(to: request, withResult: .invalidOffset) }
        request.value = Data(value[request.offset...])
        pm.respond(to: request, withResult: .success)
    }

    func peripheralManager(_ pm: CBPeripheralManager, didReceiveWrite requests: [CBATTRequest]) {
        for r in requests {
            let key = ObjectIdentifier(r.characteristic)
            var value = values[key] ?? []
            let new = [UInt8](r.value ?? Data())
            guard r.offset <= value.count, r.offset + new.count <= 512 else { return pm.respond(to: requests[0], withResult: .invalidOffset) }
            value = Array(value.prefix(r.offset)) + new
            values[key] = value
            say("write \(r.characteristic.uuid.uuidString) offset \(r.offset): \(ValueDecoding.hex(new))")
        }
        if let first = requests.first { pm.respond(to: first, withResult: .success) }
    }

    func peripheralManager(_ pm: CBPeripheralManager, central: CBCentral, didSubscribeTo characteristic: CBCharacteristic) {
        say("subscription \(characteristic.uuid.uuidString): on")
    }

    func peripheralManager(_ pm: CBPeripheralManager, central: CBCentral, didUnsubscribeFrom characteristic: CBCharacteristic) {
        say("subscription \(characteristic.uuid.uuidString): off")
    }

    /// Each notify/indicate characteristic's value with a counter octet, to its subscribers (bluetoothd's).
    private func tick(_ pm: CBPeripheralManager) {
        counter &+= 1
        for c in characteristics where !c.properties.isDisjoint(with: [.notify, .indicate]) && c.isNotifying {
            _ = pm.updateValue(Data((values[ObjectIdentifier(c)] ?? []) + [counter]), for: c, onSubscribedCentrals: nil)
        }
        queue.asyncAfter(deadline: .now() + notifyEvery) { [weak self] in self?.tick(pm) }
    }
}
