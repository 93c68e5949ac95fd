import Testing
@testable import DNSSD

/// The codec: round trips, compression, pointer protection, every-prefix truncation (STYLE habit 4).
@Suite struct DNSCodecTests {
    static func name(_ s: String) -> DNSName { try! DNSName(s) }

    static let sample: DNSMessage = {
        let type = name("_foo._tcp.local")
        let instance = try! DNSName(labels: [Array("My Mac.v2 (é)".utf8)] + type.labels)
        let host = name("6F1C.local")
        return DNSMessage(
            header: .mdnsResponse,
            questions: [DNSQuestion(name: type, type: .ptr, unicastResponse: true)],
            answers: [
                DNSRecord(name: type, type: .ptr, ttl: 4500, rdata: .ptr(instance)),
                DNSRecord(name: instance, type: .srv, cacheFlush: true, ttl: 120, rdata: .srv(priority: 1, weight: 2, port: 8080, target: host)),
                DNSRecord(name: instance, type: .txt, cacheFlush: true, ttl: 4500, rdata: .txt([Array("a=1".utf8), Array("flag".utf8)])),
            ],
            authorities: [DNSRecord(name: instance, type: .txt, ttl: 4500, rdata: .txt([[]]))],
            additionals: [
                DNSRecord(name: host, type: .a, cacheFlush: true, ttl: 120, rdata: .a([10, 0, 0, 1])),
                DNSRecord(name: host, type: .aaaa, cacheFlush: true, ttl: 120, rdata: .aaaa([0xfe, 0x80] + Array(repeating: 0, count: 13) + [1])),
                DNSRecord(name: instance, type: .nsec, cacheFlush: true, ttl: 120, rdata: .nsec(next: instance, types: [.txt, .srv, RRType(rawValue: 300)])),
                DNSRecord(name: host, type: RRType(rawValue: 99), ttl: 7, rdata: .unknown([1, 2, 3])),
            ])
    }()

    @Test func roundTrip() throws {
        let bytes = Self.sample.encode()
        let decoded = try DNSMessage(decoding: bytes)
        #expect(decoded.header == Self.sample.header)
        #expect(decoded.questions == Self.sample.questions)
        #expect(decoded.answers == Self.sample.answers)
        #expect(decoded.authorities == Self.sample.authorities)
        // NSEC types come back sorted.
        var expected = Self.sample.additionals
        expected[2].rdata = .nsec(next: expected[2].name, types: [.txt, .srv, RRType(rawValue: 300)].sorted())
        #expect(decoded.additionals == expected)
        #expect(decoded.encode() == bytes)
    }

    @Test func compressionShrinksAndPointsBackwards() throws {
        let bytes = Self.sample.encode()
        var uncompressed = 12
        for q in Self.sample.questions { uncompressed += q.name.wireLength + 4 }
        for rr in Self.sample.answers + Self.sample.authorities + Self.sample.additionals {
            uncompressed += rr.name.wireLength + 10 + rr.rdata.canonicalBytes.count
        }
        #expect(bytes.count * 10 < uncompressed * 6)   // 239 vs 424 bytes for this sample
        #expect(bytes.contains(0xC0))
    }

    @Test func namesCompareCaseInsensitively() throws {
        #expect(Self.name("_FOO._Tcp.LOCAL") == Self.name("_foo._tcp.local."))
        #expect(Set([Self.name("A.local"), Self.name("a.LOCAL")]).count == 1)
        // Non-ASCII bytes are compared exactly.
        #expect(Self.name("É.local") != Self.name("é.local"))
        let escaped = try DNSName(labels: [Array("a.b\\c".utf8), Array("local".utf8)])
        #expect(escaped.description == "a\\.b\\\\c.local.")
        #expect(try DNSName(escaped.description) == escaped)
    }

    @Test func everyPrefixIsTruncated() {
        let bytes = Self.sample.encode()
        for n in 0..<bytes.count {
            do {
                _ = try DNSMessage(decoding: Array(bytes[..<n]))
                Issue.record("prefix of \(n) bytes decoded")
            } catch {
                guard case .truncated = error else { Issue.record("prefix \(n): \(error)"); continue }
            }
        }
    }

    @Test func pointerLoopsAndForwardPointersAreRefused() {
        let header: [UInt8] = [0, 0, 0x84, 0, 0, 1, 0, 0, 0, 0, 0, 0]
        // Pointer to itself.
        #expect(throws: DNSDecodingError.badPointer(offset: 12, target: 12)) { try DNSMessage(decoding: header + [0xC0, 12, 0, 12, 0, 1]) }
        // Forward pointer.
        #expect(throws: DNSDecodingError.badPointer(offset: 12, target: 20)) { try DNSMessage(decoding: header + [0xC0, 20, 0, 12, 0, 1, 0, 0, 1, 0]) }
        // Two pointers pointing at each other: the second jump is forward of the first target.
        let loop: [UInt8] = header + [0xC0, 14, 0xC0, 12, 0, 1, 0, 1]
        #expect(throws: DNSDecodingError.self) { try DNSMessage(decoding: loop) }
        // A label followed by a pointer back to the label: a loop through the name itself.
        #expect(throws: DNSDecodingError.badPointer(offset: 14, target: 12)) { try DNSMessage(decoding: header + [1, 0x61, 0xC0, 12, 0, 1, 0, 1]) }
        // Reserved label types.
        #expect(throws: DNSDecodingError.badLabelType(offset: 12, byte: 0x41)) { try DNSMessage(decoding: header + [0x41, 0, 0, 1, 0, 1]) }
    }

    @Test func longNamesAreRefused() {
        var body: [UInt8] = []
        for _ in 0..<5 { body += [63] + Array(repeating: 0x61, count: 63) }
        body += [0, 0, 1, 0, 1]
        let header: [UInt8] = [0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]
        #expect(throws: DNSDecodingError.nameTooLong(offset: 12)) { try DNSMessage(decoding: header + body) }
        #expect(throws: DNSEncodingError.self) { try DNSName(labels: Array(repeating: Array(repeating: 0x61, count: 63), count: 5)) }
        #expect(throws: DNSEncodingError.self) { try DNSName(labels: [Array(repeating: 0x61, count: 64)]) }
    }

    @Test func hugeCountsFailFastWithoutAllocating() {
        let header: [UInt8] = [0, 0, 0x84, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]
        #expect(throws: DNSDecodingError.truncated(offset: 12, expected: "name label length")) { try DNSMessage(decoding: header) }
    }

    @Test func badRDataLengths() {
        let header: [UInt8] = [0, 0, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0]
        let aWith3: [UInt8] = header + [0, 0, 1, 0, 1, 0, 0, 0, 120, 0, 3, 1, 2, 3]
        #expect(throws: DNSDecodingError.self) { try DNSMessage(decoding: aWith3) }
        // TXT string overrunning its RDATA.
        let txt: [UInt8] = header + [0, 0, 16, 0, 1, 0, 0, 0, 120, 0, 2, 5, 0x61]
        #expect(throws: DNSDecodingError.self) { try DNSMessage(decoding: txt) }
        // PTR whose name is shorter than RDLENGTH.
        let ptr: [UInt8] = header + [0, 0, 12, 0, 1, 0, 0, 0, 120, 0, 3, 0, 0, 0]
        #expect(throws: DNSDecodingError.self) { try DNSMessage(decoding: ptr) }
    }

    @Test func randomGarbageNeverTraps() {
        var rng = SplitMix64(seed: 7)
        let base = Self.sample.encode()
        for _ in 0..<3000 {
            var bytes = base
            for _ in 0..<Int.random(in: 1...8, using: &rng) {
                bytes[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
            }
            _ = try? DNSMessage(decoding: bytes)
            let junk = (0..<Int.random(in: 0...64, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            _ = try? DNSMessage(decoding: junk)
        }
    }
}

/// TXT edge cases (RFC 6763 §6).
@Suite struct TXTRecordTests {
    @Test func emptyRecordIsOneZeroLengthString() throws {
        let txt = try TXTRecord([:])
        #expect(txt.rdata == .txt([[]]))
        let msg = DNSMessage(header: .mdnsResponse, answers: [DNSRecord(name: try DNSName("x.local"), type: .txt, ttl: 1, rdata: txt.rdata)])
        let bytes = msg.encode()
        #expect(Array(bytes.suffix(3)) == [0, 1, 0])   // RDLENGTH 1, one zero-length string
        // Zero-length RDATA from a sloppy sender decodes as the empty record too.
        var sloppy = bytes
        sloppy.removeLast(); sloppy[sloppy.count - 1] = 0
        let decoded = try DNSMessage(decoding: sloppy)
        #expect(decoded.answers[0].rdata == .txt([[]]))
        #expect(TXTRecord(rdataStrings: [[]]).dictionary.isEmpty)
    }

    @Test func keyValueForms() {
        let txt = TXTRecord(rdataStrings: [
            Array("Name=Bob".utf8), Array("flag".utf8), Array("empty=".utf8),
            Array("NAME=shadowed".utf8), Array("=nokey".utf8), Array("eq=a=b".utf8),
        ])
        #expect(txt.dictionary == ["Name": "Bob", "flag": "", "empty": "", "eq": "a=b"])
        #expect(txt.value(forKey: "name") == .some(Array("Bob".utf8)))
        #expect(txt.value(forKey: "FLAG") == .some(nil))
        #expect(txt.value(forKey: "missing") == .none)
    }

    @Test func stringLengthLimit() throws {
        let key = "k"
        let ok = String(repeating: "v", count: 253)   // "k=" + 253 = 255 bytes
        let txt = try TXTRecord([key: ok])
        #expect(txt.strings[0].count == 255)
        let bytes = DNSMessage(header: .mdnsResponse, answers: [DNSRecord(name: try DNSName("x.local"), type: .txt, ttl: 1, rdata: txt.rdata)]).encode()
        #expect(try DNSMessage(decoding: bytes).answers[0].rdata == txt.rdata)
        #expect(throws: DNSEncodingError.txtStringTooLong(length: 256)) { try TXTRecord([key: ok + "v"]) }
        #expect(TXTRecord.isValidKey("_d"))
        #expect(!TXTRecord.isValidKey("a=b"))
        #expect(!TXTRecord.isValidKey(""))
    }
}
