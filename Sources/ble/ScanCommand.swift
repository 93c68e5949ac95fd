// `ble scan`: the advertisers around, one row per device: the address `ble pair` and `ble gatt` take (with
// its type), RSSI, name, advertised services, manufacturer data with the company's name, flags and the rest
// of the advertisement. On a terminal the table is redrawn in place as devices appear and change; piped,
// a device's line is printed once its scan response is in (or a second after it was first heard) and again
// when what it advertises changes. `--json` prints one object per line instead.
import ArgumentParser
import Foundation
import BLEWire
import BLEGAP
import BLEHost

struct ScanCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "scan", abstract: "Scan and list advertisers (a live table on a terminal).")

    @Option(help: "Seconds to scan (0: until interrupted).")
    var duration: Double = 5

    @Option(help: "Only devices whose name contains this text (any case).")
    var name: String?

    @Option(help: "Only devices advertising this service UUID.")
    var service: String?

    @Option(help: "Only devices heard at this RSSI (dBm) or stronger.")
    var rssi: Int?

    @Flag(help: "Print one JSON object per line.")
    var json = false

    @Flag(help: "Print every advertisement, not just changes (not with the table).")
    var duplicates = false

    @Flag(help: "Passive scanning: no scan requests, so no scan responses.")
    var passive = false

    func validate() throws {
        if let service, BluetoothUUID(string: service) == nil { throw ValidationError("--service: \"\(service)\" is not a 16-, 32- or 128-bit UUID") }
        guard duration >= 0 else { throw ValidationError("--duration must be 0 or more") }
        if let rssi, !(-127...20).contains(rssi) { throw ValidationError("--rssi must be between -127 and 20 dBm") }
    }

    func run() throws {
        if let bluez = BlueZTool.options { return try BlueZTool.scan(bluez, self) }
        let filter = ScanFilter(name: name, service: service.flatMap { BluetoothUUID(string: $0) }, rssi: rssi)
        let mode: ScanPrinter.Mode = json ? .json : (Terminal.isTerminal && !duplicates ? .table : .lines)
        let printer = ScanPrinter(mode: mode, filter: filter, duplicates: duplicates, expectsScanResponse: !passive)
        // Scanning until interrupted waits for an adapter that goes away and scans again when it is back.
        let active = !passive
        if duration == 0 {
            AdapterWatch.keepRunning { host in host.startScanning(active: active, filterDuplicates: false) { _ in } }
        }
        let link = try DeviceLink(io: .none, yes: false)
        link.onReport = { r in printer.report(r) }
        try link.startScanning(active: !passive)
        let finished = DispatchSemaphore(value: 0)
        signal(SIGINT, SIG_IGN)
        let interrupt = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
        interrupt.setEventHandler { finished.signal() }
        interrupt.resume()
        let ticker = DispatchSource.makeTimerSource(queue: .global())
        ticker.schedule(deadline: .now() + 0.25, repeating: 0.25)
        ticker.setEventHandler { link.host.loop.execute { printer.tick(now: Date()) } }
        ticker.resume()
        _ = finished.wait(timeout: duration > 0 ? .now() + duration : .distantFuture)
        interrupt.cancel()
        ticker.cancel()
        link.stopScanning()
        link.host.loop.sync { printer.finish() }
        Controller.close(link.host)
        warn("\(printer.shownCount) device(s)")
        if printer.shownCount == 0, let hint = Controller.virtualHint { warn(hint) }
    }
}

struct ScanFilter {
    var name: String?
    var service: BluetoothUUID?
    var rssi: Int?

    func accepts(_ r: DeviceRecord) -> Bool {
        if let name, !(r.name?.localizedCaseInsensitiveContains(name) ?? false) { return false }
        if let service, !r.data.serviceUUIDs.contains(where: { $0.expanded == service.expanded }) { return false }
        if let rssi, Int(r.rssi) < rssi { return false }
        return true
    }
}

/// Formats scan results. Runs on the host's loop only.
final class ScanPrinter: @unchecked Sendable {
    enum Mode { case table, lines, json }
    let mode: Mode
    let filter: ScanFilter
    let duplicates: Bool
    let expectsScanResponse: Bool
    private var order: [BluetoothAddress] = []
    private var records: [BluetoothAddress: DeviceRecord] = [:]
    private var firstHeard: [BluetoothAddress: Date] = [:]
    /// What was last printed for each device (lines and JSON modes), without the RSSI.
    private var printed: [BluetoothAddress: String] = [:]
    private var tableLines = 0
    private var dirty = false

    init(mode: Mode, filter: ScanFilter, duplicates: Bool, expectsScanResponse: Bool) {
        self.mode = mode; self.filter = filter; self.duplicates = duplicates; self.expectsScanResponse = expectsScanResponse
    }

    var shownCount: Int { order.count }

    func report(_ r: DeviceRecord) {
        guard filter.accepts(r) else { return }
        if records[r.address] == nil { order.append(r.address); firstHeard[r.address] = Date() }
        records[r.address] = r
        dirty = true
        if mode != .table { emitIfReady(r.address, now: Date()) }
    }

    func tick(now: Date) {
        if mode == .table {
            if dirty { drawTable() }
        } else {
            for a in order where printed[a] == nil { emitIfReady(a, now: now) }
        }
    }

    func finish() {
        if mode == .table { drawTable() } else { for a in order where printed[a] == nil { emit(a) } }
    }

    /// A device is shown once its scan response arrived, or a second after it was first heard.
    private func emitIfReady(_ a: BluetoothAddress, now: Date) {
        guard let r = records[a] else { return }
        let complete = r.scanResponse != nil || !expectsScanResponse || !(r.connectable || r.advertising == nil)
        guard complete || now.timeIntervalSince(firstHeard[a] ?? now) >= 1 else { return }
        emit(a)
    }

    private func emit(_ a: BluetoothAddress) {
        guard let r = records[a] else { return }
        let key = Self.describe(r, rssi: false)
        guard duplicates || printed[a] != key else { return }
        printed[a] = key
        say(mode == .json ? jsonText(Self.json(r), pretty: false) : Self.describe(r, rssi: true))
    }

    private func drawTable() {
        dirty = false
        var out = ""
        if tableLines > 0 { out += "\u{1B}[\(tableLines)A" }
        let rows = [Terminal.bold(Self.header)] + order.compactMap { records[$0] }.map { Self.describe($0, rssi: true) }
        for row in rows { out += "\u{1B}[2K" + row + "\n" }
        tableLines = rows.count
        FileHandle.standardOutput.write(Data(out.utf8))
    }

    // MARK: Formatting

    static let header = "ADDRESS              TYPE             RSSI  NAME                  ADVERTISES"

    static func kind(_ a: BluetoothAddress) -> String {
        guard a.type.isRandom else { return "public" }
        switch a.randomKind {
        case .staticAddress: return "random static"
        case .resolvablePrivate: return "random private"
        case .nonResolvablePrivate: return "random non-resol."
        default: return "random"
        }
    }

    static func pad(_ s: String, _ n: Int) -> String { s.count >= n ? s + " " : s + String(repeating: " ", count: n - s.count) }

    /// One row: address (as `ble gatt` takes it), type, RSSI, name, and what the device advertises.
    static func describe(_ r: DeviceRecord, rssi: Bool) -> String {
        pad(r.address.description, 21) + pad(kind(r.address), 17) + (rssi ? pad(String(format: "%4d", Int(r.rssi)), 6) : "")
            + pad(r.name.map { "\"\($0)\"" } ?? "-", 22) + details(r).joined(separator: "  ")
    }

    static func flags(_ f: ADFlags) -> [String] {
        var out: [String] = []
        if f.contains(.leLimitedDiscoverable) { out.append("LE Limited Discoverable") }
        if f.contains(.leGeneralDiscoverable) { out.append("LE General Discoverable") }
        if f.contains(.brEdrNotSupported) { out.append("BR/EDR Not Supported") }
        if f.rawValue & 0x18 != 0 { out.append("LE and BR/EDR") }
        return out
    }

    static func uuidName(_ u: BluetoothUUID) -> String { AssignedNumbers.name(ofService: u).map { "\(u.uuidString) (\($0))" } ?? u.uuidString }

    static func company(_ m: [UInt8]) -> (UInt16, String?)? {
        guard m.count >= 2 else { return nil }
        let id = UInt16(m[0]) | UInt16(m[1]) << 8
        return (id, AssignedNumbers.company(id))
    }

    static func details(_ r: DeviceRecord) -> [String] {
        let d = r.data
        var out: [String] = []
        if !r.connectable { out.append("not connectable") }
        if !d.serviceUUIDs.isEmpty { out.append("services " + d.serviceUUIDs.map(uuidName).joined(separator: ", ")) }
        for m in d.structures where m.type == .manufacturerSpecificData {
            guard let (id, name) = company(m.data) else { continue }
            out.append(String(format: "manufacturer 0x%04x", id) + (name.map { " (\($0))" } ?? "") + ": " + ValueDecoding.hex(Array(m.data.dropFirst(2))))
        }
        for s in d.serviceData { out.append("data \(s.uuid.uuidString): \(ValueDecoding.hex(s.data))") }
        if let a = d.appearance { out.append("appearance \(AssignedNumbers.appearance(a))") }
        if let t = d.txPowerLevel { out.append("tx \(t) dBm") }
        if let f = d.flags { out.append("flags " + (flags(f).isEmpty ? "none" : flags(f).joined(separator: ", "))) }
        return out
    }

    static func json(_ r: DeviceRecord) -> [String: Any] {
        let d = r.data
        var o: [String: Any] = ["address": r.address.description, "address_type": kind(r.address), "rssi": Int(r.rssi), "connectable": r.connectable]
        if let n = r.name { o["name"] = n }
        if !d.serviceUUIDs.isEmpty { o["services"] = d.serviceUUIDs.map(\.uuidString) }
        let makers = d.structures.filter { $0.type == .manufacturerSpecificData }.compactMap { m -> [String: Any]? in
            guard let (id, name) = company(m.data) else { return nil }
            var e: [String: Any] = ["company_id": Int(id), "data": m.data.dropFirst(2).map { String(format: "%02x", $0) }.joined()]
            if let name { e["company"] = name }
            return e
        }
        if !makers.isEmpty { o["manufacturer_data"] = makers }
        if !d.serviceData.isEmpty { o["service_data"] = d.serviceData.map { ["uuid": $0.uuid.uuidString, "data": $0.data.map { String(format: "%02x", $0) }.joined()] } }
        if let a = d.appearance { o["appearance"] = ["value": Int(a), "name": AssignedNumbers.appearance(a)] as [String: Any] }
        if let t = d.txPowerLevel { o["tx_power"] = Int(t) }
        if let f = d.flags { o["flags"] = flags(f) }
        return o
    }
}
