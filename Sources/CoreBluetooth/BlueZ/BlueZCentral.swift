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
//   didModifyServices          those objects removed or added under the connected device (bluetoothd found the
//                              peer's database changed), one call per burst of signals (gattObjectsChanged)
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
    /// How long a connect made just after a stopScan waits for bluetoothd to end our discovery before it goes
    /// anyway (a discovery that does not end does not hold a connect for good).
    package var discoveryEndWait: Double = 6

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
    /// Our discovery session in bluetoothd, and what the app wants of it now (see driveDiscovery).
    private var discovery = Discovery.off
    private var wantDiscovery = false
    /// Counts the adapter's losses: an answer to a discovery call made before one is not for the session of now.
    private var discoveryEpoch = 0
    /// StopDiscovery calls answered InProgress in a row (asked again, up to a bound).
    private var stopRefusals = 0
    /// Connects that wait for our discovery to end (the app stopped its scan just before connecting).
    private var whenDiscoveryOff: [() -> Void] = []
    /// Connect attempts BlueZ aborted locally, per device, retried while the app still wants the connection.
    private var connectRetries: [String: Int] = [:]
    private var peripherals = WeakTable<String, CBPeripheral>()
    var devicePaths: [UUID: String] = [:]
    var links: [String: Link] = [:]
    var gatt: [String: GATTObjects] = [:]
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

    struct Link {
        weak var peripheral: CBPeripheral?
        var phase: Phase
        var replied = false
        var disconnectReason: String?
        /// The device's database changes bluetoothd has signalled and the app has not yet heard of (gattObjectsChanged).
        var serviceChanges: ServiceChanges?
        enum Phase { case connecting, connected }
    }

    /// One burst of bluetoothd's signals for a connected device's database: the services the app had that went, and
    /// whether a service came; `token` names the burst's last signal (its settling is for that one only).
    struct ServiceChanges {
        var invalidated: [CBService] = []
        var added = false
        var token = 0
    }
    /// Counts the database signals that start or prolong a burst (ServiceChanges.token).
    var serviceChangeSignals = 0

    /// The CB objects made for a device's GATT objects, by path and back.
    struct GATTObjects {
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

        /// The object made for `path` in `cache`, made now (`make`) and kept both ways if there is none yet.
        mutating func object<A: AnyObject>(_ cache: WritableKeyPath<Self, [String: A]>, at path: String, make: () -> A) -> A {
            if let known = self[keyPath: cache][path] { return known }
            let made = make()
            self[keyPath: cache][path] = made
            paths[ObjectIdentifier(made)] = path
            return made
        }

        /// Forgets what was made for the GATT object at `path` and the objects under it (bluetoothd removed them), with
        /// their state; returns the services among them. A later discovery makes new objects for the new paths, and an
        /// old object is no target any more.
        mutating func forget(at path: String) -> [CBService] {
            let gone = { (p: String) in p == path || p.hasPrefix(path + "/") }
            let services = drop(\.services, gone)
            _ = drop(\.characteristics, gone)
            _ = drop(\.descriptors, gone)
            notifying = notifying.filter { !gone($0) }
            readsInFlight = readsInFlight.filter { !gone($0.key) }
            heldDuringRead = heldDuringRead.filter { !gone($0.key) }
            readEcho = readEcho.filter { !gone($0.key) }
            // Their sockets close as they go (deinit).
            writeChannels = writeChannels.filter { !gone($0.key) }
            notifySockets = notifySockets.filter { !gone($0.key) }
            return services
        }

        private mutating func drop<A: AnyObject>(_ cache: WritableKeyPath<Self, [String: A]>, _ gone: (String) -> Bool) -> [A] {
            let dropped = self[keyPath: cache].filter { gone($0.key) }
            for (path, made) in dropped {
                self[keyPath: cache][path] = nil
                paths[ObjectIdentifier(made)] = nil
            }
            return dropped.sorted { $0.key < $1.key }.map(\.value)
        }
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
        // bluetoothd ends every discovery session of an adapter that goes off or away.
        discovery = .off
        wantDiscovery = false
        discoveryEpoch += 1
        stopRefusals = 0
        runWhenDiscoveryOff()
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
            gattObjectsChanged(path, interfaces: Array((m.body[1].stringDictionary ?? [:]).keys), added: true)
        case ("org.freedesktop.DBus.ObjectManager", "InterfacesRemoved"):
            // Before bluetoothd's objects are loaded, a change is no news: the answer to GetManagedObjects, on its way,
            // has the state as it is. (An adapter's PropertiesChanged taken then made the first state .unsupported:
            // `ble serve` on bluez exited "no bluetoothd with this adapter" while bluetoothd was busy with the adapter.)
            guard bluezOnBus, m.body.count >= 2, let path = m.body[0].string else { return }
            let names = (m.body[1].arrayItems ?? []).compactMap(\.string)
            if names.contains(BlueZObjectTree.deviceInterface) {
                linkLost(path)
                forget(device: path)
            } else {
                gattObjectsChanged(path, interfaces: names, added: false)
            }
            tree.remove(path: path, interfaces: names)
            if names.contains(BlueZObjectTree.adapterInterface) { updateState() }
        case ("org.freedesktop.DBus.Properties", "PropertiesChanged"):
            guard bluezOnBus, let path = m.path, m.body.count >= 2, let interface = m.body[0].string else { return }
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
            wantDiscovery = true
            // A connect that waited for the last scan's discovery to end need not wait: this one goes on anyway.
            runWhenDiscoveryOff()
            if discovery == .on { reportDevicesInView() }
            driveDiscovery()
        }
    }

    /// Our discovery session in bluetoothd, as its calls go. bluetoothd answers StartDiscovery and StopDiscovery only
    /// once the kernel has done them, and refuses a StopDiscovery with InProgress while our StartDiscovery is still
    /// unanswered (a device can be found and the app stop its scan before that answer, under load): the session then
    /// went on, and BlueZ's next Connect raced the kernel's discovery. So the calls go one at a time, each after the
    /// last one's answer, toward what the app wants now (`wantDiscovery`), and a refused stop is asked again.
    private enum Discovery { case off, starting, on, stopping }

    /// The most StopDiscovery calls answered InProgress in a row that are asked again (0.1 s apart).
    static let maximumStopRefusals = 50

    private func driveDiscovery() {
        guard let adapter = adapterPath, !closed else { return }
        let epoch = discoveryEpoch
        switch (discovery, wantDiscovery) {
        case (.off, true):
            discovery = .starting
            call(adapter, BlueZObjectTree.adapterInterface, "StartDiscovery") { [self] r in
                guard epoch == discoveryEpoch, discovery == .starting else { return }
                discovery = .on
                if case let .failure(e) = r {
                    // InProgress: this connection has a discovery session already.
                    if case let .remote(name, _) = e, name == "org.bluez.Error.InProgress" {
                    } else {
                        discovery = .off
                        if wantDiscovery {
                            wantDiscovery = false
                            scanFailed("StartDiscovery failed: \(e)")
                        }
                    }
                }
                if discovery == .on, wantDiscovery { reportDevicesInView() }
                driveDiscovery()
            }
        case (.on, false):
            discovery = .stopping
            call(adapter, BlueZObjectTree.adapterInterface, "StopDiscovery") { [self] r in
                guard epoch == discoveryEpoch, discovery == .stopping else { return }
                if case let .failure(e) = r {
                    if case let .remote(name, _) = e, name == "org.bluez.Error.InProgress", stopRefusals < Self.maximumStopRefusals {
                        stopRefusals += 1
                        discovery = .on
                        queue.asyncAfter(deadline: .now() + 0.1) { [self] in
                            if epoch == discoveryEpoch { driveDiscovery() }
                        }
                        return
                    }
                    // Closing the connection ends the discovery session too (bluetoothd watches its owner).
                    if !closed { CBLog.warning("BlueZ backend: StopDiscovery failed: \(e)") }
                }
                stopRefusals = 0
                discovery = .off
                driveDiscovery()
            }
        case (.off, false):
            runWhenDiscoveryOff()
        default:
            break   // a call is in flight; its answer drives again
        }
    }

    /// `work` now, or once our discovery has ended if the app has just stopped its scan (at most
    /// `options.discoveryEndWait` later: a discovery bluetoothd does not end in that time does not hold a connect
    /// for good).
    private func whenDiscoveryEnded(_ work: @escaping () -> Void) {
        guard !wantDiscovery, discovery != .off else { return work() }
        whenDiscoveryOff.append(work)
        let epoch = discoveryEpoch
        queue.asyncAfter(deadline: .now() + options.discoveryEndWait) { [self] in
            guard epoch == discoveryEpoch, !whenDiscoveryOff.isEmpty else { return }
            CBLog.warning("BlueZ backend: the discovery has not ended after \(options.discoveryEndWait) s; connecting anyway")
            runWhenDiscoveryOff()
        }
    }

    private func runWhenDiscoveryOff() {
        let waiting = whenDiscoveryOff
        whenDiscoveryOff = []
        for work in waiting { work() }
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
            wantDiscovery = false
            driveDiscovery()
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
            connectRetries[path] = 0
            // After a stopScan, Connect goes once our discovery has ended: bluetoothd's LE connection and the kernel's
            // discovery stopping under it raced (the connection aborted locally).
            whenDiscoveryEnded { [self] in connectCall(p, path) }
        }
    }

    /// Device1.Connect for the link `connect` made, while it is still wanted.
    private func connectCall(_ p: CBPeripheral, _ path: String) {
        guard let link = links[path], link.peripheral === p, link.phase == .connecting, !link.replied else { return }
        call(path, BlueZObjectTree.deviceInterface, "Connect", timeout: 120) { [self] r in
            guard let link = links[path], link.peripheral === p, link.phase == .connecting, !link.replied else { return }
            switch r {
            case .success:
                links[path]!.replied = true
                confirmConnected(path)
            case let .failure(e):
                if case let .remote(name, _) = e, name == "org.bluez.Error.AlreadyConnected" {
                    links[path]!.replied = true
                    return confirmConnected(path)
                }
                // The kernel ended the attempt itself (a discovery or another connection of bluetoothd's in its
                // way): iOS keeps a connect pending until it succeeds or the app cancels it, so it is made again.
                let tries = connectRetries[path] ?? 0
                if Self.abortedLocally(e), tries < Self.maximumConnectRetries {
                    connectRetries[path] = tries + 1
                    CBLog.warning("BlueZ backend: Connect aborted by the kernel (\(e)); trying again")
                    queue.asyncAfter(deadline: .now() + Self.connectRetryDelay) { [self] in whenDiscoveryEnded { [self] in connectCall(p, path) } }
                    return
                }
                links[path] = nil
                manager?.announceFailure(p, BlueZErrors.connectError(e))
            }
        }
    }

    /// BlueZ's answer when the kernel aborted an LE connection attempt of its own accord (ECONNABORTED).
    static func abortedLocally(_ e: DBusError) -> Bool {
        guard case let .remote(name, message) = e, name == "org.bluez.Error.Failed" else { return false }
        return message == "le-connection-abort-by-local"
    }

    static let maximumConnectRetries = 3
    static let connectRetryDelay = 0.5

    /// After Connect answered: a device not yet seen connected is asked for its properties. BlueZ 5.66 marks the
    /// device connected without announcing it when the ATT socket connects before the kernel's Device Connected
    /// event reaches bluetoothd (att_connect_cb sets the state, then device_add_connection finds it "already
    /// connected" and returns before PropertiesChanged): nothing else would ever say Connected, and the connect
    /// would hang though the link is up and its services resolved.
    private func confirmConnected(_ path: String) {
        guard tree[path, BlueZObjectTree.deviceInterface]?["Connected"]?.bool != true else { return servicesResolved(path) }
        call(path, "org.freedesktop.DBus.Properties", "GetAll", [.string(BlueZObjectTree.deviceInterface)]) { [self] r in
            if case let .success(m) = r, let props = m.body.first {
                tree.change(path: path, interface: BlueZObjectTree.deviceInterface, changed: props, invalidated: [])
            }
            servicesResolved(path)
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
