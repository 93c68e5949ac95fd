// D-Bus messages (D-Bus Specification, "Message Format").
//
// A message is a fixed header — endianness ('l' or 'B'), type, flags, protocol version 1, body length,
// serial — then the header fields as `a(yv)`, padding to 8, and the body. Required fields: a method call has
// PATH and MEMBER; a signal PATH, INTERFACE and MEMBER; an error ERROR_NAME and REPLY_SERIAL; a method return
// REPLY_SERIAL. Unknown header fields are ignored; a message of unknown type is ignored by its receiver.

public struct DBusMessage: Sendable, CustomStringConvertible {
    public enum Kind: Equatable, Sendable {
        case methodCall, methodReturn, error, signal
        /// A type this version of the spec does not know: receivers ignore it.
        case unknown(UInt8)

        var code: UInt8 {
            switch self {
            case .methodCall: return 1
            case .methodReturn: return 2
            case .error: return 3
            case .signal: return 4
            case .unknown(let c): return c
            }
        }
        init(code: UInt8) {
            switch code {
            case 1: self = .methodCall
            case 2: self = .methodReturn
            case 3: self = .error
            case 4: self = .signal
            default: self = .unknown(code)
            }
        }
    }

    public struct Flags: OptionSet, Sendable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        public static let noReplyExpected = Flags(rawValue: 0x1)
        public static let noAutoStart = Flags(rawValue: 0x2)
        public static let allowInteractiveAuthorization = Flags(rawValue: 0x4)
    }

    public var kind: Kind
    public var flags: Flags = []
    /// Set when the message is sent (by the connection) or read.
    public var serial: UInt32 = 0
    public var path: String?
    public var interface: String?
    public var member: String?
    public var errorName: String?
    public var replySerial: UInt32?
    public var destination: String?
    public var sender: String?
    public var body: [DBusValue] = []
    /// Descriptors passed with the message (SCM_RIGHTS); `.unixFD(i)` values index this list. Received
    /// descriptors belong to whoever takes them from the message: close those you do not keep.
    public var unixFDs: [Int32] = []

    public init(kind: Kind) { self.kind = kind }

    public static func methodCall(
        destination: String?, path: String, interface: String?, member: String,
        body: [DBusValue] = []
    ) -> DBusMessage {
        var m = DBusMessage(kind: .methodCall)
        m.destination = destination
        m.path = path
        m.interface = interface
        m.member = member
        m.body = body
        return m
    }

    public static func signal(path: String, interface: String, member: String, body: [DBusValue] = []) -> DBusMessage {
        var m = DBusMessage(kind: .signal)
        m.path = path
        m.interface = interface
        m.member = member
        m.body = body
        return m
    }

    /// A method return answering `call`.
    public func reply(_ body: [DBusValue] = []) -> DBusMessage {
        var m = DBusMessage(kind: .methodReturn)
        m.replySerial = serial
        m.destination = sender
        m.body = body
        return m
    }

    /// An error answering `call`.
    public func errorReply(name: String, message: String) -> DBusMessage {
        var m = DBusMessage(kind: .error)
        m.replySerial = serial
        m.destination = sender
        m.errorName = name
        m.body = [.string(message)]
        return m
    }

    /// The body's signature.
    public var signature: String { dbusSignature(body.map(\.type)) }

    /// An error reply's text (its first argument, when it is a string).
    public var errorMessage: String { body.first?.string ?? "" }

    public var description: String {
        var parts = ["\(kind) #\(serial)"]
        if let p = path { parts.append("path=\(p)") }
        if let i = interface { parts.append("interface=\(i)") }
        if let m = member { parts.append("member=\(m)") }
        if let e = errorName { parts.append("error=\(e)") }
        if let r = replySerial { parts.append("reply-to=\(r)") }
        if let d = destination { parts.append("to=\(d)") }
        if let s = sender { parts.append("from=\(s)") }
        if !body.isEmpty { parts.append("body=(\(body.map(\.description).joined(separator: ", ")))") }
        return parts.joined(separator: " ")
    }

    enum Field: UInt8 {
        case path = 1, interface, member, errorName, replySerial, destination, sender, signature, unixFDs
    }

    /// The message's octets, little-endian, with `serial`.
    public func encoded(serial: UInt32) throws(DBusError) -> [UInt8] {
        guard serial != 0 else { throw .invalidValue("serial 0") }
        try checkRequiredFields()
        var fields: [DBusValue] = []
        func field(_ f: Field, _ v: DBusValue) { fields.append(.structure([.byte(f.rawValue), .variant(v)])) }
        if let p = path {
            guard isValidObjectPath(p) else { throw .invalidValue("object path \"\(p)\"") }
            field(.path, .objectPath(p))
        }
        if let i = interface {
            guard isValidInterfaceName(i) else { throw .invalidValue("interface name \"\(i)\"") }
            field(.interface, .string(i))
        }
        if let m = member {
            guard isValidMemberName(m) else { throw .invalidValue("member name \"\(m)\"") }
            field(.member, .string(m))
        }
        if let e = errorName {
            guard isValidInterfaceName(e) else { throw .invalidValue("error name \"\(e)\"") }
            field(.errorName, .string(e))
        }
        if let r = replySerial { field(.replySerial, .uint32(r)) }
        if let d = destination { field(.destination, .string(d)) }
        if let s = sender { field(.sender, .string(s)) }
        let sig = signature
        if !sig.isEmpty {
            guard sig.utf8.count <= 255 else { throw .invalidValue("body signature over 255 octets") }
            field(.signature, .signature(sig))
        }
        if !unixFDs.isEmpty { field(.unixFDs, .uint32(UInt32(unixFDs.count))) }

        var body = DBusEncoder(base: 0)
        for v in self.body { try body.encode(v) }

        var out = DBusEncoder(reserve: 64 + body.octets.count)
        out.octets.append(UInt8(ascii: "l"))
        out.octets.append(kind.code)
        out.octets.append(flags.rawValue)
        out.octets.append(1)
        out.put(UInt32(body.octets.count))
        out.put(serial)
        try out.encode(.array(.structure([.byte, .variant]), fields))
        out.pad(to: 8)
        out.octets.append(contentsOf: body.octets)
        guard out.octets.count <= DBusLimits.maxMessageLength else { throw .invalidValue("message over 128 MiB") }
        return out.octets
    }

    func checkRequiredFields() throws(DBusError) {
        switch kind {
        case .methodCall:
            guard path != nil, member != nil else { throw .invalidValue("a method call needs a path and a member") }
        case .signal:
            guard path != nil, interface != nil, member != nil else {
                throw .invalidValue("a signal needs a path, an interface and a member")
            }
        case .error:
            guard errorName != nil, replySerial != nil else {
                throw .invalidValue("an error needs an error name and a reply serial")
            }
        case .methodReturn:
            guard replySerial != nil else { throw .invalidValue("a method return needs a reply serial") }
        case .unknown(let c):
            throw .invalidValue("message type \(c)")
        }
    }

    /// How many octets the message at the start of `octets` takes, once its first 16 are in; nil before.
    /// Throws when the header cannot start a valid message.
    public static func frameLength(_ octets: ArraySlice<UInt8>, limit: Int = DBusLimits.maxMessageLength) throws(DBusError) -> Int? {
        guard octets.count >= 16 else { return nil }
        let s = octets.startIndex
        let big: Bool
        switch octets[s] {
        case UInt8(ascii: "l"): big = false
        case UInt8(ascii: "B"): big = true
        default: throw .malformed(0, "endianness octet \(octets[s])")
        }
        guard octets[s + 3] == 1 else { throw .malformed(3, "protocol version \(octets[s + 3])") }
        func u32(_ at: Int) -> Int {
            let b = (0..<4).map { UInt32(octets[s + at + $0]) }
            return Int(big ? (b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3]) : (b[3] << 24 | b[2] << 16 | b[1] << 8 | b[0]))
        }
        let bodyLength = u32(4)
        let fieldsLength = u32(12)
        guard bodyLength <= limit, fieldsLength <= DBusLimits.maxArrayLength else {
            throw .malformed(4, "message of \(bodyLength) + \(fieldsLength) octets is over the limit")
        }
        let headerEnd = 16 + fieldsLength
        let total = (headerEnd + 7) / 8 * 8 + bodyLength
        guard total <= limit else { throw .malformed(4, "message of \(total) octets is over the limit of \(limit)") }
        return total
    }

    /// Decodes one whole message (exactly `frameLength` octets). Descriptors are attached by the caller.
    public static func decode(_ octets: [UInt8]) throws(DBusError) -> DBusMessage {
        guard let total = try frameLength(octets[...]), total == octets.count else {
            throw .malformed(0, "not one whole message")
        }
        let big = octets[0] == UInt8(ascii: "B")
        var header = DBusDecoder(octets: octets, from: 4, to: octets.count, bigEndian: big)
        let bodyLength = Int(try header.get(UInt32.self))
        var message = DBusMessage(kind: Kind(code: octets[1]))
        message.flags = Flags(rawValue: octets[2])
        message.serial = try header.get(UInt32.self)
        guard message.serial != 0 else { throw .malformed(8, "serial 0") }
        let fields = try header.decode(.array(.structure([.byte, .variant])))
        try header.skipPadding(to: 8)
        guard octets.count - header.position == bodyLength else { throw .malformed(header.position, "body length") }
        var signature = ""
        var fdCount = 0
        for case .structure(let pair) in fields.arrayItems ?? [] {
            guard pair.count == 2, case .byte(let code) = pair[0], case .variant(let value) = pair[1] else { continue }
            guard let field = Field(rawValue: code) else { continue }   // unknown fields are ignored
            func expect(_ t: DBusType) throws(DBusError) {
                guard value.type == t else { throw .malformed(12, "header field \(code) of type \(value.type)") }
            }
            switch field {
            case .path: try expect(.objectPath); message.path = value.string
            case .interface:
                try expect(.string)
                guard let i = value.string, isValidInterfaceName(i) else { throw .malformed(12, "interface name") }
                message.interface = i
            case .member:
                try expect(.string)
                guard let m = value.string, isValidMemberName(m) else { throw .malformed(12, "member name") }
                message.member = m
            case .errorName: try expect(.string); message.errorName = value.string
            case .replySerial:
                try expect(.uint32)
                if case .uint32(let r) = value { message.replySerial = r }
            case .destination: try expect(.string); message.destination = value.string
            case .sender: try expect(.string); message.sender = value.string
            case .signature: try expect(.signature); signature = value.string ?? ""
            case .unixFDs:
                try expect(.uint32)
                if case .uint32(let n) = value { fdCount = Int(n) }
            }
        }
        if case .unknown = message.kind { return message }
        do { try message.checkRequiredFields() } catch { throw .malformed(12, "\(error)") }
        let types = try DBusType.parse(signature)
        var body = DBusDecoder(octets: octets, from: header.position, to: octets.count, bigEndian: big)
        for t in types { message.body.append(try body.decode(t)) }
        guard body.atEnd else { throw .malformed(body.position, "octets after the body's last value") }
        message.declaredFDCount = fdCount
        return message
    }

    /// UNIX_FDS from the header: how many descriptors the sender says came with the message.
    public internal(set) var declaredFDCount = 0
}

/// Spec: two or more elements of [A-Za-z_][A-Za-z0-9_]* separated by ".", at most 255 octets.
public func isValidInterfaceName(_ s: String) -> Bool {
    let o = Array(s.utf8)
    guard !o.isEmpty, o.count <= 255 else { return false }
    let parts = o.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
    guard parts.count >= 2 else { return false }
    for p in parts {
        guard let first = p.first, !(first >= 0x30 && first <= 0x39) else { return false }
        guard p.allSatisfy(isNameOctet) else { return false }
    }
    return true
}

/// Spec: [A-Za-z_][A-Za-z0-9_]*, at most 255 octets.
public func isValidMemberName(_ s: String) -> Bool {
    let o = Array(s.utf8)
    guard let first = o.first, o.count <= 255, !(first >= 0x30 && first <= 0x39) else { return false }
    return o.allSatisfy(isNameOctet)
}
