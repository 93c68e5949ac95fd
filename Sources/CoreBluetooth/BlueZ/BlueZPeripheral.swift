// The peripheral role on BlueZ (BLE_TRANSPORT=bluez[:hciN]): a CBPeripheralManager whose database and advertisement
// bluetoothd serves, through the application API of doc/org.bluez.GattManager.rst and LEAdvertisingManager.rst.
//
//   add(service)             each CBMutableService is one application of its own: an object tree under
//                            /org/opencorebluetooth/p<pid>_<n>/s<k> exported with our DBus module (ObjectManager,
//                            Properties, GattService1 / GattCharacteristic1 / GattDescriptor1), registered with
//                            GattManager1.RegisterApplication; didAdd follows BlueZ's answer. remove → Unregister.
//   reads and writes         BlueZ calls ReadValue / WriteValue on our objects: a characteristic with a cached value
//                            is answered here; a dynamic one becomes a CBATTRequest, and respond(to:withResult:)
//                            sends the D-Bus answer (an error as the org.bluez.Error BlueZ turns into that ATT code)
//   subscriptions            StartNotify / StopNotify (BlueZ calls them for the first subscriber and after the last
//                            one, without saying which device: the app sees one CBCentral standing for them all)
//   updateValue              PropertiesChanged Value on the characteristic; BlueZ notifies or indicates. Paced by
//                            bluetoothd: at most `updateWindow` values it has not yet handled (a Peer.Ping sent after
//                            them is answered once it has: bluetoothd handles its messages in order), then false and
//                            peripheralManagerIsReady once half the window has been handled
//   startAdvertising         an LEAdvertisement1 object (Type peripheral, LocalName, ServiceUUIDs) registered with
//                            LEAdvertisingManager1.RegisterAdvertisement; stopAdvertising → Unregister
//
// Threading: as BlueZCentral; this object rides on a BlueZCentral session made without a central manager (its bus,
// its object tree and adapter state), and everything here runs on that session's queue.
import Foundation
import DBus

final class BlueZPeripheral: @unchecked Sendable {
    let session: BlueZCentral
    private(set) weak var manager: CBPeripheralManager?
    private var queue: DispatchQueue { session.queue }
    private let root: String

    // Queue-confined.
    private var applications: [ObjectIdentifier: Application] = [:]
    private var nextApplication = 0
    /// Method calls waiting for `respond(to:withResult:)`, by the request's identity; the entry holds its request
    /// weakly and answers only to that very object (a newer request can take the address of one the app let go).
    private var pending: [ObjectIdentifier: PendingCall] = [:]
    private struct PendingCall {
        weak var request: CBATTRequest?
        var call: DBusMessage
    }
    private var advertising = false
    /// Published L2CAP PSMs and their listening sockets (BlueZPeripheral+L2CAP).
    var l2capListeners: [CBL2CAPPSM: BlueZL2CAPListener] = [:]
    /// BlueZ subscribes once for all the centrals it serves: one CBCentral stands for them.
    let central = CBCentral(identifier: UUID(), maximumUpdateValueLength: 20)
    /// updateValue's window (any thread): values accepted that bluetoothd has not yet handled, and whether an update
    /// was refused for want of room (the app then waits for peripheralManagerIsReady).
    private let window = CBMutex((unhandled: 0, refused: false))
    static let updateWindow = 32
    /// Queue-confined: values sent since the last Ping, and whether a Ping is queued behind them.
    private var sentSincePing = 0
    private var pingQueued = false

    private struct Application {
        let path: String
        let service: CBMutableService
        var characteristics: [String: CBMutableCharacteristic] = [:]
        var descriptors: [String: CBDescriptor] = [:]
        var registered = false
    }

    private static let counter = CBMutex(0)

    init(options: BlueZOptions) {
        session = BlueZCentral(options: options)
        let n = Self.counter.withLock { v -> Int in
            v += 1; return v
        }
        root = "/org/opencorebluetooth/p\(getpid())_\(n)"
    }

    func start(_ m: CBPeripheralManager) {
        manager = m
        session.onStateChange = { [weak self] s in self?.stateChanged(s) }
        session.start(nil)
    }

    func close() {
        queue.async { [self] in
            if let bus = session.bus {
                for a in applications.values { unexport(a, bus) }
                bus.unexport(path: advertisementPath)
            }
            applications.removeAll()
            for l in l2capListeners.values { l.close() }
            l2capListeners.removeAll()
        }
        session.close()
    }

    private func stateChanged(_ s: CBManagerState) {
        if s != .poweredOn {
            // BlueZ forgets applications and advertisements of an adapter that goes: the app adds them again.
            if let bus = session.bus { for a in applications.values { unexport(a, bus) } }
            for a in applications.values { a.service.isPublished = false }
            applications.removeAll()
            for (_, p) in pending { _ = try? session.bus?.send(p.call.errorReply(name: "org.bluez.Error.Failed", message: "the adapter went away")) }
            pending.removeAll()
            advertising = false
        }
        manager?.hostPowerChanged(s)
    }

    // MARK: Services

    func add(_ service: CBMutableService) {
        queue.async { [self] in
            guard let bus = session.bus, let adapter = session.adapterPath, session.state == .poweredOn else {
                return announceAdd(service, CBError(.unknown, userInfo: [NSLocalizedDescriptionKey: "the adapter is not powered on"]))
            }
            nextApplication += 1
            var app = Application(path: "\(root)/s\(nextApplication)", service: service)
            let sp = app.path + "/service0"
            for (i, c) in (service.characteristics ?? []).compactMap({ $0 as? CBMutableCharacteristic }).enumerated() {
                let cp = "\(sp)/char\(i)"
                app.characteristics[cp] = c
                c._service = service
                for (j, d) in (c.descriptors ?? []).enumerated() { app.descriptors["\(cp)/desc\(j)"] = d }
            }
            applications[ObjectIdentifier(service)] = app
            export(app, bus)
            session.call(adapter, "org.bluez.GattManager1", "RegisterApplication", [.objectPath(app.path), .stringVariantDictionary([:])]) { [self] r in
                switch r {
                case .success:
                    applications[ObjectIdentifier(service)]?.registered = true
                    announceAdd(service, nil)
                case let .failure(e):
                    if let a = applications.removeValue(forKey: ObjectIdentifier(service)) { unexport(a, bus) }
                    announceAdd(service, BlueZErrors.cbError(e, during: .other))
                }
            }
        }
    }

    private func announceAdd(_ service: CBMutableService, _ error: (any Error)?) {
        guard let m = manager else { return }
        m.queue.async {
            service.isPublished = error == nil
            m.delegate?.peripheralManager(m, didAdd: service, error: error)
        }
    }

    func remove(_ service: CBMutableService) {
        queue.async { [self] in
            guard let app = applications.removeValue(forKey: ObjectIdentifier(service)) else { return }
            if app.registered, let adapter = session.adapterPath {
                session.call(adapter, "org.bluez.GattManager1", "UnregisterApplication", [.objectPath(app.path)]) { _ in }
            }
            if let bus = session.bus { unexport(app, bus) }
        }
    }

    func removeAll() {
        queue.async { [self] in
            for app in applications.values { remove(app.service) }
        }
    }

    private func export(_ app: Application, _ bus: DBusConnection) {
        bus.export(path: app.path) { [weak self] call in self?.answer(call) }
        for path in [app.path + "/service0"] + Array(app.characteristics.keys) + Array(app.descriptors.keys) {
            bus.export(path: path) { [weak self] call in self?.answer(call) }
        }
    }

    private func unexport(_ app: Application, _ bus: DBusConnection) {
        for path in [app.path, app.path + "/service0"] + Array(app.characteristics.keys) + Array(app.descriptors.keys) {
            bus.unexport(path: path)
        }
    }

    /// The application and object a path belongs to.
    private func owner(_ path: String) -> Application? {
        applications.values.first { path == $0.path || path.hasPrefix($0.path + "/") }
    }

    /// The interfaces and properties of every object of an application (GetManagedObjects).
    private func objects(of app: Application) -> [String: [String: [String: DBusValue]]] {
        let s = app.service
        var out: [String: [String: [String: DBusValue]]] = [:]
        let sp = app.path + "/service0"
        out[sp] = [
            "org.bluez.GattService1": [
                "UUID": .string(s.uuid.bluetoothUUID.uuid128String.lowercased()), "Primary": .boolean(s.isPrimary),
                "Includes": .array(.objectPath, []),
            ]
        ]
        for (cp, c) in app.characteristics {
            out[cp] = [
                "org.bluez.GattCharacteristic1": [
                    "UUID": .string(c.uuid.bluetoothUUID.uuid128String.lowercased()), "Service": .objectPath(sp),
                    "Flags": .array(.string, Self.flags(c).map { .string($0) }),
                ]
            ]
        }
        for (dp, d) in app.descriptors {
            let cp = String(dp[..<dp.range(of: "/desc", options: .backwards)!.lowerBound])
            out[dp] = [
                "org.bluez.GattDescriptor1": [
                    "UUID": .string(d.uuid.bluetoothUUID.uuid128String.lowercased()), "Characteristic": .objectPath(cp),
                    "Flags": .array(.string, [.string("read")]),
                ]
            ]
        }
        return out
    }

    /// GattCharacteristic1.Flags for a local characteristic (doc/org.bluez.GattCharacteristic.rst).
    static func flags(_ c: CBMutableCharacteristic) -> [String] {
        let p = c.properties, perms = c.permissions
        var f: [String] = []
        if p.contains(.broadcast) { f.append("broadcast") }
        if p.contains(.read) { f.append(perms.contains(.readEncryptionRequired) ? "encrypt-read" : "read") }
        if p.contains(.writeWithoutResponse) { f.append("write-without-response") }
        if p.contains(.write) { f.append(perms.contains(.writeEncryptionRequired) ? "encrypt-write" : "write") }
        if p.contains(.notify) || p.contains(.notifyEncryptionRequired) { f.append("notify") }
        if p.contains(.indicate) || p.contains(.indicateEncryptionRequired) { f.append("indicate") }
        if p.contains(.authenticatedSignedWrites) { f.append("authenticated-signed-writes") }
        return f
    }

    // MARK: Calls from bluetoothd

    private func answer(_ call: DBusMessage) -> DBusMessage? {
        let path = call.path ?? ""
        guard let app = owner(path) else { return call.errorReply(name: "org.freedesktop.DBus.Error.UnknownObject", message: "no object at \(path)") }
        switch (call.interface, call.member) {
        case ("org.freedesktop.DBus.ObjectManager", "GetManagedObjects"):
            let objects = objects(of: app)
            let inner: DBusType = .dictionary(key: .string, value: .dictionary(key: .string, value: .variant))
            return call.reply([
                .dictionary(
                    key: .objectPath, value: inner,
                    objects.keys.sorted().map { p in
                        DBusDictEntry(
                            .objectPath(p),
                            .dictionary(
                                key: .string, value: .dictionary(key: .string, value: .variant),
                                objects[p]!.keys.sorted().map {
                                    DBusDictEntry(.string($0), .stringVariantDictionary(objects[p]![$0]!))
                                }))
                    })
            ])
        case ("org.freedesktop.DBus.Properties", "GetAll"), ("org.freedesktop.DBus.Properties", "Get"):
            let interface = call.body.first?.string ?? ""
            guard let props = objects(of: app)[path]?[interface] else {
                return call.errorReply(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "no interface \(interface) at \(path)")
            }
            if call.member == "GetAll" { return call.reply([.stringVariantDictionary(props)]) }
            guard call.body.count > 1, let v = props[call.body[1].string ?? ""] else {
                return call.errorReply(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "no such property")
            }
            return call.reply([.variant(v)])
        case ("org.bluez.GattCharacteristic1", "ReadValue"):
            guard let c = app.characteristics[path] else { break }
            let options = call.body.first?.stringDictionary ?? [:]
            noteMTU(options)
            let offset = Int(options["offset"]?.integer ?? 0)
            if let value = c.value {
                guard offset <= value.count else { return call.errorReply(name: "org.bluez.Error.InvalidOffset", message: "Invalid offset") }
                return call.reply([.bytes(Array([UInt8](value)[offset...]))])
            }
            let request = CBATTRequest(central: central, characteristic: c, offset: offset, value: nil)
            file(request, call)
            guard let m = manager else { return nil }
            m.queue.async { m.delegate?.peripheralManager(m, didReceiveRead: request) }
            return nil
        case ("org.bluez.GattCharacteristic1", "WriteValue"):
            guard let c = app.characteristics[path], let value = call.body.first?.byteArray else { break }
            let options = call.body.count > 1 ? call.body[1].stringDictionary ?? [:] : [:]
            noteMTU(options)
            let request = CBATTRequest(central: central, characteristic: c, offset: Int(options["offset"]?.integer ?? 0), value: Data(value))
            let command = options["type"]?.string == "command"
            if !command { file(request, call) }
            if let m = manager { m.queue.async { m.delegate?.peripheralManager(m, didReceiveWrite: [request]) } }
            return command ? call.reply() : nil
        case ("org.bluez.GattCharacteristic1", "StartNotify"), ("org.bluez.GattCharacteristic1", "StopNotify"):
            guard let c = app.characteristics[path], let m = manager else { break }
            let on = call.member == "StartNotify"
            let central = central
            m.queue.async {
                let was = c._subscribedCentrals?.contains { $0 === central } ?? false
                guard on != was else { return }
                c._subscribedCentrals = on ? [central] : []
                c._isNotifying = on
                if on { m.delegate?.peripheralManager(m, central: central, didSubscribeTo: c) } else { m.delegate?.peripheralManager(m, central: central, didUnsubscribeFrom: c) }
            }
            return call.reply()
        case ("org.bluez.GattDescriptor1", "ReadValue"):
            guard let d = app.descriptors[path] else { break }
            let value = CBDescriptor.wireValue(of: d.value)
            let offset = Int(call.body.first?.stringDictionary?["offset"]?.integer ?? 0)
            guard offset <= value.count else { return call.errorReply(name: "org.bluez.Error.InvalidOffset", message: "Invalid offset") }
            return call.reply([.bytes(Array(value[offset...]))])
        default:
            break
        }
        return call.errorReply(name: "org.bluez.Error.NotSupported", message: "\(call.interface ?? "").\(call.member ?? "") is not supported here")
    }

    private func noteMTU(_ options: [String: DBusValue]) {
        guard let mtu = options["mtu"]?.integer, mtu >= 23 else { return }
        central._maximumUpdateValueLength = Int(mtu) - 3
    }

    /// Files a request that waits for the app's answer. An entry already under its identity belongs to a request
    /// that is gone (the app let it go unanswered): nobody can answer that call any more, so bluetoothd hears so now
    /// rather than after its D-Bus timeout.
    private func file(_ request: CBATTRequest, _ call: DBusMessage) {
        let key = ObjectIdentifier(request)
        if let stale = pending[key] {
            _ = try? session.bus?.send(stale.call.errorReply(name: "org.bluez.Error.Failed", message: "the request was never answered"))
        }
        pending[key] = PendingCall(request: request, call: call)
    }

    /// Answers a pending read or write; false when the request is not waiting (the manager then warns).
    func respond(to request: CBATTRequest, withResult result: CBATTError.Code) {
        let value = request.value.map { [UInt8]($0) }
        queue.async { [self] in
            let key = ObjectIdentifier(request)
            guard let entry = pending[key], entry.request === request else {
                return CBLog.warning("respond(to:withResult:) for \(request), which is not waiting for an answer")
            }
            pending[key] = nil
            let call = entry.call
            let answer: DBusMessage
            if result == .success {
                answer = call.member == "ReadValue" ? call.reply([.bytes(value ?? [])]) : call.reply()
            } else {
                let (name, message) = Self.dbusError(for: result)
                answer = call.errorReply(name: name, message: message)
            }
            _ = try? session.bus?.send(answer)
        }
    }

    /// The D-Bus error an application returns for BlueZ to send an ATT error (src/gatt-database.c).
    static func dbusError(for code: CBATTError.Code) -> (String, String) {
        switch code {
        case .readNotPermitted, .writeNotPermitted: return ("org.bluez.Error.NotPermitted", "Not permitted")
        case .invalidOffset: return ("org.bluez.Error.InvalidOffset", "Invalid offset")
        case .invalidAttributeValueLength: return ("org.bluez.Error.InvalidValueLength", "Invalid value length")
        case .insufficientAuthorization: return ("org.bluez.Error.NotAuthorized", "Not authorized")
        case .requestNotSupported: return ("org.bluez.Error.NotSupported", "Not supported")
        default: return ("org.bluez.Error.Failed", String(format: "0x%02x", code.rawValue))
        }
    }

    /// PropertiesChanged Value: BlueZ notifies or indicates the subscribed centrals. BlueZ gives no flow control on
    /// this path; the answer is false while `updateWindow` values wait for bluetoothd to handle them.
    func updateValue(_ value: Data, for characteristic: CBMutableCharacteristic) -> Bool {
        // Without a bound the app's loop of updates (send until false) never ended, and every value waited in this
        // process, on the bus and in bluetoothd at once.
        let room = window.withLock { w -> Bool in
            guard w.unhandled < Self.updateWindow else {
                w.refused = true
                return false
            }
            w.unhandled += 1
            return true
        }
        guard room else { return false }
        queue.async { [self] in
            guard let bus = session.bus,
                let path = applications.values.lazy.compactMap({ $0.characteristics.first { $0.value === characteristic }?.key }).first
            else { return handled(1) }
            _ = try? bus.send(
                .signal(
                    path: path, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                    body: [.string("org.bluez.GattCharacteristic1"), .stringVariantDictionary(["Value": .bytes([UInt8](value))]), .array(.string, [])]))
            sentSincePing += 1
            guard !pingQueued else { return }
            pingQueued = true
            // Behind the updates already queued: one Ping answers for all of them.
            queue.async { [self] in
                pingQueued = false
                let n = sentSincePing
                sentSincePing = 0
                // Whatever the answer (an error, a timeout, bluetoothd gone), these values are no longer waiting.
                session.call("/", "org.freedesktop.DBus.Peer", "Ping", timeout: 10) { [weak self] _ in
                    guard let self else { return }
                    queue.async { self.handled(n) }
                }
            }
        }
        return true
    }

    /// bluetoothd has handled `n` more values: an app refused meanwhile hears that there is room once half the window
    /// is free.
    private func handled(_ n: Int) {
        let ready = window.withLock { w -> Bool in
            w.unhandled = max(0, w.unhandled - n)
            guard w.refused, w.unhandled <= Self.updateWindow / 2 else { return false }
            w.refused = false
            return true
        }
        if ready { manager?.readyToUpdateSubscribers() }
    }

    // MARK: Advertising

    private var advertisementPath: String { root + "/advertisement0" }

    func startAdvertising(name: String?, services: [CBUUID]) {
        queue.async { [self] in
            guard let bus = session.bus, let adapter = session.adapterPath, session.state == .poweredOn else {
                return announceAdvertising(CBError(.unknown, userInfo: [NSLocalizedDescriptionKey: "the adapter is not powered on"]))
            }
            var props: [String: DBusValue] = [
                "Type": .string("peripheral"),
                "ServiceUUIDs": .array(.string, services.map { .string($0.bluetoothUUID.uuid128String.lowercased()) }),
            ]
            if let name { props["LocalName"] = .string(name) }
            let properties = props
            let path = advertisementPath
            bus.export(path: path) { [weak self] call in
                switch (call.interface, call.member) {
                case ("org.freedesktop.DBus.Properties", "GetAll"): return call.reply([.stringVariantDictionary(properties)])
                case ("org.freedesktop.DBus.Properties", "Get"):
                    guard call.body.count > 1, let v = properties[call.body[1].string ?? ""] else {
                        return call.errorReply(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "no such property")
                    }
                    return call.reply([.variant(v)])
                case ("org.bluez.LEAdvertisement1", "Release"):
                    // BlueZ dropped the advertisement (the adapter went off, or bluetoothd stops).
                    self?.advertising = false
                    self?.manager?.advertisingEnded()
                    return call.reply()
                default:
                    return call.errorReply(name: "org.bluez.Error.NotSupported", message: "not supported")
                }
            }
            session.call(adapter, "org.bluez.LEAdvertisingManager1", "RegisterAdvertisement", [.objectPath(path), .stringVariantDictionary([:])]) { [self] r in
                switch r {
                case .success:
                    advertising = true
                    announceAdvertising(nil)
                case let .failure(e):
                    bus.unexport(path: path)
                    announceAdvertising(BlueZErrors.cbError(e, during: .other))
                }
            }
        }
    }

    private func announceAdvertising(_ error: (any Error)?) {
        guard let m = manager else { return }
        if error != nil { m.advertisingEnded() }
        m.queue.async { m.delegate?.peripheralManagerDidStartAdvertising(m, error: error) }
    }

    func stopAdvertising() {
        queue.async { [self] in
            guard let adapter = session.adapterPath else { return }
            let path = advertisementPath
            let was = advertising
            advertising = false
            if was {
                session.call(adapter, "org.bluez.LEAdvertisingManager1", "UnregisterAdvertisement", [.objectPath(path)]) { [self] _ in
                    session.bus?.unexport(path: path)
                }
            } else {
                session.bus?.unexport(path: path)
            }
        }
    }
}
