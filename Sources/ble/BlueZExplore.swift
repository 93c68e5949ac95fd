// `ble gatt` and `ble shell` on BLE_TRANSPORT=bluez[:hciN]: the database as bluetoothd exports it (GattService1 /
// GattCharacteristic1 / GattDescriptor1 under the device), reached through a Core Bluetooth central on the bluez
// backend, and printed as on hci-socket (RemoteDatabase). What bluetoothd does not give: the GAP service (it keeps
// 1800 to itself), the include declarations' own handles, and a last service's end handle (shown as its last
// attribute); descriptor handles and characteristic declaration and value handles are BlueZ's object paths'.
import ArgumentParser
import CoreBluetooth
import Foundation
import BLEWire

/// The delegate calls `ble gatt` and `ble shell` wait for where there is no async call (included services, descriptor
/// values), each ended by its delegate call, the link's loss, or a time limit.
final class BlueZGATTWaiter: NSObject, CBPeripheralDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var waiting: [ObjectIdentifier: CheckedContinuation<Void, any Error>] = [:]

    func wait(for object: AnyObject, on p: CBPeripheral, seconds: Double = 30, _ start: @escaping @Sendable () -> Void) async throws {
        guard p.state == .connected else { throw ToolError("the link went down") }
        let key = ObjectIdentifier(object)
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            lock.withLock { waiting[key] = c }
            start()
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [weak self] in
                self?.resume(key, p.state == .connected ? ToolError("no answer from bluetoothd within \(Int(seconds)) s") : ToolError("the link went down"))
            }
        }
    }

    private func resume(_ key: ObjectIdentifier, _ error: (any Error)?) {
        guard let c = lock.withLock({ waiting.removeValue(forKey: key) }) else { return }
        if let error { c.resume(throwing: error) } else { c.resume() }
    }

    func peripheral(_ p: CBPeripheral, didDiscoverIncludedServicesFor service: CBService, error: (any Error)?) { resume(ObjectIdentifier(service), error) }
    func peripheral(_ p: CBPeripheral, didUpdateValueFor descriptor: CBDescriptor, error: (any Error)?) { resume(ObjectIdentifier(descriptor), error) }
    func peripheral(_ p: CBPeripheral, didWriteValueFor descriptor: CBDescriptor, error: (any Error)?) { resume(ObjectIdentifier(descriptor), error) }
}

extension BlueZTool {
    /// The database bluetoothd exports for a connected peripheral, as `ble gatt` shows it: primary services, the
    /// services they include, characteristics and descriptors, and (with `values`) every readable value and descriptor.
    static func database(_ p: CBPeripheral, values: Bool, waiter: BlueZGATTWaiter) async throws -> RemoteDatabase {
        var pending: [CBService] = try await p.services()
        var seen = Set(pending.map(ObjectIdentifier.init))
        var services: [RemoteDatabase.Service] = []
        var k = 0
        while k < pending.count {
            let s = pending[k]
            k += 1
            try await waiter.wait(for: s, on: p) { p.discoverIncludedServices(nil, for: s) }
            var rs = RemoteDatabase.Service(uuid: s.uuid.bluetoothUUID, handle: s.handle, endHandle: s.endHandle, primary: s.isPrimary)
            for inc in s.includedServices ?? [] {
                // BlueZ gives the included service, not the include declaration's own handle.
                rs.includes.append(.init(declarationHandle: 0, startHandle: inc.handle, endHandle: inc.endHandle, uuid: inc.uuid.bluetoothUUID))
                if seen.insert(ObjectIdentifier(inc)).inserted { pending.append(inc) }
            }
            for c in try await p.characteristics(for: s) {
                var rc = RemoteDatabase.Characteristic(
                    uuid: c.uuid.bluetoothUUID, declarationHandle: c.handle, valueHandle: c.valueHandle,
                    properties: UInt8(truncatingIfNeeded: c.properties.rawValue), endHandle: c.endHandle)
                for d in try await p.descriptors(for: c) {
                    var rd = RemoteDatabase.Descriptor(uuid: d.uuid.bluetoothUUID, handle: d.handle)
                    if values {
                        do {
                            try await waiter.wait(for: d, on: p) { p.readValue(for: d) }
                            rd.value = CBDescriptor.wireValue(of: d.value)
                        } catch { rd.error = try failure(error) }
                    }
                    rc.descriptors.append(rd)
                }
                if values && c.properties.contains(.read) {
                    do { rc.value = [UInt8](try await p.value(for: c)) } catch { rc.error = try failure(error) }
                }
                rs.characteristics.append(rc)
            }
            services.append(rs)
        }
        // BlueZ gives no end handles: a service ends before the next one starts; the last one at its last attribute.
        let last = Dictionary(
            services.map { s in (s.handle, s.characteristics.map { max($0.valueHandle, $0.descriptors.map(\.handle).max() ?? 0) }.max() ?? s.handle) }
        ) { a, _ in a }
        for i in services.indices where services[i].endHandle == 0xFFFF || services[i].endHandle < services[i].handle {
            services[i].endHandle = last[services[i].handle] ?? services[i].handle
        }
        for i in services.indices {
            for j in services[i].includes.indices {
                let start = services[i].includes[j].startHandle
                if let s = services.first(where: { $0.handle == start }) { services[i].includes[j].endHandle = s.endHandle }
            }
            for j in services[i].characteristics.indices where services[i].characteristics[j].endHandle > services[i].endHandle {
                services[i].characteristics[j].endHandle = services[i].endHandle
            }
        }
        var db = RemoteDatabase()
        db.services = services.sorted { $0.handle < $1.handle }
        return db
    }

    /// A failed read kept in the database as its text; a lost link ends the whole discovery.
    private static func failure(_ error: any Error) throws -> String {
        if let e = error as? CBError, e.code == .peripheralDisconnected || e.code == .notConnected { throw ToolError("the link went down") }
        if let e = error as? ToolError { throw e }
        return (error as NSError).localizedDescription
    }

    /// The note for what bluetoothd keeps out of the database it exports.
    static func hiddenNote(_ db: RemoteDatabase) -> String? {
        db.services.contains { $0.uuid == BluetoothUUID(0x1800) }
            ? nil : "(bluetoothd keeps the GAP service, 1800, to itself: not shown; hci-socket:N shows the whole database)"
    }

    /// `ble gatt` through bluetoothd.
    static func gatt(_ o: BlueZOptions, _ c: GattCommand) throws {
        let values = c.values
        let (db, address, mtu) = try withPeripheral(o, c.connect) { p, _ -> (RemoteDatabase, String, Int) in
            let waiter = BlueZGATTWaiter()
            p.delegate = waiter
            let db = try await database(p, values: values, waiter: waiter)
            return (db, p.deviceAddress.description, Int(p.attMTU))
        }
        if c.json {
            say(jsonText(db.json(device: ["address": address, "mtu": mtu]), pretty: true))
        } else {
            say(db.tree(header: "\(address) (ATT MTU \(mtu))"))
        }
        if let note = hiddenNote(db) { warn(note) }
    }
}

// MARK: ble shell

extension BlueZTool {
    /// `ble shell` through bluetoothd: the same commands as on hci-socket (ShellLine), on a Core Bluetooth central.
    /// Lines come from a thread of their own (no task's thread waits for the user); notifications print as they come.
    static func shell(_ o: BlueZOptions, _ c: ShellCommand) throws {
        try withPeripheral(o, c.connect, timeLimit: nil) { p, _ -> Void in
            let waiter = BlueZGATTWaiter()
            p.delegate = waiter
            let db = try await database(p, values: false, waiter: waiter)
            let interactive = isatty(STDIN_FILENO) == 1 && Terminal.isTerminal
            let address = p.deviceAddress.description
            say("connected; \(db.characteristics.count) characteristics in \(db.services.count) services. Type help for the commands.")
            if let note = hiddenNote(db) { warn(note) }
            let (lines, feed) = AsyncStream<String?>.makeStream()
            // read(2), not readLine(): glibc's getline holds stdin's lock while it waits, and every say()'s
            // fflush(NULL) takes each stream's lock, so a notification printed meanwhile would wait for the next line.
            Thread.detachNewThread {
                var pending: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                while true {
                    let n = buffer.withUnsafeMutableBytes { Glibc.read(STDIN_FILENO, $0.baseAddress, $0.count) }
                    if n < 0 && errno == EINTR { continue }
                    guard n > 0 else { break }
                    pending += buffer[0..<n]
                    while let end = pending.firstIndex(of: 0x0A) {
                        feed.yield(String(decoding: pending[..<end], as: UTF8.self).trimmingCharacters(in: CharacterSet(charactersIn: "\r")))
                        pending.removeSubrange(...end)
                    }
                }
                if !pending.isEmpty { feed.yield(String(decoding: pending, as: UTF8.self)) }
                feed.finish()
            }
            // The link's loss ends the shell at once, not at the next line.
            let watcher = Task {
                while !Task.isCancelled && p.state == .connected { try? await Task.sleep(nanoseconds: 100_000_000) }
                if !Task.isCancelled { feed.yield(nil) }
            }
            defer { watcher.cancel() }
            var subscriptions: [UInt16: Task<Void, Never>] = [:]
            defer { for t in subscriptions.values { t.cancel() } }
            if interactive { prompt() }
            for await next in lines {
                guard let line = next else { throw ToolError("the link went down") }
                let words = ShellSession.split(line)
                guard let first = words.first else {
                    if interactive { prompt() }
                    continue
                }
                if first == "quit" || first == "exit" { break }
                do {
                    try await execute(words, p, db, address, waiter, &subscriptions)
                } catch {
                    warn(error is ToolError ? "error: \(error)" : "error: " + ShellLine.message(for: error))
                }
                if p.state != .connected { throw ToolError("the link went down") }
                if interactive { prompt() }
            }
            // Unsubscribe before the link goes (the streams' ends send StopNotify).
            for t in subscriptions.values { t.cancel() }
            subscriptions.removeAll()
            try? await Task.sleep(nanoseconds: 200_000_000)
        }
    }

    private static func prompt() {
        print("ble> ", terminator: "")
        fflush(nil)
    }

    /// The Core Bluetooth objects of every characteristic and descriptor discovered (included services' too).
    private static func objects(_ p: CBPeripheral) -> (characteristics: [CBCharacteristic], descriptors: [CBDescriptor]) {
        var services = p.services ?? []
        var k = 0
        while k < services.count {
            for inc in services[k].includedServices ?? [] where !services.contains(where: { $0 === inc }) { services.append(inc) }
            k += 1
        }
        let characteristics = services.flatMap { $0.characteristics ?? [] }
        return (characteristics, characteristics.flatMap { $0.descriptors ?? [] })
    }

    private enum Attribute {
        case characteristic(CBCharacteristic)
        case descriptor(CBDescriptor)
    }

    private static func attribute(_ t: Target, _ p: CBPeripheral) throws -> Attribute {
        let (characteristics, descriptors) = objects(p)
        if t.isDescriptor, let d = descriptors.first(where: { $0.handle == t.handle }) { return .descriptor(d) }
        if let c = characteristics.first(where: { $0.valueHandle == t.handle }) { return .characteristic(c) }
        throw ToolError(String(format: "0x%04x is neither a characteristic value nor a descriptor (on bluez, bluetoothd reaches only those)", t.handle))
    }

    private static func execute(
        _ words: [String], _ p: CBPeripheral, _ db: RemoteDatabase, _ address: String, _ waiter: BlueZGATTWaiter,
        _ subscriptions: inout [UInt16: Task<Void, Never>]
    ) async throws {
        if words == ["help"] { return say(ShellSession.help) }
        switch try ShellLine.parseAsRoot(words) {
        case let l as ShellLine.List:
            say(try await database(p, values: !l.noValues, waiter: waiter).tree(header: address))
        case let r as ShellLine.Read:
            let t = try Target(r.attribute, in: db)
            let v: [UInt8]
            switch try attribute(t, p) {
            case let .characteristic(c):
                do { v = [UInt8](try await p.value(for: c)) } catch { throw ToolError("reading \(t.label): \((error as NSError).localizedDescription)") }
            case let .descriptor(d):
                do { try await waiter.wait(for: d, on: p) { p.readValue(for: d) } } catch let e as ToolError { throw e } catch {
                    throw ToolError("reading \(t.label): \((error as NSError).localizedDescription)")
                }
                v = CBDescriptor.wireValue(of: d.value)
            }
            say("\(t.label): " + RemoteDatabase.render(value: v, error: nil, decoded: t.decode(v)))
        case let w as ShellLine.Write:
            let t = try Target(w.attribute, in: db)
            let v = w.hex.flatMap(WriteCommand.parseHex) ?? Array((w.text ?? "").utf8)
            switch try attribute(t, p) {
            case let .characteristic(c):
                if w.noResponse {
                    guard v.count <= p.maximumWriteValueLength(for: .withoutResponse) else {
                        throw ToolError("\(v.count) octets do not fit in one Write Command (\(p.maximumWriteValueLength(for: .withoutResponse)) at most)")
                    }
                    p.writeValue(Data(v), for: c, type: .withoutResponse)
                } else {
                    do { try await p.write(Data(v), to: c) } catch { throw ToolError("writing \(t.label): \((error as NSError).localizedDescription)") }
                }
            case let .descriptor(d):
                if d.uuid == CBUUID(string: "2902") { throw ToolError("\(t.label): bluetoothd writes it itself; use subscribe and unsubscribe") }
                do { try await waiter.wait(for: d, on: p) { p.writeValue(Data(v), for: d) } } catch let e as ToolError { throw e } catch {
                    throw ToolError("writing \(t.label): \((error as NSError).localizedDescription)")
                }
            }
            say("wrote \(v.count) octet(s) to \(t.label)")
        case let s as ShellLine.Subscribe:
            let c = try db.characteristic(s.attribute)
            guard c.properties & 0x30 != 0 else { throw ToolError("\(Target.label(c)) neither notifies nor indicates") }
            guard case let .characteristic(ch) = try attribute(Target(.handle(c.valueHandle), in: db), p) else { return }
            guard subscriptions[c.valueHandle] == nil else { return say("already subscribed to \(Target.label(c))") }
            let values: AsyncStream<Data>
            do { values = try await p.updates(of: ch) } catch { throw ToolError("subscribing to \(Target.label(c)): \((error as NSError).localizedDescription)") }
            subscriptions[c.valueHandle] = Task {
                for await v in values { say(line(ch, [UInt8](v), json: false)) }
            }
            say("subscribed to \(Target.label(c))")
        case let u as ShellLine.Unsubscribe:
            let c = try db.characteristic(u.attribute)
            guard let task = subscriptions.removeValue(forKey: c.valueHandle) else { throw ToolError("not subscribed to \(Target.label(c))") }
            task.cancel()   // the stream's end sends StopNotify
            say("unsubscribed from \(Target.label(c))")
        default:
            throw ToolError("type help for the commands")
        }
    }
}
