// The DNS message codec (RFC 1035 §4.1), big-endian.
//
// Encoding compresses names (RFC 1035 §4.1.4) in owner names, PTR targets and SRV targets (RFC 6762 §18.14
// allows compression in SRV for mDNS). Decoding follows pointers only strictly backwards and at most 128
// times per name, so loops and forward pointers are refused rather than followed; every read past the end
// throws `.truncated`. Memory is bounded by the datagram: each question takes ≥ 5 bytes and each record ≥ 11,
// so a huge count in the header simply runs into `.truncated`.

// MARK: - Writer

/// Builds a message; remembers where each name suffix was written for compression.
struct DNSWriter {
    private(set) var bytes: [UInt8] = []
    private var offsets: [[[UInt8]]: Int] = [:]

    mutating func u8(_ v: UInt8) { bytes.append(v) }
    mutating func u16(_ v: UInt16) { bytes.append(UInt8(v >> 8)); bytes.append(UInt8(v & 0xFF)) }
    mutating func u32(_ v: UInt32) { u16(UInt16(v >> 16)); u16(UInt16(v & 0xFFFF)) }
    mutating func raw(_ b: [UInt8]) { bytes += b }

    /// Writes `name`, replacing the longest suffix already written by a pointer.
    mutating func name(_ name: DNSName, compress: Bool = true) {
        let canonical = name.canonicalLabels
        for i in 0..<name.labels.count {
            let suffix = Array(canonical[i...])
            if compress, let offset = offsets[suffix] {
                u16(0xC000 | UInt16(offset))
                return
            }
            if compress, bytes.count < 0x3FFF { offsets[suffix] = bytes.count }
            u8(UInt8(name.labels[i].count))
            raw(name.labels[i])
        }
        u8(0)
    }

    mutating func patchU16(at index: Int, _ v: UInt16) {
        bytes[index] = UInt8(v >> 8); bytes[index + 1] = UInt8(v & 0xFF)
    }
}

// MARK: - Reader

/// Reads a message; every shortfall throws `.truncated`.
struct DNSReader {
    let bytes: [UInt8]
    var index: Int = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var remaining: Int { bytes.count - index }

    mutating func u8(_ what: String) throws(DNSDecodingError) -> UInt8 {
        guard index < bytes.count else { throw .truncated(offset: index, expected: what) }
        defer { index += 1 }
        return bytes[index]
    }
    mutating func u16(_ what: String) throws(DNSDecodingError) -> UInt16 {
        guard index + 2 <= bytes.count else { throw .truncated(offset: index, expected: what) }
        defer { index += 2 }
        return UInt16(bytes[index]) << 8 | UInt16(bytes[index + 1])
    }
    mutating func u32(_ what: String) throws(DNSDecodingError) -> UInt32 {
        let hi = try u16(what)
        let lo = try u16(what)
        return UInt32(hi) << 16 | UInt32(lo)
    }
    mutating func raw(_ count: Int, _ what: String) throws(DNSDecodingError) -> [UInt8] {
        guard count >= 0, index + count <= bytes.count else { throw .truncated(offset: index, expected: what) }
        defer { index += count }
        return Array(bytes[index..<index + count])
    }

    /// Reads a possibly compressed name. Pointers must point strictly before the position where the
    /// pointer itself sits (and so before every label read so far), which rules out loops.
    mutating func name() throws(DNSDecodingError) -> DNSName {
        let start = index
        var labels: [[UInt8]] = []
        var wireLength = 1
        var cursor = index
        var jumped = false
        var hops = 0
        var lowestAllowed = index   // a pointer must target below every position visited so far
        while true {
            guard cursor < bytes.count else { throw .truncated(offset: cursor, expected: "name label length") }
            let len = bytes[cursor]
            switch len & 0xC0 {
            case 0x00:
                if len == 0 {
                    cursor += 1
                    if !jumped { index = cursor }
                    return DNSName(uncheckedLabels: labels)
                }
                let l = Int(len)
                guard cursor + 1 + l <= bytes.count else { throw .truncated(offset: cursor + 1, expected: "name label") }
                wireLength += l + 1
                if wireLength > 255 { throw .nameTooLong(offset: start) }
                labels.append(Array(bytes[(cursor + 1)..<(cursor + 1 + l)]))
                cursor += 1 + l
            case 0xC0:
                guard cursor + 2 <= bytes.count else { throw .truncated(offset: cursor, expected: "compression pointer") }
                let target = Int(UInt16(len & 0x3F) << 8 | UInt16(bytes[cursor + 1]))
                guard target < lowestAllowed else { throw .badPointer(offset: cursor, target: target) }
                hops += 1
                if hops > 128 { throw .tooManyPointers(offset: start) }
                if !jumped { index = cursor + 2; jumped = true }
                lowestAllowed = target
                cursor = target
            default:
                throw .badLabelType(offset: cursor, byte: len)
            }
        }
    }
}

// MARK: - Records

extension RData {
    /// Uncompressed RDATA with names lowercased: the form RFC 6762 §8.2 compares and §7.1 matches.
    public var canonicalBytes: [UInt8] {
        var w = DNSWriter()
        encode(into: &w, compress: false, canonical: true)
        return w.bytes
    }

    func encode(into w: inout DNSWriter, compress: Bool, canonical: Bool = false) {
        func name(_ n: DNSName, _ allow: Bool) {
            if canonical { w.raw(n.canonicalWire) } else { w.name(n, compress: compress && allow) }
        }
        switch self {
        case .a(let b), .aaaa(let b), .unknown(let b):
            w.raw(b)
        case .ptr(let target):
            name(target, true)
        case .srv(let priority, let weight, let port, let target):
            w.u16(priority); w.u16(weight); w.u16(port)
            name(target, true)
        case .txt(let strings):
            if strings.isEmpty { w.u8(0) }   // RFC 6763 §6.1: never empty RDATA
            for s in strings { w.u8(UInt8(min(s.count, 255))); w.raw(Array(s.prefix(255))) }
        case .nsec(let next, let types):
            name(next, false)   // RFC 4034 §4.1.1: not compressed
            NSECBitmap.encode(types, into: &w)
        }
    }

    static func decode(type: RRType, length: Int, from r: inout DNSReader) throws(DNSDecodingError) -> RData {
        let start = r.index
        guard length <= r.remaining else { throw .truncated(offset: r.index, expected: "RDATA of \(length) bytes") }
        let end = start + length
        let result: RData
        switch type {
        case .a:
            guard length == 4 else { throw .badRData(type: type.rawValue, offset: start, reason: "A needs 4 bytes, has \(length)") }
            result = .a(try r.raw(4, "A"))
        case .aaaa:
            guard length == 16 else { throw .badRData(type: type.rawValue, offset: start, reason: "AAAA needs 16 bytes, has \(length)") }
            result = .aaaa(try r.raw(16, "AAAA"))
        case .ptr:
            result = .ptr(try r.name())
        case .srv:
            let priority = try r.u16("SRV priority")
            let weight = try r.u16("SRV weight")
            let port = try r.u16("SRV port")
            result = .srv(priority: priority, weight: weight, port: port, target: try r.name())
        case .txt:
            var strings: [[UInt8]] = []
            while r.index < end {
                let l = Int(try r.u8("TXT string length"))
                guard r.index + l <= end else { throw .badRData(type: type.rawValue, offset: r.index, reason: "TXT string overruns RDATA") }
                strings.append(try r.raw(l, "TXT string"))
            }
            result = .txt(strings.isEmpty ? [[]] : strings)
        case .nsec:
            let next = try r.name()
            guard r.index <= end else { throw .badRData(type: type.rawValue, offset: start, reason: "NSEC name overruns RDATA") }
            result = .nsec(next: next, types: try NSECBitmap.decode(&r, end: end))
        default:
            result = .unknown(try r.raw(length, "RDATA"))
        }
        guard r.index == end else {
            throw .badRData(type: type.rawValue, offset: start, reason: "RDATA length \(length) but \(r.index - start) bytes used")
        }
        return result
    }
}

/// The NSEC type bitmap (RFC 4034 §4.1.2): window blocks of up to 32 bytes.
enum NSECBitmap {
    static func encode(_ types: [RRType], into w: inout DNSWriter) {
        let sorted = Set(types.map(\.rawValue)).sorted()
        var window = -1
        var bitmap: [UInt8] = []
        func flush() {
            guard window >= 0, !bitmap.isEmpty else { return }
            w.u8(UInt8(window)); w.u8(UInt8(bitmap.count)); w.raw(bitmap)
        }
        for t in sorted {
            let win = Int(t >> 8)
            if win != window { flush(); window = win; bitmap = [] }
            let bit = Int(t & 0xFF)
            while bitmap.count <= bit / 8 { bitmap.append(0) }
            bitmap[bit / 8] |= 0x80 >> UInt8(bit % 8)
        }
        flush()
    }

    static func decode(_ r: inout DNSReader, end: Int) throws(DNSDecodingError) -> [RRType] {
        var types: [RRType] = []
        while r.index < end {
            let window = try r.u8("NSEC window")
            let count = Int(try r.u8("NSEC bitmap length"))
            guard count >= 1, count <= 32, r.index + count <= end else {
                throw .badRData(type: RRType.nsec.rawValue, offset: r.index, reason: "bad bitmap length \(count)")
            }
            let bitmap = try r.raw(count, "NSEC bitmap")
            for (i, byte) in bitmap.enumerated() {
                for bit in 0..<8 where byte & (0x80 >> UInt8(bit)) != 0 {
                    types.append(RRType(rawValue: UInt16(window) << 8 | UInt16(i * 8 + bit)))
                }
            }
        }
        return types
    }
}

// MARK: - Messages

extension DNSMessage {
    /// Encodes with name compression. Counts come from the sections.
    public func encode() -> [UInt8] {
        var w = DNSWriter()
        w.u16(header.id); w.u16(header.flags)
        w.u16(UInt16(questions.count)); w.u16(UInt16(answers.count))
        w.u16(UInt16(authorities.count)); w.u16(UInt16(additionals.count))
        for q in questions {
            w.name(q.name)
            w.u16(q.type.rawValue)
            w.u16((q.rrclass & 0x7FFF) | (q.unicastResponse ? 0x8000 : 0))
        }
        for rr in answers + authorities + additionals { DNSMessage.encode(rr, into: &w) }
        return w.bytes
    }

    static func encode(_ rr: DNSRecord, into w: inout DNSWriter) {
        w.name(rr.name)
        w.u16(rr.type.rawValue)
        w.u16((rr.rrclass & 0x7FFF) | (rr.cacheFlush ? 0x8000 : 0))
        w.u32(rr.ttl)
        let lengthAt = w.bytes.count
        w.u16(0)
        rr.rdata.encode(into: &w, compress: true)
        w.patchU16(at: lengthAt, UInt16(w.bytes.count - lengthAt - 2))
    }

    /// Decodes a whole datagram. Trailing bytes after the last record are ignored (RFC 6762 §18 is silent;
    /// we are liberal).
    public init(decoding bytes: [UInt8]) throws(DNSDecodingError) {
        var r = DNSReader(bytes)
        let id = try r.u16("header ID")
        let flags = try r.u16("header flags")
        let qd = Int(try r.u16("QDCOUNT"))
        let an = Int(try r.u16("ANCOUNT"))
        let ns = Int(try r.u16("NSCOUNT"))
        let ar = Int(try r.u16("ARCOUNT"))
        var questions: [DNSQuestion] = []
        for _ in 0..<qd {
            let name = try r.name()
            let type = RRType(rawValue: try r.u16("QTYPE"))
            let cls = try r.u16("QCLASS")
            questions.append(DNSQuestion(name: name, type: type, rrclass: cls & 0x7FFF, unicastResponse: cls & 0x8000 != 0))
        }
        func records(_ n: Int) throws(DNSDecodingError) -> [DNSRecord] {
            var out: [DNSRecord] = []
            for _ in 0..<n {
                let name = try r.name()
                let type = RRType(rawValue: try r.u16("TYPE"))
                let cls = try r.u16("CLASS")
                let ttl = try r.u32("TTL")
                let length = Int(try r.u16("RDLENGTH"))
                let rdata = try RData.decode(type: type, length: length, from: &r)
                out.append(DNSRecord(name: name, type: type, rrclass: cls & 0x7FFF, cacheFlush: cls & 0x8000 != 0, ttl: ttl, rdata: rdata))
            }
            return out
        }
        let answers = try records(an)
        let authorities = try records(ns)
        let additionals = try records(ar)
        self.init(
            header: DNSHeader(id: id, flags: flags), questions: questions, answers: answers,
            authorities: authorities, additionals: additionals)
    }
}
