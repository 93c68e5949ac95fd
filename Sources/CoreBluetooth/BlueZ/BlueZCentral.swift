// The central role on BlueZ (BLE_TRANSPORT=bluez or bluez:hciN): a CBCentralManager whose controller belongs to
// bluetoothd, reached over the system bus with our DBus module, so the keyboard, the mouse and the headphones keep
// working while a Core Bluetooth program runs. The façade keeps its API, its model objects and its delivery rules;
// only the work below it changes: where the native path drives LEHost, the manager and its peripherals hand the
// call to this object (chosen at the manager's init), which maps it onto BlueZ's D-Bus API (doc/org.bluez.*.rst):
//
//   state                      Adapter1.Powered of the adapter, and the object manager: an adapter that appears
//                              or disappears (or bluetoothd leaving the bus) moves the manager between .poweredOn,
//                              .poweredOff and .unsupported
//   scanForPeripherals         Adapter1.SetDiscoveryFilter {Transport: le, DuplicateData, UUIDs} + StartDiscovery
//   didDiscover                Device1's properties (Name, UUIDs, ServiceData, ManufacturerData, TxPower, RSSI) as
//                              they are added or change, in the native path's dictionary keys
//   connect / cancel           Device1.Connect / Disconnect; didConnect once ServicesResolved, as the native path
//                              announces it once the primary services are known
//   discover…                  the GattService1 / GattCharacteristic1 / GattDescriptor1 objects under the device
//   readValue / writeValue     ReadValue / WriteValue {type: request | command} (BlueZ does long reads and writes)
//   setNotifyValue             AcquireNotify's socket where BlueZ offers it (NotifyAcquired, 5.46+, notify only):
//                              each packet a value → didUpdateValueFor; closing it stops them. Else (indications,
//                              older BlueZ, AcquireNotify refused) StartNotify / StopNotify and PropertiesChanged Value
//   maximumWriteValueLength    GattCharacteristic1.MTU
//   errors                     BlueZErrors: org.bluez.Error.* → CBError / CBATTError, BlueZ's text in the description
//
// Threading: everything here runs on `queue`, a serial queue of the backend's own, which is also the D-Bus
// connection's handler queue: replies and signals arrive on it. Calls from the app hop onto it at once; results
// reach the app through the manager's and the peripheral's usual delivery on the delegate queue. Nothing waits on
// the bus: connecting to it happens on `queue` too, after the manager's init has returned.
import Foundation
import BLEWire
import DBus
#if canImport(Glibc)
import Glibc
#endif

/// Where the BlueZ backend finds bluetoothd.
package struct BlueZOptions: Sendable, Equatable {
    /// The bus bluetoothd is on (the system bus: DBUS_SYSTEM_BUS_ADDRESS or /run/dbus/system_bus_socket).
    package var busAddress: String
    /// The adapter ("hci0"); nil: the first one BlueZ lists.
    package var adapter: String?

    package init(busAddress: String = DBusConnection.systemBusAddress, adapter: String? = nil) {
        self.busAddress = busAddress
        self.adapter = adapter
    }

    /// `bluez` or `bluez:hciN` in BLE_TRANSPORT; nil for any other transport.
    package static func fromEnvironment() -> BlueZOptions? {
        guard let v = ProcessInfo.processInfo.environment["BLE_TRANSPORT"] else { return nil }
        return parse(v)
    }

    package static func parse(_ spec: String) -> BlueZOptions? {
        if spec == "bluez" { return BlueZOptions() }
        guard spec.hasPrefix("bluez:") else { return nil }
        let name = String(spec.dropFirst(6))
        guard name.hasPrefix("hci"), Int(name.dropFirst(3)) != nil else { return nil }
        return BlueZOptions(adapter: name)
    }
}

final class BlueZCentral: @unchecked Sendable {
    let options: BlueZOptions
    let queue = DispatchQueue(label: "opencorebluetooth.bluez")
    private weak var manager: CBCentralManager?
    /// Called on `queue` with each new state (the peripheral backend rides on a session of its own, made without a
    /// central manager).
    var onStateChange: (@Sendable (CBManagerState) -> Void)?

    // Queue-confined.
    private(set) var bus: DBusConnection?
    var tree = BlueZObjectTree()
    private var bluezOnBus = false
    /// The app's pairing agent, exported and registered while bluetoothd is on the bus (BlueZAgent).
    var pairing: BlueZAgent?
    /// Waits for the agent's registration once bluetoothd answers.
    var pendingAgentDone: (@Sendable (DBusError?) -> Void)?
    var bluezReady: Bool { bluezOnBus }
    private(set) var adapterPath: String?
    private(set) var state: CBManagerState = .unknown
    private var scan: Scan?
    private var discovering = false
    private var peripherals = WeakTable<String, CBPeripheral>()
    private var devicePaths: [UUID: String] = [:]
    private var links: [String: Link] = [:]
    private var gatt: [String: GATTObjects] = [:]
    private var closed = false

    private struct Scan {
        var services: Set<CBUUID>?
        var allowDuplicates: Bool
        var reported: Set<String> = []
        /// Which scan this is (a reply to an earlier scan's SetDiscoveryFilter does not count for this one).
        var generation: Int
        /// bluetoothd has our filter's UUIDs: what it reports from now on matched them in the advertisement itself.
        var bluezFilters = false
    }
    private var scanGeneration = 0

    private struct Link {
        weak var peripheral: CBPeripheral?
        var phase: Phase
        var replied = false
        var disconnectReason: String?
        enum Phase { case connecting, connected }
    }

    /// The CB objects made for a device's GATT objects, by path and back.
    private struct GATTObjects {
        var services: [String: CBService] = [:]
        var characteristics: [String: CBCharacteristic] = [:]
        var descriptors: [String: CBDescriptor] = [:]
        var paths: [ObjectIdentifier: String] = [:]
        var notifying: Set<String> = []
        /// Reads in flight per characteristic, and the value changes that came meanwhile (BlueZ also announces
        /// a value it read as a change of Value: that echo must not look like a notification).
        var readsInFlight: [String: Int] = [:]
        var heldDuringRead: [String: [[UInt8]]] = [:]
        var readEcho: [String: [UInt8]] = [:]
        /// How writes without response go, per characteristic (AcquireWrite's socket where BlueZ offers it).
        var writeChannels: [String: WriteChannel] = [:]
        /// Notifications through AcquireNotify's socket, per characteristic (where BlueZ offers it).
        var notifySockets: [String: BlueZAcquiredNotify] = [:]
    }

    enum WriteChannel {
        /// AcquireWrite asked; the values written meanwhile, in order.
        case acquiring([[UInt8]])
        case socket(BlueZAcquiredWrite)
        /// WriteValue {type: command} (no WriteAcquired property: BlueZ before 5.46, or AcquireWrite refused).
        case dbus
    }

    static let maximumHeldValues = 256

    init(options: BlueZOptions) { self.options = options }

    // MARK: Bus and state

    func start(_ m: CBCentralManager?) {
        manager = m
        queue.async { [self] in
            let connection: DBusConnection
            do {
                connection = try DBusConnection(address: options.busAddress, queue: queue, timeout: 5)
            } catch {
                CBLog.warning("BlueZ backend: cannot reach the system bus at \(options.busAddress): \(error)")
                return setState(.unsupported)
            }
            guard !closed else { return connection.close() }
            bus = connection
            connection.onSignal { [weak self] s in self?.signal(s) }
            connection.onDisconnect { [weak self] e in self?.busLost(e) }
            for rule in [
                "type='signal',sender='org.bluez',interface='org.freedesktop.DBus.ObjectManager'",
                "type='signal',sender='org.bluez',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'",
                "type='signal',sender='org.bluez',interface='org.bluez.Device1',member='Disconnected'",
                "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='org.bluez'",
            ] {
                connection.addMatch(rule) { r in if case let .failure(e) = r { CBLog.warning("BlueZ backend: AddMatch failed: \(e)") } }
            }
            loadObjects()
        }
    }

    func close() {
        queue.async { [self] in
            closed = true
            // BlueZ ends a client's discovery session and notification sessions when it leaves the bus.
            bus?.close()
            bus = nil
        }
    }

    private func loadObjects() {
        call("/", "org.freedesktop.DBus.ObjectManager", "GetManagedObjects") { [self] r in
            switch r {
            case let .success(m):
                bluezOnBus = true
                tree.load(managedObjects: m.body.first ?? .bytes([]))
                // bluetoothd (again) on the bus: it forgets agents when it goes.
                if let pairing, !pairing.registered {
                    let done = pendingAgentDone
                    pendingAgentDone = nil
                    pairing.register(done)
                }
            case let .failure(e):
                bluezOnBus = false
                tree.clear()
                CBLog.warning("BlueZ backend: bluetoothd does not answer on the bus (\(e)); is it running?")
            }
            updateState()
        }
    }

    private func busLost(_ e: DBusError) {
        guard !closed else { return }
        CBLog.warning("BlueZ backend: the system bus connection ended: \(e)")
        bus = nil
        bluezOnBus = false
        pairing?.forgetRegistration()
        tree.clear()
        updateState()
    }

    /// The adapter the manager uses: the one named, else the first BlueZ lists.
    private func chooseAdapter() -> String? {
        let adapters = tree.paths(with: BlueZObjectTree.adapterInterface)
        if let name = options.adapter { return adapters.first { $0.hasSuffix("/" + name) } }
        return adapters.first
    }

    private func updateState() {
        let path = bluezOnBus ? chooseAdapter() : nil
        let new: CBManagerState
        if let path {
            new = tree[path, BlueZObjectTree.adapterInterface]?["Powered"]?.bool == true ? .poweredOn : .poweredOff
        } else {
            new = .unsupported
        }
        if path != adapterPath || new != .poweredOn { dropLinks() }
        adapterPath = path
        setState(new)
    }

    private func setState(_ s: CBManagerState) {
        guard s != state else { return }
        state = s
        manager?.hostPowerChanged(s)
        onStateChange?(s)
    }

    /// The adapter is off or gone: links, scans and GATT objects are forgotten; the manager resets its
    /// peripherals without didDisconnect, as on iOS.
    private func dropLinks() {
        links.removeAll()
        gatt.removeAll()
        scan = nil
        discovering = false
    }

    // MARK: Signals

    private func signal(_ m: DBusMessage) {
        switch (m.interface, m.member) {
        case ("org.freedesktop.DBus.ObjectManager", "InterfacesAdded"):
            guard m.body.count >= 2, let path = m.body[0].string else { return }
            // bluetoothd is there after all (it answered our first question before it had its objects).
            if !bluezOnBus { return loadObjects() }
            tree.add(path: path, interfaces: m.body[1])
            if path.split(separator: "/").count <= 3 { updateState() }
            if tree[path, BlueZObjectTree.deviceInterface] != nil,
                m.body[1].stringDictionary?[BlueZObjectTree.deviceInterface] != nil
            {
                deviceSeen(path, keys: Set(tree[path, BlueZObjectTree.deviceInterface]!.keys))
            }
        case ("org.freedesktop.DBus.ObjectManager", "InterfacesRemoved"):
            guard m.body.count >= 2, let path = m.body[0].string else { return }
            let names = (m.body[1].arrayItems ?? []).compactMap(\.string)
            if names.contains(BlueZObjectTree.deviceInterface) {
                linkLost(path)
                forget(device: path)
            }
            tree.remove(path: path, interfaces: names)
            if names.contains(BlueZObjectTree.adapterInterface) { updateState() }
        case ("org.freedesktop.DBus.Properties", "PropertiesChanged"):
            guard let path = m.path, m.body.count >= 2, let interface = m.body[0].string else { return }
            let invalidated = (m.body.count > 2 ? m.body[2].arrayItems ?? [] : []).compactMap(\.string)
            tree.change(path: path, interface: interface, changed: m.body[1], invalidated: invalidated)
            let changed = m.body[1].stringDictionary ?? [:]
            switch interface {
            case BlueZObjectTree.adapterInterface:
                updateState()
            case BlueZObjectTree.deviceInterface:
                if changed["Connected"]?.bool == false { linkLost(path) }
                if changed["ServicesResolved"]?.bool == true { servicesResolved(path) }
                deviceSeen(path, keys: Set(changed.keys))
            case BlueZObjectTree.characteristicInterface:
                if let v = changed["Value"]?.byteArray { valueChanged(path, v) }
                if let mtu = changed["MTU"]?.integer { mtuChanged(path, mtu) }
            default:
                break
            }
        case ("org.bluez.Device1", "Disconnected"):
            // BlueZ 5.70+: the reason comes just before Connected turns false.
            guard let path = m.path, let reason = m.body.first?.string else { return }
            links[path]?.disconnectReason = reason
        case ("org.freedesktop.DBus", "NameOwnerChanged"):
            guard m.body.count >= 3, m.body[0].string == "org.bluez" else { return }
            if m.body[2].string?.isEmpty ?? true {
                CBLog.warning("BlueZ backend: bluetoothd left the bus")
                bluezOnBus = false
                pairing?.forgetRegistration()
                for path in Array(links.keys) { linkLost(path) }
                tree.clear()
                updateState()
            } else {
                loadObjects()
            }
        default:
            break
        }
    }

    // MARK: Scanning

    func startScan(services: [CBUUID]?, allowDuplicates: Bool) {
        queue.async { [self] in
            guard state == .poweredOn, let adapter = adapterPath else { return scanFailed("the adapter is not powered on") }
            let wanted = services.flatMap { $0.isEmpty ? nil : Set($0) }
            scanGeneration += 1
            let generation = scanGeneration
            scan = Scan(services: wanted, allowDuplicates: allowDuplicates, generation: generation)
            var filter: [String: DBusValue] = ["Transport": .string("le"), "DuplicateData": .boolean(allowDuplicates)]
            if let wanted {
                filter["UUIDs"] = .array(.string, wanted.map { .string($0.bluetoothUUID.uuid128String.lowercased()) }.sorted { $0.string! < $1.string! })
            }
            call(adapter, BlueZObjectTree.adapterInterface, "SetDiscoveryFilter", [.stringVariantDictionary(filter)]) { [self] r in
                if case let .failure(e) = r { return CBLog.warning("BlueZ backend: SetDiscoveryFilter failed: \(e)") }
                if wanted != nil, scan?.generation == generation { scan?.bluezFilters = true }
            }
            guard !discovering else { return reportDevicesInView() }
            discovering = true
            call(adapter, BlueZObjectTree.adapterInterface, "StartDiscovery") { [self] r in
                if case let .failure(e) = r {
                    if case let .remote(name, _) = e, name == "org.bluez.Error.InProgress" { return reportDevicesInView() }
                    discovering = false
                    return scanFailed("StartDiscovery failed: \(e)")
                }
                reportDevicesInView()
            }
        }
    }

    /// The devices bluetoothd has in view as the scan starts: those with an RSSI, which BlueZ sets as a device's
    /// advertisements arrive during a discovery and clears when the discovery ends. A device another program's
    /// discovery (a desktop's Bluetooth panel) has already found is not announced again while it advertises the same
    /// data (the kernel filters duplicates within a discovery; BlueZ signals RSSI only when it moves): without this it
    /// would never reach the app, as iOS reports every device in range once a scan starts.
    private func reportDevicesInView() {
        guard scan != nil, let adapter = adapterPath else { return }
        for path in tree.paths(with: BlueZObjectTree.deviceInterface) where path.hasPrefix(adapter + "/") {
            guard tree[path, BlueZObjectTree.deviceInterface]?["RSSI"] != nil else { continue }
            deviceSeen(path, keys: ["RSSI"], duringOurDiscovery: false)
        }
    }

    func stopScan() {
        queue.async { [self] in
            scan = nil
            guard discovering, let adapter = adapterPath else { return }
            discovering = false
            call(adapter, BlueZObjectTree.adapterInterface, "StopDiscovery") { [self] r in
                // Closing the connection ends the discovery session too (bluetoothd watches its owner).
                if case let .failure(e) = r, !closed { CBLog.warning("BlueZ backend: StopDiscovery failed: \(e)") }
            }
        }
    }

    private func scanFailed(_ why: String) {
        CBLog.warning("BlueZ backend: cannot scan: \(why)")
        scan = nil
        manager?.scanFailed()
    }

    /// A device was added or its advertised properties changed: a discovery, if the scan wants it.
    /// `duringOurDiscovery`: BlueZ announced it now, so it passed the discovery filter we set (when no other program's
    /// discovery widened it); false for what was in view before (reportDevicesInView).
    private func deviceSeen(_ path: String, keys: Set<String>, duringOurDiscovery: Bool = true) {
        guard var s = scan, let adapter = adapterPath, path.hasPrefix(adapter + "/"),
            let props = tree[path, BlueZObjectTree.deviceInterface], let rssi = props["RSSI"]?.integer
        else { return }
        // Seen on the air now: BlueZ sets RSSI (and the advertised data) as advertisements arrive.
        guard !keys.isDisjoint(with: ["RSSI", "ManufacturerData", "ServiceData", "TxPower", "Name", "UUIDs"]) else { return }
        let advertisement = BlueZAdvertisement.dictionary(props)
        if let wanted = s.services {
            let offered = Set((advertisement[CBAdvertisementDataServiceUUIDsKey] as? [CBUUID]) ?? [])
                .union(((advertisement[CBAdvertisementDataServiceDataKey] as? [CBUUID: Data]) ?? [:]).keys)
            if wanted.isDisjoint(with: offered) {
                // Of a device it has connected to before, BlueZ's UUIDs are the services it found in its database
                // (stored, maybe older than what it advertises now), not the advertised ones: then the filter bluetoothd
                // applied to the advertisement itself, with our UUIDs, is the one that can say.
                guard duringOurDiscovery, s.bluezFilters, BlueZAdvertisement.listsDatabaseServices(props) else { return }
            }
        }
        if !s.allowDuplicates {
            // Bounded as the native scan is: past the bound a device still around is reported once more.
            if s.reported.count >= 4096 { s.reported.removeAll(keepingCapacity: true) }
            guard s.reported.insert(path).inserted else { return }
            scan = s
        }
        guard let p = peripheral(forDevice: path), let m = manager else { return }
        m.deliverDiscovery(p, advertisement: advertisement, rssi: NSNumber(value: Int(rssi)))
    }

    func peripheral(forDevice path: String) -> CBPeripheral? {
        if let p = peripherals[path] { return p }
        guard let m = manager, let props = tree[path, BlueZObjectTree.deviceInterface],
            let address = BlueZAdvertisement.address(props)
        else { return nil }
        let id = BlueZAdvertisement.identifier(for: address, adapter: options.adapter ?? "")
        let p = m.existingOrNewPeripheral(identifier: id, address: address, name: props["Name"]?.string)
        peripherals[path] = p
        devicePaths[id] = path
        return p
    }

    /// A device BlueZ removed (temporary devices go some time after discovery stops): its path is forgotten unless
    /// the app still holds its peripheral, so a long scan among rotating addresses does not grow memory.
    private func forget(device path: String) {
        guard peripherals[path] == nil, let props = tree[path, BlueZObjectTree.deviceInterface],
            let address = BlueZAdvertisement.address(props)
        else { return }
        devicePaths[BlueZAdvertisement.identifier(for: address, adapter: options.adapter ?? "")] = nil
    }

    // MARK: Retrieval

    /// The devices BlueZ knows (paired, cached or seen) with these identifiers, in the order asked. A short hop onto
    /// `queue`, which never waits on the bus.
    func retrieve(_ identifiers: [UUID]) -> [CBPeripheral] {
        queue.sync {
            guard let adapter = adapterPath else { return [] }
            var byIdentifier: [UUID: String] = [:]
            for path in tree.paths(with: BlueZObjectTree.deviceInterface) where path.hasPrefix(adapter + "/") {
                guard let props = tree[path, BlueZObjectTree.deviceInterface], let a = BlueZAdvertisement.address(props) else { continue }
                byIdentifier[BlueZAdvertisement.identifier(for: a, adapter: options.adapter ?? "")] = path
            }
            return identifiers.compactMap { id in byIdentifier[id].flatMap { peripheral(forDevice: $0) } }
        }
    }

    /// Devices connected to the adapter (by this process or by the system: a keyboard, a watch) that offer any of
    /// these services, as iOS returns links other apps made; disconnected for this manager until it connects them.
    func retrieveConnected(withServices services: [CBUUID]) -> [CBPeripheral] {
        let wanted = Set(services)
        return queue.sync {
            guard let adapter = adapterPath else { return [] }
            return tree.paths(with: BlueZObjectTree.deviceInterface).compactMap { path -> CBPeripheral? in
                guard path.hasPrefix(adapter + "/"), let props = tree[path, BlueZObjectTree.deviceInterface],
                    props["Connected"]?.bool == true
                else { return nil }
                let offered = Set((props["UUIDs"]?.arrayItems ?? []).compactMap { $0.string.flatMap(BlueZAdvertisement.cbUUID) })
                    .union(
                        tree.paths(with: BlueZObjectTree.serviceInterface, where: "Device", is: path).compactMap {
                            tree[$0, BlueZObjectTree.serviceInterface]?["UUID"]?.string.flatMap(BlueZAdvertisement.cbUUID)
                        })
                return wanted.isDisjoint(with: offered) ? nil : peripheral(forDevice: path)
            }
        }
    }

    // MARK: Connections

    func connect(_ p: CBPeripheral, attempt: UInt64) {
        queue.async { [self] in
            guard p.isCurrentConnectAttempt(attempt), p.state == .connecting else { return }
            guard let path = devicePaths[p.identifier], tree[path, BlueZObjectTree.deviceInterface] != nil else {
                manager?.announceFailure(p, CBError(.unknownDevice, userInfo: [NSLocalizedDescriptionKey: "BlueZ does not know this device (discover it first)"]))
                return
            }
            links[path] = Link(peripheral: p, phase: .connecting)
            call(path, BlueZObjectTree.deviceInterface, "Connect", timeout: 120) { [self] r in
                guard let link = links[path], link.peripheral === p, link.phase == .connecting, !link.replied else { return }
                switch r {
                case .success:
                    links[path]!.replied = true
                    servicesResolved(path)
                case let .failure(e):
                    if case let .remote(name, _) = e, name == "org.bluez.Error.AlreadyConnected" {
                        links[path]!.replied = true
                        return servicesResolved(path)
                    }
                    links[path] = nil
                    manager?.announceFailure(p, BlueZErrors.connectError(e))
                }
            }
        }
    }

    /// didConnect once Connect has answered and BlueZ has resolved the services (it may say so before or after
    /// the answer).
    private func servicesResolved(_ path: String) {
        guard let link = links[path], link.phase == .connecting, link.replied, let p = link.peripheral,
            let props = tree[path, BlueZObjectTree.deviceInterface], props["Connected"]?.bool == true,
            props["ServicesResolved"]?.bool == true
        else { return }
        links[path]!.phase = .connected
        let services = tree.paths(with: BlueZObjectTree.serviceInterface, where: "Device", is: path).compactMap {
            tree[$0, BlueZObjectTree.serviceInterface]?["UUID"]?.string.flatMap(BlueZAdvertisement.cbUUID)
        }
        manager?.announceConnected(p, mtu: linkMTU(path), services: Set(services))
    }

    /// The ATT MTU BlueZ reports on the device's characteristics (23 until it says).
    private func linkMTU(_ device: String) -> UInt16 {
        var mtu: Int64 = 23
        for c in tree.paths(with: BlueZObjectTree.characteristicInterface) where c.hasPrefix(device + "/") {
            if let m = tree[c, BlueZObjectTree.characteristicInterface]?["MTU"]?.integer { mtu = max(mtu, m) }
        }
        return UInt16(clamping: mtu)
    }

    private func mtuChanged(_ characteristic: String, _ mtu: Int64) {
        guard let (device, _) = owner(of: characteristic), links[device]?.phase == .connected,
            let p = links[device]?.peripheral
        else { return }
        let value = UInt16(clamping: mtu)
        p.queue.async { p.setMTU(value) }
    }

    func cancel(_ p: CBPeripheral) {
        queue.async { [self] in
            guard let path = devicePaths[p.identifier], let link = links[path], link.peripheral === p else {
                return manager?.announceDisconnect(p, error: nil) ?? ()
            }
            links[path] = nil
            gatt[path] = nil
            // Disconnect also cancels a connection in progress; its answer comes once the link is down.
            call(path, BlueZObjectTree.deviceInterface, "Disconnect") { [self] r in
                if case let .failure(e) = r { CBLog.warning("BlueZ backend: Disconnect failed: \(e)") }
                manager?.announceDisconnect(p, error: nil)
            }
        }
    }

    /// The link went down (Connected false, the device or bluetoothd gone) without a cancel of ours.
    private func linkLost(_ path: String) {
        guard let link = links.removeValue(forKey: path) else { return }
        gatt[path] = nil
        guard let p = link.peripheral else { return }
        // bluetoothd drops every link (Connected false, or the device objects removed) just before it says the
        // adapter is off or gone. As on iOS, Bluetooth going away is announced by the state alone, without
        // didDisconnect: a loss is announced only if the adapter is still on a moment later.
        queue.asyncAfter(deadline: .now() + Self.powerOffGrace) { [self] in
            guard state == .poweredOn, let m = manager else { return }
            announceLoss(p, link, to: m)
        }
    }

    /// How long a lost link waits to tell a link loss from the adapter going off.
    static let powerOffGrace = 0.3

    private func announceLoss(_ p: CBPeripheral, _ link: Link, to m: CBCentralManager) {
        let reason = link.disconnectReason.map { " (BlueZ: \($0))" } ?? ""
        if link.phase == .connected {
            let code: CBError.Code = link.disconnectReason == "org.bluez.Reason.Timeout" ? .connectionTimeout : .peripheralDisconnected
            m.announceDisconnect(p, error: CBError(code, userInfo: [NSLocalizedDescriptionKey: CBError(code).localizedDescription + reason]))
        } else {
            m.announceFailure(p, CBError(.connectionFailed, userInfo: [NSLocalizedDescriptionKey: CBError(.connectionFailed).localizedDescription + reason]))
        }
    }

    /// For an L2CAP channel (BlueZCentral+L2CAP): the connected peripheral's address and type, and the adapter's
    /// address; nil (after Apple's warning) when it is not connected. On `queue`.
    func l2capEndpoints(_ p: CBPeripheral) -> (peer: String, type: String?, adapter: String?)? {
        guard let path = connectedDevice(p, "openL2CAPChannel"),
            let address = tree[path, BlueZObjectTree.deviceInterface]?["Address"]?.string
        else { return nil }
        let type = tree[path, BlueZObjectTree.deviceInterface]?["AddressType"]?.string
        let adapter = adapterPath.flatMap { tree[$0, BlueZObjectTree.adapterInterface]?["Address"]?.string }
        return (address, type, adapter)
    }

    // MARK: GATT client

    /// The device path of a connected peripheral, or nil (after Apple's warning) when it is not connected.
    private func connectedDevice(_ p: CBPeripheral, _ what: String) -> String? {
        guard let path = devicePaths[p.identifier], links[path]?.phase == .connected, links[path]?.peripheral === p else {
            CBLog.misuse("\(p) can only accept commands while in the connected state (\(what))")
            return nil
        }
        return path
    }

    /// Where a GATT result goes: nil for the delegate (the classic API), else an async caller (CBPeripheral+Concurrency),
    /// which is not told through the delegate. Either way the model changes on the delegate queue first.
    typealias Done<T> = @Sendable (Result<T, any Error>) -> Void

    private func finish<T: Sendable>(
        _ p: CBPeripheral, _ done: Done<T>?, _ result: Result<T, any Error>, prepare: @escaping @Sendable () -> Void = {},
        delegate: @escaping @Sendable (any CBPeripheralDelegate) -> Void
    ) {
        guard let done else { return p.deliver(delegate, prepare: prepare) }
        p.queue.async {
            // As on our own host: a call whose link dropped meanwhile ends with the drop.
            guard p.state == .connected else { return done(.failure(CBError(.peripheralDisconnected))) }
            if case .success = result { prepare() }
            done(result)
        }
    }

    /// The device and attribute path for a call, or nil after telling an async caller why not (the delegate API only
    /// warns, as on iOS).
    private func target<T: Sendable>(_ p: CBPeripheral, _ attribute: AnyObject?, _ what: String, _ done: Done<T>?) -> (device: String, path: String)? {
        guard let device = connectedDevice(p, what) else {
            done?(.failure(CBError(.notConnected)))
            return nil
        }
        guard let attribute else { return (device, device) }
        guard let found = path(of: attribute, on: p) else {
            done?(.failure(CBError(.invalidParameters, userInfo: [NSLocalizedDescriptionKey: "\(what): the attribute is not one of this peripheral's"])))
            return nil
        }
        return found
    }

    /// The device and the GATT object path of one of a peripheral's attributes.
    private func path(of attribute: AnyObject, on p: CBPeripheral) -> (device: String, path: String)? {
        guard let device = devicePaths[p.identifier], let path = gatt[device]?.paths[ObjectIdentifier(attribute)] else { return nil }
        return (device, path)
    }

    private func owner(of path: String) -> (device: String, GATTObjects)? {
        for (device, objects) in gatt where path.hasPrefix(device + "/") { return (device, objects) }
        return nil
    }

    func discoverServices(_ p: CBPeripheral, _ uuids: [CBUUID]?, done: Done<[CBService]>? = nil) {
        let filter = uuids.flatMap { $0.isEmpty ? nil : Set($0) }
        queue.async { [self] in
            guard let (device, _) = target(p, nil, "discoverServices", done) else { return }
            var objects = gatt[device] ?? GATTObjects()
            let paths = tree.paths(with: BlueZObjectTree.serviceInterface, where: "Device", is: device)
            var found: [CBService] = []
            for (i, path) in paths.enumerated() {
                guard let props = tree[path, BlueZObjectTree.serviceInterface],
                    let uuid = props["UUID"]?.string.flatMap(BlueZAdvertisement.cbUUID), props["Primary"]?.bool != false,
                    filter?.contains(uuid) ?? true
                else { continue }
                let s =
                    objects.services[path]
                    ?? {
                        let end = i + 1 < paths.count ? BlueZObjectTree.handle(of: paths[i + 1]) &- 1 : 0xFFFF
                        let s = CBService(uuid: uuid, isPrimary: true, handle: BlueZObjectTree.handle(of: path), endHandle: end, peripheral: p)
                        objects.services[path] = s
                        objects.paths[ObjectIdentifier(s)] = path
                        return s
                    }()
                found.append(s)
            }
            gatt[device] = objects
            let kept = found
            guard kept.count <= CBPeripheral.maximumServices else {
                let e = CBPeripheral.tooLarge("services", kept.count)
                return finish(p, done, .failure(e)) { $0.peripheral(p, didDiscoverServices: e) }
            }
            finish(p, done, .success(kept), prepare: { merge(into: p, kept) }) { $0.peripheral(p, didDiscoverServices: nil) }
        }
    }

    func discoverIncludedServices(_ p: CBPeripheral, _ uuids: [CBUUID]?, for service: CBService) {
        let filter = uuids.flatMap { $0.isEmpty ? nil : Set($0) }
        queue.async { [self] in
            guard connectedDevice(p, "discoverIncludedServices") != nil, let (device, path) = path(of: service, on: p) else { return }
            var objects = gatt[device] ?? GATTObjects()
            var found: [CBService] = []
            for inc in (tree[path, BlueZObjectTree.serviceInterface]?["Includes"]?.arrayItems ?? []).compactMap(\.string) {
                guard let uuid = tree[inc, BlueZObjectTree.serviceInterface]?["UUID"]?.string.flatMap(BlueZAdvertisement.cbUUID),
                    filter?.contains(uuid) ?? true
                else { continue }
                let s =
                    objects.services[inc]
                    ?? {
                        let primary = tree[inc, BlueZObjectTree.serviceInterface]?["Primary"]?.bool ?? false
                        let s = CBService(uuid: uuid, isPrimary: primary, handle: BlueZObjectTree.handle(of: inc), endHandle: 0xFFFF, peripheral: p)
                        objects.services[inc] = s
                        objects.paths[ObjectIdentifier(s)] = inc
                        return s
                    }()
                found.append(s)
            }
            gatt[device] = objects
            let kept = found
            p.deliver(
                { $0.peripheral(p, didDiscoverIncludedServicesFor: service, error: nil) },
                prepare: {
                    var list = service._includedServices ?? []
                    for s in kept where !list.contains(where: { $0 === s }) { list.append(s) }
                    service._includedServices = list
                })
        }
    }

    func discoverCharacteristics(_ p: CBPeripheral, _ uuids: [CBUUID]?, for service: CBService, done: Done<[CBCharacteristic]>? = nil) {
        let filter = uuids.flatMap { $0.isEmpty ? nil : Set($0) }
        queue.async { [self] in
            guard let (device, servicePath) = target(p, service, "discoverCharacteristics", done) else { return }
            var objects = gatt[device]!
            let paths = tree.paths(with: BlueZObjectTree.characteristicInterface, where: "Service", is: servicePath)
            guard paths.count <= CBPeripheral.maximumCharacteristicsPerService else {
                let e = CBPeripheral.tooLarge("characteristics", paths.count)
                return finish(p, done, .failure(e)) { $0.peripheral(p, didDiscoverCharacteristicsFor: service, error: e) }
            }
            var found: [CBCharacteristic] = []
            for (i, path) in paths.enumerated() {
                guard let props = tree[path, BlueZObjectTree.characteristicInterface],
                    let uuid = props["UUID"]?.string.flatMap(BlueZAdvertisement.cbUUID), filter?.contains(uuid) ?? true
                else { continue }
                let c =
                    objects.characteristics[path]
                    ?? {
                        let h = BlueZObjectTree.handle(of: path)
                        let end = i + 1 < paths.count ? BlueZObjectTree.handle(of: paths[i + 1]) &- 1 : service.endHandle
                        let flags = (props["Flags"]?.arrayItems ?? []).compactMap(\.string)
                        let c = CBCharacteristic(
                            uuid: uuid, properties: BlueZAdvertisement.properties(flags: flags), service: service,
                            handle: h, valueHandle: h &+ 1, endHandle: end)
                        objects.characteristics[path] = c
                        objects.paths[ObjectIdentifier(c)] = path
                        return c
                    }()
                found.append(c)
            }
            gatt[device] = objects
            let kept = found
            finish(
                p, done, .success(kept),
                prepare: {
                    var list = service._characteristics ?? []
                    for c in kept where !list.contains(where: { $0 === c }) { list.append(c) }
                    list.sort { $0.handle < $1.handle }
                    service._characteristics = list
                }
            ) { $0.peripheral(p, didDiscoverCharacteristicsFor: service, error: nil) }
        }
    }

    func discoverDescriptors(_ p: CBPeripheral, for characteristic: CBCharacteristic, done: Done<[CBDescriptor]>? = nil) {
        queue.async { [self] in
            guard let (device, charPath) = target(p, characteristic, "discoverDescriptors", done) else { return }
            var objects = gatt[device]!
            let paths = tree.paths(with: BlueZObjectTree.descriptorInterface, where: "Characteristic", is: charPath)
            guard paths.count <= CBPeripheral.maximumDescriptorsPerCharacteristic else {
                let e = CBPeripheral.tooLarge("descriptors", paths.count)
                return finish(p, done, .failure(e)) { $0.peripheral(p, didDiscoverDescriptorsFor: characteristic, error: e) }
            }
            var found: [CBDescriptor] = []
            for path in paths {
                guard let uuid = tree[path, BlueZObjectTree.descriptorInterface]?["UUID"]?.string.flatMap(BlueZAdvertisement.cbUUID) else { continue }
                let d =
                    objects.descriptors[path]
                    ?? {
                        let d = CBDescriptor(uuid: uuid, characteristic: characteristic, handle: BlueZObjectTree.handle(of: path))
                        objects.descriptors[path] = d
                        objects.paths[ObjectIdentifier(d)] = path
                        return d
                    }()
                found.append(d)
            }
            gatt[device] = objects
            let kept = found
            finish(
                p, done, .success(kept),
                prepare: {
                    var list = characteristic._descriptors ?? []
                    for d in kept where !list.contains(where: { $0 === d }) { list.append(d) }
                    list.sort { $0.handle < $1.handle }
                    characteristic._descriptors = list
                }
            ) { $0.peripheral(p, didDiscoverDescriptorsFor: characteristic, error: nil) }
        }
    }

    func read(_ p: CBPeripheral, _ characteristic: CBCharacteristic, done: Done<Data>? = nil) {
        queue.async { [self] in
            guard let (device, path) = target(p, characteristic, "readValue", done) else { return }
            gatt[device]?.readsInFlight[path, default: 0] += 1
            call(path, BlueZObjectTree.characteristicInterface, "ReadValue", [.stringVariantDictionary([:])]) { [self] r in
                var held: [[UInt8]] = []
                if gatt[device] != nil {
                    gatt[device]!.readsInFlight[path, default: 1] -= 1
                    held = gatt[device]!.heldDuringRead.removeValue(forKey: path) ?? []
                }
                switch r {
                case let .success(m):
                    let value = m.body.first?.byteArray ?? []
                    // BlueZ's echo of what it read, as a change of Value, is not a notification.
                    if let i = held.firstIndex(of: value) { held.remove(at: i) } else { gatt[device]?.readEcho[path] = value }
                    let data = Data(value)
                    finish(p, done, .success(data), prepare: { characteristic._value = data }) {
                        $0.peripheral(p, didUpdateValueFor: characteristic, error: nil)
                    }
                case let .failure(e):
                    let error = BlueZErrors.cbError(e, during: .read)
                    finish(p, done, .failure(error)) { $0.peripheral(p, didUpdateValueFor: characteristic, error: error) }
                }
                for v in held { deliverNotification(device, path, v) }
            }
        }
    }

    func write(_ p: CBPeripheral, _ data: Data, _ characteristic: CBCharacteristic, type: CBCharacteristicWriteType, done: Done<Void>? = nil) {
        let bytes = [UInt8](data)
        queue.async { [self] in
            guard let (device, path) = target(p, characteristic, "writeValue", done) else { return }
            if type == .withoutResponse {
                let value = Array(bytes.prefix(p.maximumWriteValueLength(for: .withoutResponse)))
                writeWithoutResponse(p, device, path, value, done)
            } else {
                call(
                    path, BlueZObjectTree.characteristicInterface, "WriteValue",
                    [.bytes(bytes), .stringVariantDictionary(["type": .string("request")])]
                ) { [self] r in
                    let error: (any Error)? = if case let .failure(e) = r { BlueZErrors.cbError(e, during: .write) } else { nil }
                    finish(p, done, error.map { .failure($0) } ?? .success(())) { $0.peripheral(p, didWriteValueFor: characteristic, error: error) }
                }
            }
        }
    }

    /// A write without response: through AcquireWrite's socket where BlueZ offers one (the first write asks for it),
    /// else WriteValue {type: command}; the app hears peripheralIsReady once the value has left.
    private func writeWithoutResponse(_ p: CBPeripheral, _ device: String, _ path: String, _ value: [UInt8], _ done: Done<Void>?) {
        let ready: @Sendable () -> Void = {
            p.readyToSendWriteWithoutResponse()
            done?(.success(()))
        }
        switch gatt[device]?.writeChannels[path] {
        case nil:
            guard tree[path, BlueZObjectTree.characteristicInterface]?["WriteAcquired"] != nil else {
                gatt[device]?.writeChannels[path] = .dbus
                return writeCommand(path, value, ready)
            }
            gatt[device]?.writeChannels[path] = .acquiring([value])
            call(path, BlueZObjectTree.characteristicInterface, "AcquireWrite", [.stringVariantDictionary([:])]) { [self] r in
                var received: [Int32] = []
                if case let .success(m) = r { received = m.unixFDs }
                guard case let .acquiring(queued)? = gatt[device]?.writeChannels[path] else {
                    for d in received { Glibc.close(d) }   // the link went meanwhile
                    return
                }
                if case let .success(m) = r, let fd = received.first, let mtu = m.body.count > 1 ? m.body[1].integer : nil {
                    for d in received.dropFirst() { Glibc.close(d) }
                    gatt[device]?.writeChannels[path] = .socket(BlueZAcquiredWrite(fd: fd, mtu: Int(mtu), queue: queue))
                } else {
                    for d in received { Glibc.close(d) }
                    if case let .failure(e) = r { CBLog.warning("BlueZ backend: AcquireWrite failed (\(e)); writing with WriteValue") }
                    gatt[device]?.writeChannels[path] = .dbus
                }
                for v in queued { writeWithoutResponse(p, device, path, v, nil) }
                ready()
            }
        case .acquiring(var queued)?:
            if queued.count < Self.maximumHeldValues { queued.append(value) }
            gatt[device]?.writeChannels[path] = .acquiring(queued)
        case .socket(let socket)?:
            switch socket.send(Array(value.prefix(max(socket.mtu - 3, 0))), sent: { ready() }) {
            case .sent: ready()
            case .queued: break
            case .dropped:
                // The waiting value's departure tells the app when to write again.
                CBLog.misuse("writeValue(_:for:type: .withoutResponse) while canSendWriteWithoutResponse is false: the write is dropped")
            case .broken(let why):
                CBLog.warning("BlueZ backend: write without response through AcquireWrite's socket failed: \(why)")
                // A closed socket (bluetoothd restarted, the characteristic went): ask again next time.
                gatt[device]?.writeChannels[path] = nil
                ready()
            }
        case .dbus?:
            writeCommand(path, value, ready)
        }
    }

    private func writeCommand(_ path: String, _ value: [UInt8], _ ready: @escaping @Sendable () -> Void) {
        call(path, BlueZObjectTree.characteristicInterface, "WriteValue", [.bytes(value), .stringVariantDictionary(["type": .string("command")])]) { r in
            if case let .failure(e) = r { CBLog.warning("BlueZ backend: write without response failed: \(e)") }
            ready()
        }
    }

    func setNotify(_ p: CBPeripheral, _ enabled: Bool, _ characteristic: CBCharacteristic, done: Done<Void>? = nil) {
        queue.async { [self] in
            guard let (device, path) = target(p, characteristic, "setNotifyValue", done) else { return }
            let props = tree[path, BlueZObjectTree.characteristicInterface]
            let flags = (props?["Flags"]?.arrayItems ?? []).compactMap(\.string)
            if !enabled, let socket = gatt[device]?.notifySockets.removeValue(forKey: path) {
                // Closing the socket is bluetoothd's sign to disable the notifications.
                socket.stop()
                gatt[device]?.notifying.remove(path)
                return finish(p, done, .success(()), prepare: { characteristic._isNotifying = false }) {
                    $0.peripheral(p, didUpdateNotificationStateFor: characteristic, error: nil)
                }
            }
            if enabled, gatt[device]?.notifySockets[path] == nil, !(gatt[device]?.notifying.contains(path) ?? false),
                props?["NotifyAcquired"] != nil, flags.contains("notify")
            {
                return acquireNotify(p, device, path, characteristic, done)
            }
            startNotify(p, enabled, device, path, characteristic, done)
        }
    }

    /// AcquireNotify: the socket carries the values from now on; refused (another client holds it, or bluetoothd
    /// cannot), StartNotify instead.
    private func acquireNotify(_ p: CBPeripheral, _ device: String, _ path: String, _ characteristic: CBCharacteristic, _ done: Done<Void>?) {
        call(path, BlueZObjectTree.characteristicInterface, "AcquireNotify", [.stringVariantDictionary([:])]) { [self] r in
            var received: [Int32] = []
            if case let .success(m) = r { received = m.unixFDs }
            guard gatt[device] != nil, links[device] != nil else {
                for d in received { Glibc.close(d) }   // the link went meanwhile
                return
            }
            guard case let .success(m) = r, let fd = received.first, let mtu = m.body.count > 1 ? m.body[1].integer : nil else {
                for d in received { Glibc.close(d) }
                if case let .failure(e) = r { CBLog.warning("BlueZ backend: AcquireNotify failed (\(e)); subscribing with StartNotify") }
                return startNotify(p, true, device, path, characteristic, done)
            }
            for d in received.dropFirst() { Glibc.close(d) }
            let socket = BlueZAcquiredNotify(
                fd: fd, mtu: Int(mtu), queue: queue,
                value: { [weak self] v in self?.deliverNotification(device, path, v) },
                ended: { [weak self] why in
                    guard let self, self.gatt[device]?.notifySockets[path] != nil else { return }
                    CBLog.warning("BlueZ backend: notifications of \(path) ended: \(why)")
                    self.gatt[device]?.notifySockets[path] = nil
                })
            gatt[device]?.notifySockets[path] = socket
            gatt[device]?.notifying.insert(path)
            finish(p, done, .success(()), prepare: { characteristic._isNotifying = true }) {
                $0.peripheral(p, didUpdateNotificationStateFor: characteristic, error: nil)
            }
        }
    }

    private func startNotify(_ p: CBPeripheral, _ enabled: Bool, _ device: String, _ path: String, _ characteristic: CBCharacteristic, _ done: Done<Void>?) {
        call(path, BlueZObjectTree.characteristicInterface, enabled ? "StartNotify" : "StopNotify") { [self] r in
            var failure: (any Error)?
            if case let .failure(e) = r {
                // Already in the state asked for (a second StartNotify, a StopNotify without a session) is success.
                let already: Bool =
                    if case let .remote(name, message) = e {
                        name == "org.bluez.Error.InProgress" || (!enabled && message.lowercased().contains("no notify session"))
                    } else { false }
                if !already { failure = BlueZErrors.cbError(e, during: .notify) }
            }
            if let failure {
                return finish(p, done, .failure(failure)) { $0.peripheral(p, didUpdateNotificationStateFor: characteristic, error: failure) }
            }
            if enabled { gatt[device]?.notifying.insert(path) } else { gatt[device]?.notifying.remove(path) }
            finish(p, done, .success(()), prepare: { characteristic._isNotifying = enabled }) {
                $0.peripheral(p, didUpdateNotificationStateFor: characteristic, error: nil)
            }
        }
    }

    /// PropertiesChanged Value on a characteristic: a notification or indication when the app subscribed.
    private func valueChanged(_ path: String, _ value: [UInt8]) {
        guard let (device, objects) = owner(of: path), objects.characteristics[path] != nil else { return }
        // While AcquireNotify's socket carries the notifications, a change of Value is a read's echo at most.
        if objects.notifySockets[path] != nil, objects.readsInFlight[path, default: 0] == 0 {
            gatt[device]!.readEcho[path] = nil
            return
        }
        if objects.readsInFlight[path, default: 0] > 0 {
            var held = objects.heldDuringRead[path] ?? []
            if held.count < Self.maximumHeldValues { held.append(value) }
            gatt[device]!.heldDuringRead[path] = held
            return
        }
        if objects.readEcho[path] == value {
            gatt[device]!.readEcho[path] = nil
            return
        }
        gatt[device]!.readEcho[path] = nil
        deliverNotification(device, path, value)
    }

    private func deliverNotification(_ device: String, _ path: String, _ value: [UInt8]) {
        guard let objects = gatt[device], objects.notifying.contains(path), let c = objects.characteristics[path],
            let p = links[device]?.peripheral
        else { return }
        let data = Data(value)
        p.valueListeners.yield(data, handle: c.valueHandle)
        p.deliver({ $0.peripheral(p, didUpdateValueFor: c, error: nil) }, prepare: { c._value = data })
    }

    func read(_ p: CBPeripheral, _ descriptor: CBDescriptor) {
        queue.async { [self] in
            guard connectedDevice(p, "readValue") != nil, let (_, path) = path(of: descriptor, on: p) else { return }
            call(path, BlueZObjectTree.descriptorInterface, "ReadValue", [.stringVariantDictionary([:])]) { r in
                switch r {
                case let .success(m):
                    let v = m.body.first?.byteArray ?? []
                    p.deliver(
                        { $0.peripheral(p, didUpdateValueFor: descriptor, error: nil) },
                        prepare: { descriptor._value = CBDescriptor.typedValue(v, for: descriptor.uuid) })
                case let .failure(e):
                    p.deliver { $0.peripheral(p, didUpdateValueFor: descriptor, error: BlueZErrors.cbError(e, during: .read)) }
                }
            }
        }
    }

    func write(_ p: CBPeripheral, _ data: Data, _ descriptor: CBDescriptor) {
        let bytes = [UInt8](data)
        queue.async { [self] in
            guard connectedDevice(p, "writeValue") != nil, let (_, path) = path(of: descriptor, on: p) else { return }
            call(path, BlueZObjectTree.descriptorInterface, "WriteValue", [.bytes(bytes), .stringVariantDictionary([:])]) { r in
                let error: (any Error)? = if case let .failure(e) = r { BlueZErrors.cbError(e, during: .write) } else { nil }
                p.deliver { $0.peripheral(p, didWriteValueFor: descriptor, error: error) }
            }
        }
    }

    /// BlueZ reports a device's RSSI only while discovering (Device1.RSSI); outside that, the last one is gone.
    func readRSSI(_ p: CBPeripheral, done: Done<Int>? = nil) {
        queue.async { [self] in
            guard let (device, _) = target(p, nil, "readRSSI", done) else { return }
            if let v = tree[device, BlueZObjectTree.deviceInterface]?["RSSI"]?.integer {
                let n = NSNumber(value: Int(v))
                finish(p, done, .success(Int(v))) { $0.peripheral(p, didReadRSSI: n, error: nil) }
            } else {
                let e = CBError(
                    .operationNotSupported,
                    userInfo: [NSLocalizedDescriptionKey: "BlueZ reports a connected device's RSSI only while it is discovering"])
                finish(p, done, .failure(e)) { $0.peripheral(p, didReadRSSI: NSNumber(value: 127), error: e) }
            }
        }
    }

    // MARK: Calls

    func call(
        _ path: String, _ interface: String, _ member: String, _ body: [DBusValue] = [], timeout: Double = 25,
        _ done: @escaping @Sendable (Result<DBusMessage, DBusError>) -> Void
    ) {
        guard let bus else { return queue.async { done(.failure(.disconnected("no connection to the system bus"))) } }
        bus.call(.methodCall(destination: "org.bluez", path: path, interface: interface, member: member, body: body), timeout: timeout, reply: done)
    }

    /// The state the backend has reached (for tests).
    var stateForTests: CBManagerState { queue.sync { state } }
}

/// Merges found services into a peripheral's list (delegate queue), keeping the objects it has.
private func merge(into p: CBPeripheral, _ found: [CBService]) {
    var list = p.services ?? []
    for s in found where !list.contains(where: { $0 === s }) { list.append(s) }
    list.sort { $0.handle < $1.handle }
    p.setServices(list)
}

extension CBPeripheral {
    /// Why an async GATT call cannot run on our own host: not connected.
    var asyncUnavailable: CBError { CBError(.notConnected) }

    /// An async GATT call on the BlueZ backend: `start` hands the backend a completion that resumes the caller once
    /// (on the delegate queue, after the model changed), with the CBError / CBATTError BlueZ's answer maps to.
    func bluezAsync<T: Sendable>(_ start: (@escaping @Sendable (Result<T, any Error>) -> Void) -> Void) async throws -> T {
        guard state == .connected else { throw CBError(.notConnected) }
        return try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, any Error>) in start { c.resume(with: $0) } }
    }
}
