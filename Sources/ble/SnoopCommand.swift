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
