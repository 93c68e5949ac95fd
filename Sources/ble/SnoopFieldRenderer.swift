// How `ble snoop` prints a decoded packet: any value (HCI command, event, ATT or SMP PDU, return
// parameters) as "Label: value" lines found by reflection, with the names, acronyms and units people
// expect, octets in hex, handles in hex, advertising data by structure, and secrets masked.
import Foundation
import BLEWire
import BLEHCI
import BLEATT
import BLESMP
import BLEGAP

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

    static let acronyms = [
        "le": "LE", "rssi": "RSSI", "att": "ATT", "mtu": "MTU", "ltk": "LTK", "irk": "IRK", "csrk": "CSRK",
        "ediv": "EDIV", "psm": "PSM", "cid": "CID", "mps": "MPS", "phy": "PHY", "oob": "OOB", "io": "IO",
        "acl": "ACL", "hci": "HCI", "lmp": "LMP", "bd": "BD", "addr": "ADDR", "uuid": "UUID", "dh": "DH",
    ]

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
