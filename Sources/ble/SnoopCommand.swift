// `ble snoop FILE`: prints a btsnoop capture as decoded text (HCI commands and events, ACL with L2CAP
// channel and ATT/signalling PDUs).
import ArgumentParser
import Foundation
import BLEHCI
import BLEL2CAP
import BLEATT
import BLETransport

struct SnoopCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "snoop", abstract: "Print a btsnoop capture (BLE_SNOOP=FILE writes one) as text.")

    @Argument(help: "The btsnoop file.")
    var file: String

    func run() throws {
        let records = try BTSnoopReader.read(path: file)
        guard let t0 = records.first?.timestampMicros else { return print("(empty capture)") }
        var recombiners: [UInt16: L2CAPRecombiner] = [:]
        for r in records {
            let t = Double(r.timestampMicros &- t0) / 1_000_000
            let arrow = r.direction == .hostToController ? "host → ctrl" : "ctrl → host"
            print(String(format: "%10.6f ", t) + arrow + "  " + describe(r.packet, &recombiners))
        }
    }

    func describe(_ p: HCIPacket, _ recombiners: inout [UInt16: L2CAPRecombiner]) -> String {
        switch p.type {
        case .command:
            guard let c = try? HCICommand.decode(p) else { return "malformed command \(p.bytes.hexString)" }
            return "CMD  \(c.opcode)  \(c)"
        case .event:
            guard let e = try? HCIEvent.decode(p) else { return "malformed event \(p.bytes.hexString)" }
            if case let .commandComplete(_, op, ret) = e { return "EVT  Command Complete (\(op)) \(ret.hexString)" }
            return "EVT  \(e)"
        case .acl:
            guard let a = try? ACLPacket.decode(p) else { return "malformed ACL \(p.bytes.hexString)" }
            var r = recombiners[a.handle] ?? L2CAPRecombiner(maximumFrameLength: 65_535)
            let frame = try? r.append(a.data, boundary: a.boundary == .continuing ? .continuing : .first)
            recombiners[a.handle] = r
            let head = "ACL  handle 0x\(String(a.handle, radix: 16)) \(a.data.count) bytes"
            guard let f = frame ?? nil else { return head + " (fragment)" }
            switch f.channelID {
            case .att:
                if let pdu = try? ATTPDU.decode(f.payload) { return head + "  ATT \(pdu)" }
                return head + "  ATT malformed \(f.payload.hexString)"
            case .leSignaling:
                if let s = try? L2CAPSignal.decodeAll(f.payload) { return head + "  L2CAP signalling \(s)" }
                return head + "  L2CAP signalling malformed"
            default:
                return head + "  \(f.channelID) \(f.payload.hexString)"
            }
        default:
            return "\(p.type) \(p.bytes.hexString)"
        }
    }
}
