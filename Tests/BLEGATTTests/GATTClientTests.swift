// The GATT client against our own GATT server, every procedure, through the wire encoding: each PDU the
// client sends is encoded, decoded, handled by the server, and the answer encoded and decoded back.
import Testing
import BLEWire
import BLEATT
@testable import BLEGATT

/// Runs a client and a server back to back, answering dynamic reads/writes from a table.
struct Loopback {
    var client: GATTClient
    var server: GATTServer
    let id = GATTClientID(1)
    var notifications: [(UInt16, [UInt8])] = []
    var indications: [(UInt16, [UInt8])] = []
    var sentRequests: [ATTOpcode] = []
    var dynamic: [UInt16: [UInt8]] = [:]
    var written: [GATTWrite] = []

    init(database: GATTDatabase, mtu: UInt16 = 23) {
        client = GATTClient()
        server = GATTServer(database: database)
        server.clientConnected(id)
    }

    mutating func run(_ p: GATTClient.Procedure) throws -> GATTClient.Outcome {
        let (pid, actions) = client.start(p)
        var result: Result<GATTClient.Outcome, GATTClient.Failure>?
        var pending = actions
        var steps = 0
        while !pending.isEmpty {
            steps += 1
            try #require(steps < 10_000, "procedure does not terminate")
            let a = pending.removeFirst()
            switch a {
            case let .send(pdu), let .sendCommand(pdu):
                if case .send = a { sentRequests.append(pdu.opcode) }
                let wire = try ATTPDU.decode(pdu.encode())
                pending += serve(server.handle(wire, from: id))
            case let .complete(i, r):
                #expect(i == pid)
                result = r
            case let .notification(h, v): notifications.append((h, v))
            case let .indication(h, v): indications.append((h, v))
            case let .protocolViolation(why): Issue.record("protocol violation: \(why)")
            }
        }
        switch try #require(result) {
        case let .success(o): return o
        case let .failure(f): throw f
        }
    }

    /// Carries out server actions; returns the client's reactions.
    mutating func serve(_ actions: [GATTServerAction]) -> [GATTClient.Action] {
        var out: [GATTClient.Action] = []
        for a in actions {
            switch a {
            case let .send(pdu, _):
                out += client.receive(try! ATTPDU.decode(pdu.encode()))
            case let .readRequest(rid, _, handle, offset):
                let v = dynamic[handle] ?? []
                let r: Result<[UInt8], ATTErrorCode> = Int(offset) > v.count ? .failure(.invalidOffset) : .success(Array(v[Int(offset)...]))
                out += serve(server.completeRead(id: rid, result: r))
            case let .writeRequests(rid, _, writes, _):
                written += writes
                out += serve(server.completeWrite(id: rid, error: nil))
            default:
                break
            }
        }
        return out
    }
}

func testDatabase() throws -> (GATTDatabase, GATTServiceHandles, GATTServiceHandles, GATTServiceHandles) {
    var db = GATTDatabase.withDefaultServices(deviceName: "Test Device")
    let secondary = try db.add(
        GATTServiceDefinition(
            uuid: BluetoothUUID(string: "A0B1C2D3-0000-1000-8000-00805F9B34FB")!, isPrimary: false,
            characteristics: [GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A19), properties: [.read], permissions: .readable, value: [99])]))
    let small = try db.add(
        GATTServiceDefinition(
            uuid: BluetoothUUID(0x180F), isPrimary: false,
            characteristics: [GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A19), properties: [.read], permissions: .readable, value: [50])]))
    let long = (0..<500).map { UInt8($0 % 251) }
    let main = try db.add(
        GATTServiceDefinition(
            uuid: BluetoothUUID(0x180D), includedServices: [secondary.reference, small.reference],
            characteristics: [
                GATTCharacteristicDefinition(
                    uuid: BluetoothUUID(0x2A37), properties: [.notify, .indicate], permissions: [], value: nil,
                    descriptors: [.userDescription("Heart Rate")]),
                GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A38), properties: [.read], permissions: .readable, value: [0x01]),
                GATTCharacteristicDefinition(
                    uuid: BluetoothUUID(string: "6E400002-B5A3-F393-E0A9-E50E24DCCA9E")!,
                    properties: [.read, .write, .writeWithoutResponse], permissions: .readWrite, value: long),
                GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A39), properties: [.write], permissions: .writeable, value: nil),
            ]))
    return (db, secondary, small, main)
}

@Suite struct GATTClientAgainstServerTests {
    @Test(arguments: [UInt16(23), UInt16(247)])
    func everyDiscoveryProcedure(mtu: UInt16) throws {
        let (db, secondary, small, main) = try testDatabase()
        var lb = Loopback(database: db)
        #expect(try lb.run(.exchangeMTU(clientRxMTU: mtu)) == .mtu(mtu))
        #expect(lb.client.mtu == mtu)

        guard case let .services(all) = try lb.run(.discoverAllPrimaryServices) else { Issue.record("no services"); return }
        #expect(all.map(\.uuid) == [BluetoothUUID(0x1800), BluetoothUUID(0x1801), BluetoothUUID(0x180D)])
        #expect(all.last?.handle == main.range.lowerBound && all.last?.endHandle == main.range.upperBound)

        guard case let .services(byUUID) = try lb.run(.discoverPrimaryServices(uuid: BluetoothUUID(0x180D))) else { Issue.record("none"); return }
        #expect(byUUID == [GATTRemoteService(uuid: BluetoothUUID(0x180D), handle: main.range.lowerBound, endHandle: main.range.upperBound)])
        // A UUID given in its 128-bit form still finds the 16-bit service.
        guard case let .services(expanded) = try lb.run(.discoverPrimaryServices(uuid: BluetoothUUID(0x180D).expanded)) else { return }
        #expect(expanded.count == 1)

        guard case let .includedServices(incs) = try lb.run(.findIncludedServices(start: main.range.lowerBound, end: main.range.upperBound)) else { return }
        #expect(incs.map(\.uuid) == [BluetoothUUID(string: "A0B1C2D3-0000-1000-8000-00805F9B34FB")!, BluetoothUUID(0x180F)])
        #expect(incs.map(\.startHandle) == [secondary.range.lowerBound, small.range.lowerBound])
        #expect(incs.map(\.endHandle) == [secondary.range.upperBound, small.range.upperBound])

        guard case let .characteristics(chars) = try lb.run(.discoverCharacteristics(start: main.range.lowerBound, end: main.range.upperBound, uuid: nil)) else { return }
        #expect(chars.map(\.uuid.uuidString) == ["2A37", "2A38", "6E400002-B5A3-F393-E0A9-E50E24DCCA9E", "2A39"])
        #expect(chars.map(\.valueHandle) == main.characteristics.map(\.value))
        #expect(chars[0].properties == 0x30)
        guard case let .characteristics(one) = try lb.run(.discoverCharacteristics(start: main.range.lowerBound, end: main.range.upperBound, uuid: BluetoothUUID(0x2A38))) else {
            return
        }
        #expect(one.map(\.valueHandle) == [main.characteristics[1].value])

        let hr = main.characteristics[0]
        guard case let .descriptors(ds) = try lb.run(.discoverDescriptors(start: hr.value + 1, end: hr.endHandle)) else { return }
        #expect(ds.map(\.uuid) == [.clientCharacteristicConfiguration, .characteristicUserDescription])
        #expect(try lb.run(.discoverDescriptors(start: 10, end: 9)) == .descriptors([]))
    }

    @Test(arguments: [UInt16(23), UInt16(100), UInt16(517)])
    func readsShortLongMultipleAndByUUID(mtu: UInt16) throws {
        let (db, _, small, main) = try testDatabase()
        var lb = Loopback(database: db)
        _ = try lb.run(.exchangeMTU(clientRxMTU: mtu))
        let long = (0..<500).map { UInt8($0 % 251) }
        let longHandle = main.characteristics[2].value
        #expect(try lb.run(.read(handle: main.characteristics[1].value)) == .value([0x01]))
        #expect(try lb.run(.readLong(handle: longHandle)) == .value(long))
        #expect(try lb.run(.readLong(handle: main.characteristics[1].value)) == .value([0x01]))
        #expect(try lb.run(.readMultiple(handles: [main.characteristics[1].value, small.characteristics[0].value])) == .value([0x01, 50]))
        #expect(try lb.run(.readMultipleVariable(handles: [main.characteristics[1].value, small.characteristics[0].value])) == .values([[0x01], [50]]))
        #expect(
            try lb.run(.readUsingCharacteristicUUID(start: 1, end: 0xFFFF, uuid: .deviceName))
                == .handleValues([GATTHandleValue(handle: 3, value: Array("Test Device".utf8))]))
        #expect(throws: GATTClient.Failure.att(.invalidHandle, handle: 0x0F00)) { try lb.run(.read(handle: 0x0F00)) }
        #expect(throws: GATTClient.Failure.self) { try lb.run(.read(handle: main.characteristics[0].value)) }
    }

    @Test func writesShortLongReliableAndCommand() throws {
        let (db, _, _, main) = try testDatabase()
        var lb = Loopback(database: db)
        let target = main.characteristics[2].value
        #expect(try lb.run(.write(handle: target, value: [1, 2, 3])) == .written)
        #expect(try lb.run(.read(handle: target)) == .value([1, 2, 3]))
        let big = (0..<300).map { UInt8(255 - $0 % 200) }
        #expect(try lb.run(.write(handle: target, value: big)) == .written)
        #expect(lb.sentRequests.contains(.prepareWriteRequest) && lb.sentRequests.last == .executeWriteRequest)
        #expect(try lb.run(.readLong(handle: target)) == .value(big))
        // Dynamic characteristic: the writes reach the application as one batch with offsets.
        let cp = main.characteristics[3].value
        #expect(try lb.run(.reliableWrite([GATTHandleValue(handle: cp, value: [9, 9]), GATTHandleValue(handle: target, value: [7])])) == .written)
        #expect(lb.written.contains(GATTWrite(handle: cp, offset: 0, value: [9, 9])))
        let cmd = lb.client.writeWithoutResponse(handle: target, value: [4, 4])
        #expect(cmd == [.sendCommand(.writeCommand(ATTWriteCommand(handle: target, value: [4, 4])))])
        #expect(lb.client.writeWithoutResponse(handle: target, value: Array(repeating: 0, count: 21)).isEmpty)
        // Writes the server refuses come back as ATT errors.
        #expect(throws: GATTClient.Failure.att(.writeNotPermitted, handle: main.characteristics[1].value)) {
            try lb.run(.write(handle: main.characteristics[1].value, value: [1]))
        }
    }

    @Test func notificationsAndIndicationsAfterSubscribing() throws {
        let (db, _, _, main) = try testDatabase()
        var lb = Loopback(database: db)
        let hr = main.characteristics[0]
        let cccd = try #require(hr.clientConfiguration)
        #expect(try lb.run(.write(handle: cccd, value: [0x03, 0x00])) == .written)
        var reactions = lb.serve(lb.server.notify(handle: hr.value, value: [0x00, 72], to: lb.id))
        reactions += lb.serve(lb.server.indicate(handle: hr.value, value: [0x00, 73], to: lb.id))
        #expect(reactions.contains(.notification(handle: hr.value, value: [0x00, 72])))
        #expect(reactions.contains(.indication(handle: hr.value, value: [0x00, 73])))
        // The client confirms the indication; the server then accepts the next one.
        for case let .sendCommand(pdu) in reactions { _ = lb.serve(lb.server.handle(pdu, from: lb.id)) }
        let again = lb.serve(lb.server.indicate(handle: hr.value, value: [1], to: lb.id))
        #expect(again.contains(.indication(handle: hr.value, value: [1])))
    }
}

@Suite struct GATTClientScriptedServerTests {
    @Test func unexpectedResponsesAndTimeouts() {
        var c = GATTClient()
        #expect(
            c.receive(.readResponse(ATTReadResponse(value: [1])))
                == [.protocolViolation("ATT_READ_RSP received with no request outstanding")] || !c.hasOutstandingRequest)
        let (a, first) = c.start(.read(handle: 3))
        let (b, queued) = c.start(.read(handle: 4))
        #expect(first == [.send(.readRequest(ATTReadRequest(handle: 3)))])
        #expect(queued.isEmpty)   // one request at a time
        let wrong = c.receive(.writeResponse(ATTWriteResponse()))
        #expect(wrong.count == 1)
        if case .protocolViolation = wrong.first {} else { Issue.record("expected a protocol violation") }
        let timedOut = c.transactionTimedOut()
        #expect(timedOut == [.complete(a, .failure(.timeout)), .complete(b, .failure(.bearerClosed))])
        let (d, after) = c.start(.read(handle: 5))
        #expect(after == [.complete(d, .failure(.bearerClosed))])
    }

    @Test func nonAdvancingDiscoveryIsAnInvalidResponse() {
        var c = GATTClient()
        let (id, _) = c.start(.discoverCharacteristics(start: 10, end: 20, uuid: nil))
        // The server answers with a declaration below the requested start handle.
        let r = c.receive(.readByTypeResponse(ATTReadByTypeResponse(attributeDataList: [ATTHandleValue(handle: 5, value: [0x02, 0x06, 0x00, 0x37, 0x2A])])))
        guard case let .complete(i, .failure(.invalidResponse)) = r.first else { Issue.record("expected invalid response, got \(r)"); return }
        #expect(i == id)
    }

    @Test(arguments: [0x0000, 0x000C, 0x0015] as [UInt16])
    func aValueHandleOutsideItsCharacteristicIsAnInvalidResponse(valueHandle: UInt16) {
        // Declared at 12 in a service ending at 20: the value must follow it (0, 12 itself and 21 do not).
        var c = GATTClient()
        let (id, _) = c.start(.discoverCharacteristics(start: 10, end: 20, uuid: nil))
        let decl: [UInt8] = [0x02, UInt8(valueHandle & 0xFF), UInt8(valueHandle >> 8), 0x37, 0x2A]
        let r = c.receive(.readByTypeResponse(ATTReadByTypeResponse(attributeDataList: [ATTHandleValue(handle: 12, value: decl)])))
        guard case let .complete(i, .failure(.invalidResponse)) = r.first else { Issue.record("expected invalid response, got \(r)"); return }
        #expect(i == id)
    }

    @Test func anOversizedResponseFailsTheProcedureAndTheNextOneRuns() {
        var c = GATTClient()
        let (a, _) = c.start(.read(handle: 5))
        let (b, _) = c.start(.read(handle: 6))
        let r = c.rejectResponse("too long")
        #expect(r.first == .complete(a, .failure(.invalidResponse("too long"))))
        #expect(r.dropFirst().first == .send(.readRequest(ATTReadRequest(handle: 6))))
        _ = b
    }

    @Test func longWriteEchoMismatchCancels() {
        var c = GATTClient()
        let value = Array(repeating: UInt8(7), count: 40)
        let (id, start) = c.start(.writeLong(handle: 9, offset: 0, value: value))
        guard case let .send(.prepareWriteRequest(p)) = start.first else { Issue.record("no prepare"); return }
        #expect(p.partValue.count == 18)
        var echo = p
        echo.partValue[0] ^= 0xFF
        let r = c.receive(.prepareWriteResponse(ATTPrepareWriteResponse(handle: echo.handle, offset: echo.offset, partValue: echo.partValue)))
        #expect(r == [.send(.executeWriteRequest(ATTExecuteWriteRequest(flags: .cancelAll)))])
        let end = c.receive(.executeWriteResponse(ATTExecuteWriteResponse()))
        guard case .complete(id, .failure(.invalidResponse)) = end.first else { Issue.record("expected failure, got \(end)"); return }
    }

    @Test func disconnectFailsEverything() {
        var c = GATTClient()
        let (a, _) = c.start(.discoverAllPrimaryServices)
        let (b, _) = c.start(.read(handle: 1))
        #expect(c.disconnected() == [.complete(a, .failure(.disconnected)), .complete(b, .failure(.disconnected))])
    }

    @Test func indicationsAreConfirmedAndNotificationsPassThroughMidRequest() {
        var c = GATTClient()
        _ = c.start(.read(handle: 1))
        #expect(c.receive(.handleValueNotification(ATTHandleValueNotification(handle: 3, value: [1]))) == [.notification(handle: 3, value: [1])])
        #expect(
            c.receive(.handleValueIndication(ATTHandleValueIndication(handle: 3, value: [2])))
                == [.indication(handle: 3, value: [2]), .sendCommand(.handleValueConfirmation(ATTHandleValueConfirmation()))])
        #expect(c.hasOutstandingRequest)
    }
}
