// `ble snoop FILE`: a btsnoop capture (BLE_SNOOP=FILE writes one) as text, in the manner of btmon: one
// header line per packet (time, direction, what it is), then its fields, one per line. HCI commands and
// events by name with their parameters (Command Complete with the status and return parameters), ACL
// reassembled per connection and direction into L2CAP frames, and those decoded as ATT, L2CAP signalling
// and SMP. Keys and pairing values (LTK, IRK, CSRK, confirm and random values, DHKey checks, and the LTK
// in HCI encryption commands) are masked unless `--show-keys`. `--live` follows a capture as it grows.
import ArgumentParser
import Foundation
import BLEWire
import BLEHCI
import BLEL2CAP
import BLEATT
import BLESMP
import BLEGAP
import BLETransport

struct SnoopCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "snoop", abstract: "Print a btsnoop capture (BLE_SNOOP=FILE writes one) as decoded text.")

    @Argument(help: "The btsnoop file.")
    var file: String

    @Flag(help: "Show keys and pairing values instead of masking them.")
    var showKeys = false

    @Flag(help: "Keep reading as the capture grows (until interrupted).")
    var live = false

    func run() throws {
        var reader = SnoopReader()
        var decoder = SnoopDecoder(showKeys: showKeys)
        let fd = open(file, O_RDONLY)
        guard fd >= 0 else { throw ToolError("\(file): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var interrupted = false
        // Ctrl-C ends a live run normally (the source must live as long as the loop below).
        var interrupt: DispatchSourceSignal?
        if live {
            signal(SIGINT, SIG_IGN)
            interrupt = DispatchSource.makeSignalSource(signal: SIGINT, queue: .global())
            interrupt?.setEventHandler { Foundation.exit(0) }
            interrupt?.resume()
        }
        defer { interrupt?.cancel() }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var printedAny = false
        while !interrupted {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 { throw ToolError("\(file): \(String(cString: strerror(errno)))") }
            if n > 0 {
                do {
                    for r in try reader.feed(buffer[0..<n]) {
                        say(decoder.describe(r))
                        printedAny = true
                    }
                } catch {
                    throw ToolError("\(file): \(error)")
                }
                continue
            }
            if !live { interrupted = true } else { usleep(200_000) }
        }
        if !printedAny { say(reader.sawHeader ? "(no packets)" : "(empty file)") }
    }
}

/// Cuts btsnoop records (version 1, datalink 1002: H4) out of bytes as they arrive.
struct SnoopReader {
    private var pending: [UInt8] = []
    private(set) var sawHeader = false

    struct Failure: Error, CustomStringConvertible { let description: String }

    struct Record {
        var packet: HCIPacket
        var toController: Bool
        /// Microseconds (since year 0, as btsnoop counts; only differences are shown).
        var timestampMicros: UInt64
    }

    mutating func feed<C: Collection>(_ bytes: C) throws -> [Record] where C.Element == UInt8 {
        pending.append(contentsOf: bytes)
        func be32(_ i: Int) -> UInt32 { UInt32(pending[i]) << 24 | UInt32(pending[i + 1]) << 16 | UInt32(pending[i + 2]) << 8 | UInt32(pending[i + 3]) }
        var out: [Record] = []
        var i = 0
        if !sawHeader {
            guard pending.count >= 16 else { return [] }
            guard Array(pending[0..<8]) == Array("btsnoop\0".utf8) else { throw Failure(description: "not a btsnoop file") }
            guard be32(12) == 1002 else { throw Failure(description: "unsupported btsnoop datalink \(be32(12)) (only 1002, HCI UART H4)") }
            sawHeader = true
            i = 16
        }
        while i + 24 <= pending.count {
            let included = Int(be32(i + 4))
            guard i + 24 + included <= pending.count else { break }
            let flags = be32(i + 8)
            let ts = UInt64(be32(i + 16)) << 32 | UInt64(be32(i + 20))
            let body = Array(pending[(i + 24)..<(i + 24 + included)])
            i += 24 + included
            guard let first = body.first, let type = HCIPacketType(rawValue: first) else { continue }
            out.append(Record(packet: HCIPacket(type: type, bytes: Array(body.dropFirst())), toController: flags & 1 == 0, timestampMicros: ts))
        }
        pending.removeFirst(i)
        return out
    }
}

/// Turns records into text; keeps the L2CAP reassembly of each connection and direction.
struct SnoopDecoder {
    let showKeys: Bool
    private var start: UInt64?
    private var recombiners: [String: L2CAPRecombiner] = [:]
    static let indent = String(repeating: " ", count: 14)

    init(showKeys: Bool) { self.showKeys = showKeys }

    mutating func describe(_ r: SnoopReader.Record) -> String {
        let t0 = start ?? r.timestampMicros
        start = t0
        let t = Double(r.timestampMicros &- t0) / 1_000_000
        let toController = r.toController
        let (title, fields) = decode(r.packet, toController: toController)
        var lines = [String(format: "%11.6f ", t) + (toController ? "< " : "> ") + title]
        lines += fields.map { Self.indent + $0 }
        return lines.joined(separator: "\n")
    }

    mutating func decode(_ p: HCIPacket, toController: Bool) -> (String, [String]) {
        switch p.type {
        case .command:
            guard let c = try? HCICommand.decode(p) else { return ("HCI Command (malformed)", [ValueDecoding.hex(p.bytes)]) }
            return ("HCI Command: \(Self.opcodeName(c.opcode))", FieldRenderer(showKeys: showKeys).fields(ofPayload: c))
        case .event:
            guard let e = try? HCIEvent.decode(p) else { return ("HCI Event (malformed)", [ValueDecoding.hex(p.bytes)]) }
            if case let .commandComplete(_, op, ret) = e {
                // Return parameters decoded where the command's are known, else status and hex.
                if let decoded = Self.returnParameters(op, ret) {
                    return ("HCI Event: Command Complete: \(Self.opcodeName(op))", FieldRenderer(showKeys: showKeys).fields(decoded))
                }
                var fields: [String] = []
                if let s = ret.first { fields.append("Status: \(HCIStatus(rawValue: s))") }
                if ret.count > 1 { fields.append("Return parameters: " + ValueDecoding.hex(Array(ret.dropFirst()))) }
                return ("HCI Event: Command Complete: \(Self.opcodeName(op))", fields)
            }
            if case let .le(meta) = e {
                let (name, payload) = FieldRenderer.caseName(meta)
                return ("HCI Event: LE Meta: \(FieldRenderer.words(name))", FieldRenderer(showKeys: showKeys).fields(payload))
            }
            let (name, payload) = FieldRenderer.caseName(e)
            return ("HCI Event: \(FieldRenderer.words(name))", FieldRenderer(showKeys: showKeys).fields(payload))
        case .acl:
            guard let a = try? ACLPacket.decode(p) else { return ("ACL (malformed)", [ValueDecoding.hex(p.bytes)]) }
            let key = "\(toController ? "<" : ">")\(a.handle)"
            var r = recombiners[key] ?? L2CAPRecombiner(maximumFrameLength: 65_535)
            let frame = try? r.append(a.data, boundary: a.boundary == .continuing ? .continuing : .first)
            recombiners[key] = r
            let head = String(format: "ACL 0x%04x: ", a.handle)
            guard let f = frame ?? nil else { return (head + "fragment of \(a.data.count) octets", []) }
            let renderer = FieldRenderer(showKeys: showKeys)
            switch f.channelID {
            case .att:
                guard let pdu = try? ATTPDU.decode(f.payload) else { return (head + "ATT (malformed)", [ValueDecoding.hex(f.payload)]) }
                let (name, payload) = FieldRenderer.caseName(pdu)
                return (head + "ATT " + FieldRenderer.words(name), renderer.fields(payload))
            case .smp:
                guard let pdu = try? SMPPDU.decode(f.payload) else { return (head + "SMP (malformed)", [ValueDecoding.hex(f.payload)]) }
                let (name, _) = FieldRenderer.caseName(pdu)
                return (head + "SMP " + FieldRenderer.words(name), renderer.fields(ofPayload: pdu))
            case .leSignaling:
                guard let signals = try? L2CAPSignal.decodeAll(f.payload) else { return (head + "L2CAP signalling (malformed)", [ValueDecoding.hex(f.payload)]) }
                return (head + "L2CAP signalling", signals.flatMap { renderer.lines(label: nil, $0) })
            default:
                return (head + String(format: "L2CAP channel 0x%04x, %d octets", f.channelID.rawValue, f.payload.count), [ValueDecoding.hex(f.payload)])
            }
        default:
            return ("\(p.type)", [ValueDecoding.hex(p.bytes)])
        }
    }

    /// The return parameters of the commands whose layout BLEHCI knows (Vol 4 Part E §7).
    static func returnParameters(_ op: HCIOpcode, _ ret: [UInt8]) -> Any? {
        switch op {
        case .readLocalVersionInformation: return try? ReadLocalVersionReturn(decoding: ret)
        case .readBDADDR: return try? ReadBDADDRReturn(decoding: ret)
        case .readRSSI: return try? ReadRSSIReturn(decoding: ret)
        case .leReadBufferSize: return try? LEReadBufferSizeReturn(decoding: ret)
        case .leRand: return try? LERandReturn(decoding: ret)
        case .leEncrypt: return try? LEEncryptReturn(decoding: ret)
        case .leReadPHY: return try? LEReadPHYReturn(decoding: ret)
        case .leReadMaximumDataLength: return try? LEReadMaximumDataLengthReturn(decoding: ret)
        default: return nil
        }
    }

    /// "HCI_LE_Set_Scan_Parameters" → "LE Set Scan Parameters (0x200b)".
    static func opcodeName(_ op: HCIOpcode) -> String {
        var s = "\(op)"
        if s.hasPrefix("HCI_") { s = String(s.dropFirst(4)) }
        return s.replacingOccurrences(of: "_", with: " ") + String(format: " (0x%04x)", op.rawValue)
    }
}

/// Renders any decoded value as "Label: value" lines by reflection: enums by case, structs and tuples by
/// field, octet arrays as hex, handles in hex; secrets masked.
struct FieldRenderer {
    let showKeys: Bool

    /// The case name of an enum value and its payload (nil when it has none).
    static func caseName(_ v: Any) -> (String, Any?) {
        let m = Mirror(reflecting: v)
        if m.displayStyle == .enum, let c = m.children.first, let label = c.label { return (label, c.value) }
        return ("\(v)", nil)
    }

    /// "exchangeMTURequest" → "Exchange MTU Request"; as a label ("scanInterval") → "Scan interval".
    static func words(_ name: String, capitaliseAll: Bool = true) -> String {
        var parts: [String] = []
        let chars = Array(name)
        var current = ""
        for (i, ch) in chars.enumerated() {
            let prevLower = i > 0 && (chars[i - 1].isLowercase || chars[i - 1].isNumber)
            let nextLower = i + 1 < chars.count && chars[i + 1].isLowercase
            if ch.isUppercase && i > 0 && (prevLower || (nextLower && chars[i - 1].isUppercase)) {
                parts.append(current)
                current = ""
            }
            current.append(ch)
        }
        if !current.isEmpty { parts.append(current) }
        let shaped = parts.enumerated().map { i, w -> String in
            if let a = acronyms[w.lowercased()] { return a }
            let acronym = w.count > 1 && w.allSatisfy { $0.isUppercase || $0.isNumber }
            if i == 0 { return w.prefix(1).uppercased() + w.dropFirst() }
            return capitaliseAll || acronym ? w : w.lowercased()
        }
        return shaped.joined(separator: " ")
    }

    static let acronyms = ["le": "LE", "rssi": "RSSI", "att": "ATT", "mtu": "MTU", "ltk": "LTK", "irk": "IRK", "csrk": "CSRK",
                           "ediv": "EDIV", "psm": "PSM", "cid": "CID", "mps": "MPS", "phy": "PHY", "oob": "OOB", "io": "IO",
                           "acl": "ACL", "hci": "HCI", "lmp": "LMP", "bd": "BD", "addr": "ADDR", "uuid": "UUID", "dh": "DH"]

    /// Field labels whose values are secrets.
    static func isSecret(_ label: String) -> Bool {
        let l = label.lowercased()
        if l.contains("public") || l.contains("size") || l.contains("distribution") { return false }
        return ["ltk", "irk", "csrk", "random", "rand", "confirm", "dhkey", "longtermkey"].contains { l.contains($0) } || l.hasSuffix("key")
    }

    func fields(ofPayload v: Any) -> [String] {
        let (name, payload) = Self.caseName(v)
        guard let payload else { return [] }
        // A payload with no label of its own is shown as "Value", and is secret by its case's name
        // (pairingRandom([UInt8]) is a random value).
        if leaf(payload, label: name) != nil { return lines(label: "Value", payload, raw: name) }
        return fields(payload, label: name)
    }

    func fields(_ v: Any?, label: String? = nil) -> [String] {
        guard let v else { return [] }
        let m = Mirror(reflecting: v)
        if leaf(v, label: label) != nil {
            return lines(label: label.map { Self.words($0, capitaliseAll: false) } ?? "Value", v)
        }
        if m.displayStyle == .tuple || m.displayStyle == .struct || m.displayStyle == .class {
            return m.children.flatMap { c in lines(label: c.label.map { $0.hasPrefix(".") ? nil : Self.words($0, capitaliseAll: false) } ?? nil, c.value, raw: c.label) }
        }
        return lines(label: nil, v)
    }

    /// One value as lines: "Label: leaf", or "Label:" followed by its indented fields.
    func lines(label: String?, _ v: Any, raw: String? = nil) -> [String] {
        let secretLabel = raw ?? label ?? ""
        if let s = leaf(v, label: secretLabel) {
            var out = [(label.map { "\($0): " } ?? "") + s]
            // Advertising data, structure by structure.
            if let b = v as? [UInt8], !b.isEmpty, ["data", "leSetAdvertisingData", "leSetScanResponseData"].contains(secretLabel) {
                out += AdvertisingData(lenient: b).structures.map { "  " + Self.describe($0) }
            }
            return out
        }
        let m = Mirror(reflecting: v)
        if m.displayStyle == .optional {
            guard let c = m.children.first else { return [(label.map { "\($0): " } ?? "") + "none"] }
            return lines(label: label, c.value, raw: raw)
        }
        if m.displayStyle == .collection {
            var out: [String] = []
            for (i, c) in m.children.enumerated() {
                out.append("\(label ?? "Item") [\(i)]:")
                out += lines(label: nil, c.value).map { "  " + $0 }
            }
            return out.isEmpty ? [(label ?? "Items") + ": none"] : out
        }
        if m.displayStyle == .enum, let c = m.children.first, let name = c.label {
            let inner = fields(c.value, label: name)
            return [(label.map { "\($0): " } ?? "") + Self.words(name)] + inner.map { "  " + $0 }
        }
        let inner = m.children.flatMap { c in lines(label: c.label.map { $0.hasPrefix(".") ? nil : Self.words($0, capitaliseAll: false) } ?? nil, c.value, raw: c.label) }
        if let label { return ["\(label):"] + inner.map { "  " + $0 } }
        return inner
    }

    /// A value that fits on one line, or nil.
    func leaf(_ v: Any, label: String?) -> String? {
        let secret = !showKeys && label.map(Self.isSecret) == true
        switch v {
        case let b as [UInt8]:
            if secret { return "<\(b.count) octets masked; --show-keys shows them>" }
            return b.isEmpty ? "(none)" : ValueDecoding.hex(b)
        case let x as UInt64 where secret: _ = x; return "<masked; --show-keys shows it>"
        case let a as BluetoothAddress: return a.description
        case let u as BluetoothUUID: return u.uuidString + (AssignedNumbers.name(of: u).map { " (\($0))" } ?? "")
        case let s as String: return ValueDecoding.quoted(s)
        case let s as HCIStatus: return s.description
        case let o as HCIOpcode: return SnoopDecoder.opcodeName(o)
        case let e as ATTErrorCode: return "\(e.name) (0x\(String(format: "%02x", e.rawValue)))"
        case let r as PairingFailureReason: return "\(r)"
        case let h as UInt16 where label?.lowercased().contains("handle") == true: return String(format: "0x%04x", h)
        case let x as UInt64: return String(format: "0x%016llx", x)   // masks and feature bits
        case is Bool, is Int, is Int8, is UInt8, is UInt16, is UInt32, is Double, is Int16, is Int32: return "\(v)"
        default: break
        }
        let m = Mirror(reflecting: v)
        if m.displayStyle == .enum && m.children.isEmpty { return Self.words("\(v)") }
        if m.children.count == 1, m.children.first?.label == "rawValue", let raw = m.children.first?.value {
            if let r = raw as? UInt8 { return String(format: "0x%02x", r) }
            if let r = raw as? UInt16 { return String(format: "0x%04x", r) }
            return "\(raw)"
        }
        if m.children.isEmpty { return "\(v)" }
        return nil
    }

    /// One AD structure in words.
    static func describe(_ s: ADStructure) -> String {
        let one = AdvertisingData([s])
        switch s.type {
        case .flags: return "Flags: " + (one.flags.map { ScanPrinter.flags($0).joined(separator: ", ") } ?? ValueDecoding.hex(s.data))
        case .completeLocalName, .shortenedLocalName: return "Name: " + ValueDecoding.quoted(String(decoding: s.data, as: UTF8.self))
        case .manufacturerSpecificData:
            guard let (id, name) = ScanPrinter.company(s.data) else { return "Manufacturer data: " + ValueDecoding.hex(s.data) }
            return String(format: "Manufacturer data: company 0x%04x", id) + (name.map { " (\($0))" } ?? "") + ": " + ValueDecoding.hex(Array(s.data.dropFirst(2)))
        case .txPowerLevel: return "TX power: " + (one.txPowerLevel.map { "\($0) dBm" } ?? ValueDecoding.hex(s.data))
        case .appearance: return "Appearance: " + (one.appearance.map(AssignedNumbers.appearance) ?? ValueDecoding.hex(s.data))
        default:
            if !one.serviceUUIDs.isEmpty { return "Services: " + one.serviceUUIDs.map(ScanPrinter.uuidName).joined(separator: ", ") }
            if let d = one.serviceData.first { return "Service data \(d.uuid.uuidString): " + ValueDecoding.hex(d.data) }
            return String(format: "AD type 0x%02x: ", s.type.rawValue) + ValueDecoding.hex(s.data)
        }
    }
}
