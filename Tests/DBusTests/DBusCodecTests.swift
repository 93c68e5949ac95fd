// The D-Bus codec on bytes: signatures, values, messages in both byte orders, every prefix, bad input.
import Testing
@testable import DBus

@Suite struct DBusSignatureTests {
    @Test func parsesEveryKindOfType() throws {
        let types = try DBusType.parse("ya{sv}(ii)aayvoghb")
        #expect(
            types == [
                .byte, .dictionary(key: .string, value: .variant), .structure([.int32, .int32]),
                .array(.array(.byte)), .variant, .objectPath, .signature, .unixFD, .boolean,
            ])
        #expect(dbusSignature(types) == "ya{sv}(ii)aayvoghb")
    }

    @Test(arguments: [
        "a", "(", "()", "(i", "a{vs}", "{ss}", "a{s}", "a{sss}", "z", "a{(i)s}",
        String(repeating: "a", count: 33) + "y", String(repeating: "(", count: 33) + "y" + String(repeating: ")", count: 33),
        String(repeating: "y", count: 256),
    ])
    func refusesInvalidSignatures(_ s: String) {
        #expect(throws: DBusError.self) { try DBusType.parse(s) }
    }

    @Test func acceptsTheDeepestAllowedNesting() throws {
        _ = try DBusType.parse(String(repeating: "a", count: 32) + "y")
        _ = try DBusType.parse(String(repeating: "(", count: 32) + "y" + String(repeating: ")", count: 32))
    }
}

@Suite struct DBusValueCodecTests {
    static let samples: [DBusValue] = [
        .byte(7), .boolean(true), .int16(-2), .uint16(65000), .int32(-70000), .uint32(4_000_000_000),
        .int64(-1 << 40), .uint64(1 << 63), .double(3.25), .string("héllo"), .objectPath("/org/bluez/hci0"),
        .signature("a{sv}"), .unixFD(0), .variant(.uint16(5)), .bytes([1, 2, 3]),
        .array(.string, [.string("a"), .string("bc")]), .array(.int64, []),
        .stringVariantDictionary(["Name": .string("x"), "RSSI": .int16(-40), "UUIDs": .array(.string, [.string("180d")])]),
        .structure([.byte(1), .variant(.structure([.string("deep"), .bytes([])])), .int64(9)]),
        .dictionary(key: .uint16, value: .array(.byte), [DBusDictEntry(.uint16(0x4c), .bytes([9, 9]))]),
    ]

    @Test(arguments: samples)
    func roundTripsAtEveryAlignment(_ value: DBusValue) throws {
        for base in 0..<8 {
            var e = DBusEncoder(base: base)
            try e.encode(value)
            let octets = [UInt8](repeating: 0, count: base) + e.octets
            var d = DBusDecoder(octets: octets, from: base, to: octets.count, bigEndian: false)
            #expect(try d.decode(value.type) == value)
            #expect(d.atEnd)
        }
    }

    @Test func everyTruncationFailsCleanly() throws {
        for value in Self.samples {
            var e = DBusEncoder()
            try e.encode(value)
            for cut in 0..<e.octets.count {
                var d = DBusDecoder(octets: Array(e.octets[..<cut]), from: 0, to: cut, bigEndian: false)
                // A shorter input either fails or (for an array/string prefix) cannot end at the same place.
                if let v = try? d.decode(value.type) { #expect(v != value || cut == e.octets.count) }
            }
        }
    }

    @Test func refusesWhatTheSpecForbids() {
        func decode(_ octets: [UInt8], _ type: DBusType) throws -> DBusValue {
            var d = DBusDecoder(octets: octets, from: 0, to: octets.count, bigEndian: false)
            return try d.decode(type)
        }
        #expect(throws: DBusError.self) { try decode([2, 0, 0, 0], .boolean) }   // boolean 2
        #expect(throws: DBusError.self) { try decode([1, 0, 0, 0, 0x61, 1], .string) }   // no NUL
        #expect(throws: DBusError.self) { try decode([2, 0, 0, 0, 0x61, 0, 0x62, 0], .string) }   // NUL inside
        #expect(throws: DBusError.self) { try decode([2, 0, 0, 0, 0xC3, 0x28, 0], .string) }   // not UTF-8
        #expect(throws: DBusError.self) { try decode([2, 0, 0, 0, 0x2F, 0x2F, 0], .objectPath) }   // "//"
        #expect(throws: DBusError.self) { try decode([0xFF, 0xFF, 0xFF, 0x0F], .array(.byte)) }   // 256 MiB
        #expect(throws: DBusError.self) { try decode([1, 0x7A, 0], .variant) }   // bad type
        #expect(throws: DBusError.self) { try decode([1, 0x7A, 0], .signature) }
        #expect(throws: DBusError.self) { try decode([7, 1, 0, 0, 0, 0, 0, 0, 5], .structure([.byte, .uint32])) }   // padding ≠ 0
        // A variant inside a variant… 70 deep: refused, not a stack overflow.
        var nested: [UInt8] = []
        for _ in 0..<70 { nested += [1, UInt8(ascii: "v"), 0] }
        nested += [1, UInt8(ascii: "y"), 0, 5]
        #expect(throws: DBusError.self) { try decode(nested, .variant) }
    }

    @Test func refusesUnsendableValues() {
        var e = DBusEncoder()
        #expect(throws: DBusError.self) { try e.encode(.objectPath("no/slash")) }
        #expect(throws: DBusError.self) { try e.encode(.string("a\u{0}b")) }
        #expect(throws: DBusError.self) { try e.encode(.array(.string, [.int32(1)])) }
        #expect(throws: DBusError.self) { try e.encode(.structure([])) }
    }
}

@Suite struct DBusMessageTests {
    @Test func aMethodCallRoundTrips() throws {
        var call = DBusMessage.methodCall(
            destination: "org.bluez", path: "/org/bluez/hci0", interface: "org.bluez.Adapter1",
            member: "SetDiscoveryFilter",
            body: [.stringVariantDictionary(["Transport": .string("le"), "DuplicateData": .boolean(false)])])
        call.flags = [.noAutoStart]
        let octets = try call.encoded(serial: 42)
        #expect(octets.count % 1 == 0 && octets[0] == UInt8(ascii: "l") && octets[1] == 1 && octets[3] == 1)
        #expect(try DBusMessage.frameLength(octets[...]) == octets.count)
        let back = try DBusMessage.decode(octets)
        #expect(back.kind == .methodCall && back.serial == 42 && back.flags == [.noAutoStart])
        #expect(back.path == "/org/bluez/hci0" && back.interface == "org.bluez.Adapter1" && back.member == "SetDiscoveryFilter")
        #expect(back.destination == "org.bluez" && back.signature == "a{sv}" && back.body == call.body)
    }

    /// A method return written by hand in big-endian order from the spec's layout: "B", type 2, flags 0,
    /// version 1, body 7 octets, serial 7; fields REPLY_SERIAL=5 (u) and SIGNATURE="s"; body the string "hi".
    @Test func decodesABigEndianMessageBuiltFromTheSpec() throws {
        var octets: [UInt8] = [0x42, 2, 0, 1, 0, 0, 0, 7, 0, 0, 0, 7]
        let fields: [UInt8] = [
            5, 1, 0x75, 0, 0, 0, 0, 5,   // (y=5, v=<u 5>)
            8, 1, 0x67, 0, 1, 0x73, 0,
        ]   // (y=8, v=<g "s">)
        octets += [0, 0, 0, UInt8(fields.count)] + fields
        while octets.count % 8 != 0 { octets.append(0) }
        octets += [0, 0, 0, 2, 0x68, 0x69, 0]
        octets[4...7] = [0, 0, 0, 7]
        let m = try DBusMessage.decode(octets)
        #expect(m.kind == .methodReturn && m.serial == 7 && m.replySerial == 5 && m.body == [.string("hi")])
    }

    @Test func everyPrefixIsNeedMoreOrAnError() throws {
        let signal = DBusMessage.signal(
            path: "/org/bluez/hci0/dev_00_11_22_33_44_55", interface: "org.freedesktop.DBus.Properties",
            member: "PropertiesChanged",
            body: [.string("org.bluez.Device1"), .stringVariantDictionary(["RSSI": .int16(-60)]), .array(.string, [])])
        let octets = try signal.encoded(serial: 3)
        for cut in 0..<octets.count {
            if let length = try DBusMessage.frameLength(octets[..<cut]) { #expect(length > cut) }
            #expect(throws: DBusError.self) { try DBusMessage.decode(Array(octets[..<cut])) }
        }
        #expect(try DBusMessage.decode(octets).body == signal.body)
    }

    @Test func refusesMessagesWithoutTheirRequiredFieldsOrOverTheLimit() throws {
        var m = DBusMessage(kind: .methodCall)
        m.member = "Hello"
        #expect(throws: DBusError.self) { try m.encoded(serial: 1) }   // no path
        var ok = DBusMessage.methodCall(destination: nil, path: "/", interface: nil, member: "Ping")
        #expect(throws: DBusError.self) { try ok.encoded(serial: 0) }
        var octets = try ok.encoded(serial: 1)
        octets[0] = UInt8(ascii: "x")
        #expect(throws: DBusError.self) { try DBusMessage.frameLength(octets[...]) }
        octets[0] = UInt8(ascii: "l")
        octets[4...7] = [0, 0, 0, 0x10]   // a body of 256 MiB
        #expect(throws: DBusError.self) { try DBusMessage.frameLength(octets[...]) }
        ok.member = "9bad"
        #expect(throws: DBusError.self) { try ok.encoded(serial: 1) }
    }

    @Test func unknownHeaderFieldsAreIgnoredAndUnknownKindsKept() throws {
        let call = DBusMessage.methodCall(destination: nil, path: "/a", interface: nil, member: "M")
        var octets = try call.encoded(serial: 9)
        octets[1] = 9   // a message type from the future
        let m = try DBusMessage.decode(octets)
        #expect(m.kind == .unknown(9))
    }

    @Test func namesAreValidatedAsTheSpecSays() {
        #expect(isValidInterfaceName("org.bluez.Adapter1"))
        #expect(!isValidInterfaceName("bluez"))
        #expect(!isValidInterfaceName("org..bluez"))
        #expect(!isValidInterfaceName("org.1bluez"))
        #expect(isValidMemberName("StartNotify"))
        #expect(!isValidMemberName("Start-Notify"))
        #expect(isValidObjectPath("/"))
        #expect(!isValidObjectPath("/a/"))
        #expect(!isValidObjectPath(""))
    }
}

@Suite struct DBusAuthTests {
    @Test func externalWithDescriptorPassing() throws {
        var auth = DBusAuthClient(uid: 1000, negotiateUnixFDs: true)
        #expect(auth.opening == [0] + Array("AUTH EXTERNAL 31303030\r\n".utf8))
        #expect(try auth.receive(line: "OK 1234deadbeef") == .send(Array("NEGOTIATE_UNIX_FD\r\n".utf8)))
        #expect(try auth.receive(line: "AGREE_UNIX_FD") == .begin(Array("BEGIN\r\n".utf8), unixFDs: true, guid: "1234deadbeef"))
        #expect(auth.state == .authenticated)
    }

    @Test func aBusWithoutDescriptorPassingStillBegins() throws {
        var auth = DBusAuthClient(uid: 0, negotiateUnixFDs: true)
        _ = try auth.receive(line: "OK abc")
        #expect(try auth.receive(line: "ERROR not supported") == .begin(Array("BEGIN\r\n".utf8), unixFDs: false, guid: "abc"))
    }

    @Test func rejectionAndNonsenseFail() {
        var a = DBusAuthClient(uid: 0, negotiateUnixFDs: false)
        #expect(throws: DBusError.self) { try a.receive(line: "REJECTED DBUS_COOKIE_SHA1") }
        var b = DBusAuthClient(uid: 0, negotiateUnixFDs: false)
        #expect(throws: DBusError.self) { try b.receive(line: "HTTP/1.1 400 Bad Request") }
    }
}
