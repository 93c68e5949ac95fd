// DNS message structures (RFC 1035 §4.1) with the mDNS reinterpretations of the class field's top bit
// (RFC 6762 §5.4 unicast-response bit in questions, §10.2 cache-flush bit in records).
// Codecs live in DNSMessage+Wire.swift.

/// A resource-record type (RFC 1035 §3.2.2). Unknown values are kept.
public struct RRType: RawRepresentable, Hashable, Sendable, Comparable, CustomStringConvertible {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public static let a = RRType(rawValue: 1)
    public static let ptr = RRType(rawValue: 12)
    public static let hinfo = RRType(rawValue: 13)
    public static let txt = RRType(rawValue: 16)
    public static let aaaa = RRType(rawValue: 28)
    public static let srv = RRType(rawValue: 33)
    public static let nsec = RRType(rawValue: 47)
    /// QTYPE "*" (RFC 1035 §3.2.3), used by probes (RFC 6762 §8.1).
    public static let any = RRType(rawValue: 255)
    public static func < (a: RRType, b: RRType) -> Bool { a.rawValue < b.rawValue }
    public var description: String {
        switch self {
        case .a: return "A"
        case .ptr: return "PTR"
        case .hinfo: return "HINFO"
        case .txt: return "TXT"
        case .aaaa: return "AAAA"
        case .srv: return "SRV"
        case .nsec: return "NSEC"
        case .any: return "ANY"
        default: return "TYPE\(rawValue)"
        }
    }
}

/// Class IN (RFC 1035 §3.2.4), the only one mDNS uses.
public let dnsClassIN: UInt16 = 1

/// The 12-byte header (RFC 1035 §4.1.1). Counts are derived from the sections when encoding.
public struct DNSHeader: Hashable, Sendable {
    public var id: UInt16
    /// QR, Opcode, AA, TC, RD, RA, Z, RCODE in one field, as on the wire.
    public var flags: UInt16

    public init(id: UInt16 = 0, flags: UInt16 = 0) { self.id = id; self.flags = flags }

    public var isResponse: Bool {
        get { flags & 0x8000 != 0 }
        set { flags = newValue ? flags | 0x8000 : flags & ~0x8000 }
    }
    public var opcode: UInt8 { UInt8((flags >> 11) & 0xF) }
    public var isAuthoritative: Bool {
        get { flags & 0x0400 != 0 }
        set { flags = newValue ? flags | 0x0400 : flags & ~0x0400 }
    }
    public var isTruncated: Bool {
        get { flags & 0x0200 != 0 }
        set { flags = newValue ? flags | 0x0200 : flags & ~0x0200 }
    }
    public var rcode: UInt8 { UInt8(flags & 0xF) }

    /// An mDNS response: QR and AA set, ID 0 (RFC 6762 §18.1–18.4).
    public static let mdnsResponse = DNSHeader(id: 0, flags: 0x8400)
    /// An mDNS query: all zero (RFC 6762 §18).
    public static let mdnsQuery = DNSHeader(id: 0, flags: 0)
}

/// A question (RFC 1035 §4.1.2). `unicastResponse` is the QU bit, the top bit of QCLASS (RFC 6762 §5.4).
public struct DNSQuestion: Hashable, Sendable {
    public var name: DNSName
    public var type: RRType
    public var rrclass: UInt16
    public var unicastResponse: Bool

    public init(name: DNSName, type: RRType, rrclass: UInt16 = dnsClassIN, unicastResponse: Bool = false) {
        self.name = name; self.type = type; self.rrclass = rrclass; self.unicastResponse = unicastResponse
    }
}

/// Record data, one case per type we understand; anything else is kept as bytes.
public enum RData: Hashable, Sendable {
    /// RFC 1035 §3.4.1: 4 bytes.
    case a([UInt8])
    /// RFC 3596 §2.2: 16 bytes.
    case aaaa([UInt8])
    /// RFC 1035 §3.3.12.
    case ptr(DNSName)
    /// RFC 2782: priority, weight, port, target.
    case srv(priority: UInt16, weight: UInt16, port: UInt16, target: DNSName)
    /// RFC 1035 §3.3.14 / RFC 6763 §6: character-strings of ≤ 255 bytes. Empty RDATA decodes to `[[]]`.
    case txt([[UInt8]])
    /// RFC 4034 §4.1 as restricted by RFC 6762 §6.1: next name and the types that exist.
    case nsec(next: DNSName, types: [RRType])
    /// Any other type: RDATA bytes as received.
    case unknown([UInt8])
}

/// A resource record (RFC 1035 §4.1.3). `cacheFlush` is the top bit of CLASS (RFC 6762 §10.2).
public struct DNSRecord: Hashable, Sendable, CustomStringConvertible {
    public var name: DNSName
    public var type: RRType
    public var rrclass: UInt16
    public var cacheFlush: Bool
    public var ttl: UInt32
    public var rdata: RData

    public init(name: DNSName, type: RRType, rrclass: UInt16 = dnsClassIN, cacheFlush: Bool = false, ttl: UInt32, rdata: RData) {
        self.name = name; self.type = type; self.rrclass = rrclass; self.cacheFlush = cacheFlush; self.ttl = ttl; self.rdata = rdata
    }

    /// Same name, type, class and rdata: the identity RFC 6762 uses for "the same record" (§7.1, §10.2).
    public func sameRecord(as other: DNSRecord) -> Bool {
        type == other.type && rrclass == other.rrclass && name == other.name && rdata.canonicalBytes == other.rdata.canonicalBytes
    }

    public var description: String { "\(name) \(type) ttl=\(ttl)\(cacheFlush ? " flush" : "") \(rdata)" }
}

/// A whole message (RFC 1035 §4.1).
public struct DNSMessage: Hashable, Sendable {
    public var header: DNSHeader
    public var questions: [DNSQuestion]
    public var answers: [DNSRecord]
    public var authorities: [DNSRecord]
    public var additionals: [DNSRecord]

    public init(
        header: DNSHeader, questions: [DNSQuestion] = [], answers: [DNSRecord] = [],
        authorities: [DNSRecord] = [], additionals: [DNSRecord] = []
    ) {
        self.header = header; self.questions = questions; self.answers = answers
        self.authorities = authorities; self.additionals = additionals
    }
}
