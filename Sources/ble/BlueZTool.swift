// `ble pair` and `ble bonds` on BLE_TRANSPORT=bluez[:hciN]: bluetoothd keeps the adapter and the bonds, so these
// commands ask it over D-Bus (CoreBluetooth's BlueZDevices) instead of opening a controller of our own. Pairing
// prompts reach the terminal through an org.bluez.Agent1 this process registers as the default agent while it runs.
import ArgumentParser
import CoreBluetooth
import Foundation
import BLESMP
import BLEWire

enum BlueZTool {
    /// The BlueZ options BLE_TRANSPORT names, or nil when it names another transport.
    static var options: BlueZOptions? { BlueZOptions.fromEnvironment() }

    static func open(_ o: BlueZOptions) throws -> BlueZDevices {
        do { return try BlueZDevices(options: o) } catch { throw ToolError("BLE_TRANSPORT=\(transportName(o)): \(error)") }
    }

    /// Why a command that opens a controller of its own does not run on bluez.
    static func needsOwnController(_ o: BlueZOptions) -> String {
        "BLE_TRANSPORT=\(transportName(o)): this command runs our own host on a controller of its own, and bluetoothd keeps the "
            + "adapter on this backend. Through bluetoothd: `ble scan`, `ble gatt`, `ble read`, `ble write`, `ble subscribe`, `ble shell`, `ble serve`, `ble pair`, `ble bonds`, `ble send`, `ble receive`, `ble demo`, `ble mc`, `ble gk`, `ble bench peer --l2cap`; the others need hci-socket:N "
            + "(an adapter bluetoothd lets go; `ble doctor` says which)"
    }

    static func transportName(_ o: BlueZOptions) -> String { o.adapter.map { "bluez:\($0)" } ?? "bluez" }

    static func describe(_ d: BlueZDevices.Device) -> String {
        "\(d.address) (\(d.addressType))" + (d.name.map { " \($0)" } ?? "") + (d.bonded || !d.paired ? "" : " paired")
            + (d.bonded ? " bonded" : "") + (d.trusted ? " trusted" : "") + (d.connected ? " connected" : "")
    }

    /// `ble pair` through bluetoothd.
    static func pair(_ o: BlueZOptions, _ c: PairCommand) throws {
        if c.legacy { throw ValidationError("--legacy: bluetoothd chooses LE Secure Connections itself when both sides support it (BLE_TRANSPORT=bluez)") }
        if c.mitm {
            throw ValidationError(
                "--mitm: bluetoothd decides MITM protection from the agent's IO capability (--io), not per pairing (BLE_TRANSPORT=bluez)")
        }
        let bluez = try open(o)
        defer { bluez.close() }
        var device: BlueZDevices.Device
        do {
            device = try bluez.find(c.address, discover: min(c.timeout, 30))
            if device.paired, c.force {
                print("forgetting the bond with \(device.address) first (--force)")
                try bluez.remove(device)
                device = try bluez.find(c.address, discover: min(c.timeout, 30))
            }
            if device.paired {
                print("already bonded with \(describe(device)) (BlueZ keeps the keys; --force pairs again)")
                return
            }
            // Not the default agent: bluetoothd asks the agent of the process that called Pair, and the default one
            // (the desktop's, or `ble serve` on another adapter of this bluetoothd) keeps answering pairings others start.
            try bluez.install(agent: TerminalPairingAgent(capability(c.io.capability), autoAccept: c.yes), asDefault: false)
            let wasConnected = device.connected
            print("pairing with \(device.address) through bluetoothd (\(transportName(o)))…")
            device = try bluez.pair(device, timeout: c.timeout)
            print("bonded with \(describe(device))")
            if !wasConnected { try? bluez.disconnect(device) }
        } catch {
            print("failed: \(error)")
            throw ExitCode(1)
        }
    }

    /// `ble bonds` through bluetoothd: list, or forget one (Adapter1.RemoveDevice).
    static func bonds(_ o: BlueZOptions, remove: String?) throws {
        let bluez = try open(o)
        defer { bluez.close() }
        if let remove {
            guard let d = bluez.bonds().first(where: { $0.address.caseInsensitiveCompare(remove) == .orderedSame }) else {
                print("no bond with \(remove)")
                throw ExitCode(1)
            }
            do { try bluez.remove(d) } catch {
                print("failed: \(error)")
                throw ExitCode(1)
            }
            print("forgot \(d.address)")
            return
        }
        let bonds = bluez.bonds()
        print("\(bonds.count) bond(s) kept by bluetoothd (\(transportName(o)))")
        for d in bonds { print("  " + describe(d)) }
    }

    static func capability(_ io: IOCapability) -> CBPairingIOCapability {
        switch io {
        case .noInputNoOutput: return .noInputNoOutput
        case .displayOnly: return .displayOnly
        case .displayYesNo: return .displayYesNo
        case .keyboardOnly: return .keyboardOnly
        case .keyboardDisplay: return .keyboardDisplay
        }
    }
}

/// The terminal as a CBPairingAgent (the BlueZ path; TerminalAgent is the same for our own host). Without a terminal
/// (stdin closed) it refuses what needs an answer.
final class TerminalPairingAgent: CBPairingAgent, @unchecked Sendable {
    let ioCapability: CBPairingIOCapability
    let autoAccept: Bool
    init(_ io: CBPairingIOCapability, autoAccept: Bool) {
        ioCapability = io
        self.autoAccept = autoAccept
    }

    /// Reads a line on a thread of its own, so no task's thread waits for the user.
    private func ask(_ question: String) async -> String? {
        await withCheckedContinuation { (c: CheckedContinuation<String?, Never>) in
            Thread.detachNewThread {
                print(question, terminator: " ")
                fflush(nil)
                c.resume(returning: readLine()?.trimmingCharacters(in: .whitespaces))
            }
        }
    }

    func shouldPair(with peer: CBPeer?) async -> Bool {
        if autoAccept {
            say("pairing: accepted (Just Works)")
            return true
        }
        return await ask("Pair (Just Works)? [y/N]")?.lowercased().hasPrefix("y") == true
    }

    func display(passkey: UInt32, for peer: CBPeer?) async {
        say(String(format: "Passkey: %06u  (type it on the other device)", passkey))
    }

    func passkey(for peer: CBPeer?) async -> UInt32? {
        await ask("Passkey shown by the other device:").flatMap { UInt32($0) }
    }

    func confirm(number: UInt32, with peer: CBPeer?) async -> Bool {
        if autoAccept {
            say(String(format: "Comparison value %06u: accepted", number))
            return true
        }
        return await ask(String(format: "Does the other device show %06u? [y/N]", number))?.lowercased().hasPrefix("y") == true
    }
}

// MARK: ble scan

extension BlueZTool {
    /// `ble scan` through bluetoothd: a Core Bluetooth central on the bluez backend (BlueZ merges advertisements and
    /// scan responses into Device1's properties). One line per device when it is first heard and again when what it
    /// advertises changes (every report with --duplicates); `--json` as on our own host, with the keys BlueZ gives.
    static func scan(_ o: BlueZOptions, _ c: ScanCommand) throws {
        if c.passive { throw ValidationError("--passive: bluetoothd's discovery always scans actively (BLE_TRANSPORT=bluez)") }
        final class Scanner: NSObject, CBCentralManagerDelegate, @unchecked Sendable {
            let command: ScanCommand
            let ready = DispatchSemaphore(value: 0)
            var state: CBManagerState = .unknown
            var shown: [UUID: String] = [:]
            init(_ c: ScanCommand) { command = c }
            func centralManagerDidUpdateState(_ central: CBCentralManager) {
                state = central.state
                if central.state != .unknown { ready.signal() }
            }
            func centralManager(_ central: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
                let name = advertisementData[CBAdvertisementDataLocalNameKey] as? String ?? p.name
                if let wanted = command.name, !(name?.localizedCaseInsensitiveContains(wanted) ?? false) { return }
                if let floor = command.rssi, rssi.intValue < floor { return }
                let a = p.deviceAddress
                var details: [String] = []
                var json: [String: Any] = ["address": a.description, "address_type": ScanPrinter.kind(a), "rssi": rssi.intValue, "connectable": true]
                if let name { json["name"] = name }
                if let s = advertisementData[CBAdvertisementDataServiceUUIDsKey] as? [CBUUID], !s.isEmpty {
                    details.append("services " + s.map { ScanPrinter.uuidName($0.bluetoothUUID) }.joined(separator: ", "))
                    json["services"] = s.map(\.bluetoothUUID.uuidString)
                }
                if let m = advertisementData[CBAdvertisementDataManufacturerDataKey] as? Data, let (id, company) = ScanPrinter.company([UInt8](m)) {
                    let rest = [UInt8](m.dropFirst(2))
                    details.append(String(format: "manufacturer 0x%04x", id) + (company.map { " (\($0))" } ?? "") + ": " + ValueDecoding.hex(rest))
                    var e: [String: Any] = ["company_id": Int(id), "data": rest.map { String(format: "%02x", $0) }.joined()]
                    if let company { e["company"] = company }
                    json["manufacturer_data"] = [e]
                }
                if let sd = advertisementData[CBAdvertisementDataServiceDataKey] as? [CBUUID: Data], !sd.isEmpty {
                    let sorted = sd.sorted { $0.key.uuidString < $1.key.uuidString }
                    for (u, d) in sorted { details.append("data \(u.bluetoothUUID.uuidString): \(ValueDecoding.hex([UInt8](d)))") }
                    json["service_data"] = sorted.map { ["uuid": $0.key.bluetoothUUID.uuidString, "data": $0.value.map { String(format: "%02x", $0) }.joined()] }
                }
                if let t = advertisementData[CBAdvertisementDataTxPowerLevelKey] as? NSNumber {
                    details.append("tx \(t.intValue) dBm")
                    json["tx_power"] = t.intValue
                }
                let content = ScanPrinter.pad(name.map { "\"\($0)\"" } ?? "-", 22) + details.joined(separator: "  ")
                if !command.duplicates, shown[p.identifier] == content { return }
                shown[p.identifier] = content
                if command.json {
                    say(jsonText(json, pretty: false))
                } else {
                    say(ScanPrinter.pad(a.description, 21) + ScanPrinter.pad(ScanPrinter.kind(a), 17) + ScanPrinter.pad(String(format: "%4d", rssi.intValue), 6) + content)
                }
            }
        }
        let scanner = Scanner(c)
        let queue = DispatchQueue(label: "ble-scan-bluez")
        let manager = CBCentralManager(delegate: scanner, queue: queue, bluez: o)
        if scanner.ready.wait(timeout: .now() + Controller.defaultTimeout) == .timedOut || queue.sync(execute: { scanner.state }) != .poweredOn {
            let why = queue.sync { scanner.state }
            throw ToolError(
                "BLE_TRANSPORT=\(transportName(o)): "
                    + (why == .poweredOff ? "the adapter is powered off (bluetoothctl power on)" : "no bluetoothd with this adapter on the system bus (is bluetoothd running?)"))
        }
        if !c.json { say(ScanPrinter.header) }
        let services = c.service.flatMap { BluetoothUUID(string: $0) }.map { [CBUUID($0)] }
        manager.scanForPeripherals(withServices: services, options: [CBCentralManagerScanOptionAllowDuplicatesKey: true])
        let finished = DispatchSemaphore(value: 0)
        signal(SIGINT, SIG_IGN)
        let interrupt = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        interrupt.setEventHandler { finished.signal() }
        interrupt.resume()
        _ = finished.wait(timeout: c.duration > 0 ? .now() + c.duration : .distantFuture)
        interrupt.cancel()
        manager.stopScan()
        warn("\(queue.sync { scanner.shown.count }) device(s)")
        withExtendedLifetime(manager) {}
    }
}

// MARK: ble read, ble write

extension BlueZTool {
    /// Finds the device through bluetoothd, connects a Core Bluetooth central to it (pairing prompts on the terminal),
    /// discovers its characteristics, runs `body` with the async GATT calls, and disconnects.
    /// `timeLimit`: seconds past the connection's timeout the whole command may take (nil: as long as the user types,
    /// for `ble shell`).
    static func withPeripheral<T: Sendable>(
        _ o: BlueZOptions, _ connect: ConnectOptions, timeLimit: Double? = 120,
        _ body: @escaping @Sendable (CBPeripheral, [CBCharacteristic]) async throws -> T
    ) throws -> T {
        let devices = try open(o)
        let device: BlueZDevices.Device
        do { device = try devices.find(connect.device, discover: connect.timeout) } catch {
            devices.close()
            throw ToolError("\(error)")
        }
        let identifier = devices.identifier(of: device)
        devices.close()
        let outcome = ToolOutcome<T>()
        let done = DispatchSemaphore(value: 0)
        let manager = CBCentralManager(delegate: nil, queue: DispatchQueue(label: "ble-bluez-central"), bluez: o)
        manager.pairingAgent = TerminalPairingAgent(capability(connect.io.capability), autoAccept: connect.yes)
        let work = Task {
            let result: Result<T, any Error>
            var connected: CBPeripheral?
            do {
                do { try await manager.waitUntilPoweredOn() } catch {
                    throw ToolError(
                        "BLE_TRANSPORT=\(transportName(o)): the Core Bluetooth manager is \(manager.state == .poweredOff ? "powered off" : "unsupported"): "
                            + "bluetoothd or its adapter went away (BLE_LOG=1 shows why)")
                }
                guard let p = manager.retrievePeripherals(withIdentifiers: [identifier]).first else {
                    throw ToolError("bluetoothd no longer knows \(device.address)")
                }
                connected = p
                try await manager.connectAndWait(p)
                result = .success(try await lookingAgain(p, body))
            } catch {
                result = .failure(error)
            }
            if let p = connected, p.state != .disconnected {
                manager.cancelPeripheralConnection(p)
                // Disconnect leaves on the backend's queue after what the body sent; wait for it to be done.
                for _ in 0..<500 where p.state != .disconnected { try? await Task.sleep(nanoseconds: 10_000_000) }
            }
            outcome.lock.withLock { outcome.result = result }
            done.signal()
        }
        if done.wait(timeout: timeLimit.map { .now() + connect.timeout + $0 } ?? .distantFuture) == .timedOut {
            work.cancel()
            throw ToolError("\(device.address): no answer from bluetoothd within \(Int(connect.timeout + (timeLimit ?? 0))) s")
        }
        do {
            return try outcome.lock.withLock { outcome.result! }.get()
        } catch let e as ToolError {
            throw e
        } catch {
            throw ToolError("\(device.address): \((error as NSError).localizedDescription)")
        }
    }

    /// The characteristic an attribute names (by UUID, or by its value handle as BlueZ's paths give it).
    static func characteristic(_ spec: AttributeSpec, in list: [CBCharacteristic]) throws -> CBCharacteristic {
        let found: CBCharacteristic? =
            switch spec {
            case let .uuid(u): list.first { $0.uuid.bluetoothUUID == u }
            case let .handle(h): list.first { $0.valueHandle == h }
            }
        guard let found else { throw MissingCharacteristic(spec: "\(spec)") }
        return found
    }

    /// A characteristic the device's database, as bluetoothd shows it, does not have (yet: see `lookingAgain`).
    struct MissingCharacteristic: Error, CustomStringConvertible {
        let spec: String
        var description: String { "no characteristic \(spec) (on bluez, characteristics only: bluetoothd keeps descriptors' handles)" }
    }

    /// How often, and how far apart, `lookingAgain` looks at the database again for a missing characteristic.
    static let lookAgain = (times: 6, nanoseconds: UInt64(500_000_000))

    /// Runs `body` with the characteristics of `p`'s services as bluetoothd shows them. A characteristic it does not
    /// find is looked for again, every half second for 3 s: on reconnection to a bonded device bluetoothd says the
    /// services are resolved from its cache, then finds the device's database changed (another hash, as after its
    /// GATT server was restarted), and removes the old objects before it exports the new ones; a look in between
    /// finds neither (the kernel row cb-pair-bluez-bluez failed that way).
    static func lookingAgain<T>(
        _ p: CBPeripheral, _ body: (CBPeripheral, [CBCharacteristic]) async throws -> T
    ) async throws -> T {
        var attempt = 0
        while true {
            var characteristics: [CBCharacteristic] = []
            for s in try await p.services() { characteristics += try await p.characteristics(for: s) }
            do {
                return try await body(p, characteristics)
            } catch let missing as MissingCharacteristic {
                attempt += 1
                guard attempt <= lookAgain.times else { throw ToolError(missing.description) }
                try await Task.sleep(nanoseconds: lookAgain.nanoseconds)
            }
        }
    }

    static func label(_ c: CBCharacteristic) -> String {
        let u = c.uuid.bluetoothUUID
        return String(format: "0x%04x ", c.valueHandle) + RemoteDatabase.label(u, AssignedNumbers.name(ofCharacteristic: u))
    }

    static func read(_ o: BlueZOptions, _ c: ReadCommand) throws {
        let (label, value, decoded) = try withPeripheral(o, c.connect) { p, list -> (String, [UInt8], String?) in
            let ch = try characteristic(c.attribute, in: list)
            let v: [UInt8]
            do { v = [UInt8](try await p.value(for: ch)) } catch { throw ToolError("reading \(BlueZTool.label(ch)): \((error as NSError).localizedDescription)") }
            return (BlueZTool.label(ch), v, ValueDecoding.characteristic(ch.uuid.bluetoothUUID, v, presentation: nil))
        }
        if c.raw { return FileHandle.standardOutput.write(Data(value)) }
        if c.json {
            var object: [String: Any] = ["handle": Int(label.prefix(6).dropFirst(2), radix: 16) ?? 0, "value": value.map { String(format: "%02x", $0) }.joined()]
            if let decoded { object["decoded"] = decoded }
            say(jsonText(object, pretty: false))
        } else {
            say("\(label): " + RemoteDatabase.render(value: value, error: nil, decoded: decoded))
        }
    }

    static func write(_ o: BlueZOptions, _ c: WriteCommand) throws {
        let v = try c.value()
        guard v.count <= 512 else { throw ToolError("\(v.count) octets; an attribute value holds at most 512") }
        let noResponse = c.noResponse
        let label = try withPeripheral(o, c.connect) { p, list -> String in
            let ch = try characteristic(c.attribute, in: list)
            if noResponse {
                guard v.count <= p.maximumWriteValueLength(for: .withoutResponse) else {
                    throw ToolError("\(v.count) octets do not fit in one Write Command (\(p.maximumWriteValueLength(for: .withoutResponse)) at most)")
                }
                p.writeValue(Data(v), for: ch, type: .withoutResponse)
                // bluetoothd has taken it once it answers WriteValue; the flag says so.
                for _ in 0..<500 where !p.canSendWriteWithoutResponse { try? await Task.sleep(nanoseconds: 10_000_000) }
            } else {
                do { try await p.write(Data(v), to: ch) } catch { throw ToolError("writing \(BlueZTool.label(ch)): \((error as NSError).localizedDescription)") }
            }
            return BlueZTool.label(ch)
        }
        say("wrote \(v.count) octet(s) to \(label)" + (noResponse ? " without response" : ""))
    }
}

// MARK: ble subscribe

extension BlueZTool {
    /// `ble subscribe` through bluetoothd: `updates(of:)` per characteristic (StartNotify; BlueZ picks notifications
    /// where the characteristic offers them), values printed as they come, until --count, Ctrl-C (which unsubscribes
    /// first) or the link's loss.
    static func subscribe(_ o: BlueZOptions, _ c: SubscribeCommand) throws {
        if c.indicate {
            throw ValidationError("--indicate: bluetoothd chooses notifications where the characteristic offers them (BLE_TRANSPORT=bluez)")
        }
        let (stop, stopper) = AsyncStream<Void>.makeStream()
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        let sources = [SIGINT, SIGTERM].map { sig -> DispatchSourceSignal in
            let s = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            s.setEventHandler { stopper.yield() }
            s.resume()
            return s
        }
        defer { sources.forEach { $0.cancel() } }
        let limit = c.count
        let asJSON = c.json
        let attributes = c.attributes
        let failure = try withPeripheral(o, c.connect) { p, list -> String? in
            var streams: [(CBCharacteristic, AsyncStream<Data>)] = []
            // All looked up before any is subscribed to: a missing one makes `lookingAgain` run this again.
            let found = try attributes.map { try characteristic($0, in: list) }
            for ch in found {
                guard ch.properties.contains(.notify) || ch.properties.contains(.indicate) else {
                    throw ToolError("\(BlueZTool.label(ch)) neither notifies nor indicates")
                }
                do { streams.append((ch, try await p.updates(of: ch))) } catch {
                    throw ToolError("subscribing to \(BlueZTool.label(ch)): \((error as NSError).localizedDescription)")
                }
                warn("subscribed to \(BlueZTool.label(ch)) (\(ch.properties.contains(.notify) ? "notifications" : "indications"))")
            }
            let received = CBMutex(0)
            return await withTaskGroup(of: String?.self) { group in
                for (ch, values) in streams {
                    group.addTask {
                        for await v in values {
                            let n = received.withLock { n -> Int in
                                n += 1
                                return n
                            }
                            guard limit == 0 || n <= limit else { return nil }
                            say(line(ch, [UInt8](v), json: asJSON))
                            if limit > 0 && n == limit { return nil }
                        }
                        return Task.isCancelled ? nil : "the link went down"
                    }
                }
                group.addTask {
                    for await _ in stop { return nil }
                    return nil
                }
                let first = await group.next() ?? nil
                group.cancelAll()
                return first
            }
        }
        if let failure { throw ToolError(failure) }
    }

    static func line(_ c: CBCharacteristic, _ value: [UInt8], json: Bool) -> String {
        let u = c.uuid.bluetoothUUID
        let decoded = ValueDecoding.characteristic(u, value, presentation: nil)
        let kind = c.properties.contains(.notify) ? "notification" : "indication"
        let now = Date()
        if json {
            var o: [String: Any] = [
                "time": ISO8601DateFormatter.withFractionalSeconds.string(from: now), "kind": kind, "handle": Int(c.valueHandle),
                "uuid": u.uuidString, "value": value.map { String(format: "%02x", $0) }.joined(),
            ]
            if let decoded { o["decoded"] = decoded }
            return jsonText(o, pretty: false)
        }
        return "\(SubscribeCommand.clock.string(from: now)) \(kind) \(label(c)): " + RemoteDatabase.render(value: value, error: nil, decoded: decoded)
    }
}

/// What a task hands back to a command's thread.
private final class ToolOutcome<T>: @unchecked Sendable {
    let lock = NSLock()
    var result: Result<T, any Error>?
}
