import Testing
import BLEATT
import BLEWire
@testable import BLEGATT

private func hex(_ uuid: BluetoothUUID) -> String { uuid.littleEndianBytes.hexString }

@Test func exchangeMTU() throws {
    var s = try makeServer()
    let actions = s.handle(bytes: [0x02, 0x40, 0x00], from: alice)
    // Server Rx MTU 517 = 0x0205; the ATT_MTU becomes min(64, 517) = 64.
    #expect(actions == [.send(try ATTPDU.decode([0x03, 0x05, 0x02]), to: alice), .mtuChanged(client: alice, mtu: 64)])
    #expect(s.mtu(for: alice) == 64)
    #expect(s.mtu(for: bob) == 23)
    // Asked again: same answer, no change.
    #expect(s.handle(bytes: [0x02, 0x17, 0x00], from: alice) == [.send(try ATTPDU.decode([0x03, 0x05, 0x02]), to: alice)])
    #expect(s.mtu(for: alice) == 64)
}

@Test func readByGroupTypeDiscoversServices() throws {
    var s = try makeServer()
    // 16-bit services share one response; the 128-bit one has another length and comes next.
    #expect(s.exchange("10 0100 ffff 0028") == "11 06 0100 0500 0018 0600 0900 0118".filter { $0 != " " })
    #expect(s.exchange("10 0600 ffff 0028") == "1106" + "0600" + "0900" + "0118")
    #expect(s.exchange("10 0a00 ffff 0028") == "1114" + "0e00" + "1800" + hex(customService))
    #expect(s.exchange("10 1900 ffff 0028") == err(0x10, 0x19, 0x0A))
    #expect(s.exchange("10 0100 ffff 0128") == "1106" + "0a00" + "0d00" + "0f18")
    #expect(s.exchange("10 0100 ffff 0328") == err(0x10, 0x0001, 0x10))
    #expect(s.exchange("10 0000 ffff 0028") == err(0x10, 0x0000, 0x01))
    #expect(s.exchange("10 0500 0400 0028") == err(0x10, 0x0005, 0x01))
    // 128-bit group type form of 0x2800 is the same type.
    #expect(s.exchange("10 0100 ffff" + hex(BluetoothUUID.primaryService.expanded)) == "1106" + "0100" + "0500" + "0018" + "0600" + "0900" + "0118")
}

@Test func findByTypeValueDiscoversServicesByUUID() throws {
    var s = try makeServer()
    #expect(s.exchange("06 0100 ffff 0028 0018") == "07" + "0100" + "0500")
    #expect(s.exchange("06 0100 ffff 0028" + hex(customService)) == "07" + "0e00" + "1800")
    // The secondary Battery service is not a primary service.
    #expect(s.exchange("06 0100 ffff 0028 0f18") == err(0x06, 0x0001, 0x0A))
    #expect(s.exchange("06 0100 ffff 0128 0f18") == "07" + "0a00" + "0d00")
    // A 16-bit service searched by its 128-bit form.
    #expect(s.exchange("06 0100 ffff 0028" + hex(BluetoothUUID(0x1800).expanded)) == "07" + "0100" + "0500")
    // Non-grouping attributes: the group end is the handle itself.
    #expect(s.exchange("06 0100 ffff 002a 54657374") == "07" + "0300" + "0300")
    #expect(s.exchange("06 0000 ffff 0028 0018") == err(0x06, 0x0000, 0x01))
}

@Test func readByTypeDiscoversCharacteristicsAndIncludes() throws {
    var s = try makeServer()
    #expect(s.exchange("08 0100 0500 0328") == "0907" + "0200" + "020300002a" + "0400" + "020500012a")
    // From handle 6: two 7-octet entries; the next declaration (128-bit UUID) has another length.
    #expect(s.exchange("08 0600 ffff 0328") == "0907" + "0700" + "200800052a" + "0b00" + "120c00192a")
    #expect(s.exchange("08 0f00 ffff 0328") == "0915" + "1000" + "aa1100" + hex(greetingUUID))
    #expect(s.exchange("08 1100 ffff 0328") == "0907" + "1500" + "0e16003d2a" + "1700" + "0218003e2a")
    #expect(s.exchange("08 1800 ffff 0328") == err(0x08, 0x0018, 0x0A))
    #expect(s.exchange("08 0e00 1800 0228") == "0908" + "0f00" + "0a000d000f18")
    #expect(s.exchange("08 0100 ffff 0228") == "0908" + "0f00" + "0a000d000f18")
    #expect(s.exchange("08 0100 ffff 002a") == "0906" + "0300" + "54657374")
    #expect(s.exchange("08 0100 ffff" + hex(greetingUUID)) == "0907" + "1100" + "68656c6c6f")
    #expect(s.exchange("08 0100 ffff ffaa") == err(0x08, 0x0001, 0x0A))
    #expect(s.exchange("08 0200 0100 0328") == err(0x08, 0x0002, 0x01))
    // Read using characteristic UUID on a value that needs encryption.
    #expect(s.exchange("08 0100 ffff 3e2a") == err(0x08, 0x0018, 0x05))
}

@Test func readByTypeOfADynamicValueAsksTheApplication() throws {
    var s = try makeServer()
    let actions = s.handle(bytes: [UInt8](hexString: "08 0100 ffff 3d2a")!, from: alice)
    guard case let .readRequest(id, client, handle, offset) = actions.first, actions.count == 1 else {
        Issue.record("expected a read request, got \(actions)"); return
    }
    #expect(client == alice && handle == 22 && offset == 0)
    let done = s.completeRead(id: id, result: .success([1, 2, 3]))
    #expect(done == [.send(try ATTPDU.decode([UInt8](hexString: "09 05 1600 010203")!), to: alice)])
    // The id is spent.
    #expect(s.completeRead(id: id, result: .success([1])).isEmpty)
}

@Test func findInformationListsHandlesAndTypes() throws {
    var s = try makeServer()
    // Five 4-octet entries fill 2 + 20 = 22 of 23 octets.
    #expect(s.exchange("04 0100 0900") == "0501" + "01000028" + "02000328" + "0300002a" + "04000328" + "0500012a")
    #expect(s.exchange("04 1000 1400") == "0501" + "10000328")
    #expect(s.exchange("04 1100 1100") == "0502" + "1100" + hex(greetingUUID))
    #expect(s.exchange("04 1200 1400") == "0501" + "12000029" + "13000229" + "14000129")
    #expect(s.exchange("04 1900 ffff") == err(0x04, 0x0019, 0x0A))
    #expect(s.exchange("04 0000 0100") == err(0x04, 0x0000, 0x01))
    #expect(s.exchange("04 0200 0100") == err(0x04, 0x0002, 0x01))
}

@Test func malformedAndUnsupportedPDUs() throws {
    var s = try makeServer()
    #expect(s.exchange("3f 00") == err(0x3F, 0x0000, 0x06))
    #expect(s.handle(bytes: [0x7F, 0x00], from: alice).isEmpty, "unknown commands are ignored")
    #expect(s.exchange("0a 03") == err(0x0A, 0x0000, 0x04))
    #expect(s.exchange("04 0100 ff") == err(0x04, 0x0000, 0x04))
    #expect(s.exchange("0e 0300") == err(0x0E, 0x0000, 0x04))
    #expect(s.exchange("08 0100 ffff 00280000") == err(0x08, 0x0000, 0x04))
    #expect(s.handle(bytes: [0x52, 0x01], from: alice).isEmpty, "a malformed command gets no answer")
    #expect(s.handle(bytes: [], from: alice).isEmpty)
    // Signed writes are ignored until signing keys exist.
    #expect(s.handle(bytes: [0xD2, 0x11, 0x00, 0x41] + Array(repeating: 0, count: 12), from: alice).isEmpty)
    #expect(s.exchange("0a 1100") == "0b" + Array("hello".utf8).hexString)
    // A response sent to the server role.
    #expect(s.handle(bytes: [0x13], from: alice) == [.protocolError(client: alice, .wrongRole(.writeResponse))])
}
