// Multipeer's Bluetooth device on BLE_TRANSPORT=bluez[:hciN]: bluetoothd keeps the adapter, and the node does over
// BlueZ's D-Bus API (doc/org.bluez.*.rst) and the kernel's L2CAP sockets what BluetoothPeerNode does on our own host:
//
//   addAdvert        an LEAdvertisement1 object per advert (Type peripheral; ServiceData {UUID: token u64 | SPSM
//                    u16}; LocalName) registered with LEAdvertisingManager1. On the air (kernel 6.1, BlueZ 5.66):
//                    legacy connectable PDUs with PeerAdvert's Service Data structure octet for octet (28 octets;
//                    no Flags structure) and the name in the scan response;
//                    native browsers need only the Service Data, so they read it unchanged. Several
//                    adverts are several instances, which the kernel rotates itself (as we rotate them on LEHost).
//   browse           Adapter1.SetDiscoveryFilter {Transport le, DuplicateData} + StartDiscovery; Device1's
//                    ServiceData entries whose UUID is browsed and whose value is a token and an SPSM are `seen`;
//                    a device that bluetoothd drops, or that gives no sign for `lostAfter`, is `lost`.
//   monitor          where bluetoothd offers AdvertisementMonitorManager1 (its experimental interfaces: main.conf
//                    Experimental = true, or -E), an AdvertisementMonitor1 per browsed service too (or_patterns:
//                    the Service Data structure of that UUID): the kernel then scans without its duplicate filter,
//                    and bluetoothd calls DeviceFound when the peer's adverts begin and DeviceLost `monitorLostAfter`
//                    seconds after they stop; a device it holds found is not lost by the `lostAfter` sweep. Without
//                    the manager (stock Debian and Raspberry Pi OS), or when bluetoothd refuses the monitor, browsing
//                    is discovery alone, as above.
//   listen/connect   the kernel's LE credit-based L2CAP sockets (BlueZKernelL2CAP: PSM chosen by the kernel,
//                    connect by address and type, which makes the LE link too), each bridged into a PeerLink by
//                    SeqPacketBridge.
//
// BlueZ's failures become log lines and MC errors, never waits: no system bus, no bluetoothd or no adapter make
// `acquire` return nil (MC then reports MCError.unavailable with the reason); advertising slots exhausted
// (org.bluez.Error.NotPermitted "Maximum advertisements reached") reach the advert's failure handler; bluetoothd
// leaving the bus, or the adapter going off or away, stops adverts and discovery until it is back, when they are
// registered and started again.
//
// Threading: everything runs on `queue`, which is also the D-Bus connection's queue (replies and signals arrive on
// it); public methods hop onto it.
import Foundation
import BLETransport
import BLEWire
import DBus
import CoreBluetooth
import PeerSession
import PeerTransport
#if canImport(Glibc)
import Glibc
#endif

public final class BlueZPeerNode: PeerBluetoothNode, @unchecked Sendable {
    let options: BlueZOptions
    let sockets: any BlueZPeerSockets
    let queue = DispatchQueue(label: "opencorebluetooth.multipeer.bluez")
    let bus: DBusConnection
    let root: String
    /// Where the node exports its objects on the bus (its adverts are under it).
    package var objectRoot: String { root }
    private static let instances = Locked(0)

    // MARK: Making nodes

    private static let shared = Locked<(node: BlueZPeerNode, users: Int)?>(nil)

    /// The process's node on the adapter `options` name (one radio per process, as on a phone), opened when it is the
    /// first user; nil (the reason logged and kept in `PeerBluetoothNodes.unavailableReason`) when BlueZ cannot give
    /// one. Every non-nil result is paired with a `release`.
    static func acquire(options: BlueZOptions) -> BlueZPeerNode? {
        shared.withLock { s in
            if let e = s, e.node.options == options {
                s = (e.node, e.users + 1)
                return e.node
            }
            do {
                let node = try BlueZPeerNode(options: options, sockets: KernelL2CAPSockets())
                s = (node, 1)
                return node
            } catch {
                PeerBluetoothNodes.unavailable("Bluetooth (BlueZ): \(error)")
                return nil
            }
        }
    }

    public func release() {
        let last = Self.shared.withLock { s -> Bool in
            guard let e = s, e.node === self else { return true }   // a node of a test: its owner releases it once
            if e.users > 1 { s = (self, e.users - 1); return false }
            s = nil
            return true
        }
        if last { close() }
    }

    /// Why a node could not be opened.
    package struct Unavailable: Error, CustomStringConvertible {
        package var description: String
    }

    /// Connects to the bus and finds the adapter (blocks the calling thread for that: a few milliseconds, at most
    /// the bus's 5 s timeout). Never call it on `queue`.
    package init(options: BlueZOptions, sockets: any BlueZPeerSockets) throws(Unavailable) {
        self.options = options
        self.sockets = sockets
        let n = Self.instances.withLock {
            $0 += 1; return $0
        }
        root = "/org/opencorebluetooth/mc\(getpid())_\(n)"
        do {
            bus = try DBusConnection(address: options.busAddress, queue: queue, timeout: 5)
        } catch {
            throw Unavailable(description: "cannot reach the system bus at \(options.busAddress) (\(error)); is dbus running?")
        }
        let objects: DBusMessage
        do {
            objects = try bus.callBlocking(bluez("/", "org.freedesktop.DBus.ObjectManager", "GetManagedObjects"), timeout: 5)
        } catch {
            bus.close()
            throw Unavailable(description: "bluetoothd does not answer on the system bus (\(error)); is it running (systemctl start bluetooth)?")
        }
        let found: String? = queue.sync {
            load(objects)
            return adapterPath
        }
        guard found != nil else {
            bus.close()
            let which = options.adapter.map { "adapter \($0)" } ?? "adapter"
            throw Unavailable(description: "BlueZ has no \(which) (is the controller plugged in, or blocked: rfkill unblock bluetooth?)")
        }
        bus.onSignal { [weak self] m in self?.signal(m) }
        bus.onDisconnect { [weak self] e in self?.busLost(e) }
        for rule in [
            "type='signal',sender='org.bluez',interface='org.freedesktop.DBus.ObjectManager'",
            "type='signal',sender='org.bluez',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'",
            "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='org.bluez'",
        ] {
            bus.addMatch(rule) { r in
                if case let .failure(e) = r { PeerLog.warning("Bluetooth (BlueZ): AddMatch failed: \(e)") }
            }
        }
        queue.async { [self] in
            if !powered { PeerLog.warning("Bluetooth (BlueZ): \(adapterName) is powered off; waiting for it (bluetoothctl power on)") }
            // Objects that changed between the first look and the signals' rules: look again.
            reload()
        }
    }

    // MARK: State (on `queue`)

    var closed = false
    var adapterPath: String?
    private var adapterProperties: [String: DBusValue] = [:]
    var powered: Bool { adapterProperties["Powered"]?.bool == true }
    var adapterName: String { adapterPath.map { String($0.split(separator: "/").last ?? "adapter") } ?? options.adapter ?? "the adapter" }
    private var adapterAddress: String? { adapterProperties["Address"]?.string }

    struct Device {
        var address: String
        var random: Bool
        var serviceData: [String: [UInt8]] = [:]
    }
    var devices: [String: Device] = [:]

    private let knownAddress = Locked<BluetoothAddress?>(nil)
    public var address: BluetoothAddress? { knownAddress.withLock { $0 } }

    private func bluez(_ path: String, _ interface: String, _ member: String, _ body: [DBusValue] = []) -> DBusMessage {
        .methodCall(destination: "org.bluez", path: path, interface: interface, member: member, body: body)
    }

    func call(_ path: String, _ interface: String, _ member: String, _ body: [DBusValue] = [], _ done: @escaping @Sendable (Result<DBusMessage, DBusError>) -> Void) {
        bus.call(bluez(path, interface, member, body), timeout: 10, reply: done)
    }

    /// A GetManagedObjects answer: the adapter and the devices under it.
    private func load(_ m: DBusMessage) {
        var adapters: [String: [String: DBusValue]] = [:]
        var monitorManagers: [String: [String: DBusValue]] = [:]
        var found: [String: [String: DBusValue]] = [:]
        if case .dictionary(_, _, let entries) = m.body.first?.unwrapped ?? .bytes([]) {
            for e in entries {
                guard let path = e.key.string, let interfaces = e.value.unwrapped.stringDictionary else { continue }
                if let a = interfaces["org.bluez.Adapter1"]?.unwrapped.stringDictionary { adapters[path] = a.mapValues(\.unwrapped) }
                if let a = interfaces[Self.monitorManagerInterface]?.unwrapped.stringDictionary { monitorManagers[path] = a.mapValues(\.unwrapped) }
                if let d = interfaces["org.bluez.Device1"]?.unwrapped.stringDictionary { found[path] = d.mapValues(\.unwrapped) }
            }
        }
        let chosen = options.adapter.map { name in adapters.keys.first { $0.hasSuffix("/" + name) } } ?? adapters.keys.sorted().first
        setAdapter(chosen, chosen.flatMap { adapters[$0] } ?? [:])
        forgetMonitored()
        devices = [:]
        setMonitorManager(chosen.flatMap { monitorManagers[$0] })
        guard let adapterPath else { return }
        for (path, props) in found where path.hasPrefix(adapterPath + "/") { updateDevice(path, props, report: false) }
    }

    private func reload() {
        guard !closed else { return }
        call("/", "org.freedesktop.DBus.ObjectManager", "GetManagedObjects") { [self] r in
            switch r {
            case let .success(m):
                let wasOn = powered
                load(m)
                if powered && !wasOn { poweredOn() } else if !powered { poweredOff() }
            case let .failure(e):
                PeerLog.warning("Bluetooth (BlueZ): bluetoothd does not answer (\(e)); waiting for it")
                setAdapter(nil, [:])
                poweredOff()
            }
        }
    }

    private func setAdapter(_ path: String?, _ props: [String: DBusValue]) {
        if path != adapterPath { setMonitorManager(nil) }
        adapterPath = path
        adapterProperties = props
        let a = props["Address"]?.string.flatMap { BluetoothAddress(string: $0, type: props["AddressType"]?.string == "random" ? .random : .public) }
        knownAddress.withLock { $0 = path == nil ? nil : a }
    }

    // MARK: Signals

    private func signal(_ m: DBusMessage) {
        guard !closed else { return }
        switch (m.interface, m.member) {
        case ("org.freedesktop.DBus.ObjectManager", "InterfacesAdded"):
            guard m.body.count >= 2, let path = m.body[0].string, let interfaces = m.body[1].unwrapped.stringDictionary else { return }
            if interfaces["org.bluez.Adapter1"] != nil, adapterPath == nil || adapterPath == path {
                // An adapter (back): look at everything again.
                return reload()
            }
            if let d = interfaces["org.bluez.Device1"]?.unwrapped.stringDictionary, let adapterPath, path.hasPrefix(adapterPath + "/") {
                updateDevice(path, d.mapValues(\.unwrapped), report: true)
            }
            if let props = interfaces[Self.monitorManagerInterface]?.unwrapped.stringDictionary, path == adapterPath {
                setMonitorManager(props.mapValues(\.unwrapped))
                refreshMonitor()
            }
        case ("org.freedesktop.DBus.ObjectManager", "InterfacesRemoved"):
            guard m.body.count >= 2, let path = m.body[0].string else { return }
            let names = (m.body[1].arrayItems ?? []).compactMap(\.string)
            if names.contains("org.bluez.Device1"), let d = devices.removeValue(forKey: path) {
                monitored[path] = nil
                endSuperseded(d.address)
                deviceGone(d)
            }
            if names.contains(Self.monitorManagerInterface), path == adapterPath { setMonitorManager(nil) }
            if names.contains("org.bluez.Adapter1"), path == adapterPath {
                PeerLog.warning("Bluetooth (BlueZ): \(adapterName) went away; adverts and browsing wait for it to come back")
                setAdapter(nil, [:])
                poweredOff()
            }
        case ("org.freedesktop.DBus.Properties", "PropertiesChanged"):
            guard let path = m.path, m.body.count >= 2, let interface = m.body[0].string, let changed = m.body[1].unwrapped.stringDictionary else { return }
            if interface == "org.bluez.Adapter1", path == adapterPath {
                let wasOn = powered
                for (k, v) in changed { adapterProperties[k] = v.unwrapped }
                setAdapter(path, adapterProperties)
                if powered && !wasOn {
                    poweredOn()
                } else if !powered && wasOn {
                    PeerLog.warning("Bluetooth (BlueZ): \(adapterName) was powered off; adverts and browsing wait for it")
                    poweredOff()
                }
            } else if interface == "org.bluez.Device1", let adapterPath, path.hasPrefix(adapterPath + "/") {
                updateDevice(path, changed.mapValues(\.unwrapped), report: true)
                if changed["Connected"]?.unwrapped.bool == false, let d = devices[path] { endSuperseded(d.address) }
            }
        case ("org.freedesktop.DBus", "NameOwnerChanged"):
            guard m.body.count >= 3, m.body[0].string == "org.bluez" else { return }
            if m.body[2].string?.isEmpty ?? true {
                PeerLog.warning("Bluetooth (BlueZ): bluetoothd left the bus; adverts and browsing wait for it to come back")
                setAdapter(nil, [:])
                for (_, d) in devices { deviceGone(d) }
                devices = [:]
                poweredOff()
            } else {
                reload()
            }
        default:
            break
        }
    }

    private func busLost(_ e: DBusError) {
        guard !closed else { return }
        PeerLog.warning("Bluetooth (BlueZ): the system bus connection ended (\(e)); Bluetooth is unavailable to this process now")
        setAdapter(nil, [:])
        poweredOff()
    }

    // MARK: Power

    private var whenOn: [() -> Void] = []
    /// Counts the times the adapter went off or away.
    var epoch = 0

    private func poweredOn() {
        let pending = whenOn
        whenOn.removeAll()
        for w in pending { w() }
        for id in adverts.keys.sorted() { register(id) }
        discovering = false
        refreshDiscovery()
        refreshMonitor()
        scheduleSweep()
    }

    private func poweredOff() {
        // Answers to calls made before this are about an adapter state that is gone: they are ignored.
        epoch &+= 1
        // The adapter's links are gone, and with them the channels the kernel kept for superseded connects.
        endSuperseded(nil)
        for id in adverts.keys { adverts[id]?.registered = false; adverts[id]?.registering = false }
        discovering = false
        // What the monitor held found is judged by the sweep again until it reports anew.
        forgetMonitored()
        monitorRefused = false
    }

    /// Runs `work` on the queue once the adapter is on.
    private func whenPoweredOn(_ work: @escaping () -> Void) {
        if powered && adapterPath != nil { work() } else { whenOn.append(work) }
    }

    // MARK: Advertising

    struct Advert {
        var advert: PeerAdvert
        var name: String?
        var onFailure: @Sendable (String) -> Void
        var registered = false
        var registering = false
        var attempts = 0
    }
    private var adverts: [UInt64: Advert] = [:]
    private let ids = Locked<UInt64>(0)

    /// Ids are made at once (the public calls answer without waiting for the queue, as they may run on it).
    private func makeID() -> UInt64 {
        ids.withLock {
            $0 += 1; return $0
        }
    }

    private func advertPath(_ id: UInt64) -> String { root + "/advert\(id)" }

    public func addAdvert(_ advert: PeerAdvert, name: String, onFailure: @escaping @Sendable (String) -> Void) -> UInt64 {
        let id = makeID()
        queue.async { [self] in
            guard !closed else { return }
            adverts[id] = Advert(advert: advert, name: name, onFailure: onFailure)
            bus.export(path: advertPath(id)) { [weak self] call in self?.answerAdvert(id, call) }
            if powered && adapterPath != nil { register(id) }
        }
        return id
    }

    public func removeAdvert(_ id: UInt64) {
        queue.async { [self] in
            guard let a = adverts.removeValue(forKey: id) else { return }
            let path = advertPath(id)
            if (a.registered || a.registering), let adapterPath {
                call(adapterPath, "org.bluez.LEAdvertisingManager1", "UnregisterAdvertisement", [.objectPath(path)]) { [self] _ in bus.unexport(path: path) }
            } else {
                bus.unexport(path: path)
            }
        }
    }

    /// LEAdvertisement1's properties (doc/org.bluez.LEAdvertisement.rst).
    static func properties(of advert: PeerAdvert, name: String?) -> [String: DBusValue] {
        var p: [String: DBusValue] = [
            "Type": .string("peripheral"),
            "ServiceData": .dictionary(
                key: .string, value: .variant,
                [DBusDictEntry(.string(PeerAdvert.uuidString(advert.service).lowercased()), .variant(.bytes(advert.serviceDataPayload)))]),
        ]
        if let name { p["LocalName"] = .string(name) }
        return p
    }

    private func answerAdvert(_ id: UInt64, _ call: DBusMessage) -> DBusMessage? {
        guard let a = adverts[id] else { return call.errorReply(name: "org.freedesktop.DBus.Error.UnknownObject", message: "no such advertisement") }
        let props = Self.properties(of: a.advert, name: a.name)
        switch (call.interface, call.member) {
        case ("org.freedesktop.DBus.Properties", "GetAll"):
            return call.reply([.stringVariantDictionary(props)])
        case ("org.freedesktop.DBus.Properties", "Get"):
            guard call.body.count > 1, let v = props[call.body[1].string ?? ""] else {
                return call.errorReply(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "no such property")
            }
            return call.reply([.variant(v)])
        case ("org.bluez.LEAdvertisement1", "Release"):
            // BlueZ dropped it (the adapter went off, or bluetoothd stops): registered again when the adapter is on.
            adverts[id]?.registered = false
            return call.reply()
        default:
            return call.errorReply(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "not supported")
        }
    }

    private func register(_ id: UInt64) {
        guard let a = adverts[id], !a.registered, !a.registering, let adapterPath else { return }
        adverts[id]?.registering = true
        let path = advertPath(id)
        let asked = epoch
        call(adapterPath, "org.bluez.LEAdvertisingManager1", "RegisterAdvertisement", [.objectPath(path), .stringVariantDictionary([:])]) { [self] r in
            // An answer from before the adapter went off or away: registered again when it is back.
            guard asked == epoch else { return }
            guard adverts[id] != nil else {
                // Removed meanwhile.
                if case .success = r { call(adapterPath, "org.bluez.LEAdvertisingManager1", "UnregisterAdvertisement", [.objectPath(path)]) { _ in } }
                return
            }
            adverts[id]?.registering = false
            switch r {
            case .success:
                adverts[id]?.registered = true
                adverts[id]?.attempts = 0
            case let .failure(e) where Self.isAlreadyExists(e):
                // BlueZ kept it through the power cycle.
                adverts[id]?.registered = true
            case let .failure(e):
                let attempts = (adverts[id]?.attempts ?? 0) + 1
                adverts[id]?.attempts = attempts
                if case let .remote(name, _) = e, name == "org.bluez.Error.InvalidLength", a.name != nil {
                    // The name did not fit beside the Service Data: advertise without it (browsers learn it over a channel).
                    PeerLog.write("Bluetooth (BlueZ): advert with the name refused (\(e)); advertising without it")
                    adverts[id]?.name = nil
                    return register(id)
                }
                if case let .remote(name, _) = e, name == "org.bluez.Error.Failed", attempts < Self.registrationAttempts {
                    // The kernel answers Busy while another advertising operation is under way (another process's
                    // advert added or removed, seen in the guest): a moment later it takes ours.
                    PeerLog.write("Bluetooth (BlueZ): advert refused (\(e)); trying again (attempt \(attempts + 1) of \(Self.registrationAttempts))")
                    queue.asyncAfter(deadline: .now() + Self.registrationRetryDelay * Double(attempts)) { [weak self] in self?.register(id) }
                    return
                }
                let why = Self.advertisingFailure(e, adapter: adapterName)
                PeerLog.warning("Bluetooth (BlueZ): cannot advertise: \(why)")
                a.onFailure(why)
            }
        }
    }

    /// How often a registration refused with org.bluez.Error.Failed is tried, and the pause before each retry (times
    /// the attempt's number): 28 s in all. (Five attempts, 10 s, were not enough in the loaded guest: the kernel
    /// answered Busy (0x0a) for 13 s after the previous pair's processes had ended, mc-bluez's eighth run.)
    static let registrationAttempts = 8
    static let registrationRetryDelay: Double = 1

    static func isAlreadyExists(_ e: DBusError) -> Bool {
        if case let .remote(name, _) = e { return name == "org.bluez.Error.AlreadyExists" }
        return false
    }

    /// What a refused RegisterAdvertisement means to a user.
    static func advertisingFailure(_ e: DBusError, adapter: String) -> String {
        guard case let .remote(name, message) = e else { return "\(e)" }
        switch name {
        case "org.bluez.Error.NotPermitted":
            return "every advertising slot of \(adapter) is taken (BlueZ: \(message)); stop another advertiser, or use a second adapter"
        case "org.freedesktop.DBus.Error.UnknownMethod", "org.freedesktop.DBus.Error.UnknownObject", "org.freedesktop.DBus.Error.UnknownInterface":
            return "\(adapter) does not advertise through BlueZ (no LEAdvertisingManager1: an adapter without LE, or bluetoothd too old) (\(name): \(message))"
        default:
            return "BlueZ refused the advertisement: \(name): \(message)"
        }
    }

    // MARK: Browsing

    struct Browse {
        var service: String
        var handler: @Sendable (PeerBrowseEvent) -> Void
        var lastSeen: [UInt64: Date] = [:]
    }
    var browses: [UInt64: Browse] = [:]
    private var discovering = false
    private var sweepScheduled = false
    /// A peer no sign of which came for this long is lost (bluetoothd reports a device again only when its data
    /// change, or after its discovery restarts, so this is longer than on our own host).
    package var lostAfter: TimeInterval = 20
    static let maximumTracked = 1024

    public func browse(service: [UInt8], _ handler: @escaping @Sendable (PeerBrowseEvent) -> Void) -> UInt64 {
        let id = makeID()
        queue.async { [self] in
            guard !closed else { return }
            browses[id] = Browse(service: PeerAdvert.uuidString(service).lowercased(), handler: handler)
            refreshDiscovery()
            refreshMonitor()
            // What bluetoothd already knows is reported at once.
            for (path, d) in devices { report(path, d, only: id) }
            scheduleSweep()
        }
        return id
    }

    public func cancelBrowse(_ id: UInt64) {
        queue.async { [self] in
            guard browses.removeValue(forKey: id) != nil else { return }
            refreshDiscovery()
            refreshMonitor()
        }
    }

    private func refreshDiscovery() {
        guard let adapterPath, powered else { return }
        if browses.isEmpty {
            guard discovering else { return }
            discovering = false
            call(adapterPath, "org.bluez.Adapter1", "StopDiscovery") { _ in }
        } else if !discovering {
            discovering = true
            // Every advert counts (DuplicateData): it tells us the peer is still there.
            let filter: [String: DBusValue] = ["Transport": .string("le"), "DuplicateData": .boolean(true)]
            call(adapterPath, "org.bluez.Adapter1", "SetDiscoveryFilter", [.stringVariantDictionary(filter)]) { r in
                if case let .failure(e) = r { PeerLog.warning("Bluetooth (BlueZ): SetDiscoveryFilter failed: \(e)") }
            }
            let asked = epoch
            call(adapterPath, "org.bluez.Adapter1", "StartDiscovery") { [self] r in
                guard case let .failure(e) = r, asked == epoch else { return }
                if case let .remote(name, _) = e, name == "org.bluez.Error.InProgress" { return }
                discovering = false
                PeerLog.warning("Bluetooth (BlueZ): cannot browse on \(adapterName): \(e)")
            }
        }
    }

    private func updateDevice(_ path: String, _ changed: [String: DBusValue], report announce: Bool) {
        var d = devices[path] ?? Device(address: "", random: false)
        if let a = changed["Address"]?.string { d.address = a }
        if let t = changed["AddressType"]?.string { d.random = t == "random" }
        if case .dictionary(_, _, let entries) = changed["ServiceData"] ?? .bytes([]) {
            var m: [String: [UInt8]] = [:]
            for e in entries {
                if let u = e.key.string?.lowercased(), let b = e.value.unwrapped.byteArray { m[u] = b }
            }
            d.serviceData = m
        }
        guard !d.address.isEmpty else { return }
        devices[path] = d
        if announce { report(path, d, only: nil) }
    }

    /// The peers a device's Service Data names, to the browses of their service.
    func report(_ path: String, _ d: Device, only: UInt64?) {
        guard let bytes = Self.addressOctets(d.address) else { return }
        let now = Date()
        for (id, b) in browses where only == nil || only == id {
            guard let payload = d.serviceData[b.service], let service = PeerAdvert.uuid(bluezString: b.service),
                let advert = PeerAdvert(service: service, serviceDataPayload: payload)
            else { continue }
            // Bounded: a flood of made-up tokens cannot grow the table past this.
            guard b.lastSeen[advert.token] != nil || b.lastSeen.count < Self.maximumTracked else { continue }
            browses[id]?.lastSeen[advert.token] = now
            b.handler(.seen(token: advert.token, endpoint: PeerBluetoothEndpoint(address: bytes, isRandom: d.random, psm: advert.psm)))
        }
    }

    /// A device is gone (for the browses of `service` only, when given): the tokens it carried are lost.
    func deviceGone(_ d: Device, service: String? = nil) {
        for (id, b) in browses where service == nil || b.service == service {
            for (uuid, payload) in d.serviceData where uuid == b.service {
                guard let service = PeerAdvert.uuid(bluezString: uuid), let advert = PeerAdvert(service: service, serviceDataPayload: payload),
                    browses[id]?.lastSeen.removeValue(forKey: advert.token) != nil
                else { continue }
                b.handler(.lost(token: advert.token))
            }
        }
    }

    private func scheduleSweep() {
        guard !sweepScheduled, !closed else { return }
        sweepScheduled = true
        queue.asyncAfter(deadline: .now() + 1) { [weak self] in
            guard let self else { return }
            sweepScheduled = false
            let now = Date()
            let held = heldByMonitor()
            for (id, b) in browses {
                for (token, seen) in b.lastSeen where now.timeIntervalSince(seen) > lostAfter && !held.contains(Held(service: b.service, token: token)) {
                    browses[id]?.lastSeen[token] = nil
                    b.handler(.lost(token: token))
                }
            }
            if !browses.isEmpty { scheduleSweep() }
        }
    }

    /// "AA:BB:CC:DD:EE:FF" → wire order (least significant octet first).
    static func addressOctets(_ s: String) -> [UInt8]? {
        let parts = s.split(separator: ":")
        guard parts.count == 6 else { return nil }
        let octets = parts.compactMap { $0.count == 2 ? UInt8($0, radix: 16) : nil }
        return octets.count == 6 ? octets.reversed() : nil
    }

    // MARK: Advertisement monitor (its state; the rest is in BlueZPeerNode+Monitor.swift)

    /// Whether the adapter offers AdvertisementMonitorManager1 with or_patterns monitors (bluetoothd's experimental
    /// interfaces; BlueZ 5.66 in the guest). Without it the node browses by discovery alone.
    var monitorManager = false
    /// The monitor application registered (or being registered) with the manager: its path and the services of its
    /// monitors, in order (monitor i is `path/si`); nil when there is none.
    var monitorApp: (path: String, services: [String], active: Set<Int>)?
    var monitorApps = 0
    /// bluetoothd refused or released a monitor: browsing stays on discovery alone until the adapter comes back.
    var monitorRefused = false
    /// Devices a monitor reported found and has not reported lost, with the services of the monitors that hold them.
    var monitored: [String: Set<String>] = [:]
    /// How long a monitored peer may go without an advert before bluetoothd reports it lost (RSSILowTimeout, 1–300 s).
    /// A bluez peer advertises every 1.28 s (the kernel's default interval), a native one every 100 ms: 5 s is four
    /// missed adverts of the slower.
    package var monitorLostAfter: UInt16 = 5

    // MARK: Channels

    private var listeners: [UInt16: @Sendable () -> Void] = [:]
    private var bridges: [ObjectIdentifier: SeqPacketBridge] = [:]
    /// The SDU size our channels offer: the largest the socket takes, since the kernel (6.1) gives the peer
    /// receiveMTU / MPS + 1 credits and nothing else sets them (2048 gave 3 credits, one SDU and a half in flight,
    /// on 1021-octet LE buffers; 65535 gives 65).
    package var receiveMTU: UInt16 = BlueZKernelL2CAP.largestReceiveMTU

    public func listen(tls: PeerTLSIdentity?, onLink: @escaping @Sendable (PeerLink) -> Void, completion: @escaping @Sendable (UInt16?) -> Void) {
        queue.async { [self] in
            whenPoweredOn { [self] in
                do {
                    let l = try sockets.listen(adapterAddress: adapterAddress, receiveMTU: receiveMTU) { [weak self] fd in
                        guard let self else { return _ = Glibc.close(fd) }
                        self.queue.async {
                            // The peer's device, as a member's endpoint names it (the session matches the two).
                            let remote = self.sockets.peer(fd).flatMap { p in
                                Self.addressOctets(p.address).map { PeerBluetoothEndpoint(address: $0, isRandom: p.random, psm: 0).host }
                            }
                            PeerLog.write("Bluetooth (BlueZ): channel from \(remote ?? "an unknown device") accepted")
                            if let p = self.sockets.peer(fd) { self.peerLinked(p.address) }
                            self.bridge(fd, remoteHost: remote ?? Self.unknownRemote, asClient: false, tls: tls) { r in if case let .success(link) = r { onLink(link) } }
                        }
                    }
                    listeners[l.psm] = l.close
                    PeerLog.write("Bluetooth (BlueZ): listening on PSM 0x\(String(l.psm, radix: 16)) of \(adapterName)")
                    completion(l.psm)
                } catch {
                    PeerLog.warning("Bluetooth (BlueZ): cannot listen for L2CAP channels on \(adapterName): \(error)")
                    completion(nil)
                }
            }
        }
    }

    public func unlisten(_ psm: UInt16) {
        queue.async { [self] in listeners.removeValue(forKey: psm)?() }
    }

    /// The remote host of a channel a peer opened to us when the socket does not say who it is.
    static let unknownRemote = "ble:00:00:00:00:00:00/public"

    public func connect(
        to endpoint: PeerBluetoothEndpoint, tls: PeerTLSIdentity?,
        completion: @escaping @Sendable (Result<PeerLink, PeerTransportError>) -> Void
    ) {
        guard endpoint.address.count == 6 else { return completion(.failure(.cannotConnect("\(endpoint): not an address"))) }
        let text = endpoint.address.reversed().map { String(format: "%02X", $0) }.joined(separator: ":")
        let id = makeID()
        queue.async { [self] in
            guard !closed else { return completion(.failure(.cannotConnect("\(endpoint.host): Bluetooth is closed"))) }
            whenPoweredOn { [self] in
                PeerLog.write("Bluetooth (BlueZ): opening a channel to \(endpoint)")
                startConnect(id, endpoint: endpoint, address: text, tls: tls, completion: completion)
            }
        }
    }

    /// Connects not yet answered, by id: the peer's address, when the attempt began, how to end it, and which attempt
    /// of the connect it is (a superseded attempt's answer is dropped).
    private struct Attempt {
        var address: String
        var started: Date
        var cancel: @Sendable () -> Void
        var generation: Int
        var retry: () -> Void
    }
    private var attempts: [UInt64: Attempt] = [:]
    /// How long an attempt must have waited before a channel from its peer makes it start again. (Not at once: when
    /// the kernel's own connection to the peer has just come up, its channel request is on the way; ending it then
    /// left the next connects unanswered in the guest. Device1.Connected is no sign for the same reason: it is set
    /// for the kernel's own link too.)
    package var relinkAfter: TimeInterval = 5

    private func startConnect(
        _ id: UInt64, endpoint: PeerBluetoothEndpoint, address: String, tls: PeerTLSIdentity?, generation: Int = 0,
        completion: @escaping @Sendable (Result<PeerLink, PeerTransportError>) -> Void
    ) {
        let cancel = sockets.connect(address: address, random: endpoint.isRandom, psm: endpoint.psm, adapterAddress: adapterAddress, receiveMTU: receiveMTU) {
            [weak self] r in
            guard let self else {
                if case let .success(fd) = r { Glibc.close(fd) }
                return completion(.failure(.cannotConnect("\(endpoint.host): Bluetooth is closed")))
            }
            queue.async { [self] in
                guard attempts[id]?.generation == generation else {
                    // Superseded by a new attempt over the peer's own link.
                    if case let .success(fd) = r { Glibc.close(fd) }
                    return
                }
                attempts[id] = nil
                switch r {
                case let .success(fd):
                    bridge(fd, remoteHost: endpoint.host, asClient: true, tls: tls, completion: completion)
                case let .failure(e):
                    completion(.failure(.cannotConnect("\(endpoint.host) PSM 0x\(String(endpoint.psm, radix: 16)): \(e)")))
                }
            }
        }
        attempts[id] = Attempt(
            address: address, started: Date(), cancel: cancel, generation: generation,
            retry: { [weak self] in self?.startConnect(id, endpoint: endpoint, address: address, tls: tls, generation: generation + 1, completion: completion) })
    }

    /// `address` opened a channel to us, so it has a link to us: connects of ours to it that have waited `relinkAfter`
    /// start again, over that link. The kernel (6.1) had started their own LE connection (a scan for
    /// the peer) before the peer connected to us, and then neither used the peer's link for them nor, while that link
    /// lasted, connected itself (it does not initiate while it is peripheral to a device): in the guest a GameKit
    /// picker on bluez waited on four connects in a row, ~45 s each, while the peer kept linking to it.
    private func peerLinked(_ address: String) {
        let now = Date()
        for (id, a) in attempts where a.address.caseInsensitiveCompare(address) == .orderedSame && now.timeIntervalSince(a.started) >= relinkAfter {
            PeerLog.write("Bluetooth (BlueZ): \(address) linked to us while our channel to it waited; opening it again over that link")
            attempts[id] = nil
            keepSuperseded(address, a.cancel)
            a.retry()
        }
    }

    /// Connects superseded by one over the peer's own link, left open. Not closed then: the kernel (6.1) deletes a
    /// channel still connecting without a word to the peer, and gives its source CID to the next channel; when the
    /// request had reached the peer, the peer still holds a channel with that CID and refuses the next one as
    /// "Source CID already allocated" (0x000A), which the socket reports as ECONNREFUSED. In the guest (gk-bluez) a
    /// superseded connect's request had been answered with success by our host, yet the kernel's socket never
    /// completed; closed 7 s later, its CID 0x0040 went to the picker's invitation channel, which our host refused,
    /// and the invitation failed. Kept, a superseded connect holds its CID until its device's link ends (the kernel
    /// then ends every channel of it), the device goes, or the node closes; at most `maximumSuperseded` at once
    /// (the oldest closed first). Its answer, if one comes, is dropped (a connected socket is closed with a
    /// Disconnection Request, which frees the CID on both sides).
    private var superseded: [(address: String, cancel: @Sendable () -> Void)] = []
    static let maximumSuperseded = 16

    private func keepSuperseded(_ address: String, _ cancel: @escaping @Sendable () -> Void) {
        superseded.append((address, cancel))
        if superseded.count > Self.maximumSuperseded { superseded.removeFirst().cancel() }
    }

    /// The link to `address` ended (nil: every link): the connects kept for it are closed now.
    private func endSuperseded(_ address: String?) {
        let (ending, kept) = superseded.reduce(into: ([(address: String, cancel: @Sendable () -> Void)](), [(address: String, cancel: @Sendable () -> Void)]())) { r, e in
            if address == nil || e.address.caseInsensitiveCompare(address!) == .orderedSame { r.0.append(e) } else { r.1.append(e) }
        }
        guard !ending.isEmpty else { return }
        superseded = kept
        for e in ending { e.cancel() }
    }

    private func bridge(_ fd: Int32, remoteHost: String, asClient: Bool, tls: PeerTLSIdentity?, completion: @escaping @Sendable (Result<PeerLink, PeerTransportError>) -> Void) {
        guard !closed else {
            Glibc.close(fd)
            return completion(.failure(.cannotConnect("\(remoteHost): Bluetooth is closed")))
        }
        let mtus = sockets.mtus(fd)
        let sockets = self.sockets
        let made = SeqPacketBridge.start(fd: fd, sendMTU: mtus.send, receiveMTU: mtus.receive, unsent: { sockets.unsentOctets($0) }) { pairEnd in
            PeerTransport.shared.adopt(socket: pairEnd, remoteHost: remoteHost, asClient: asClient, tls: tls, completion: completion)
        }
        guard let made else { return completion(.failure(.cannotConnect("socketpair: \(String(cString: strerror(errno)))"))) }
        // Kept so that closing the node ends its channels; a bridge that ended on its own is dropped on the next one.
        bridges = bridges.filter { !$0.value.isFinished }
        bridges[ObjectIdentifier(made)] = made
    }

    // MARK: Closing

    private func close() {
        queue.async { [self] in
            guard !closed else { return }
            closed = true
            if let adapterPath {
                for id in adverts.keys where adverts[id]!.registered || adverts[id]!.registering {
                    call(adapterPath, "org.bluez.LEAdvertisingManager1", "UnregisterAdvertisement", [.objectPath(advertPath(id))]) { _ in }
                }
            }
            for id in adverts.keys { bus.unexport(path: advertPath(id)) }
            adverts.removeAll()
            browses.removeAll()
            refreshMonitor()
            for (_, c) in listeners { c() }
            listeners.removeAll()
            for (_, b) in bridges { b.cancel() }
            bridges.removeAll()
            // Connects still waiting end (their completions get the failure).
            for (_, a) in attempts { a.cancel() }
            endSuperseded(nil)
            // bluetoothd ends our discovery session (and any registration left) when we leave the bus; the calls above
            // go out before the connection closes.
            let bus = self.bus
            queue.asyncAfter(deadline: .now() + 0.5) { bus.close() }
        }
    }

    deinit { bus.close() }
}

extension PeerBluetoothNode {
    /// Announces `advert` with no one to tell if it cannot be.
    public func addAdvert(_ advert: PeerAdvert, name: String) -> UInt64 { addAdvert(advert, name: name, onFailure: { _ in }) }
}
