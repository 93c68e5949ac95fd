// `ble interop`: two small Core Bluetooth programs for trying another stack (BlueZ, a phone) against ours on a
// real controller: a peripheral whose characteristics exercise long reads and writes (answered through
// CBATTRequest offsets), notifications, indications and a write-without-response counter, and a central that
// discovers, reads, writes and subscribes to whatever a peer serves. Both use nothing but the Core Bluetooth
// API; each step is printed on a line of its own, for people and for scripts (scripts/kernel/scenarios).
// Neither opens the controller beforehand to check it (as `ble demo` does): on the HCI user channel the kernel
// sets an adapter up again each time it is let go, and the manager's own open would find it busy.
import ArgumentParser
import Foundation
import CoreBluetooth

struct InteropCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "interop",
        abstract: "Core Bluetooth test programs to try another stack against: a peripheral and a central.",
        subcommands: [InteropPeripheralCommand.self, InteropCentralCommand.self])
}

/// The peripheral's service and characteristics.
enum InteropUUIDs {
    static let service = CBUUID(string: "7D2E0000-5B6A-4C3E-9A6D-2F4B1C0E8A10")
    /// Read: a 512-octet value answered in didReceiveRead at each offset the central asks for.
    static let long = CBUUID(string: "7D2E0001-5B6A-4C3E-9A6D-2F4B1C0E8A10")
    /// Write (with response): long values arrive as prepared writes, one CBATTRequest per part.
    static let longWrite = CBUUID(string: "7D2E0002-5B6A-4C3E-9A6D-2F4B1C0E8A10")
    static let notify = CBUUID(string: "7D2E0003-5B6A-4C3E-9A6D-2F4B1C0E8A10")
    static let indicate = CBUUID(string: "7D2E0004-5B6A-4C3E-9A6D-2F4B1C0E8A10")
    /// Write without response: counted; a 2-octet big-endian sequence number at the start is checked for gaps.
    static let flood = CBUUID(string: "7D2E0005-5B6A-4C3E-9A6D-2F4B1C0E8A10")

    /// The long value: readable text, its start and end easy to find in a hex dump.
    static let longValue: Data = {
        var s = "OCB long value, 512 octets:"
        var i = 0
        while s.utf8.count < 508 { s += String(i % 10); i += 1 }
        return Data((s + "END.").utf8)
    }()
}

/// One line of output, flushed at once (the output is often a file read while the program runs).
func interopSay(_ who: String, _ text: String) {
    print("[\(who)] \(text)")
    fflush(nil)
}

struct InteropPeripheralCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "peripheral",
        abstract: "Advertise a service with a long readable value, a long writable one, notify, indicate and write-without-response characteristics.")

    @Option(help: "The advertised local name.")
    var name = "OCB Interop"

    @Option(help: "Notifications (or indications) sent to each central that subscribes (1…10000).")
    var updates = 5

    @Option(help: "Seconds before the program ends (1…3600).")
    var timeout = 120

    func validate() throws {
        guard (1...10000).contains(updates) else { throw ValidationError("--updates must be 1…10000") }
        guard (1...3600).contains(timeout) else { throw ValidationError("--timeout must be 1…3600") }
    }

    func run() throws {
        let p = InteropPeripheral(name: name, updates: updates)
        p.start()
        DispatchQueue.main.asyncAfter(deadline: .now() + .seconds(timeout)) {
            p.summary()
            interopSay("peripheral", "time is up after \(timeout) s")
            Foundation.exit(0)
        }
        dispatchMain()
    }
}

final class InteropPeripheral: NSObject, CBPeripheralManagerDelegate, @unchecked Sendable {
    let name: String
    let updates: Int
    private var manager: CBPeripheralManager!
    private var notifyCharacteristic: CBMutableCharacteristic!
    private var indicateCharacteristic: CBMutableCharacteristic!
    /// What each subscribed characteristic still has to send: (characteristic, next number, last number).
    private var pending: [(CBMutableCharacteristic, Int, Int)] = []
    private var written = Data()
    private var floodWrites = 0
    private var floodBytes = 0
    private var floodGaps = 0
    private var floodNext: UInt16?
    private var floodReported = 0
    private var readOffsets: [Int] = []

    init(name: String, updates: Int) {
        self.name = name
        self.updates = updates
    }

    func start() {
        manager = CBPeripheralManager(delegate: self, queue: nil)
        // The flood's running count, once a second while it grows.
        let t = DispatchSource.makeTimerSource(queue: .main)
        t.schedule(deadline: .now() + 1, repeating: 1)
        t.setEventHandler { [weak self] in
            guard let self, floodWrites != floodReported else { return }
            floodReported = floodWrites
            reportFlood()
        }
        t.resume()
        timer = t
    }
    private var timer: DispatchSourceTimer?

    func reportFlood() {
        interopSay("peripheral", "write-without-response: \(floodWrites) writes, \(floodBytes) octets, \(floodGaps) gaps in the sequence")
    }

    func summary() {
        if floodWrites > 0 { reportFlood() }
    }

    func peripheralManagerDidUpdateState(_ peripheral: CBPeripheralManager) {
        interopSay("peripheral", "state \(peripheral.state.name)\(peripheral.state == .unsupported ? " (the controller could not be opened; BLE_LOG=1 shows why)" : "")")
        guard peripheral.state == .poweredOn else { return }
        let long = CBMutableCharacteristic(type: InteropUUIDs.long, properties: [.read], value: nil, permissions: [.readable])
        let longWrite = CBMutableCharacteristic(type: InteropUUIDs.longWrite, properties: [.read, .write], value: nil, permissions: [.readable, .writeable])
        notifyCharacteristic = CBMutableCharacteristic(type: InteropUUIDs.notify, properties: [.notify], value: nil, permissions: [])
        indicateCharacteristic = CBMutableCharacteristic(type: InteropUUIDs.indicate, properties: [.indicate], value: nil, permissions: [])
        let flood = CBMutableCharacteristic(type: InteropUUIDs.flood, properties: [.writeWithoutResponse], value: nil, permissions: [.writeable])
        let service = CBMutableService(type: InteropUUIDs.service, primary: true)
        service.characteristics = [long, longWrite, notifyCharacteristic, indicateCharacteristic, flood]
        peripheral.add(service)
    }

    func peripheralManager(_ peripheral: CBPeripheralManager, didAdd service: CBService, error: Error?) {
        if let error { return interopSay("peripheral", "could not publish \(service.uuid): \(error.localizedDescription)") }
        interopSay("peripheral", "published service \(service.uuid) with \(service.characteristics?.count ?? 0) characteristics")
        peripheral.startAdvertising([CBAdvertisementDataLocalNameKey: name, CBAdvertisementDataServiceUUIDsKey: [InteropUUIDs.service]])
    }

    func peripheralManagerDidStartAdvertising(_ peripheral: CBPeripheralManager, error: Error?) {
        interopSay("peripheral", error.map { "advertising failed: \($0.localizedDescription)" } ?? "advertising as \"\(name)\"")
    }

    func peripheralManager(_ peripheral: CBPeripheralManager, didReceiveRead request: CBATTRequest) {
        let value: Data
        switch request.characteristic.uuid {
        case InteropUUIDs.long: value = InteropUUIDs.longValue
        case InteropUUIDs.longWrite: value = written
        default: return peripheral.respond(to: request, withResult: .readNotPermitted)
        }
        guard request.offset <= value.count else {
            interopSay("peripheral", "read \(request.characteristic.uuid) at offset \(request.offset): invalid offset")
            return peripheral.respond(to: request, withResult: .invalidOffset)
        }
        request.value = value.subdata(in: request.offset..<value.count)
        interopSay("peripheral", "read \(request.characteristic.uuid) at offset \(request.offset) of \(value.count)")
        peripheral.respond(to: request, withResult: .success)
    }

    func peripheralManager(_ peripheral: CBPeripheralManager, didReceiveWrite requests: [CBATTRequest]) {
        guard let first = requests.first else { return }
        if first.characteristic.uuid == InteropUUIDs.flood {
            for r in requests { countFlood(r.value ?? Data()) }
            return   // no response for a Write Command
        }
        guard requests.allSatisfy({ $0.characteristic.uuid == InteropUUIDs.longWrite }) else {
            return peripheral.respond(to: first, withResult: .writeNotPermitted)
        }
        // A long write arrives as one request per prepared part, in order, with its offset (as on iOS).
        var value = Data()
        for r in requests {
            guard r.offset == value.count, let part = r.value else {
                interopSay("peripheral", "write \(r.characteristic.uuid): part at offset \(r.offset) does not follow \(value.count) octets")
                return peripheral.respond(to: first, withResult: .invalidOffset)
            }
            value.append(part)
        }
        written = value
        let text = String(decoding: value, as: UTF8.self)
        interopSay(
            "peripheral",
            "write \(first.characteristic.uuid): \(value.count) octets in \(requests.count) request(s) at offsets \(requests.map { String($0.offset) }.joined(separator: ",")): \(text.prefix(24))…\(text.suffix(8))"
        )
        peripheral.respond(to: first, withResult: .success)
    }

    private func countFlood(_ value: Data) {
        floodWrites += 1
        floodBytes += value.count
        guard value.count >= 2 else { return }
        let n = UInt16(value[value.startIndex]) << 8 | UInt16(value[value.startIndex + 1])
        if let expected = floodNext, n != expected { floodGaps += 1 }
        floodNext = n &+ 1
    }

    func peripheralManager(_ peripheral: CBPeripheralManager, central: CBCentral, didSubscribeTo characteristic: CBCharacteristic) {
        interopSay("peripheral", "central subscribed to \(characteristic.uuid) (max update \(central.maximumUpdateValueLength) octets)")
        guard let c = characteristic as? CBMutableCharacteristic else { return }
        pending.append((c, 1, updates))
        sendPending()
    }

    func peripheralManager(_ peripheral: CBPeripheralManager, central: CBCentral, didUnsubscribeFrom characteristic: CBCharacteristic) {
        interopSay("peripheral", "central unsubscribed from \(characteristic.uuid)")
        pending.removeAll { $0.0.uuid == characteristic.uuid }
    }

    func peripheralManagerIsReady(toUpdateSubscribers peripheral: CBPeripheralManager) { sendPending() }

    /// Sends what is pending until the transmit queue is full (then peripheralManagerIsReady resumes).
    private func sendPending() {
        while let (c, n, last) = pending.first {
            let kind = c.uuid == InteropUUIDs.indicate ? "indication" : "notification"
            let value = Data("\(kind) \(n) of \(last)".utf8)
            guard manager.updateValue(value, for: c, onSubscribedCentrals: nil) else { return }
            interopSay("peripheral", "sent \(kind) \(n) of \(last) on \(c.uuid)")
            if n == last { pending.removeFirst() } else { pending[0] = (c, n + 1, last) }
        }
    }
}

struct InteropCentralCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "central",
        abstract: "Find a peripheral by name or service, connect, discover everything, read what is readable, subscribe, write, and wait for notifications.")

    @Option(help: "Connect to the first peripheral advertising this local name.")
    var name: String?

    @Option(help: "Connect to the first peripheral advertising this service (and subscribe/write within it).")
    var service: String?

    @Option(help: "Hex value written with response to the first writable characteristic of --service (default: none).")
    var writeHex: String?

    @Option(help: "Notifications to wait for from --service's first notifying characteristic (0…1000).")
    var notifications = 0

    @Option(help: "Seconds before the program gives up (1…600).")
    var timeout = 60

    func validate() throws {
        guard name != nil || service != nil else { throw ValidationError("give --name or --service") }
        guard (0...1000).contains(notifications) else { throw ValidationError("--notifications must be 0…1000") }
        guard (1...600).contains(timeout) else { throw ValidationError("--timeout must be 1…600") }
        if let writeHex, Data(interopHex: writeHex) == nil { throw ValidationError("--write-hex: not hexadecimal: \(writeHex)") }
    }

    func run() throws {
        let c = InteropCentral(
            name: name, service: service.map { CBUUID(string: $0) }, write: writeHex.flatMap { Data(interopHex: $0) }, notifications: notifications)
        c.start()
        DispatchQueue.main.asyncAfter(deadline: .now() + .seconds(timeout)) {
            interopSay("central", "timed out after \(timeout) s")
            Foundation.exit(1)
        }
        dispatchMain()
    }
}

extension Data {
    /// "0a0B 0c" → [0x0A, 0x0B, 0x0C]; nil unless every character is a hex digit (spaces allowed).
    init?(interopHex text: String) {
        let digits = text.filter { !$0.isWhitespace }
        guard digits.count % 2 == 0, !digits.isEmpty else { return nil }
        var bytes: [UInt8] = []
        var i = digits.startIndex
        while i < digits.endIndex {
            let j = digits.index(i, offsetBy: 2)
            guard let b = UInt8(digits[i..<j], radix: 16) else { return nil }
            bytes.append(b)
            i = j
        }
        self.init(bytes)
    }
}

final class InteropCentral: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate, @unchecked Sendable {
    let name: String?
    let service: CBUUID?
    let write: Data?
    let notificationsWanted: Int
    private var manager: CBCentralManager!
    private var peripheral: CBPeripheral?
    private var servicesLeft = 0
    private var readsLeft = 0
    private var notifying: CBCharacteristic?
    private var received = 0
    private var wrote = false

    init(name: String?, service: CBUUID?, write: Data?, notifications: Int) {
        self.name = name
        self.service = service
        self.write = write
        notificationsWanted = notifications
    }

    func start() { manager = CBCentralManager(delegate: self, queue: nil) }

    private func describe(_ error: Error) -> String {
        let ns = error as NSError
        return "\(ns.localizedDescription) (\(ns.domain) code \(ns.code))"
    }

    private func finish(_ code: Int32, _ text: String) {
        interopSay("central", text)
        Foundation.exit(code)
    }

    func centralManagerDidUpdateState(_ central: CBCentralManager) {
        interopSay("central", "state \(central.state.name)\(central.state == .unsupported ? " (the controller could not be opened; BLE_LOG=1 shows why)" : "")")
        guard central.state == .poweredOn else { return }
        central.scanForPeripherals(withServices: nil, options: nil)
        interopSay("central", "scanning for \(name.map { "\"\($0)\"" } ?? service!.uuidString)")
    }

    func centralManager(_ central: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
        guard peripheral == nil else { return }
        let advertisedName = advertisementData[CBAdvertisementDataLocalNameKey] as? String
        let services = advertisementData[CBAdvertisementDataServiceUUIDsKey] as? [CBUUID] ?? []
        if let name, advertisedName != name { return }
        if name == nil, let service, !services.contains(service) { return }
        interopSay("central", "discovered \(advertisedName ?? p.name ?? "(no name)") (RSSI \(rssi))")
        central.stopScan()
        peripheral = p
        p.delegate = self
        central.connect(p, options: nil)
    }

    func centralManager(_ central: CBCentralManager, didConnect p: CBPeripheral) {
        interopSay("central", "connected (maximum write \(p.maximumWriteValueLength(for: .withResponse)) octets)")
        p.discoverServices(nil)
    }

    func centralManager(_ central: CBCentralManager, didFailToConnect p: CBPeripheral, error: Error?) {
        finish(2, "failed to connect: \(error.map(describe) ?? "no error")")
    }

    func centralManager(_ central: CBCentralManager, didDisconnectPeripheral p: CBPeripheral, error: Error?) {
        if let error { finish(3, "disconnected: \(describe(error))") }
        finish(0, "disconnected (by us)")
    }

    func peripheral(_ p: CBPeripheral, didDiscoverServices error: Error?) {
        if let error { return finish(4, "service discovery failed: \(describe(error))") }
        let services = p.services ?? []
        interopSay("central", "services: \(services.map { $0.uuid.uuidString }.joined(separator: " "))")
        servicesLeft = services.count
        if services.isEmpty { return allDiscovered(p) }
        for s in services { p.discoverCharacteristics(nil, for: s) }
    }

    func peripheral(_ p: CBPeripheral, didDiscoverCharacteristicsFor s: CBService, error: Error?) {
        if let error { interopSay("central", "characteristics of \(s.uuid) failed: \(describe(error))") }
        for c in s.characteristics ?? [] {
            interopSay("central", "service \(s.uuid.uuidString) characteristic \(c.uuid.uuidString) \(c.properties.names)")
        }
        servicesLeft -= 1
        if servicesLeft == 0 { allDiscovered(p) }
    }

    private func allDiscovered(_ p: CBPeripheral) {
        let readable = (p.services ?? []).flatMap { $0.characteristics ?? [] }.filter { $0.properties.contains(.read) }
        readsLeft = readable.count
        if readable.isEmpty { return subscribe(p) }
        for c in readable { p.readValue(for: c) }
    }

    func peripheral(_ p: CBPeripheral, didUpdateValueFor c: CBCharacteristic, error: Error?) {
        if let error {
            interopSay("central", "read \(c.uuid.uuidString) failed: \(describe(error))")
        } else if c === notifying && readsLeft == 0 {
            received += 1
            interopSay("central", "notification \(received) on \(c.uuid.uuidString): \(Self.show(c.value))")
            if received >= notificationsWanted && (write == nil || wrote) { manager.cancelPeripheralConnection(p) }
            return
        } else {
            interopSay("central", "read \(c.uuid.uuidString) = \(Self.show(c.value))")
        }
        if readsLeft > 0 {
            readsLeft -= 1
            if readsLeft == 0 { subscribe(p) }
        }
    }

    static func show(_ value: Data?) -> String {
        guard let value else { return "(none)" }
        let hex = value.map { String(format: "%02x", $0) }.joined()
        if let text = String(data: value, encoding: .utf8), !text.isEmpty, text.allSatisfy({ !$0.isASCII || $0.isLetter || $0.isNumber || $0.isPunctuation || $0 == " " }) {
            return "\(hex) \"\(text)\""
        }
        return hex
    }

    private var target: CBService? { service.flatMap { uuid in peripheral?.services?.first { $0.uuid == uuid } } }

    private func subscribe(_ p: CBPeripheral) {
        guard service != nil else { return manager.cancelPeripheralConnection(p) }
        guard let s = target else { return finish(5, "the peripheral does not serve \(service!.uuidString)") }
        if notificationsWanted > 0, let c = s.characteristics?.first(where: { $0.properties.contains(.notify) || $0.properties.contains(.indicate) }) {
            notifying = c
            p.setNotifyValue(true, for: c)
        } else {
            writeIfAsked(p)
        }
    }

    func peripheral(_ p: CBPeripheral, didUpdateNotificationStateFor c: CBCharacteristic, error: Error?) {
        if let error { return finish(6, "subscribing to \(c.uuid.uuidString) failed: \(describe(error))") }
        interopSay("central", "notifications for \(c.uuid.uuidString): \(c.isNotifying ? "on" : "off")")
        if c.isNotifying { writeIfAsked(p) }
    }

    private func writeIfAsked(_ p: CBPeripheral) {
        guard let write else {
            if notificationsWanted == 0 { manager.cancelPeripheralConnection(p) }
            return
        }
        guard let c = target?.characteristics?.first(where: { $0.properties.contains(.write) }) else {
            return finish(7, "no characteristic of \(service!.uuidString) is writable")
        }
        p.writeValue(write, for: c, type: .withResponse)
    }

    func peripheral(_ p: CBPeripheral, didWriteValueFor c: CBCharacteristic, error: Error?) {
        if let error { return finish(8, "write to \(c.uuid.uuidString) failed: \(describe(error))") }
        wrote = true
        interopSay("central", "write to \(c.uuid.uuidString) acknowledged")
        if received >= notificationsWanted { manager.cancelPeripheralConnection(p) }
    }
}

extension CBCharacteristicProperties {
    /// "[read, write, notify]".
    var names: String {
        let all: [(CBCharacteristicProperties, String)] = [
            (.broadcast, "broadcast"), (.read, "read"), (.writeWithoutResponse, "writeWithoutResponse"), (.write, "write"),
            (.notify, "notify"), (.indicate, "indicate"), (.authenticatedSignedWrites, "signedWrite"), (.extendedProperties, "extended"),
        ]
        return "[" + all.filter { contains($0.0) }.map(\.1).joined(separator: ", ") + "]"
    }
}
