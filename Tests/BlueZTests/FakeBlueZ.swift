// A fake bluetoothd for the BlueZ backend's tests: it owns org.bluez on a private bus and exports, with our DBus
// module, the object tree and methods BlueZ documents (doc/org.bluez.Adapter.rst, Device.rst, GattService.rst,
// GattCharacteristic.rst, GattDescriptor.rst): ObjectManager.GetManagedObjects with InterfacesAdded/Removed,
// Properties.Get/GetAll/Set with PropertiesChanged, Adapter1.SetDiscoveryFilter/StartDiscovery/StopDiscovery,
// Device1.Connect/Disconnect (and the Disconnected signal of BlueZ 5.70+), GattCharacteristic1.ReadValue/
// WriteValue/StartNotify/StopNotify, GattDescriptor1.ReadValue/WriteValue. Paths and properties are BlueZ's:
// /org/bluez/hciN, …/dev_AA_BB_…, …/serviceXXXX/charYYYY/descZZZZ with handles in hex.
//
// What it does on a call, where BlueZ's order matters: Connect sets Connected, adds the GATT objects, answers, then
// sets ServicesResolved; a ReadValue answers, then announces the value it read as a change of Value (BlueZ caches
// what it reads). Tests can make the next call of a method fail with a given D-Bus error, hold a Connect unanswered
// (a Disconnect then fails it, as BlueZ cancels a pending connection), drive adapters and devices, and change a
// connected device's database as bluetoothd does on a Service Changed indication (removeService, addService).
import Foundation
import DBus

struct FakeDescriptor {
    var uuid: String
    var value: [UInt8]
}

struct FakeCharacteristic {
    var uuid: String
    var flags: [String]
    var value: [UInt8]
    var descriptors: [FakeDescriptor] = []
}

struct FakeService {
    var uuid: String
    var characteristics: [FakeCharacteristic]
    var primary = true
    /// The services (indexes in the database) this one includes.
    var includes: [Int] = []
}

final class FakeBlueZ: @unchecked Sendable {
    let connection: DBusConnection
    private let lock = NSLock()
    private var objects: [String: [String: [String: DBusValue]]] = [:]
    private var failures: [String: (name: String, message: String, times: Int)] = [:]
    private var heldConnect: DBusMessage?
    private var log: [String] = []
    private var writes: [(path: String, value: [UInt8], type: String)] = []
    private var filter: [String: DBusValue]?
    /// Applications registered with GattManager1 (path → owner and objects) and advertisements with
    /// LEAdvertisingManager1 (path → properties), as BlueZ read them at registration.
    private var apps: [String: (owner: String, objects: [String: [String: [String: DBusValue]]])] = [:]
    private var adverts: [String: [String: DBusValue]] = [:]
    /// Monitor applications registered with AdvertisementMonitorManager1 (path → owner, and each monitor's properties
    /// as read at registration, by path) and the monitors activated (those whose values bluetoothd accepts).
    private var monitorApps: [String: (owner: String, monitors: [String: [String: DBusValue]])] = [:]
    private var activeMonitors: Set<String> = []
    private var appSignals: [(path: String, value: [UInt8])] = []
    /// Agents registered with AgentManager1 (path → owner and capability) and the default one.
    private var agents: [String: (owner: String, capability: String)] = [:]
    private var defaultAgentPath: String?
    /// What Device1.Pair asks the agent (nil: Just Works, no question).
    var pairingPrompt: (member: String, body: [DBusValue])?
    /// The agent's answers to Pair's prompts (reply bodies, or the error name).
    private var agentAnswers: [String] = []
    var holdConnect = false
    /// Connect as BlueZ 5.66 does when the ATT socket connects before the kernel's Device Connected event: the
    /// device becomes Connected (Get and GetAll say so) without a PropertiesChanged for it.
    var connectsSilently = false
    /// GetManagedObjects left unanswered until `answerGetManagedObjects` (bluetoothd busy: its answer comes after
    /// signals sent meanwhile).
    var holdGetManagedObjects = false
    private var heldGetManagedObjects: [DBusMessage] = []
    /// StartDiscovery left unanswered (bluetoothd answers it only once the kernel's discovery has started) until
    /// `answerStartDiscovery`; meanwhile StopDiscovery is refused with InProgress, as bluetoothd 5.66 refuses it while
    /// the client's StartDiscovery is pending (adapter.c, stop_discovery: `if (client->msg) return btd_error_busy`).
    var holdStartDiscovery = false
    private var heldStartDiscovery: DBusMessage?
    /// Whether characteristics that take writes without response offer AcquireWrite (WriteAcquired, BlueZ 5.46+).
    var offersAcquireWrite = true
    /// Whether characteristics that notify offer AcquireNotify (NotifyAcquired, BlueZ 5.46+; bluetoothd 5.66 does):
    /// off by default, so that the tests of StartNotify and PropertiesChanged keep that path.
    var offersAcquireNotify = false
    /// bluetoothd's ends of AcquireNotify's sockets, by characteristic, and the ones the client closed.
    private var notifyEnds: [String: Int32] = [:]
    private var releasedNotify: [String] = []
    /// The socket buffer of an acquired write's socket (small to make the sender wait), and whether its reader
    /// pauses, as a link that is slower than the writer.
    var acquiredSocketBuffer: Int32 = 0
    let acquiredReaderPaused = NSCondition()
    var pauseAcquiredReader = false
    var mtu: UInt16 = 247
    /// While held, the fake's handling of an application's value change waits (bluetoothd busy): everything behind it
    /// on the fake's connection waits too, Peer.Ping's answer included, as in bluetoothd's one main loop.
    private let valueChangeGate = NSCondition()
    private var valueChangesHeld = false
    func holdValueChanges(_ held: Bool) {
        valueChangeGate.lock()
        valueChangesHeld = held
        valueChangeGate.broadcast()
        valueChangeGate.unlock()
    }
    /// The GATT database every device shows once connected.
    var database: [FakeService] = []
    /// Seconds after Connect (and ServicesResolved) the database is exported, as bluetoothd does on reconnection to
    /// a bonded device whose database changed: resolved from its cache, then the new objects. 0: at once.
    var exportsDatabaseAfter: Double = 0

    /// Async: the bus's answers arrive on the connection's queue, which needs a Dispatch worker; waiting for them with
    /// callBlocking held the test task's worker meanwhile (on a saturated machine the suite's tasks then queued behind
    /// the pool's growth of one worker a second).
    init(address: String) async throws {
        connection = try DBusConnection(address: address)
        // The object manager is there before the name, as in bluetoothd.
        connection.export(path: "/") { [weak self] call in self?.handleRoot(call) }
        connection.export(path: "/org/bluez") { [weak self] call in self?.handle(call) }
        // Value changes of registered applications' characteristics (bluetoothd watches them the same way).
        connection.onSignal { [weak self] m in
            // A client that leaves the bus takes its agents with it (bluetoothd watches their owners).
            if let self, m.member == "NameOwnerChanged", m.body.count == 3, let old = m.body[1].string, m.body[2].string?.isEmpty == true {
                self.lock.withLock {
                    for (path, a) in self.agents where a.owner == old {
                        self.agents[path] = nil
                        if self.defaultAgentPath == path { self.defaultAgentPath = nil }
                    }
                }
                return
            }
            guard let self, m.member == "PropertiesChanged", m.sender != self.connection.uniqueName, let path = m.path,
                let v = m.body.count > 1 ? m.body[1].stringDictionary?["Value"]?.byteArray : nil
            else { return }
            self.valueChangeGate.lock()
            while self.valueChangesHeld { self.valueChangeGate.wait() }
            self.valueChangeGate.unlock()
            self.lock.withLock { self.appSignals.append((path, v)) }
        }
        _ = try await connection.call(
            .methodCall(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "AddMatch", body: [.string("type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'")]))
        _ = try await connection.call(
            .methodCall(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "AddMatch", body: [.string("type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged'")]))
        let reply = try await connection.call(
            .methodCall(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "RequestName", body: [.string("org.bluez"), .uint32(4)]))
        precondition(reply.body.first?.integer == 1, "org.bluez was not granted to the fake")
    }

    deinit { connection.close() }

    // MARK: What tests read

    /// "Interface.Member path" of every method call received, in order.
    var calls: [String] { lock.withLock { log } }
    var lastWrites: [(path: String, value: [UInt8], type: String)] { lock.withLock { writes } }
    var discoveryFilter: [String: DBusValue]? { lock.withLock { filter } }
    func property(_ path: String, _ interface: String, _ name: String) -> DBusValue? { lock.withLock { objects[path]?[interface]?[name] } }
    var registeredApplications: [String: [String: [String: [String: DBusValue]]]] { lock.withLock { apps.mapValues(\.objects) } }
    var advertisements: [String: [String: DBusValue]] { lock.withLock { adverts } }
    /// Value changes the applications announced (what BlueZ would notify or indicate).
    var notifiedValues: [(path: String, value: [UInt8])] { lock.withLock { appSignals } }

    // MARK: Acting as BlueZ's GATT server toward a registered application (a remote central's requests)

    /// The registered characteristic with this UUID: its application's owner and its path.
    func applicationCharacteristic(_ uuid: String) -> (owner: String, path: String)? {
        lock.withLock {
            for (_, app) in apps {
                for (path, ifaces) in app.objects where ifaces["org.bluez.GattCharacteristic1"]?["UUID"]?.string == uuid {
                    return (app.owner, path)
                }
            }
            return nil
        }
    }

    /// Calls a method of the application's characteristic, as bluetoothd does for a central's request.
    func callApplication(_ uuid: String, _ member: String, _ body: [DBusValue]) async throws -> DBusMessage {
        guard let (owner, path) = applicationCharacteristic(uuid) else { throw DBusError.invalidValue("no registered characteristic \(uuid)") }
        return try await connection.call(.methodCall(destination: owner, path: path, interface: "org.bluez.GattCharacteristic1", member: member, body: body))
    }

    static func requestOptions(offset: UInt16 = 0, type: String? = nil) -> DBusValue {
        var o: [String: DBusValue] = ["offset": .uint16(offset), "device": .objectPath("/org/bluez/hci0/dev_C0_FF_EE_00_00_09"), "mtu": .uint16(185)]
        if let type { o["type"] = .string(type) }
        return .stringVariantDictionary(o)
    }

    var registeredAgents: [String: String] { lock.withLock { agents.mapValues(\.capability) } }
    var defaultAgent: String? { lock.withLock { defaultAgentPath } }
    var answersFromAgent: [String] { lock.withLock { agentAnswers } }

    /// Calls the default agent as bluetoothd does when the kernel asks (a pairing the peer or a refused read started).
    func askAgent(_ member: String, _ body: [DBusValue]) async throws -> DBusMessage {
        let target: (String, String)? = lock.withLock {
            guard let p = defaultAgentPath, let a = agents[p] else { return nil }
            return (a.owner, p)
        }
        guard let (owner, path) = target else { throw DBusError.invalidValue("no default agent") }
        return try await connection.call(.methodCall(destination: owner, path: path, interface: "org.bluez.Agent1", member: member, body: body), timeout: 10)
    }

    /// Answers the StartDiscovery held (holdStartDiscovery); false when none is.
    func answerStartDiscovery() -> Bool {
        guard
            let held = lock.withLock({ () -> DBusMessage? in
                defer { heldStartDiscovery = nil }; return heldStartDiscovery
            })
        else { return false }
        _ = try? connection.send(held.reply())
        return true
    }

    /// The next call of `member` fails with this D-Bus error (the next `times` calls).
    func failNext(_ member: String, name: String, message: String, times: Int = 1) { lock.withLock { failures[member] = (name, message, times) } }

    // MARK: Driving the fake

    /// An adapter; `monitors`: with AdvertisementMonitorManager1 (bluetoothd's experimental interfaces on).
    @discardableResult
    func addAdapter(_ name: String = "hci0", powered: Bool = true, monitors: Bool = false) -> String {
        let path = "/org/bluez/\(name)"
        add(
            path, "org.bluez.Adapter1",
            [
                "Address": .string("00:11:22:33:44:55"), "AddressType": .string("public"), "Name": .string("fake"),
                "Alias": .string("fake"), "Powered": .boolean(powered), "Discovering": .boolean(false),
                "UUIDs": .array(.string, []),
            ])
        if monitors { addMonitorManager(path) }
        return path
    }

    /// AdvertisementMonitorManager1 on an adapter (as 5.66 lists it with software pattern matching).
    func addMonitorManager(_ adapter: String) {
        add(
            adapter, "org.bluez.AdvertisementMonitorManager1",
            ["SupportedMonitorTypes": .array(.string, [.string("or_patterns")]), "SupportedFeatures": .array(.string, [])])
    }

    /// The monitors registered and activated: their paths and properties.
    var monitors: [String: [String: DBusValue]] {
        lock.withLock {
            var out: [String: [String: DBusValue]] = [:]
            for (_, app) in monitorApps { for (p, props) in app.monitors where activeMonitors.contains(p) { out[p] = props } }
            return out
        }
    }

    /// Calls DeviceFound or DeviceLost on every active monitor whose or_patterns match the device's ServiceData (an AD
    /// type 0x21 pattern at position 0 whose content begins the structure: the UUID in wire order); the number called.
    @discardableResult
    func monitorReport(_ member: String, _ device: String) async throws -> Int {
        let uuids: [[UInt8]] = {
            guard case .dictionary(_, _, let entries) = property(device, "org.bluez.Device1", "ServiceData") ?? .bytes([]) else { return [] }
            return entries.compactMap { $0.key.string.flatMap(Self.wireUUID) }
        }()
        let targets: [(String, String)] = lock.withLock {
            var out: [(String, String)] = []
            for (_, app) in monitorApps {
                for (p, props) in app.monitors where activeMonitors.contains(p) {
                    let patterns = props["Patterns"]?.arrayItems ?? []
                    let matches = patterns.contains { pattern in
                        guard case .structure(let f) = pattern, f.count == 3, case .byte(let start) = f[0], case .byte(let type) = f[1],
                            let content = f[2].byteArray
                        else { return false }
                        return type == 0x21 && uuids.contains { Array(($0 + [UInt8](repeating: 0, count: 32)).dropFirst(Int(start)).prefix(content.count)) == content }
                    }
                    if matches { out.append((app.owner, p)) }
                }
            }
            return out
        }
        for (owner, p) in targets {
            _ = try await connection.call(.methodCall(destination: owner, path: p, interface: "org.bluez.AdvertisementMonitor1", member: member, body: [.objectPath(device)]))
        }
        return targets.count
    }

    /// "0000180d-0000-1000-8000-00805f9b34fb" → its 16 octets in wire order (least significant first).
    static func wireUUID(_ s: String) -> [UInt8]? {
        let hex = Array(s.replacingOccurrences(of: "-", with: "").utf8)
        guard hex.count == 32 else { return nil }
        var out: [UInt8] = []
        for i in stride(from: 0, to: 32, by: 2) {
            guard let b = UInt8(String(decoding: hex[i..<i + 2], as: UTF8.self), radix: 16) else { return nil }
            out.append(b)
        }
        return out.reversed()
    }

    func setPowered(_ path: String, _ on: Bool) { change(path, "org.bluez.Adapter1", ["Powered": .boolean(on)]) }

    /// Removes an object and everything under it, children first, as bluetoothd does when an adapter goes.
    func remove(_ path: String) {
        let doomed = lock.withLock { objects.keys.filter { $0 == path || $0.hasPrefix(path + "/") }.sorted { $0.count > $1.count } }
        for p in doomed { removeObject(p) }
    }

    /// A device bluetoothd has seen advertising.
    @discardableResult
    func addDevice(adapter: String = "/org/bluez/hci0", address: String, random: Bool = false, _ properties: [String: DBusValue]) -> String {
        let path = adapter + "/dev_" + address.replacingOccurrences(of: ":", with: "_")
        var props: [String: DBusValue] = [
            "Address": .string(address), "AddressType": .string(random ? "random" : "public"), "Adapter": .objectPath(adapter),
            "Alias": .string(address.replacingOccurrences(of: ":", with: "-")), "Connected": .boolean(false),
            "ServicesResolved": .boolean(false), "Paired": .boolean(false), "Trusted": .boolean(false), "Blocked": .boolean(false),
            "LegacyPairing": .boolean(false),
        ]
        props.merge(properties) { $1 }
        add(path, "org.bluez.Device1", props)
        return path
    }

    func change(_ path: String, _ interface: String, _ changed: [String: DBusValue]) {
        lock.withLock { for (k, v) in changed { objects[path]?[interface]?[k] = v } }
        emit(path, "org.freedesktop.DBus.Properties", "PropertiesChanged", [.string(interface), .stringVariantDictionary(changed), .array(.string, [])])
    }

    /// Properties BlueZ no longer has (PropertiesChanged's invalidated list): RSSI once discovery ends, for one.
    func invalidate(_ path: String, _ interface: String, _ names: [String]) {
        lock.withLock { for k in names { objects[path]?[interface]?[k] = nil } }
        emit(path, "org.freedesktop.DBus.Properties", "PropertiesChanged", [.string(interface), .stringVariantDictionary([:]), .array(.string, names.map { .string($0) })])
    }

    /// A notification or indication: the characteristic's Value changes.
    func notify(_ path: String, _ value: [UInt8]) { change(path, "org.bluez.GattCharacteristic1", ["Value": .bytes(value)]) }

    /// The peer (or the air) ends the link: BlueZ 5.70's Disconnected(reason, message), then Connected false.
    func dropLink(_ device: String, reason: String = "org.bluez.Reason.Remote") {
        emit(device, "org.bluez.Device1", "Disconnected", [.string(reason), .string("Connection terminated by remote user")])
        linkDown(device)
    }

    // MARK: Plumbing

    private func add(_ path: String, _ interface: String, _ props: [String: DBusValue]) {
        lock.withLock { objects[path, default: [:]][interface] = props }
        connection.export(path: path) { [weak self] call in self?.handle(call) }
        emit(
            "/", "org.freedesktop.DBus.ObjectManager", "InterfacesAdded",
            [
                .objectPath(path),
                .dictionary(key: .string, value: .dictionary(key: .string, value: .variant), [DBusDictEntry(.string(interface), .stringVariantDictionary(props))]),
            ])
    }

    private func emit(_ path: String, _ interface: String, _ member: String, _ body: [DBusValue]) {
        _ = try? connection.send(.signal(path: path, interface: interface, member: member, body: body))
    }

    private func handleRoot(_ call: DBusMessage) -> DBusMessage? {
        guard call.interface == "org.freedesktop.DBus.ObjectManager", call.member == "GetManagedObjects" else { return handle(call) }
        lock.withLock { log.append("org.freedesktop.DBus.ObjectManager.GetManagedObjects /") }
        if holdGetManagedObjects {
            lock.withLock { heldGetManagedObjects.append(call) }
            return nil
        }
        return managedObjects(call)
    }

    /// Answers the GetManagedObjects calls held, with the objects as they are now; how many there were.
    func answerGetManagedObjects() -> Int {
        holdGetManagedObjects = false
        let held = lock.withLock { () -> [DBusMessage] in
            defer { heldGetManagedObjects = [] }
            return heldGetManagedObjects
        }
        for call in held { _ = try? connection.send(managedObjects(call)!) }
        return held.count
    }

    private func managedObjects(_ call: DBusMessage) -> DBusMessage? {
        let snapshot = lock.withLock { objects }
        let entries = snapshot.keys.sorted().map { path in
            DBusDictEntry(
                .objectPath(path),
                .dictionary(
                    key: .string, value: .dictionary(key: .string, value: .variant),
                    snapshot[path]!.keys.sorted().map { DBusDictEntry(.string($0), .stringVariantDictionary(snapshot[path]![$0]!)) }))
        }
        return call.reply([.dictionary(key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)), entries)])
    }

    private func handle(_ call: DBusMessage) -> DBusMessage? {
        let path = call.path ?? ""
        let member = call.member ?? ""
        let failure: (name: String, message: String)? = lock.withLock {
            log.append("\(call.interface ?? "").\(member) \(path)")
            guard let f = failures[member] else { return nil }
            failures[member] = f.times > 1 ? (f.name, f.message, f.times - 1) : nil
            return (f.name, f.message)
        }
        if let failure { return call.errorReply(name: failure.name, message: failure.message) }
        switch (call.interface, member) {
        case ("org.freedesktop.DBus.Properties", "GetAll"):
            let props = lock.withLock { objects[path]?[call.body.first?.string ?? ""] } ?? [:]
            return call.reply([.stringVariantDictionary(props)])
        case ("org.freedesktop.DBus.Properties", "Get"):
            guard call.body.count == 2, let v = property(path, call.body[0].string ?? "", call.body[1].string ?? "") else {
                return call.errorReply(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "No such property")
            }
            return call.reply([.variant(v)])
        case ("org.bluez.Adapter1", "SetDiscoveryFilter"):
            lock.withLock { filter = call.body.first?.stringDictionary?.mapValues(\.unwrapped) }
            return call.reply()
        case ("org.bluez.Adapter1", "StartDiscovery"):
            guard property(path, "org.bluez.Adapter1", "Powered")?.bool == true else {
                return call.errorReply(name: "org.bluez.Error.NotReady", message: "Resource Not Ready")
            }
            change(path, "org.bluez.Adapter1", ["Discovering": .boolean(true)])
            if holdStartDiscovery {
                lock.withLock { heldStartDiscovery = call }
                return nil
            }
            return call.reply()
        case ("org.bluez.Adapter1", "StopDiscovery"):
            if lock.withLock({ heldStartDiscovery != nil }) {
                return call.errorReply(name: "org.bluez.Error.InProgress", message: "Operation already in progress")
            }
            guard property(path, "org.bluez.Adapter1", "Discovering")?.bool == true else {
                return call.errorReply(name: "org.bluez.Error.Failed", message: "No discovery started")
            }
            change(path, "org.bluez.Adapter1", ["Discovering": .boolean(false)])
            return call.reply()
        case ("org.bluez.Device1", "Connect"):
            if holdConnect {
                lock.withLock { heldConnect = call }
                return nil
            }
            if connectsSilently {
                lock.withLock { objects[path]?["org.bluez.Device1"]?["Connected"] = .boolean(true) }
            } else {
                change(path, "org.bluez.Device1", ["Connected": .boolean(true)])
            }
            if exportsDatabaseAfter > 0 {
                DispatchQueue.global().asyncAfter(deadline: .now() + exportsDatabaseAfter) { [weak self] in self?.addDatabase(under: path) }
            } else {
                addDatabase(under: path)
            }
            _ = try? connection.send(call.reply())
            change(path, "org.bluez.Device1", ["ServicesResolved": .boolean(true)])
            return nil
        case ("org.bluez.Device1", "Disconnect"):
            if let held = lock.withLock({ () -> DBusMessage? in
                defer { heldConnect = nil }; return heldConnect
            }) {
                _ = try? connection.send(held.errorReply(name: "org.bluez.Error.Failed", message: "le-connection-abort-by-local"))
            }
            linkDown(path)
            return call.reply()
        case ("org.bluez.GattCharacteristic1", "ReadValue"), ("org.bluez.GattDescriptor1", "ReadValue"):
            let interface = call.interface!
            let value = property(path, interface, "Value")?.byteArray ?? []
            let offset = Int(call.body.first?.stringDictionary?["offset"]?.integer ?? 0)
            guard offset <= value.count else { return call.errorReply(name: "org.bluez.Error.InvalidArguments", message: "Invalid offset") }
            _ = try? connection.send(call.reply([.bytes(Array(value[offset...]))]))
            // BlueZ caches what it read: the value is announced as changed, after the answer.
            if interface == "org.bluez.GattCharacteristic1" { change(path, interface, ["Value": .bytes(value)]) }
            return nil
        case ("org.bluez.GattCharacteristic1", "WriteValue"), ("org.bluez.GattDescriptor1", "WriteValue"):
            // bluetoothd writes Client Characteristic Configuration itself (StartNotify / StopNotify).
            if call.interface == "org.bluez.GattDescriptor1", property(path, "org.bluez.GattDescriptor1", "UUID") == .string("00002902-0000-1000-8000-00805f9b34fb") {
                return call.errorReply(name: "org.bluez.Error.NotPermitted", message: "Write not permitted")
            }
            guard let value = call.body.first?.byteArray else {
                return call.errorReply(name: "org.bluez.Error.InvalidArguments", message: "Invalid arguments in method call")
            }
            let options = call.body.count > 1 ? call.body[1].stringDictionary ?? [:] : [:]
            let type = options["type"]?.string ?? "request"
            lock.withLock {
                writes.append((path, value, type))
                objects[path]?[call.interface!]?["Value"] = .bytes(value)
            }
            return call.reply()
        case ("org.bluez.AgentManager1", "RegisterAgent"):
            guard call.body.count == 2, let agent = call.body[0].string, let capability = call.body[1].string, let owner = call.sender,
                ["", "DisplayOnly", "DisplayYesNo", "KeyboardOnly", "NoInputNoOutput", "KeyboardDisplay"].contains(capability)
            else { return call.errorReply(name: "org.bluez.Error.InvalidArguments", message: "Invalid arguments in method call") }
            return lock.withLock {
                guard agents[agent] == nil else { return call.errorReply(name: "org.bluez.Error.AlreadyExists", message: "Already Exists") }
                agents[agent] = (owner, capability.isEmpty ? "KeyboardDisplay" : capability)
                return call.reply()
            }
        case ("org.bluez.AgentManager1", "UnregisterAgent"), ("org.bluez.AgentManager1", "RequestDefaultAgent"):
            let agent = call.body.first?.string ?? ""
            return lock.withLock {
                guard let a = agents[agent], a.owner == call.sender else { return call.errorReply(name: "org.bluez.Error.DoesNotExist", message: "Does Not Exist") }
                if member == "RequestDefaultAgent" {
                    defaultAgentPath = agent
                } else {
                    agents[agent] = nil
                    if defaultAgentPath == agent { defaultAgentPath = nil }
                }
                return call.reply()
            }
        case ("org.bluez.Device1", "Pair"):
            return pair(call, path)
        case ("org.bluez.Adapter1", "RemoveDevice"):
            guard let device = call.body.first?.string, device.hasPrefix(path + "/"), property(device, "org.bluez.Device1", "Address") != nil else {
                return call.errorReply(name: "org.bluez.Error.DoesNotExist", message: "Does Not Exist")
            }
            linkDown(device)
            remove(device)
            return call.reply()
        case ("org.bluez.GattManager1", "RegisterApplication"):
            return registerApplication(call)
        case ("org.bluez.GattManager1", "UnregisterApplication"):
            let app = call.body.first?.string ?? ""
            guard lock.withLock({ apps.removeValue(forKey: app) }) != nil else { return call.errorReply(name: "org.bluez.Error.DoesNotExist", message: "Does Not Exist") }
            return call.reply()
        case ("org.bluez.LEAdvertisingManager1", "RegisterAdvertisement"):
            return registerAdvertisement(call)
        case ("org.bluez.LEAdvertisingManager1", "UnregisterAdvertisement"):
            let path = call.body.first?.string ?? ""
            guard lock.withLock({ adverts.removeValue(forKey: path) }) != nil else { return call.errorReply(name: "org.bluez.Error.DoesNotExist", message: "Does Not Exist") }
            return call.reply()
        case ("org.bluez.AdvertisementMonitorManager1", "RegisterMonitor"):
            return registerMonitor(call)
        case ("org.bluez.AdvertisementMonitorManager1", "UnregisterMonitor"):
            let app = call.body.first?.string ?? ""
            return lock.withLock {
                guard let a = monitorApps[app], a.owner == call.sender else { return call.errorReply(name: "org.bluez.Error.DoesNotExist", message: "Does Not Exist") }
                monitorApps[app] = nil
                for p in a.monitors.keys { activeMonitors.remove(p) }
                return call.reply()
            }
        case ("org.bluez.GattCharacteristic1", "AcquireWrite"):
            return acquireWrite(call, path)
        case ("org.bluez.GattCharacteristic1", "AcquireNotify"):
            return acquireNotify(call, path)
        case ("org.bluez.GattCharacteristic1", "StartNotify"):
            change(path, "org.bluez.GattCharacteristic1", ["Notifying": .boolean(true)])
            return call.reply()
        case ("org.bluez.GattCharacteristic1", "StopNotify"):
            guard property(path, "org.bluez.GattCharacteristic1", "Notifying")?.bool == true else {
                return call.errorReply(name: "org.bluez.Error.Failed", message: "No notify session started")
            }
            change(path, "org.bluez.GattCharacteristic1", ["Notifying": .boolean(false)])
            return call.reply()
        default:
            return call.errorReply(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "\(call.interface ?? "").\(member) is not here")
        }
    }

    private func linkDown(_ device: String) {
        guard property(device, "org.bluez.Device1", "Connected")?.bool == true else { return }
        change(device, "org.bluez.Device1", ["Connected": .boolean(false), "ServicesResolved": .boolean(false)])
        let gattObjects = lock.withLock { objects.keys.filter { $0.hasPrefix(device + "/") } }
        // As bluetoothd does, each InterfacesRemoved names the interfaces the object had.
        for p in gattObjects.sorted(by: { $0.count > $1.count }) { removeObject(p) }
    }

    /// Device1.Pair as bluetoothd runs it: connect, ask the agent (the caller's, else the default) what the pairing
    /// method needs, then Paired and Bonded, then the answer; an agent's refusal is AuthenticationFailed.
    private func pair(_ call: DBusMessage, _ device: String) -> DBusMessage? {
        if property(device, "org.bluez.Device1", "Paired")?.bool == true { return call.errorReply(name: "org.bluez.Error.AlreadyExists", message: "Already Exists") }
        let (prompt, agent): ((member: String, body: [DBusValue])?, (String, String)?) = lock.withLock {
            let mine = agents.first { $0.value.owner == call.sender }.map { ($0.value.owner, $0.key) }
            let fallback = defaultAgentPath.flatMap { p in agents[p].map { ($0.owner, p) } }
            return (pairingPrompt, mine ?? fallback)
        }
        let finish: @Sendable (Bool) -> Void = { [weak self] ok in
            guard let self else { return }
            if ok {
                self.change(device, "org.bluez.Device1", ["Paired": .boolean(true), "Bonded": .boolean(true)])
                _ = try? self.connection.send(call.reply())
            } else {
                _ = try? self.connection.send(call.errorReply(name: "org.bluez.Error.AuthenticationFailed", message: "Authentication Failed"))
            }
        }
        change(device, "org.bluez.Device1", ["Connected": .boolean(true)])
        guard let prompt else {
            finish(true)
            return nil
        }
        guard let (owner, agentPath) = agent else {
            return call.errorReply(name: "org.bluez.Error.AuthenticationRejected", message: "Authentication Rejected")
        }
        connection.call(
            .methodCall(destination: owner, path: agentPath, interface: "org.bluez.Agent1", member: prompt.member, body: [.objectPath(device)] + prompt.body),
            timeout: 10
        ) { [weak self] r in
            guard let self else { return }
            let answer: String
            switch r {
            case let .success(m): answer = "\(prompt.member) \(m.body.map(\.description).joined(separator: " "))"
            case let .failure(e): answer = "\(prompt.member) \(e)"
            }
            self.lock.withLock { self.agentAnswers.append(answer) }
            if case .success = r { finish(true) } else { finish(false) }
        }
        return nil
    }

    /// AcquireWrite as bluetoothd answers it: one end of a SOCK_SEQPACKET pair and the MTU; each packet read from the
    /// other end is one Write Command (recorded with the type "acquired") until we close our end.
    private func acquireWrite(_ call: DBusMessage, _ path: String) -> DBusMessage? {
        var ends: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &ends) == 0 else {
            return call.errorReply(name: "org.bluez.Error.Failed", message: "socketpair failed")
        }
        let buffer = acquiredSocketBuffer
        if buffer > 0 {
            var b = buffer
            setsockopt(ends[0], SOL_SOCKET, SO_SNDBUF, &b, socklen_t(MemoryLayout<Int32>.size))
            setsockopt(ends[1], SOL_SOCKET, SO_RCVBUF, &b, socklen_t(MemoryLayout<Int32>.size))
        }
        change(path, "org.bluez.GattCharacteristic1", ["WriteAcquired": .boolean(true)])
        var reply = call.reply([.unixFD(0), .uint16(mtu)])
        reply.unixFDs = [ends[0]]
        _ = try? connection.send(reply)
        close(ends[0])
        let theirs = ends[1]
        Thread.detachNewThread { [weak self] in
            var packet = [UInt8](repeating: 0, count: 1024)
            while true {
                if let self {
                    self.acquiredReaderPaused.lock()
                    while self.pauseAcquiredReader { self.acquiredReaderPaused.wait() }
                    self.acquiredReaderPaused.unlock()
                }
                let n = read(theirs, &packet, packet.count)
                guard n > 0, let self else { break }
                let value = Array(packet[0..<n])
                self.lock.withLock { self.writes.append((path, value, "acquired")) }
            }
            close(theirs)
        }
        return nil
    }

    /// AcquireNotify as bluetoothd answers it: one end of a SOCK_SEQPACKET pair and the MTU, NotifyAcquired true;
    /// `notifyThroughSocket` writes values there; when the client closes its end, NotifyAcquired is false again
    /// (bluetoothd disables the notifications then) and the path is listed in `notifySocketsReleased`.
    private func acquireNotify(_ call: DBusMessage, _ path: String) -> DBusMessage? {
        if lock.withLock({ notifyEnds[path] != nil }) { return call.errorReply(name: "org.bluez.Error.NotPermitted", message: "Notify acquired") }
        var ends: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &ends) == 0 else {
            return call.errorReply(name: "org.bluez.Error.Failed", message: "socketpair failed")
        }
        change(path, "org.bluez.GattCharacteristic1", ["NotifyAcquired": .boolean(true)])
        var reply = call.reply([.unixFD(0), .uint16(mtu)])
        reply.unixFDs = [ends[0]]
        _ = try? connection.send(reply)
        close(ends[0])
        let ours = ends[1]
        lock.withLock { notifyEnds[path] = ours }
        Thread.detachNewThread { [weak self] in
            // Nothing comes the other way: a read that ends is the client's close.
            var b = [UInt8](repeating: 0, count: 16)
            while read(ours, &b, b.count) > 0 {}
            guard let self else { return }
            self.lock.withLock {
                self.notifyEnds[path] = nil
                self.releasedNotify.append(path)
            }
            close(ours)
            self.change(path, "org.bluez.GattCharacteristic1", ["NotifyAcquired": .boolean(false)])
        }
        return nil
    }

    /// A notification through AcquireNotify's socket; false when no client holds one for the characteristic.
    @discardableResult
    func notifyThroughSocket(_ path: String, _ value: [UInt8]) -> Bool {
        lock.withLock {
            guard let fd = notifyEnds[path] else { return false }
            return value.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == value.count
        }
    }

    var notifySocketsReleased: [String] { lock.withLock { releasedNotify } }

    func setAcquiredReaderPaused(_ paused: Bool) {
        acquiredReaderPaused.lock()
        pauseAcquiredReader = paused
        acquiredReaderPaused.broadcast()
        acquiredReaderPaused.unlock()
    }

    private func hex(_ h: Int) -> String { String(format: "%04x", h) }

    private func registerApplication(_ call: DBusMessage) -> DBusMessage? {
        guard let app = call.body.first?.string, let owner = call.sender else {
            return call.errorReply(name: "org.bluez.Error.InvalidArguments", message: "Invalid arguments in method call")
        }
        if lock.withLock({ apps[app] != nil }) { return call.errorReply(name: "org.bluez.Error.AlreadyExists", message: "Already Exists") }
        // As bluetoothd: read the application's objects, then answer.
        connection.call(.methodCall(destination: owner, path: app, interface: "org.freedesktop.DBus.ObjectManager", member: "GetManagedObjects")) { [weak self] r in
            guard let self else { return }
            guard case let .success(m) = r, case .dictionary(_, _, let entries) = m.body.first ?? .bytes([]) else {
                _ = try? self.connection.send(call.errorReply(name: "org.bluez.Error.Failed", message: "Failed to read application objects"))
                return
            }
            var objects: [String: [String: [String: DBusValue]]] = [:]
            for e in entries {
                guard let p = e.key.string, case .dictionary(_, _, let ifaces) = e.value else { continue }
                for i in ifaces { objects[p, default: [:]][i.key.string ?? ""] = (i.value.stringDictionary ?? [:]).mapValues(\.unwrapped) }
            }
            guard objects.values.contains(where: { $0["org.bluez.GattService1"] != nil }) else {
                _ = try? self.connection.send(call.errorReply(name: "org.bluez.Error.Failed", message: "No valid services found"))
                return
            }
            self.lock.withLock { self.apps[app] = (owner, objects) }
            _ = try? self.connection.send(call.reply())
        }
        return nil
    }

    /// RegisterMonitor as bluetoothd 5.66 runs it (src/adv_monitor.c): the answer at once, then the application's
    /// objects read; each AdvertisementMonitor1 whose values it accepts is activated (Activate), any other released
    /// (Release): Type or_patterns; RSSI thresholds -127…20 with the high one not below the low one; timeouts 1…300 s;
    /// a sampling period of at most 255; at least one pattern, each starting within the 31 octets of advertising data,
    /// its content 1…31 octets and ending within them.
    private func registerMonitor(_ call: DBusMessage) -> DBusMessage? {
        guard let app = call.body.first?.string, let owner = call.sender else {
            return call.errorReply(name: "org.bluez.Error.InvalidArguments", message: "Invalid arguments in method call")
        }
        if lock.withLock({ monitorApps[app] != nil }) { return call.errorReply(name: "org.bluez.Error.AlreadyExists", message: "Already Exists") }
        lock.withLock { monitorApps[app] = (owner, [:]) }
        _ = try? connection.send(call.reply())
        connection.call(.methodCall(destination: owner, path: app, interface: "org.freedesktop.DBus.ObjectManager", member: "GetManagedObjects")) { [weak self] r in
            guard let self, case let .success(m) = r, case .dictionary(_, _, let entries) = m.body.first ?? .bytes([]) else { return }
            for e in entries {
                guard let p = e.key.string, let ifaces = e.value.stringDictionary, let props = ifaces["org.bluez.AdvertisementMonitor1"]?.stringDictionary?.mapValues(\.unwrapped)
                else { continue }
                let valid = Self.validMonitor(props)
                self.lock.withLock {
                    self.monitorApps[app]?.monitors[p] = props
                    if valid { self.activeMonitors.insert(p) }
                }
                self.connection.call(.methodCall(destination: owner, path: p, interface: "org.bluez.AdvertisementMonitor1", member: valid ? "Activate" : "Release")) { _ in }
            }
        }
        return nil
    }

    static func validMonitor(_ p: [String: DBusValue]) -> Bool {
        guard p["Type"]?.string == "or_patterns" else { return false }
        func int(_ k: String) -> Int64? { p[k]?.integer }
        if let low = int("RSSILowThreshold"), let high = int("RSSIHighThreshold") {
            guard (-127...20).contains(low), (-127...20).contains(high), high >= low else { return false }
        }
        for k in ["RSSILowTimeout", "RSSIHighTimeout"] { if let t = int(k), !(1...300).contains(t) { return false } }
        if let s = int("RSSISamplingPeriod"), !(0...255).contains(s) { return false }
        guard let patterns = p["Patterns"]?.arrayItems, !patterns.isEmpty else { return false }
        return patterns.allSatisfy { pattern in
            guard case .structure(let f) = pattern, f.count == 3, case .byte(let start) = f[0], case .byte = f[1], let content = f[2].byteArray else { return false }
            return start < 31 && !content.isEmpty && Int(start) + content.count <= 31
        }
    }

    private func registerAdvertisement(_ call: DBusMessage) -> DBusMessage? {
        guard let path = call.body.first?.string, let owner = call.sender else {
            return call.errorReply(name: "org.bluez.Error.InvalidArguments", message: "Invalid arguments in method call")
        }
        connection.call(.methodCall(destination: owner, path: path, interface: "org.freedesktop.DBus.Properties", member: "GetAll", body: [.string("org.bluez.LEAdvertisement1")]))
        { [weak self] r in
            guard let self else { return }
            guard case let .success(m) = r, let props = m.body.first?.stringDictionary?.mapValues(\.unwrapped), props["Type"] != nil else {
                _ = try? self.connection.send(call.errorReply(name: "org.bluez.Error.InvalidArguments", message: "Invalid arguments in method call"))
                return
            }
            self.lock.withLock { self.adverts[path] = props }
            _ = try? self.connection.send(call.reply())
        }
        return nil
    }

    private func addDatabase(under device: String) {
        // Each service's path first (its handle), for the includes.
        var paths: [String] = []
        var next = 1
        for service in database {
            paths.append(device + "/service" + hex(next))
            next += 1 + service.characteristics.reduce(0) { $0 + 2 + $1.descriptors.count }
        }
        var handle = 1
        for (i, service) in database.enumerated() {
            export(service, under: device, handle: &handle, includes: service.includes.map { paths[$0] })
        }
    }

    /// A service's objects under a device, at `handle` (…/serviceXXXX): the service first, then each characteristic
    /// and its descriptors; `handle` moves past the service. The service's path.
    @discardableResult
    private func export(_ service: FakeService, under device: String, handle: inout Int, includes: [String]) -> String {
        let sp = device + "/service" + hex(handle)
        add(
            sp, "org.bluez.GattService1",
            [
                "UUID": .string(service.uuid), "Primary": .boolean(service.primary), "Device": .objectPath(device),
                "Includes": .array(.objectPath, includes.map { .objectPath($0) }),
            ])
        handle += 1
        for c in service.characteristics {
            let cp = sp + "/char" + hex(handle)
            add(
                cp, "org.bluez.GattCharacteristic1",
                [
                    "UUID": .string(c.uuid), "Service": .objectPath(sp), "Value": .bytes(c.value), "Notifying": .boolean(false),
                    "Flags": .array(.string, c.flags.map { .string($0) }), "MTU": .uint16(mtu),
                ].merging(offersAcquireWrite && c.flags.contains("write-without-response") ? ["WriteAcquired": .boolean(false)] : [:]) { a, _ in a }
                    .merging(offersAcquireNotify && c.flags.contains("notify") ? ["NotifyAcquired": .boolean(false)] : [:]) { a, _ in a })
            handle += 2
            for d in c.descriptors {
                add(cp + "/desc" + hex(handle), "org.bluez.GattDescriptor1", ["UUID": .string(d.uuid), "Characteristic": .objectPath(cp), "Value": .bytes(d.value)])
                handle += 1
            }
        }
        return sp
    }

    /// The peer's database changed and bluetoothd removes a service (src/gatt-client.c, unregister_service): each
    /// characteristic's descriptors, then the characteristic, then the service, one InterfacesRemoved each.
    func removeService(_ path: String) {
        let chars = lock.withLock { objects.keys.filter { $0.hasPrefix(path + "/") && !$0.contains("/desc") }.sorted() }
        for c in chars {
            for d in lock.withLock({ objects.keys.filter { $0.hasPrefix(c + "/") }.sorted() }) { removeObject(d) }
            removeObject(c)
        }
        removeObject(path)
    }

    /// A service bluetoothd found on rediscovery, exported under the device at `handle` (InterfacesAdded for the
    /// service, then its characteristics and descriptors); its path.
    @discardableResult
    func addService(_ service: FakeService, under device: String, handle: Int) -> String {
        var h = handle
        return export(service, under: device, handle: &h, includes: [])
    }

    private func removeObject(_ p: String) {
        let names = lock.withLock { objects.removeValue(forKey: p).map { Array($0.keys) } ?? [] }
        connection.unexport(path: p)
        emit("/", "org.freedesktop.DBus.ObjectManager", "InterfacesRemoved", [.objectPath(p), .array(.string, names.map { .string($0) })])
    }
}
