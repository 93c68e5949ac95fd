// Readings of attribute values whose format is known: the strings and numbers of the GAP, Device
// Information, Battery and Heart Rate specifications, the descriptors of Vol 3 Part G §3.3.3, and any
// characteristic that carries a Characteristic Presentation Format descriptor (§3.3.3.5). Anything else
// is shown as hex, with its text when every octet is printable UTF-8.
import Foundation
import BLEWire

enum ValueDecoding {
    /// "01 02 0a" ("" for an empty value).
    static func hex(_ v: [UInt8]) -> String { v.map { String(format: "%02x", $0) }.joined(separator: " ") }

    /// The value as text when it is valid UTF-8 with no control characters (a trailing NUL allowed).
    static func text(_ v: [UInt8]) -> String? {
        var bytes = v
        while bytes.last == 0 { bytes.removeLast() }
        guard !bytes.isEmpty, let s = String(bytes: bytes, encoding: .utf8) else { return nil }
        guard !s.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else { return nil }
        return s
    }

    static func quoted(_ s: String) -> String {
        "\"" + s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }

    static func u16(_ v: [UInt8], _ i: Int) -> UInt16? { i + 1 < v.count ? UInt16(v[i]) | UInt16(v[i + 1]) << 8 : nil }

    /// A reading of a characteristic value, or nil when the format is not known. `presentation` is the
    /// value of the characteristic's Presentation Format descriptor, when it has one.
    static func characteristic(_ uuid: BluetoothUUID, _ v: [UInt8], presentation: [UInt8]? = nil) -> String? {
        if let p = presentation, let s = presented(v, format: p) { return s }
        guard let short = uuid.uuid16 else { return text(v).map(quoted) }
        switch short {
        case 0x2A00, 0x2A24, 0x2A25, 0x2A26, 0x2A27, 0x2A28, 0x2A29:
            return quoted(String(decoding: v, as: UTF8.self))
        case 0x2A01:
            guard let a = u16(v, 0), v.count == 2 else { return nil }
            return "\(AssignedNumbers.appearance(a)) (0x\(String(format: "%04x", a)))"
        case 0x2A04:
            guard v.count == 8, let lo = u16(v, 0), let hi = u16(v, 2), let lat = u16(v, 4), let to = u16(v, 6) else { return nil }
            func ms(_ x: UInt16, _ unit: Double) -> String { x == 0xFFFF ? "any" : String(format: "%g ms", Double(x) * unit) }
            return "interval \(ms(lo, 1.25))–\(ms(hi, 1.25)), latency \(lat), timeout \(ms(to, 10))"
        case 0x2A05:
            guard v.count == 4, let a = u16(v, 0), let b = u16(v, 2) else { return nil }
            return String(format: "handles 0x%04x–0x%04x", a, b)
        case 0x2A19:
            guard v.count == 1 else { return nil }
            return "\(v[0]) %"
        case 0x2A37: return heartRate(v)
        case 0x2A38:
            guard v.count == 1 else { return nil }
            let places = ["Other", "Chest", "Wrist", "Finger", "Hand", "Ear Lobe", "Foot"]
            return Int(v[0]) < places.count ? places[Int(v[0])] : "reserved (\(v[0]))"
        case 0x2A50:
            guard v.count == 7, let vendor = u16(v, 1), let product = u16(v, 3), let version = u16(v, 5) else { return nil }
            let source = v[0] == 1 ? "Bluetooth SIG" : v[0] == 2 ? "USB-IF" : "source \(v[0])"
            let company = v[0] == 1 ? AssignedNumbers.company(vendor).map { " \($0)" } ?? "" : ""
            return String(format: "vendor 0x%04x", vendor) + company + " (\(source)), " + String(format: "product 0x%04x, version 0x%04x", product, version)
        case 0x2A6E:
            guard v.count == 2, let raw = u16(v, 0) else { return nil }
            return String(format: "%.2f °C", Double(Int16(bitPattern: raw)) / 100)
        case 0x2A6F:
            guard v.count == 2, let raw = u16(v, 0) else { return nil }
            return String(format: "%.2f %%", Double(raw) / 100)
        default:
            return text(v).map(quoted)
        }
    }

    /// Heart Rate Measurement (Heart Rate Service 1.0 §3.1): flags, then the rate, energy and RR-intervals.
    static func heartRate(_ v: [UInt8]) -> String? {
        guard let flags = v.first else { return nil }
        var i = 1
        let bpm: Int
        if flags & 0x01 != 0 {
            guard let r = u16(v, i) else { return nil }
            bpm = Int(r); i += 2
        } else {
            guard i < v.count else { return nil }
            bpm = Int(v[i]); i += 1
        }
        var parts = ["\(bpm) bpm"]
        switch (flags >> 1) & 0x03 {
        case 2: parts.append("no contact")
        case 3: parts.append("contact")
        default: break
        }
        if flags & 0x08 != 0 {
            guard let e = u16(v, i) else { return nil }
            parts.append("\(e) kJ"); i += 2
        }
        if flags & 0x10 != 0 {
            var rr: [String] = []
            while let r = u16(v, i) { rr.append(String(format: "%.3f", Double(r) / 1024)); i += 2 }
            if !rr.isEmpty { parts.append("RR " + rr.joined(separator: ", ") + " s") }
        }
        return parts.joined(separator: ", ")
    }

    /// Presentation Format formats (Assigned Numbers "Formats"): name and size in octets.
    static let formats: [UInt8: (String, Int)] = [
        0x01: ("boolean", 1), 0x04: ("uint8", 1), 0x06: ("uint16", 2), 0x07: ("uint24", 3), 0x08: ("uint32", 4),
        0x0C: ("sint8", 1), 0x0E: ("sint16", 2), 0x10: ("sint32", 4), 0x14: ("float32", 4), 0x15: ("float64", 8),
        0x19: ("utf8s", 0), 0x1A: ("utf16s", 0), 0x1B: ("struct", 0),
    ]

    /// A value read through its Presentation Format (format, exponent, unit, namespace, description).
    static func presented(_ v: [UInt8], format p: [UInt8]) -> String? {
        guard p.count == 7, let (name, size) = formats[p[0]] else { return nil }
        let exponent = Int(Int8(bitPattern: p[1]))
        let unit = u16(p, 2).flatMap { AssignedNumbers.units[$0] } ?? ""
        let isFloat = name.hasPrefix("float")
        func scaled(_ x: Double) -> String {
            let value = x * pow(10, Double(exponent))
            let number = exponent < 0 ? String(format: "%.\(-exponent)f", value) : isFloat ? String(format: "%g", value) : String(format: "%.0f", value)
            return unit.isEmpty ? number : "\(number) \(unit)"
        }
        if name == "utf8s" { return quoted(String(decoding: v, as: UTF8.self)) }
        guard size > 0, v.count == size else { return nil }
        var raw: UInt64 = 0
        for (k, b) in v.enumerated() { raw |= UInt64(b) << (8 * UInt64(k)) }
        switch name {
        case "boolean": return v[0] == 0 ? "false" : "true"
        case "uint8", "uint16", "uint24", "uint32": return scaled(Double(raw))
        case "sint8": return scaled(Double(Int8(truncatingIfNeeded: raw)))
        case "sint16": return scaled(Double(Int16(truncatingIfNeeded: raw)))
        case "sint32": return scaled(Double(Int32(truncatingIfNeeded: raw)))
        case "float32": return scaled(Double(Float(bitPattern: UInt32(truncatingIfNeeded: raw))))
        case "float64": return scaled(Double(bitPattern: raw))
        default: return nil
        }
    }

    /// A reading of a descriptor value, or nil when the format is not known.
    static func descriptor(_ uuid: BluetoothUUID, _ v: [UInt8]) -> String? {
        guard let short = uuid.uuid16 else { return text(v).map(quoted) }
        switch short {
        case 0x2900:
            guard let bits = u16(v, 0) else { return nil }
            var parts: [String] = []
            if bits & 1 != 0 { parts.append("reliable write") }
            if bits & 2 != 0 { parts.append("writable auxiliaries") }
            return parts.isEmpty ? "none" : parts.joined(separator: ", ")
        case 0x2901: return quoted(String(decoding: v, as: UTF8.self))
        case 0x2902:
            guard v.count == 2, let bits = u16(v, 0) else { return nil }
            var parts: [String] = []
            if bits & 1 != 0 { parts.append("notifications") }
            if bits & 2 != 0 { parts.append("indications") }
            return parts.isEmpty ? "off" : parts.joined(separator: " and ") + " on"
        case 0x2904:
            guard v.count == 7, let unit = u16(v, 2), let desc = u16(v, 5) else { return nil }
            let f = formats[v[0]]?.0 ?? "format 0x" + String(format: "%02x", v[0])
            let u = AssignedNumbers.units[unit].map { $0.isEmpty ? "unitless" : $0 } ?? String(format: "unit 0x%04x", unit)
            return "\(f), exponent \(Int8(bitPattern: v[1])), \(u), namespace \(v[4]), description 0x\(String(format: "%04x", desc))"
        default:
            return text(v).map(quoted)
        }
    }
}
