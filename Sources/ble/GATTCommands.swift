// Exploring a device from the command line, as btgatt-client, bumble-gatt-dump and nRF Connect do:
// `ble gatt DEVICE` dumps the database, `ble read`, `ble write` and `ble subscribe` work on one
// characteristic named by UUID or handle. Each connects (by address or by name), pairs when the device
// asks (prompts as in `ble pair`), does its work and disconnects.
import ArgumentParser
import Foundation
import BLEWire
import BLEHCI
import BLEGATT
import BLEHost
import BLESMP

/// How to reach the device; shared by the exploring commands.
struct ConnectOptions: ParsableArguments {
    @Argument(help: "The device: its address as `ble scan` shows it (AA:BB:CC:DD:EE:FF, /P or /R for its type) or its advertised name.")
    var device: String

    @Option(help: "Seconds to find the device and to connect.")
    var timeout: Double = 10

    @Option(help: ArgumentHelp("Pairing, when the device asks for it: what this terminal can do.", valueName: "capability"))
    var io: IOArgument = .keyboardDisplay

    @Flag(help: "Accept Just Works pairing and numeric comparisons without asking.")
    var yes = false

    func validate() throws {
        guard timeout > 0 else { throw ValidationError("--timeout must be more than 0 seconds") }
    }

    /// Connects, runs `body`, disconnects. The link is closed whatever `body` does.
    func withLink<T>(_ body: (DeviceLink, HostConnection) throws -> T) throws -> T {
        let link = try DeviceLink(io: io, yes: yes)
        defer { link.close() }
        let c = try link.connect(DeviceTarget(device), timeout: timeout)
        return try body(link, c)
    }
}

extension AttributeSpec: ExpressibleByArgument {
    init?(argument: String) { self.init(argument) }
}

struct GattCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gatt", abstract: "Connect to a device and dump its GATT database as a tree (or JSON).",
        discussion:
            "Shows every service (primary, and secondary ones that are included), include, characteristic with its properties and value, and descriptor, with handles, Bluetooth SIG names and values decoded where the format is known."
    )

    @OptionGroup var connect: ConnectOptions

    @Flag(help: "Print JSON instead of the tree.")
    var json = false

    @Flag(inversion: .prefixedNo, help: "Read every readable value and descriptor.")
    var values = true

    func run() throws {
        if let bluez = BlueZTool.options { return try BlueZTool.gatt(bluez, self) }
        try connect.withLink { link, c in
            let db = try RemoteDatabase.discover(link, values: values)
            let (address, mtu) = link.host.loop.sync { (c.peerAddress, c.attMTU) }
            if json {
                say(jsonText(db.json(device: ["address": address.description, "mtu": Int(mtu)]), pretty: true))
            } else {
                say(db.tree(header: "\(address) (ATT MTU \(mtu))"))
            }
        }
    }
}

struct ReadCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "read", abstract: "Read a characteristic (or any attribute by handle), whole however long.")

    @OptionGroup var connect: ConnectOptions

    @Argument(help: "The characteristic's UUID (2A37), or an attribute handle (0x0012 or 18).")
    var attribute: AttributeSpec

    @Flag(help: "Print a JSON object.")
    var json = false

    @Flag(help: "Write the value's raw octets to standard output.")
    var raw = false

    func validate() throws {
        if json && raw { throw ValidationError("--json and --raw cannot be used together") }
    }

    func run() throws {
        if let bluez = BlueZTool.options { return try BlueZTool.read(bluez, self) }
        try connect.withLink { link, _ in
            let db = try RemoteDatabase.discover(link, values: false)
            let target = try Target(attribute, in: db)
            let value: [UInt8]
            do { value = try link.read(target.handle) } catch let e as GATTFailure { throw ToolError("reading \(target.label): \(e)") }
            if raw {
                FileHandle.standardOutput.write(Data(value))
                return
            }
            let decoded = target.decode(value)
            if json {
                var o: [String: Any] = ["handle": Int(target.handle), "value": value.map { String(format: "%02x", $0) }.joined()]
                if let u = target.uuid { o["uuid"] = u.uuidString }
                if let decoded { o["decoded"] = decoded }
                say(jsonText(o, pretty: false))
            } else {
                say("\(target.label): " + RemoteDatabase.render(value: value, error: nil, decoded: decoded))
            }
        }
    }
}

struct WriteCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "write", abstract: "Write a characteristic (or any attribute by handle): hex, UTF-8 text or a file.",
        discussion:
            "A value longer than ATT_MTU − 3 is written with prepared writes (a long write, up to 512 octets); --no-response sends a Write Command, which must fit in one packet.")

    @OptionGroup var connect: ConnectOptions

    @Argument(help: "The characteristic's UUID (2A39), or an attribute handle (0x0012 or 18).")
    var attribute: AttributeSpec

    @Option(help: "The value in hex (0a0b0c, spaces and colons allowed).")
    var hex: String?

    @Option(help: "The value as UTF-8 text.")
    var text: String?

    @Option(help: "Write this file's contents.")
    var file: String?

    @Flag(help: "Write without response (Write Command).")
    var noResponse = false

    func validate() throws {
        let given = [hex != nil, text != nil, file != nil].filter { $0 }.count
        guard given == 1 else { throw ValidationError("give the value with exactly one of --hex, --text or --file") }
        if let hex, Self.parseHex(hex) == nil { throw ValidationError("--hex: \"\(hex)\" is not hex (two digits per octet)") }
    }

    static func parseHex(_ s: String) -> [UInt8]? {
        var t = s.filter { !" :-".contains($0) }
        if t.lowercased().hasPrefix("0x") { t = String(t.dropFirst(2)) }
        guard t.count % 2 == 0 else { return nil }
        return [UInt8](hexString: t)
    }

    func value() throws -> [UInt8] {
        if let hex { return Self.parseHex(hex) ?? [] }
        if let text { return Array(text.utf8) }
        return try readFile(file!)
    }

    func run() throws {
        let v = try value()
        guard v.count <= 512 else { throw ToolError("\(v.count) octets; an attribute value holds at most 512") }
        if let bluez = BlueZTool.options { return try BlueZTool.write(bluez, self) }
        try connect.withLink { link, _ in
            let db = try RemoteDatabase.discover(link, values: false)
            let target = try Target(attribute, in: db)
            do {
                if noResponse { try link.writeWithoutResponse(target.handle, v) } else { _ = try link.gatt(.write(handle: target.handle, value: v)) }
            } catch let e as GATTFailure {
                throw ToolError("writing \(target.label): \(e)")
            }
            say("wrote \(v.count) octet(s) to \(target.label)" + (noResponse ? " without response" : ""))
        }
    }
}

struct SubscribeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "subscribe", abstract: "Subscribe to notifications or indications and print them with timestamps.",
        discussion: "Runs until interrupted (Ctrl-C, which unsubscribes first) or until --count values arrived.")

    @OptionGroup var connect: ConnectOptions

    @Argument(help: "The characteristics: UUIDs (2A37) or handles (0x0033).")
    var attributes: [AttributeSpec]

    @Option(help: "Stop after this many values (0: until interrupted).")
    var count = 0

    @Flag(help: "Ask for indications even where notifications are possible.")
    var indicate = false

    @Flag(help: "Print one JSON object per value.")
    var json = false

    func validate() throws {
        guard !attributes.isEmpty else { throw ValidationError("name at least one characteristic") }
        guard count >= 0 else { throw ValidationError("--count must be 0 or more") }
    }

    func run() throws {
        if let bluez = BlueZTool.options { return try BlueZTool.subscribe(bluez, self) }
        try connect.withLink { link, _ in
            let db = try RemoteDatabase.discover(link, values: false)
            let chars = try attributes.map { try db.characteristic($0) }
            final class State: @unchecked Sendable {
                let lock = NSLock()
                var received = 0
                var failure: String?
            }
            let state = State()
            let finished = DispatchSemaphore(value: 0)
            let byHandle = Dictionary(chars.map { ($0.valueHandle, $0) }, uniquingKeysWith: { a, _ in a })
            let limit = count, asJSON = json
            link.host.loop.sync {
                link.onValue = { handle, value, isIndication in
                    guard let c = byHandle[handle] else { return }
                    let n: Int = state.lock.withLock {
                        state.received += 1; return state.received
                    }
                    guard limit == 0 || n <= limit else { return }
                    say(Self.line(c, value, indication: isIndication, json: asJSON))
                    if limit > 0 && n == limit { finished.signal() }
                }
                link.onDisconnect = { reason in
                    state.lock.withLock { state.failure = "the link went down: \(reason)" }
                    finished.signal()
                }
            }
            var cccds: [(RemoteDatabase.Characteristic, UInt16)] = []
            for c in chars {
                guard c.properties & 0x30 != 0 else {
                    throw ToolError("\(Target.label(c)) neither notifies nor indicates (properties: \(RemoteDatabase.properties(c.properties).joined(separator: ", ")))")
                }
                guard let cccd = c.cccd else { throw ToolError("\(Target.label(c)) has no Client Characteristic Configuration descriptor") }
                let bits: UInt8 = (indicate || c.properties & 0x10 == 0) && c.properties & 0x20 != 0 ? 0x02 : 0x01
                do { _ = try link.gatt(.write(handle: cccd.handle, value: [bits, 0])) } catch let e as GATTFailure {
                    throw ToolError("subscribing to \(Target.label(c)): \(e)")
                }
                cccds.append((c, cccd.handle))
                warn("subscribed to \(Target.label(c)) (\(bits == 2 ? "indications" : "notifications"))")
            }
            signal(SIGINT, SIG_IGN)
            signal(SIGTERM, SIG_IGN)
            let sources = [SIGINT, SIGTERM].map { sig -> DispatchSourceSignal in
                let s = DispatchSource.makeSignalSource(signal: sig, queue: .global())
                s.setEventHandler { finished.signal() }
                s.resume()
                return s
            }
            finished.wait()
            sources.forEach { $0.cancel() }
            if let failure = state.lock.withLock({ state.failure }) { throw ToolError(failure) }
            for (_, h) in cccds { _ = try? link.gatt(.write(handle: h, value: [0, 0])) }
        }
    }

    static let clock: DateFormatter = {
        let f = DateFormatter()
        f.dateFormat = "HH:mm:ss.SSS"
        return f
    }()

    static func line(_ c: RemoteDatabase.Characteristic, _ value: [UInt8], indication: Bool, json: Bool) -> String {
        let decoded = ValueDecoding.characteristic(c.uuid, value, presentation: c.presentationFormat)
        let now = Date()
        if json {
            var o: [String: Any] = [
                "time": ISO8601DateFormatter.withFractionalSeconds.string(from: now), "kind": indication ? "indication" : "notification",
                "handle": Int(c.valueHandle), "uuid": c.uuid.uuidString, "value": value.map { String(format: "%02x", $0) }.joined(),
            ]
            if let decoded { o["decoded"] = decoded }
            return jsonText(o, pretty: false)
        }
        return "\(clock.string(from: now)) \(indication ? "indication" : "notification") \(Target.label(c)): "
            + RemoteDatabase.render(value: value, error: nil, decoded: decoded)
    }
}

extension ISO8601DateFormatter {
    nonisolated(unsafe) static let withFractionalSeconds: ISO8601DateFormatter = {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f
    }()
}

/// The attribute a read or write goes to, with what is known of it for naming and decoding.
struct Target {
    var handle: UInt16
    var uuid: BluetoothUUID?
    var characteristic: RemoteDatabase.Characteristic?
    var isDescriptor = false

    init(_ spec: AttributeSpec, in db: RemoteDatabase) throws {
        switch spec {
        case .uuid:
            let c = try db.characteristic(spec)
            handle = c.valueHandle; uuid = c.uuid; characteristic = c
        case let .handle(h):
            handle = h
            if let c = db.characteristics.first(where: { $0.valueHandle == h }) {
                uuid = c.uuid; characteristic = c
            } else if let d = db.characteristics.flatMap(\.descriptors).first(where: { $0.handle == h }) {
                uuid = d.uuid; isDescriptor = true
            }
        }
    }

    static func label(_ c: RemoteDatabase.Characteristic) -> String {
        String(format: "0x%04x ", c.valueHandle) + RemoteDatabase.label(c.uuid, AssignedNumbers.name(ofCharacteristic: c.uuid))
    }

    var label: String {
        if let characteristic { return Self.label(characteristic) }
        let h = String(format: "0x%04x", handle)
        guard let uuid else { return h }
        return h + " " + RemoteDatabase.label(uuid, isDescriptor ? AssignedNumbers.name(ofDescriptor: uuid) : nil)
    }

    func decode(_ v: [UInt8]) -> String? {
        if let characteristic { return ValueDecoding.characteristic(characteristic.uuid, v, presentation: characteristic.presentationFormat) }
        if let uuid, isDescriptor { return ValueDecoding.descriptor(uuid, v) }
        return nil
    }
}

/// Throws the system's reason when `path` cannot be read as a file ("No such file or directory", "Is a directory").
func checkReadableFile(_ path: String) throws {
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { throw ToolError("\(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var byte: UInt8 = 0
    if read(fd, &byte, 1) < 0 { throw ToolError("\(path): \(String(cString: strerror(errno)))") }
}

/// A file's contents, or the system's reason it cannot be read ("No such file or directory").
func readFile(_ path: String) throws -> [UInt8] {
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { throw ToolError("\(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var out: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while true {
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 {
            if errno == EINTR { continue }
            throw ToolError("\(path): \(String(cString: strerror(errno)))")
        }
        if n == 0 { return out }
        out.append(contentsOf: buffer[0..<n])
    }
}
