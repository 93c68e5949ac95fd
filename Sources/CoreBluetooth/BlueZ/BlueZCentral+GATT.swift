// The GATT client of the BlueZ backend's central (BlueZCentral): the GattService1 / GattCharacteristic1 /
// GattDescriptor1 objects under a connected device become the façade's CBService / CBCharacteristic / CBDescriptor,
// made once per object path and kept while the link lasts (or until bluetoothd removes the object: didModifyServices);
// reads and writes are ReadValue / WriteValue, writes without response go through AcquireWrite's socket where BlueZ
// offers it, notifications through AcquireNotify's socket or StartNotify and PropertiesChanged Value. Everything here
// runs on the session's `queue`, as the rest of BlueZCentral.
import Foundation
import DBus

extension BlueZCentral {
    /// The device path of a connected peripheral, or nil (after Apple's warning) when it is not connected.
    func connectedDevice(_ p: CBPeripheral, _ what: String) -> String? {
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
            // Never discovered on this link, or removed with its service (a changed database, didModifyServices).
            let why = "\(what): the attribute is not one of this peripheral's (not discovered, or its service was removed)"
            if let done { done(.failure(CBError(.invalidParameters, userInfo: [NSLocalizedDescriptionKey: why]))) } else { CBLog.warning(why) }
            return nil
        }
        return found
    }

    /// The device and the GATT object path of one of a peripheral's attributes.
    private func path(of attribute: AnyObject, on p: CBPeripheral) -> (device: String, path: String)? {
        guard let device = devicePaths[p.identifier], let path = gatt[device]?.paths[ObjectIdentifier(attribute)] else { return nil }
        return (device, path)
    }

    func owner(of path: String) -> (device: String, GATTObjects)? {
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
                found.append(
                    objects.object(\.services, at: path) {
                        let end = i + 1 < paths.count ? BlueZObjectTree.handle(of: paths[i + 1]) &- 1 : 0xFFFF
                        return CBService(uuid: uuid, isPrimary: true, handle: BlueZObjectTree.handle(of: path), endHandle: end, peripheral: p)
                    })
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
                found.append(
                    objects.object(\.services, at: inc) {
                        let primary = tree[inc, BlueZObjectTree.serviceInterface]?["Primary"]?.bool ?? false
                        return CBService(uuid: uuid, isPrimary: primary, handle: BlueZObjectTree.handle(of: inc), endHandle: 0xFFFF, peripheral: p)
                    })
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
            let paths = tree.paths(with: BlueZObjectTree.characteristicInterface, where: "Service", is: servicePath)
            discovered(
                p, device, paths, kind: "characteristics", limit: CBPeripheral.maximumCharacteristicsPerService, cache: \.characteristics,
                done: done, handle: \.handle, list: \._characteristics, of: service,
                make: { i, path in
                    guard let props = tree[path, BlueZObjectTree.characteristicInterface],
                        let uuid = props["UUID"]?.string.flatMap(BlueZAdvertisement.cbUUID), filter?.contains(uuid) ?? true
                    else { return nil }
                    let h = BlueZObjectTree.handle(of: path)
                    let end = i + 1 < paths.count ? BlueZObjectTree.handle(of: paths[i + 1]) &- 1 : service.endHandle
                    let flags = (props["Flags"]?.arrayItems ?? []).compactMap(\.string)
                    return CBCharacteristic(
                        uuid: uuid, properties: BlueZAdvertisement.properties(flags: flags), service: service,
                        handle: h, valueHandle: h &+ 1, endHandle: end)
                },
                // A cached characteristic is found again only if the filter asks for it.
                keep: { filter?.contains($0.uuid) ?? true }
            ) { e in { $0.peripheral(p, didDiscoverCharacteristicsFor: service, error: e) } }
        }
    }

    func discoverDescriptors(_ p: CBPeripheral, for characteristic: CBCharacteristic, done: Done<[CBDescriptor]>? = nil) {
        queue.async { [self] in
            guard let (device, charPath) = target(p, characteristic, "discoverDescriptors", done) else { return }
            let paths = tree.paths(with: BlueZObjectTree.descriptorInterface, where: "Characteristic", is: charPath)
            discovered(
                p, device, paths, kind: "descriptors", limit: CBPeripheral.maximumDescriptorsPerCharacteristic, cache: \.descriptors,
                done: done, handle: \.handle, list: \._descriptors, of: characteristic,
                make: { _, path in
                    guard let uuid = tree[path, BlueZObjectTree.descriptorInterface]?["UUID"]?.string.flatMap(BlueZAdvertisement.cbUUID) else { return nil }
                    return CBDescriptor(uuid: uuid, characteristic: characteristic, handle: BlueZObjectTree.handle(of: path))
                },
                keep: { _ in true }
            ) { e in { $0.peripheral(p, didDiscoverDescriptorsFor: characteristic, error: e) } }
        }
    }

    /// A discovery's answer from the objects BlueZ lists at `paths` (on the queue): too many is the error iOS gives;
    /// else each attribute is made once per path (`make`, nil for one to leave out; kept in the device's `cache`),
    /// merged into the parent's `list` in handle order, and the app told through `tell` (its delegate call, given
    /// the error).
    private func discovered<Parent: AnyObject & Sendable, A: CBAttribute>(
        _ p: CBPeripheral, _ device: String, _ paths: [String], kind: String, limit: Int,
        cache: WritableKeyPath<GATTObjects, [String: A]>, done: Done<[A]>?, handle: KeyPath<A, UInt16> & Sendable,
        list: ReferenceWritableKeyPath<Parent, [A]?> & Sendable, of parent: Parent, make: (Int, String) -> A?, keep: (A) -> Bool,
        tell: (_ error: (any Error)?) -> @Sendable (any CBPeripheralDelegate) -> Void
    ) {
        guard paths.count <= limit else {
            let e = CBPeripheral.tooLarge(kind, paths.count)
            return finish(p, done, .failure(e), delegate: tell(e))
        }
        var objects = gatt[device]!
        var found: [A] = []
        for (i, path) in paths.enumerated() {
            if let known = objects[keyPath: cache][path] {
                if keep(known) { found.append(known) }
            } else if let made = make(i, path) {
                found.append(objects.object(cache, at: path) { made })
            }
        }
        gatt[device] = objects
        let kept = found
        finish(
            p, done, .success(kept),
            prepare: {
                var all = parent[keyPath: list] ?? []
                for a in kept where !all.contains(where: { $0 === a }) { all.append(a) }
                all.sort { $0[keyPath: handle] < $1[keyPath: handle] }
                parent[keyPath: list] = all
            }, delegate: tell(nil))
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
    func valueChanged(_ path: String, _ value: [UInt8]) {
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

    // MARK: Service Changed

    /// A GATT object added (InterfacesAdded) or removed (InterfacesRemoved) with these interfaces. Under a connected
    /// device, bluetoothd does so when it finds the peer's database changed (a Service Changed indication; a bonded
    /// device's cache found out of date): it removes the objects of the services in the range, one signal per
    /// descriptor, characteristic and service, rediscovers the range and exports what it finds at new paths. The app
    /// hears of it as the native host tells it of one indication (CBPeripheral+ServiceChanged): one
    /// peripheral(_:didModifyServices:) once the signals have settled (`serviceChangeSettle` without another), the
    /// services it had that went listed and removed from `services`. Where BlueZ's signals say less than an
    /// indication's range: a service it never had that went is not reported, alone (nothing to invalidate); a service
    /// that came is, with the invalidated ones or with none, as the native host reports an indication that
    /// invalidates nothing, so the app discovers again (it also hears of services exported after a burst that
    /// invalidated its own, when bluetoothd's rediscovery outlasted the settling). The link lost or the device removed
    /// within the settling ends the burst unheard (linkLost, as before); so does a cancel.
    func gattObjectsChanged(_ path: String, interfaces: [String], added: Bool) {
        let gattInterfaces = [BlueZObjectTree.serviceInterface, BlueZObjectTree.characteristicInterface, BlueZObjectTree.descriptorInterface]
        guard interfaces.contains(where: gattInterfaces.contains),
            let device = links.first(where: { path.hasPrefix($0.key + "/") && $0.value.phase == .connected && $0.value.peripheral != nil })?.key
        else { return }
        var changes = links[device]!.serviceChanges ?? ServiceChanges()
        if added {
            if interfaces.contains(BlueZObjectTree.serviceInterface) { changes.added = true }
        } else if let gone = gatt[device]?.forget(at: path) {
            // An object made for this path is at most once in the burst: forget dropped it.
            changes.invalidated += gone
        }
        serviceChangeSignals += 1
        changes.token = serviceChangeSignals
        links[device]!.serviceChanges = changes
        let token = changes.token
        queue.asyncAfter(deadline: .now() + Self.serviceChangeSettle) { [self] in serviceChangesSettled(device, token) }
    }

    /// How long a burst of database signals lasts past its last signal.
    static let serviceChangeSettle = 0.3

    /// The burst whose last signal was `token` has settled: didModifyServices on the delegate queue, where the
    /// services the peripheral lists are the ones it reports (an included service it never listed is not).
    private func serviceChangesSettled(_ device: String, _ token: Int) {
        guard let link = links[device], link.phase == .connected, let p = link.peripheral, let changes = link.serviceChanges,
            changes.token == token
        else { return }
        links[device]!.serviceChanges = nil
        guard !changes.invalidated.isEmpty || changes.added else { return }
        let (gone, added) = (changes.invalidated, changes.added)
        let invalid = InvalidatedServices()
        p.deliver(
            { d in if !invalid.services.isEmpty || added { d.peripheral(p, didModifyServices: invalid.services) } },
            prepare: {
                let all = p.services ?? []
                invalid.services = all.filter { s in gone.contains { $0 === s } }
                if !invalid.services.isEmpty { p.setServices(all.filter { s in !gone.contains { $0 === s } }) }
            })
    }
}

/// The services a didModifyServices reports, found on the delegate queue as the model changes and read there next.
private final class InvalidatedServices: @unchecked Sendable {
    var services: [CBService] = []
}

/// Merges found services into a peripheral's list (delegate queue), keeping the objects it has.
private func merge(into p: CBPeripheral, _ found: [CBService]) {
    var list = p.services ?? []
    for s in found where !list.contains(where: { $0 === s }) { list.append(s) }
    list.sort { $0.handle < $1.handle }
    p.setServices(list)
}
