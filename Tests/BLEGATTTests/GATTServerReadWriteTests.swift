import Testing
import BLEATT
import BLEWire
@testable import BLEGATT

@Test func readsAndPermissionErrors() throws {
    var s = try makeServer()
    #expect(s.exchange("0a 0300") == "0b54657374")
    #expect(s.exchange("0a 0000") == err(0x0A, 0x0000, 0x01))
    #expect(s.exchange("0a 9900") == err(0x0A, 0x0099, 0x01))
    #expect(s.exchange("0a 0800") == err(0x0A, 0x0008, 0x02))
    // Needs encryption: no key yet → Insufficient Authentication (pair first).
    #expect(s.exchange("0a 1800") == err(0x0A, 0x0018, 0x05))
    // A bond exists but the link is not encrypted → Insufficient Encryption.
    s.updateSecurity(ATTSecurity(hasLongTermKey: true), for: alice)
    #expect(s.exchange("0a 1800") == err(0x0A, 0x0018, 0x0F))
    s.updateSecurity(.encryptedUnauthenticated, for: alice)
    #expect(s.exchange("0a 1800") == "0b" + Array(longValue.prefix(22)).hexString)
    // Bob's link is still plain.
    #expect(s.exchange("0a 1800", from: bob) == err(0x0A, 0x0018, 0x05))
}

@Test func keySizeAndAuthenticationRules() throws {
    #expect(
        ATTSecurity(encrypted: true, keySize: 7).check(encryption: true, authentication: false, minimumKeySize: 16)
            == .encryptionKeySizeTooShort)
    #expect(ATTSecurity.encryptedUnauthenticated.check(encryption: false, authentication: true) == .insufficientAuthentication)
    #expect(ATTSecurity.encryptedAuthenticated.check(encryption: true, authentication: true) == nil)
    #expect(ATTSecurity.none.check(encryption: false, authentication: false) == nil)
}

@Test func longReadsWithOffsets() throws {
    var s = try makeServer()
    s.updateSecurity(.encryptedUnauthenticated, for: alice)
    #expect(s.exchange("0c 1800 0000") == "0d" + Array(longValue[0..<22]).hexString)
    #expect(s.exchange("0c 1800 1600") == "0d" + Array(longValue[22..<44]).hexString)
    #expect(s.exchange("0c 1800 2c00") == "0d" + Array(longValue[44..<60]).hexString)
    #expect(s.exchange("0c 1800 3c00") == "0d", "offset == length gives an empty part")
    #expect(s.exchange("0c 1800 3d00") == err(0x0C, 0x0018, 0x07))
    // Fixed-length attributes that fit a Read Response are not long.
    #expect(s.exchange("0c 0d00 0000") == err(0x0C, 0x000D, 0x0B))
    #expect(s.exchange("0c 0200 0000") == err(0x0C, 0x0002, 0x0B))
    #expect(s.exchange("0c 0800 0000") == err(0x0C, 0x0008, 0x02))
    #expect(s.exchange("0c 4400 0000") == err(0x0C, 0x0044, 0x01))
    // With a larger ATT_MTU one Read gets all 60 octets.
    _ = s.handle(bytes: [0x02, 0x40, 0x00], from: alice)
    #expect(s.exchange("0a 1800") == "0b" + longValue.hexString)

    // Dynamic: the application gets the offset; the server cuts the answer to ATT_MTU − 1.
    let actions = s.handle(bytes: [UInt8](hexString: "0c 1600 0500")!, from: bob)
    guard case let .readRequest(id, _, 22, 5) = actions.first else { Issue.record("\(actions)"); return }
    let done = s.completeRead(id: id, result: .success(Array(repeating: 7, count: 30)))
    #expect(done == [.send(.readBlobResponse(ATTReadBlobResponse(partValue: Array(repeating: 7, count: 22))), to: bob)])
    let again = s.handle(bytes: [UInt8](hexString: "0c 1600 4000")!, from: bob)
    guard case let .readRequest(id2, _, _, _) = again.first else { Issue.record("\(again)"); return }
    #expect(
        s.completeRead(id: id2, result: .failure(.invalidOffset)) == [
            .send(
                .errorResponse(
                    ATTErrorResponse(requestOpcode: .readBlobRequest, handle: 22, error: .invalidOffset)), to: bob)
        ])
}

@Test func readMultipleAndVariable() throws {
    var s = try makeServer()
    #expect(s.exchange("0e 0300 0500") == "0f" + "54657374" + "4003")
    #expect(s.exchange("0e 0300 0800") == err(0x0E, 0x0008, 0x02))
    #expect(s.exchange("0e 0300 9900") == err(0x0E, 0x0099, 0x01))
    #expect(s.exchange("20 0300 0500") == "21" + "0400" + "54657374" + "0200" + "4003")
    // Cut at ATT_MTU − 1 = 22 octets: the length field keeps the full length.
    s.updateSecurity(.encryptedUnauthenticated, for: alice)
    #expect(s.exchange("20 1800 0300") == "21" + "3c00" + Array(longValue.prefix(20)).hexString)
    #expect(s.exchange("0e 1800 0300") == "0f" + Array(longValue.prefix(22)).hexString)

    // A dynamic value in the middle is fetched from the application, then the rest follows.
    let first = s.handle(bytes: [UInt8](hexString: "0e 0300 1600 0500")!, from: alice)
    guard case let .readRequest(id, _, 22, 0) = first.first else { Issue.record("\(first)"); return }
    #expect(
        s.completeRead(id: id, result: .success([0x09])) == [
            .send(
                .readMultipleResponse(
                    ATTReadMultipleResponse(values: Array("Test".utf8) + [0x09, 0x40, 0x03])), to: alice)
        ])
    let second = s.handle(bytes: [UInt8](hexString: "20 1600 0300")!, from: alice)
    guard case let .readRequest(id2, _, 22, 0) = second.first else { Issue.record("\(second)"); return }
    #expect(
        s.completeRead(id: id2, result: .failure(.application(0x80))) == [
            .send(
                .errorResponse(
                    ATTErrorResponse(requestOpcode: .readMultipleVariableRequest, handle: 22, error: ATTErrorCode(0x80))), to: alice)
        ])
}

@Test func writesToStoredValues() throws {
    var s = try makeServer()
    #expect(
        s.handle(bytes: [UInt8](hexString: "12 1100 6869")!, from: alice)
            == [.valueWritten(client: alice, handle: 17, value: [0x68, 0x69]), .send(.writeResponse(ATTWriteResponse()), to: alice)])
    #expect(s.exchange("0a 1100", from: bob) == "0b6869")
    #expect(s.exchange("12 0300 00") == err(0x12, 0x0003, 0x03))
    #expect(s.exchange("12 0000 00") == err(0x12, 0x0000, 0x01))
    #expect(s.exchange("12 1100" + Array(repeating: UInt8(0x41), count: 21).hexString) == err(0x12, 0x0011, 0x0D))
    // Commands: silently dropped when not permitted, applied otherwise.
    #expect(s.handle(bytes: [UInt8](hexString: "52 0300 00")!, from: alice).isEmpty)
    #expect(s.handle(bytes: [UInt8](hexString: "52 1100 6162")!, from: alice) == [.valueWritten(client: alice, handle: 17, value: [0x61, 0x62])])
    #expect(s.database.attribute(at: 17)?.value == .stored([0x61, 0x62]))
}

@Test func writesToDynamicValues() throws {
    var s = try makeServer()
    let a = s.handle(bytes: [UInt8](hexString: "12 1600 0102")!, from: alice)
    guard case let .writeRequests(id, alice, writes, true) = a.first, a.count == 1 else { Issue.record("\(a)"); return }
    #expect(writes == [GATTWrite(handle: 22, offset: 0, value: [1, 2])])
    // While the application decides, another request from the same client breaks ATT's rule.
    #expect(s.handle(bytes: [0x0A, 0x03, 0x00], from: alice) == [.protocolError(client: alice, .requestWhileOutstanding(.readRequest))])
    // Other clients are not blocked.
    #expect(s.exchange("0a 0300", from: bob) == "0b54657374")
    #expect(s.completeWrite(id: id, error: nil) == [.send(.writeResponse(ATTWriteResponse()), to: alice)])
    #expect(s.exchange("0a 0300") == "0b54657374")

    let b = s.handle(bytes: [UInt8](hexString: "12 1600 03")!, from: alice)
    guard case let .writeRequests(id2, _, _, true) = b.first else { Issue.record("\(b)"); return }
    #expect(
        s.completeWrite(id: id2, error: .writeRequestRejected) == [
            .send(
                .errorResponse(
                    ATTErrorResponse(requestOpcode: .writeRequest, handle: 22, error: .writeRequestRejected)), to: alice)
        ])

    let c = s.handle(bytes: [UInt8](hexString: "52 1600 07")!, from: alice)
    guard case let .writeRequests(id3, _, [GATTWrite(handle: 22, offset: 0, value: [7])], false) = c.first else { Issue.record("\(c)"); return }
    // A command does not block the client's requests, and its completion sends nothing.
    #expect(s.exchange("0a 0300") == "0b54657374")
    #expect(s.completeWrite(id: id3, error: nil).isEmpty)
}

@Test func clientConfigurationIsPerClient() throws {
    var s = try makeServer()
    #expect(
        s.handle(bytes: [UInt8](hexString: "12 0d00 0100")!, from: alice) == [
            .subscriptionChanged(client: alice, characteristicValueHandle: 12, notify: true, indicate: false),
            .send(.writeResponse(ATTWriteResponse()), to: alice),
        ])
    #expect(s.exchange("0a 0d00") == "0b0100")
    #expect(s.exchange("0a 0d00", from: bob) == "0b0000")
    // Same value again: no change reported.
    #expect(s.handle(bytes: [UInt8](hexString: "12 0d00 0100")!, from: alice) == [.send(.writeResponse(ATTWriteResponse()), to: alice)])
    // Battery Level cannot indicate; a 3-octet value is the wrong length.
    #expect(s.exchange("12 0d00 0200") == err(0x12, 0x000D, 0xFD))
    #expect(s.exchange("12 0d00 010000") == err(0x12, 0x000D, 0x0D))
    #expect(s.subscription(of: alice, valueHandle: 12) == .notification)
    #expect(s.subscription(of: bob, valueHandle: 12) == [])
}

@Test func preparedWritesCommitAndCancel() throws {
    var s = try makeServer()
    #expect(s.exchange("16 1100 0000 6162636465666768696a") == "17 1100 0000 6162636465666768696a".filter { $0 != " " })
    #expect(s.exchange("16 1100 0a00 6b6c6d6e6f7071727374") == "17 1100 0a00 6b6c6d6e6f7071727374".filter { $0 != " " })
    #expect(s.exchange("0a 1100") == "0b68656c6c6f", "nothing is written before execution")
    let done = s.handle(bytes: [0x18, 0x01], from: alice)
    #expect(
        done == [
            .valueWritten(client: alice, handle: 17, value: Array("abcdefghijklmnopqrst".utf8)),
            .send(.executeWriteResponse(ATTExecuteWriteResponse()), to: alice),
        ])
    #expect(s.exchange("0a 1100") == "0b" + Array("abcdefghijklmnopqrst".utf8).hexString)

    #expect(s.exchange("16 1100 0000 7878") == "1711000000" + "7878")
    #expect(s.exchange("18 00") == "19")
    #expect(s.exchange("0a 1100") == "0b" + Array("abcdefghijklmnopqrst".utf8).hexString)
    // The queue was emptied: executing again writes nothing.
    #expect(s.handle(bytes: [0x18, 0x01], from: alice) == [.send(.executeWriteResponse(ATTExecuteWriteResponse()), to: alice)])
    #expect(s.exchange("18 02") == err(0x18, 0x0000, 0x04))
}

@Test func preparedWritesAreAllOrNothing() throws {
    var s = try makeServer()
    // A valid CCCD write and a write past the end of "hello" (offset 10 > 5).
    #expect(s.exchange("16 0d00 0000 0100") != nil)
    #expect(s.exchange("16 1100 0a00 7a7a") != nil)
    #expect(s.exchange("18 01") == err(0x18, 0x0011, 0x07))
    #expect(s.exchange("0a 0d00") == "0b0000")
    #expect(s.exchange("0a 1100") == "0b68656c6c6f")
    // 15 + 6 = 21 octets > the 20-octet maximum.
    _ = s.exchange("16 1100 0000" + Array(repeating: UInt8(0x41), count: 15).hexString)
    _ = s.exchange("16 1100 0f00" + Array(repeating: UInt8(0x42), count: 6).hexString)
    #expect(s.exchange("18 01") == err(0x18, 0x0011, 0x0D))
    #expect(s.exchange("0a 1100") == "0b68656c6c6f")
    // Permissions are checked when preparing.
    #expect(s.exchange("16 0300 0000 00") == err(0x16, 0x0003, 0x03))
    #expect(s.exchange("16 0800 0000 00") == err(0x16, 0x0008, 0x03))
    #expect(s.exchange("16 7700 0000 00") == err(0x16, 0x0077, 0x01))
}

@Test func preparedWritesWithDynamicParts() throws {
    var s = try makeServer()
    _ = s.exchange("16 1600 0000 01")
    _ = s.exchange("16 1100 0000 796f")
    _ = s.exchange("16 1600 0100 02")
    let a = s.handle(bytes: [0x18, 0x01], from: alice)
    guard case let .writeRequests(id, alice, writes, true) = a.first, a.count == 1 else { Issue.record("\(a)"); return }
    #expect(writes == [GATTWrite(handle: 22, offset: 0, value: [1]), GATTWrite(handle: 22, offset: 1, value: [2])])
    #expect(s.database.attribute(at: 17)?.value == .stored(Array("hello".utf8)), "stored parts wait for the application")
    #expect(
        s.completeWrite(id: id, error: nil) == [
            .valueWritten(client: alice, handle: 17, value: [0x79, 0x6F]),
            .send(.executeWriteResponse(ATTExecuteWriteResponse()), to: alice),
        ])
    // Refused by the application: nothing applies.
    _ = s.exchange("16 1600 0000 01")
    _ = s.exchange("16 1100 0000 7a")
    let b = s.handle(bytes: [0x18, 0x01], from: alice)
    guard case let .writeRequests(id2, _, _, _) = b.first else { Issue.record("\(b)"); return }
    #expect(
        s.completeWrite(id: id2, error: .application(0x81)) == [
            .send(
                .errorResponse(
                    ATTErrorResponse(requestOpcode: .executeWriteRequest, handle: 22, error: ATTErrorCode(0x81))), to: alice)
        ])
    #expect(s.database.attribute(at: 17)?.value == .stored([0x79, 0x6F]))
}

@Test func prepareQueueFull() throws {
    var s = try makeServer(GATTServerConfiguration(maximumPreparedWrites: 2, maximumPreparedBytes: 5))
    #expect(s.exchange("16 1100 0000 01") != nil)
    #expect(s.exchange("16 1100 0100 02") != nil)
    #expect(s.exchange("16 1100 0200 03") == err(0x16, 0x0011, 0x09))
    _ = s.exchange("18 00")
    #expect(s.exchange("16 1100 0000 0102030405") == "1711000000" + "0102030405")
    #expect(s.exchange("16 1100 0500 06") == err(0x16, 0x0011, 0x09), "byte budget spent")
    // Queues are per client.
    #expect(s.exchange("16 1100 0000 01", from: bob) == "1711000000" + "01")
}
