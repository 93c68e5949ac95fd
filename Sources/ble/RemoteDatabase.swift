// A peer's GATT database as `ble gatt` shows it: every primary service (Vol 3 Part G §4.4.1), the secondary
// services that they include (§4.5.1), characteristics (§4.6.1), descriptors (§4.7.1) and, optionally, the
// values, read whole (§4.8.3). Rendered as a tree or as JSON.
import Foundation
import BLEWire
import BLEATT
import BLEGATT

struct RemoteDatabase {
    struct Descriptor {
        var uuid: BluetoothUUID
        var handle: UInt16
        var value: [UInt8]?
        var error: String?
    }
    struct Characteristic {
        var uuid: BluetoothUUID
        var declarationHandle: UInt16
        var valueHandle: UInt16
        var properties: UInt8
        var endHandle: UInt16
        var descriptors: [Descriptor] = []
        var value: [UInt8]?
        var error: String?

        var presentationFormat: [UInt8]? { descriptors.first { $0.uuid == BluetoothUUID(0x2904) }?.value }
        var cccd: Descriptor? { descriptors.first { $0.uuid == BluetoothUUID(0x2902) } }
    }
    struct Include {
        var declarationHandle: UInt16
        var startHandle: UInt16
        var endHandle: UInt16
        var uuid: BluetoothUUID
    }
    struct Service {
        var uuid: BluetoothUUID
        var handle: UInt16
        var endHandle: UInt16
        var primary: Bool
        var includes: [Include] = []
        var characteristics: [Characteristic] = []
    }

    var services: [Service] = []

    /// Characteristic property names, as the `ble serve` file spells them (Vol 3 Part G §3.3.1.1).
    static let propertyNames: [(UInt8, String)] = [
        (0x01, "broadcast"), (0x02, "read"), (0x04, "writeWithoutResponse"), (0x08, "write"), (0x10, "notify"),
        (0x20, "indicate"), (0x40, "authenticatedSignedWrites"), (0x80, "extendedProperties"),
    ]
    static func properties(_ p: UInt8) -> [String] { propertyNames.filter { p & $0.0 != 0 }.map(\.1) }

    var characteristics: [Characteristic] { services.flatMap(\.characteristics) }

    /// Discovers the whole database; reads every readable value and descriptor when `values` is set.
    static func discover(_ link: DeviceLink, values: Bool) throws -> RemoteDatabase {
        var db = RemoteDatabase()
        guard case let .services(primary) = try link.gatt(.discoverAllPrimaryServices) else { throw ToolError("unexpected answer to service discovery") }
        var pending = primary.map { Service(uuid: $0.uuid, handle: $0.handle, endHandle: $0.endHandle, primary: true) }
        var seen = Set(pending.map(\.handle))
        var k = 0
        while k < pending.count {
            var s = pending[k]
            if case let .includedServices(incs) = try link.gatt(.findIncludedServices(start: s.handle, end: s.endHandle)) {
                for inc in incs {
                    var uuid = inc.uuid
                    // A 128-bit UUID is left out of the include declaration: read it from the service declaration.
                    if uuid == BluetoothUUID(0x0000), let v = try? link.read(inc.startHandle), let u = try? BluetoothUUID(littleEndianBytes: v) { uuid = u }
                    s.includes.append(Include(declarationHandle: inc.declarationHandle, startHandle: inc.startHandle, endHandle: inc.endHandle, uuid: uuid))
                    if !seen.contains(inc.startHandle) {
                        seen.insert(inc.startHandle)
                        pending.append(Service(uuid: uuid, handle: inc.startHandle, endHandle: inc.endHandle, primary: false))
                    }
                }
            }
            if case let .characteristics(cs) = try link.gatt(.discoverCharacteristics(start: s.handle, end: s.endHandle, uuid: nil)) {
                let sorted = cs.sorted { $0.declarationHandle < $1.declarationHandle }
                for (i, c) in sorted.enumerated() {
                    let end = i + 1 < sorted.count ? sorted[i + 1].declarationHandle - 1 : s.endHandle
                    var ch = Characteristic(
                        uuid: c.uuid, declarationHandle: c.declarationHandle, valueHandle: c.valueHandle,
                        properties: c.properties, endHandle: end)
                    if c.valueHandle < end, case let .descriptors(ds) = try link.gatt(.discoverDescriptors(start: c.valueHandle + 1, end: end)) {
                        ch.descriptors = ds.map { Descriptor(uuid: $0.uuid, handle: $0.handle) }
                    }
                    s.characteristics.append(ch)
                }
            }
            pending[k] = s
            k += 1
        }
        db.services = pending.sorted { $0.handle < $1.handle }
        if values { try db.readValues(link) }
        return db
    }

    /// Reads every readable characteristic value and every descriptor; failures are kept, not thrown,
    /// except a lost link.
    mutating func readValues(_ link: DeviceLink) throws {
        func attempt(_ h: UInt16) throws -> ([UInt8]?, String?) {
            do { return (try link.read(h), nil) } catch let e as GATTFailure {
                if case .disconnected = e.failure { throw ToolError("the link went down") }
                return (nil, e.description)
            }
        }
        for i in services.indices {
            for j in services[i].characteristics.indices {
                for d in services[i].characteristics[j].descriptors.indices {
                    let (v, e) = try attempt(services[i].characteristics[j].descriptors[d].handle)
                    services[i].characteristics[j].descriptors[d].value = v
                    services[i].characteristics[j].descriptors[d].error = e
                }
                guard services[i].characteristics[j].properties & 0x02 != 0 else { continue }
                let (v, e) = try attempt(services[i].characteristics[j].valueHandle)
                services[i].characteristics[j].value = v
                services[i].characteristics[j].error = e
            }
        }
    }

    /// The characteristic `spec` names: a UUID, or a handle (decimal or 0x-hex) of its declaration, value or descriptors.
    func characteristic(_ spec: AttributeSpec) throws -> Characteristic {
        switch spec {
        case let .handle(h):
            guard let c = characteristics.first(where: { (Int($0.declarationHandle)...Int($0.endHandle)).contains(Int(h)) }) else {
                throw ToolError(String(format: "no characteristic at handle 0x%04x", h))
            }
            return c
        case let .uuid(u):
            let matches = characteristics.filter { $0.uuid == u }
            guard let c = matches.first else { throw ToolError("no characteristic \(u.uuidString) on the device") }
            if matches.count > 1 {
                warn(
                    "\(matches.count) characteristics \(u.uuidString) (value handles \(matches.map { String(format: "0x%04x", $0.valueHandle) }.joined(separator: ", "))); using the first, name another by its handle"
                )
            }
            return c
        }
    }

    // MARK: Rendering

    static func label(_ uuid: BluetoothUUID, _ name: String?) -> String { name.map { "\(uuid.uuidString) \($0)" } ?? uuid.uuidString }

    static func render(value: [UInt8]?, error: String?, decoded: String?) -> String {
        if let error { return "(\(error))" }
        guard let value else { return "" }
        if value.isEmpty { return "(empty)" }
        let hex = value.count > 32 ? ValueDecoding.hex(Array(value.prefix(32))) + " … (\(value.count) octets)" : ValueDecoding.hex(value)
        guard let decoded else { return hex }
        return decoded.hasPrefix("\"") && value.count > 8 ? decoded : "\(decoded)  [\(hex)]"
    }

    /// The tree: services, includes, characteristics with their properties and values, descriptors.
    func tree(header: String) -> String {
        var lines = [Terminal.bold(header)]
        for (si, s) in services.enumerated() {
            let lastService = si == services.count - 1
            let sp = lastService ? "    " : "│   "
            lines.append(
                (lastService ? "└── " : "├── ") + Terminal.cyan(String(format: "0x%04x–0x%04x", s.handle, s.endHandle)) + " "
                    + (s.primary ? "service " : "secondary service ") + Terminal.bold(Self.label(s.uuid, AssignedNumbers.name(ofService: s.uuid))))
            let children = s.includes.count + s.characteristics.count
            var n = 0
            for inc in s.includes {
                n += 1
                lines.append(
                    sp + (n == children ? "└── " : "├── ")
                        // 0: not known (bluetoothd gives the included service, not its include declaration).
                        + Terminal.cyan(inc.declarationHandle == 0 ? "------" : String(format: "0x%04x", inc.declarationHandle))
                        + " includes " + Self.label(inc.uuid, AssignedNumbers.name(ofService: inc.uuid))
                        + String(format: " (0x%04x–0x%04x)", inc.startHandle, inc.endHandle))
            }
            for c in s.characteristics {
                n += 1
                let lastChild = n == children
                let cp = sp + (lastChild ? "    " : "│   ")
                lines.append(
                    sp + (lastChild ? "└── " : "├── ") + Terminal.cyan(String(format: "0x%04x", c.declarationHandle))
                        + " characteristic " + Terminal.bold(Self.label(c.uuid, AssignedNumbers.name(ofCharacteristic: c.uuid)))
                        + String(format: ", value 0x%04x", c.valueHandle) + " [" + Self.properties(c.properties).joined(separator: ", ") + "]")
                let rendered = Self.render(
                    value: c.value, error: c.error,
                    decoded: c.value.flatMap { ValueDecoding.characteristic(c.uuid, $0, presentation: c.presentationFormat) })
                if !rendered.isEmpty { lines.append(cp + (c.descriptors.isEmpty ? "    " : "│   ") + "= " + Terminal.green(rendered)) }
                for (di, d) in c.descriptors.enumerated() {
                    let r = Self.render(value: d.value, error: d.error, decoded: d.value.flatMap { ValueDecoding.descriptor(d.uuid, $0) })
                    lines.append(
                        cp + (di == c.descriptors.count - 1 ? "└── " : "├── ") + Terminal.cyan(String(format: "0x%04x", d.handle))
                            + " descriptor " + Self.label(d.uuid, AssignedNumbers.name(ofDescriptor: d.uuid)) + (r.isEmpty ? "" : " = " + Terminal.green(r)))
                }
            }
        }
        return lines.joined(separator: "\n")
    }

    static func valueFields(_ value: [UInt8]?, _ error: String?, decoded: String?) -> [String: Any] {
        var o: [String: Any] = [:]
        if let value {
            o["value"] = value.map { String(format: "%02x", $0) }.joined()
            if let decoded { o["decoded"] = decoded }
        }
        if let error { o["error"] = error }
        return o
    }

    /// The JSON object: services with their handles, includes, characteristics and descriptors.
    func json(device: [String: Any]) -> [String: Any] {
        var root = device
        root["services"] = services.map { s -> [String: Any] in
            var o: [String: Any] = ["uuid": s.uuid.uuidString, "handle": Int(s.handle), "end_handle": Int(s.endHandle), "primary": s.primary]
            if let n = AssignedNumbers.name(ofService: s.uuid) { o["name"] = n }
            o["includes"] = s.includes.map {
                var i: [String: Any] = ["start_handle": Int($0.startHandle), "end_handle": Int($0.endHandle), "uuid": $0.uuid.uuidString]
                if $0.declarationHandle != 0 { i["handle"] = Int($0.declarationHandle) }
                return i
            }
            o["characteristics"] = s.characteristics.map { c -> [String: Any] in
                var co: [String: Any] = [
                    "uuid": c.uuid.uuidString, "handle": Int(c.declarationHandle), "value_handle": Int(c.valueHandle),
                    "properties": Self.properties(c.properties),
                ]
                if let n = AssignedNumbers.name(ofCharacteristic: c.uuid) { co["name"] = n }
                co.merge(Self.valueFields(c.value, c.error, decoded: c.value.flatMap { ValueDecoding.characteristic(c.uuid, $0, presentation: c.presentationFormat) })) { $1 }
                co["descriptors"] = c.descriptors.map { d -> [String: Any] in
                    var dd: [String: Any] = ["uuid": d.uuid.uuidString, "handle": Int(d.handle)]
                    if let n = AssignedNumbers.name(ofDescriptor: d.uuid) { dd["name"] = n }
                    dd.merge(Self.valueFields(d.value, d.error, decoded: d.value.flatMap { ValueDecoding.descriptor(d.uuid, $0) })) { $1 }
                    return dd
                }
                return co
            }
            return o
        }
        return root
    }
}

/// A characteristic named on the command line: a UUID, or an attribute handle (18 or 0x0012).
enum AttributeSpec: Sendable, CustomStringConvertible {
    case uuid(BluetoothUUID)
    case handle(UInt16)

    /// "0x…" is a handle; what reads as a UUID (4 or 8 hex digits, or 128 bits) is a UUID; other decimal
    /// numbers are handles. So 18 and 0x0012 are handles, 1800 and 2A37 UUIDs.
    init?(_ text: String) {
        let t = text.lowercased()
        if t.hasPrefix("0x") {
            guard let h = UInt16(t.dropFirst(2), radix: 16), h != 0 else { return nil }
            self = .handle(h)
        } else if let u = BluetoothUUID(string: text) {
            self = .uuid(u)
        } else if let h = UInt16(t), h != 0 {
            self = .handle(h)
        } else {
            return nil
        }
    }

    var description: String {
        switch self {
        case let .uuid(u): return u.uuidString
        case let .handle(h): return String(format: "0x%04x", h)
        }
    }
}

/// JSON text with sorted keys (stable output, for people and for golden files).
func jsonText(_ o: Any, pretty: Bool) -> String {
    var options: JSONSerialization.WritingOptions = [.sortedKeys, .withoutEscapingSlashes]
    if pretty { options.insert(.prettyPrinted) }
    guard let d = try? JSONSerialization.data(withJSONObject: o, options: options) else { return "{}" }
    return String(decoding: d, as: UTF8.self)
}
