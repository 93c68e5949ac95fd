// A GATT database described in JSON, for `ble serve FILE.json`: to emulate a real device exactly (fixed
// handles, reserved handle ranges) or to serve a database without writing Swift.
//
//   { "advertise": { "name": "…", "serviceUUIDs": ["180D"] },
//     "defaultServices": true,                       // false leaves out the GAP and GATT services
//     "services": [ { "uuid": "180D", "primary": true, "handle": 16, "endHandle": 40, "includes": ["180F"],
//                     "characteristics": [ { "uuid": "2A37", "properties": ["notify"], "permissions": ["readable"],
//                                            "value": "hex:0048", "handle": 17,
//                                            "descriptors": [ { "uuid": "2901", "value": "utf8:Heart", "handle": 20 } ] } ] } ] }
//
// Two layouts. A file whose every service fixes its "handle" and "endHandle" (a copy of a real device, a
// PTS test database) is served exactly as written: nothing is added, not the GAP and GATT services (unless
// "defaultServices": true), not a Client Characteristic Configuration descriptor the file leaves out of a
// notifying characteristic, not an Extended Properties descriptor; what the specification would want
// otherwise becomes a warning (`warnings`), never a change, so an emulator can copy a device warts included.
// Any other file gets the helpful layout: the default services, and the descriptors the specification
// expects. "exact": true or false chooses the layout whatever the handles say.
//
// Every error names its place in the file, e.g. `services[0].characteristics[2].properties[1]`.
import Foundation
import BLEWire

public struct GATTDatabaseFile: Sendable {
    public struct Advertising: Sendable, Equatable {
        public var name: String?
        public var serviceUUIDs: [BluetoothUUID]
    }

    public var advertise: Advertising
    public var defaultServices: Bool
    public var services: [GATTServiceDefinition]
    /// The file is served as written (see the top of this file).
    public var isExact: Bool
    /// Where an exactly served file departs from what the specification recommends, each at its place.
    public var warnings: [FileWarning]
    /// For each service, the file references of its includes (UUID strings or handles), resolved on build.
    var includeRefs: [[IncludeRef]]

    enum IncludeRef: Sendable { case uuid(BluetoothUUID), handle(UInt16) }

    public struct FileError: Error, Equatable, CustomStringConvertible, Sendable {
        public var path: String
        public var message: String
        public var description: String { path.isEmpty ? message : "\(path): \(message)" }
    }

    /// Something served as written that the specification would want otherwise.
    public struct FileWarning: Equatable, CustomStringConvertible, Sendable {
        public var path: String
        public var message: String
        public var description: String { path.isEmpty ? message : "\(path): \(message)" }
    }

    public static let propertyNames: [String: GATTCharacteristicProperties] = [
        "broadcast": .broadcast, "read": .read, "writeWithoutResponse": .writeWithoutResponse, "write": .write,
        "notify": .notify, "indicate": .indicate, "authenticatedSignedWrites": .authenticatedSignedWrites,
        "extendedProperties": .extendedProperties,
        // Core Bluetooth's two extra flags are notify/indicate that need encryption.
        "notifyEncryptionRequired": .notify, "indicateEncryptionRequired": .indicate,
    ]

    public static let permissionNames: [String: AttributePermissions] = [
        "readable": .readable, "writeable": .writeable,
        "readEncryptionRequired": [.readable, .readEncryptionRequired], "writeEncryptionRequired": [.writeable, .writeEncryptionRequired],
        "readAuthenticationRequired": [.readable, .readEncryptionRequired, .readAuthenticationRequired],
        "writeAuthenticationRequired": [.writeable, .writeEncryptionRequired, .writeAuthenticationRequired],
    ]

    /// Reads and parses a file; a file that cannot be read gives the system's reason ("No such file or directory").
    public init(path: String) throws {
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: path)) } catch {
            throw FileError(path: "", message: "cannot read \(path): \(Self.systemReason(path: path, error))")
        }
        try self.init(json: data)
    }

    /// The POSIX reason behind a failed read, asked of the system again when Foundation does not carry it.
    static func systemReason(path: String, _ error: any Error) -> String {
        let fd = open(path, O_RDONLY)
        if fd < 0 { return String(cString: strerror(errno)) }
        defer { close(fd) }
        var byte: UInt8 = 0
        if read(fd, &byte, 1) < 0 { return String(cString: strerror(errno)) }
        let ns = error as NSError
        if let underlying = ns.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(underlying.code)))
        }
        return ns.localizedDescription
    }

    /// Where JSONSerialization stopped ("around character N", or the end), as "line L, column C" (1-based).
    static func location(of error: any Error, in json: Data) -> String? {
        let debug = (error as NSError).userInfo["NSDebugDescription"] as? String ?? ""
        var offset: Int?
        if let r = debug.range(of: "character ") {
            offset = Int(debug[r.upperBound...].prefix { $0.isNumber })
        } else if debug.contains("end of file") || debug.contains("Unexpected end") {
            offset = json.count
        }
        guard let offset else { return nil }
        var line = 1, column = 1
        for b in json.prefix(offset) {
            if b == 0x0A { line += 1; column = 1 } else if b & 0xC0 != 0x80 { column += 1 }
        }
        return "line \(line), column \(column)"
    }

    public init(json: Data) throws {
        let root: Any
        do { root = try JSONSerialization.jsonObject(with: json) } catch {
            let detail = (error as NSError).userInfo["NSDebugDescription"] as? String
            let place = Self.location(of: error, in: json).map { "\($0): " } ?? ""
            throw FileError(path: "", message: "\(place)not valid JSON (\(detail ?? error.localizedDescription))")
        }
        let top = try Self.object(root, "")
        try Self.allowKeys(top, ["advertise", "defaultServices", "exact", "services"], "")
        let exactChoice = try top["exact"].map { try Self.bool($0, "exact") }
        let defaultsChoice = try top["defaultServices"].map { try Self.bool($0, "defaultServices") }
        if let a = top["advertise"] {
            let o = try Self.object(a, "advertise")
            try Self.allowKeys(o, ["name", "serviceUUIDs"], "advertise")
            advertise = Advertising(
                name: try o["name"].map { try Self.string($0, "advertise.name") },
                serviceUUIDs: try Self.array(o["serviceUUIDs"] ?? [Any](), "advertise.serviceUUIDs").enumerated().map {
                    try Self.uuid($1, "advertise.serviceUUIDs[\($0)]")
                })
        } else {
            advertise = Advertising(name: nil, serviceUUIDs: [])
        }
        var services: [GATTServiceDefinition] = []
        var includes: [[IncludeRef]] = []
        var lastHandle = 0
        for (i, raw) in try Self.array(top["services"] ?? [Any](), "services").enumerated() {
            let p = "services[\(i)]"
            let o = try Self.object(raw, p)
            try Self.allowKeys(o, ["uuid", "primary", "includes", "characteristics", "handle", "endHandle"], p)
            let uuid = try Self.uuid(try Self.required(o, "uuid", p), "\(p).uuid")
            let handle = try o["handle"].map { try Self.handle($0, "\(p).handle") }
            try Self.checkOrder(handle, after: &lastHandle, "\(p).handle")
            var refs: [IncludeRef] = []
            for (k, inc) in try Self.array(o["includes"] ?? [Any](), "\(p).includes").enumerated() {
                // On Linux an NSNumber holding 0 or 1 also passes `is Bool`: ask for the JSON type itself.
                if let n = inc as? NSNumber, !isJSONBool(n) {
                    refs.append(.handle(try Self.handle(n, "\(p).includes[\(k)]")))
                } else {
                    refs.append(.uuid(try Self.uuid(inc, "\(p).includes[\(k)]")))
                }
            }
            var chars: [GATTCharacteristicDefinition] = []
            for (j, rawC) in try Self.array(o["characteristics"] ?? [Any](), "\(p).characteristics").enumerated() {
                let cp = "\(p).characteristics[\(j)]"
                let c = try Self.object(rawC, cp)
                try Self.allowKeys(c, ["uuid", "properties", "permissions", "value", "descriptors", "handle"], cp)
                var props: GATTCharacteristicProperties = []
                for (k, name) in try Self.array(c["properties"] ?? [Any](), "\(cp).properties").enumerated() {
                    let s = try Self.string(name, "\(cp).properties[\(k)]")
                    guard let v = Self.propertyNames[s] else {
                        throw FileError(path: "\(cp).properties[\(k)]", message: "unknown property \"\(s)\" (known: \(Self.propertyNames.keys.sorted().joined(separator: ", ")))")
                    }
                    props.formUnion(v)
                }
                let perms = try Self.permissions(c["permissions"], "\(cp).permissions")
                let ch = try c["handle"].map { try Self.handle($0, "\(cp).handle") }
                if ch != nil && handle == nil { throw FileError(path: "\(cp).handle", message: "a fixed characteristic handle needs a fixed service handle") }
                try Self.checkOrder(ch, after: &lastHandle, "\(cp).handle")
                if let ch { lastHandle = Int(ch) + 2 }   // the value takes the next handle
                var descriptors: [GATTDescriptorDefinition] = []
                for (k, rawD) in try Self.array(c["descriptors"] ?? [Any](), "\(cp).descriptors").enumerated() {
                    let dp = "\(cp).descriptors[\(k)]"
                    let d = try Self.object(rawD, dp)
                    try Self.allowKeys(d, ["uuid", "permissions", "value", "handle"], dp)
                    let dh = try d["handle"].map { try Self.handle($0, "\(dp).handle") }
                    if dh != nil && handle == nil { throw FileError(path: "\(dp).handle", message: "a fixed descriptor handle needs a fixed service handle") }
                    try Self.checkOrder(dh, after: &lastHandle, "\(dp).handle")
                    descriptors.append(
                        GATTDescriptorDefinition(
                            uuid: try Self.uuid(try Self.required(d, "uuid", dp), "\(dp).uuid"),
                            permissions: d["permissions"] == nil ? .readable : try Self.permissions(d["permissions"], "\(dp).permissions"),
                            value: try d["value"].map { try Self.value($0, "\(dp).value") } ?? [], handle: dh))
                }
                let value = try c["value"].map { try Self.value($0, "\(cp).value") }
                if let value, value.count > 512 { throw FileError(path: "\(cp).value", message: "\(value.count) octets; an attribute value holds at most 512") }
                chars.append(
                    GATTCharacteristicDefinition(
                        uuid: try Self.uuid(try Self.required(c, "uuid", cp), "\(cp).uuid"), properties: props, permissions: perms,
                        value: value ?? [], descriptors: descriptors, handle: ch))
            }
            let end = try o["endHandle"].map { try Self.handle($0, "\(p).endHandle") }
            if let end {
                guard Int(end) >= lastHandle - 1 else { throw FileError(path: "\(p).endHandle", message: "0x\(String(end, radix: 16)) is below the service's last attribute") }
                lastHandle = Int(end) + 1
            }
            services.append(
                GATTServiceDefinition(
                    uuid: uuid, isPrimary: try o["primary"].map { try Self.bool($0, "\(p).primary") } ?? true,
                    characteristics: chars, handle: handle, endHandle: end))
            includes.append(refs)
        }
        let fixed = !services.isEmpty && services.allSatisfy { $0.handle != nil && $0.endHandle != nil }
        isExact = exactChoice ?? fixed
        defaultServices = defaultsChoice ?? !isExact
        warnings = []
        if isExact {
            for i in services.indices { services[i].addsMissingDescriptors = false }
            warnings = Self.departures(services, defaultServices: defaultServices, chosen: exactChoice == true)
        }
        self.includeRefs = includes
        self.services = services
    }

    /// What an exact layout serves that the specification recommends otherwise (Vol 3 Part G §3.3.3.3: a
    /// characteristic that notifies or indicates has a Client Characteristic Configuration descriptor;
    /// §3.3.3.1: one with extended properties has that descriptor; Vol 3 Part C §12: a GATT server has the
    /// GAP service).
    static func departures(_ services: [GATTServiceDefinition], defaultServices: Bool, chosen: Bool) -> [FileWarning] {
        let why = chosen ? "\"exact\": true" : "every service fixes its handle and end handle"
        var out = [FileWarning(path: "", message: "\(why): the database is served exactly as written, nothing added")]
        if !defaultServices && !services.contains(where: { $0.uuid == .gapService }) {
            out.append(FileWarning(path: "services", message: "no GAP service (0x1800); served without one"))
        }
        for (i, s) in services.enumerated() {
            for (j, c) in s.characteristics.enumerated() {
                let p = "services[\(i)].characteristics[\(j)]"
                let has = Set(c.descriptors.map(\.uuid))
                if !c.properties.isDisjoint(with: [.notify, .indicate]) && !has.contains(.clientCharacteristicConfiguration) {
                    let what = c.properties.contains(.notify) ? "notifies" : "indicates"
                    out.append(FileWarning(path: p, message: "\(what) without a Client Characteristic Configuration descriptor (0x2902); none added, so no client can subscribe"))
                }
                if c.properties.contains(.extendedProperties) && !has.contains(.characteristicExtendedProperties) {
                    out.append(FileWarning(path: p, message: "has extended properties without their descriptor (0x2900); none added"))
                }
            }
        }
        return out
    }

    /// Builds the database, adding services in file order. A service may include one declared later in the
    /// file when that one has a fixed handle (real devices have such databases, e.g. a service at handle 1
    /// including one at 128): the later service is then added first, so its handles are known.
    public func makeDatabase(deviceName: String = "OpenCoreBluetooth") throws -> GATTDatabase {
        var db = defaultServices ? GATTDatabase.withDefaultServices(deviceName: deviceName) : GATTDatabase()
        // Which service each include names, by index in the file.
        var targets: [[Int]] = []
        for (i, refs) in includeRefs.enumerated() {
            targets.append(
                try refs.enumerated().map { k, ref in
                    let p = "services[\(i)].includes[\(k)]"
                    let j: Int
                    switch ref {
                    case let .uuid(u):
                        guard let f = services[..<i].lastIndex(where: { $0.uuid == u }) ?? services[(i + 1)...].firstIndex(where: { $0.uuid == u }) else {
                            throw FileError(path: p, message: "no service \(u.uuidString) in the file")
                        }
                        j = f
                    case let .handle(h):
                        guard let f = services.firstIndex(where: { $0.handle == h }) else { throw FileError(path: p, message: "no service declared at handle \(h)") }
                        j = f
                    }
                    if j == i { throw FileError(path: p, message: "a service cannot include itself") }
                    if j > i && services[j].handle == nil {
                        throw FileError(path: p, message: "service \(services[j].uuid.uuidString) is declared later without a fixed \"handle\"; give it one to include it here")
                    }
                    return j
                })
        }
        var handles: [Int: UInt16] = [:]
        var visiting = Set<Int>()
        func add(_ i: Int) throws {
            if handles[i] != nil { return }
            guard !visiting.contains(i) else { throw FileError(path: "services[\(i)].includes", message: "services include each other in a cycle") }
            visiting.insert(i)
            for j in targets[i] { try add(j) }
            var s = services[i]
            s.includedServices = targets[i].map { GATTServiceReference(handle: handles[$0]!) }
            do {
                handles[i] = try db.add(s).range.lowerBound
            } catch {
                throw FileError(path: "services[\(i)]", message: Self.describe(error))
            }
            visiting.remove(i)
        }
        for i in services.indices { try add(i) }
        return db
    }

    static func describe(_ e: GATTDatabaseError) -> String {
        switch e {
        case let .handleConflict(r): return "handles overlap the service at 0x\(String(r.lowerBound, radix: 16))–0x\(String(r.upperBound, radix: 16))"
        case .handlesExhausted: return "no room left in the handle space"
        case .includedServiceNotFound: return "included service not found"
        case let .invalidDefinition(why): return why
        case .serviceNotFound: return "service not found"
        case let .serviceIsIncluded(h): return "included by the service at 0x\(String(h, radix: 16))"
        }
    }

    // MARK: JSON helpers

    static func object(_ v: Any, _ p: String) throws -> [String: Any] {
        guard let o = v as? [String: Any] else { throw FileError(path: p, message: "expected an object") }
        return o
    }
    static func array(_ v: Any, _ p: String) throws -> [Any] {
        guard let a = v as? [Any] else { throw FileError(path: p, message: "expected an array") }
        return a
    }
    static func string(_ v: Any, _ p: String) throws -> String {
        guard let s = v as? String else { throw FileError(path: p, message: "expected a string") }
        return s
    }
    static func bool(_ v: Any, _ p: String) throws -> Bool {
        guard let n = v as? NSNumber, isJSONBool(n) else { throw FileError(path: p, message: "expected true or false") }
        return n.boolValue
    }
    static func required(_ o: [String: Any], _ key: String, _ p: String) throws -> Any {
        guard let v = o[key] else { throw FileError(path: p, message: "\"\(key)\" is missing") }
        return v
    }
    static func allowKeys(_ o: [String: Any], _ keys: Set<String>, _ p: String) throws {
        if let bad = o.keys.sorted().first(where: { !keys.contains($0) }) {
            throw FileError(path: p.isEmpty ? bad : "\(p).\(bad)", message: "unknown key \"\(bad)\" (known: \(keys.sorted().joined(separator: ", ")))")
        }
    }
    static func uuid(_ v: Any, _ p: String) throws -> BluetoothUUID {
        let s = try string(v, p)
        guard let u = BluetoothUUID(string: s) else { throw FileError(path: p, message: "\"\(s)\" is not a 16-, 32- or 128-bit UUID") }
        return u
    }
    static func handle(_ v: Any, _ p: String) throws -> UInt16 {
        guard let n = v as? NSNumber, !isJSONBool(n), let h = UInt16(exactly: n.doubleValue), h != 0 else {
            throw FileError(path: p, message: "expected a handle 1…65535")
        }
        return h
    }
    static func permissions(_ v: Any?, _ p: String) throws -> AttributePermissions {
        var perms: AttributePermissions = []
        for (k, name) in try array(v ?? [Any](), p).enumerated() {
            let s = try string(name, "\(p)[\(k)]")
            guard let x = permissionNames[s] else {
                throw FileError(path: "\(p)[\(k)]", message: "unknown permission \"\(s)\" (known: \(permissionNames.keys.sorted().joined(separator: ", ")))")
            }
            perms.formUnion(x)
        }
        return perms
    }
    /// "hex:0a0b" or "utf8:text".
    static func value(_ v: Any, _ p: String) throws -> [UInt8] {
        let s = try string(v, p)
        if s.hasPrefix("hex:") {
            guard let b = [UInt8](hexString: String(s.dropFirst(4))) else { throw FileError(path: p, message: "\"\(s)\" is not valid hex") }
            return b
        }
        if s.hasPrefix("utf8:") { return Array(s.dropFirst(5).utf8) }
        throw FileError(path: p, message: "a value starts with \"hex:\" or \"utf8:\"")
    }
    /// Handles given in the file must increase in file order.
    static func checkOrder(_ h: UInt16?, after last: inout Int, _ p: String) throws {
        guard let h else { return }
        guard Int(h) >= last else {
            throw FileError(path: p, message: "handle \(h) overlaps or comes before the attribute before it (next free handle is \(last))")
        }
        last = Int(h) + 1
    }
}

/// JSON booleans arrive as NSNumber too; Foundation marks them with the objCType "c".
func isJSONBool(_ n: NSNumber) -> Bool {
    String(cString: n.objCType) == "c"
}
