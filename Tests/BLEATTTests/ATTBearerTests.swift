import Testing
import BLEWire
@testable import BLEATT

private let read3 = ATTPDU.readRequest(ATTReadRequest(handle: 3))
private let read5 = ATTPDU.readRequest(ATTReadRequest(handle: 5))
private let write7 = ATTPDU.writeRequest(ATTWriteRequest(handle: 7, value: [1]))

@Test func clientSendsOneRequestAtATimeInFIFOOrder() throws {
    var c = ATTBearerClient()
    let (a, actA) = try c.send(read3)
    #expect(actA == [.send(read3), .startTransactionTimer])
    let (b, actB) = try c.send(read5)
    let (w, actW) = try c.send(write7)
    #expect(actB.isEmpty && actW.isEmpty)
    #expect(c.queuedCount == 2)
    #expect(c.state == .awaitingResponse(a, request: .readRequest))

    let rsp = ATTPDU.readResponse(ATTReadResponse(value: [0x42]))
    #expect(c.receive(rsp) == [.stopTransactionTimer, .complete(a, .response(rsp)), .send(read5), .startTransactionTimer])
    let err = ATTErrorResponse(requestOpcode: .readRequest, handle: 5, error: .readNotPermitted)
    #expect(c.receive(.errorResponse(err)) == [.stopTransactionTimer, .complete(b, .error(err)), .send(write7), .startTransactionTimer])
    let wr = ATTPDU.writeResponse(ATTWriteResponse())
    #expect(c.receive(wr) == [.stopTransactionTimer, .complete(w, .response(wr))])
    #expect(c.state == .idle)
    #expect(c.queuedCount == 0)
}

@Test func clientReportsResponsesThatMatchNothing() throws {
    var c = ATTBearerClient()
    // Nothing outstanding.
    #expect(c.receive(.readResponse(ATTReadResponse(value: []))) == [.protocolError(.unexpectedResponse(.readResponse))])
    let (id, _) = try c.send(read3)
    // Wrong response opcode.
    #expect(c.receive(.writeResponse(ATTWriteResponse())) == [.protocolError(.unexpectedResponse(.writeResponse))])
    // Error Response for another request.
    let wrong = ATTErrorResponse(requestOpcode: .writeRequest, handle: 3, error: .invalidHandle)
    #expect(c.receive(.errorResponse(wrong)) == [.protocolError(.mismatchedErrorResponse(wrong))])
    // A request sent to the client role.
    #expect(c.receive(read5) == [.protocolError(.wrongRole(.readRequest))])
    // Still waiting for the real answer.
    #expect(c.state == .awaitingResponse(id, request: .readRequest))
    // Undecodable octets.
    #expect(c.receive(bytes: [0x0B]) != [])
    if case .protocolError(.malformed) = c.receive(bytes: [0x09, 0x01])[0] {} else { Issue.record("expected malformed") }
}

@Test func clientTimeoutKillsTheBearer() throws {
    var c = ATTBearerClient()
    #expect(c.timeout().isEmpty, "a timeout with nothing outstanding is ignored")
    let (a, _) = try c.send(read3)
    let (b, _) = try c.send(read5)
    #expect(c.timeout() == [.complete(a, .timedOut), .complete(b, .bearerClosed)])
    #expect(c.state == .timedOut)
    #expect(throws: ATTBearerError.bearerTimedOut) { try c.send(read3) }
    #expect(throws: ATTBearerError.bearerTimedOut) {
        try c.sendCommand(.writeCommand(ATTWriteCommand(handle: 1, value: [])))
    }
    // A late response is dropped.
    #expect(c.receive(.readResponse(ATTReadResponse(value: []))).isEmpty)
}

@Test func clientCloseAbandonsEverything() throws {
    var c = ATTBearerClient()
    let (a, _) = try c.send(read3)
    let (b, _) = try c.send(read5)
    #expect(c.close() == [.stopTransactionTimer, .complete(a, .bearerClosed), .complete(b, .bearerClosed)])
    #expect(throws: ATTBearerError.bearerClosed) { try c.send(read3) }
}

@Test func clientExchangesMTUOnce() throws {
    var c = ATTBearerClient(preferredMTU: 247)
    let (id, actions) = try c.exchangeMTU()
    #expect(actions == [.send(.exchangeMTURequest(ATTExchangeMTURequest(clientRxMTU: 247))), .startTransactionTimer])
    #expect(throws: ATTBearerError.mtuAlreadyExchanged) { try c.exchangeMTU() }
    let rsp = ATTPDU.exchangeMTUResponse(ATTExchangeMTUResponse(serverRxMTU: 185))
    #expect(c.receive(rsp) == [.stopTransactionTimer, .mtuChanged(185), .complete(id, .response(rsp))])
    #expect(c.mtu == 185)
}

@Test func clientMTUNeverBelowDefault() throws {
    var c = ATTBearerClient(preferredMTU: 100)
    _ = try c.exchangeMTU()
    let rsp = ATTPDU.exchangeMTUResponse(ATTExchangeMTUResponse(serverRxMTU: 10))
    let actions = c.receive(rsp)
    #expect(!actions.contains(.mtuChanged(10)))
    #expect(c.mtu == 23)
}

@Test func clientRejectsMisuse() {
    var c = ATTBearerClient()
    #expect(throws: ATTBearerError.wrongKind(.writeCommand)) { try c.send(.writeCommand(ATTWriteCommand(handle: 1, value: []))) }
    #expect(throws: ATTBearerError.wrongKind(.readRequest)) { try c.sendCommand(read3) }
    // 3 + 21 = 24 octets > ATT_MTU 23.
    #expect(throws: ATTBearerError.pduTooLarge(size: 24, mtu: 23)) {
        try c.send(.writeRequest(ATTWriteRequest(handle: 1, value: Array(repeating: 0, count: 21))))
    }
    #expect(c.state == .idle)
}

@Test func clientConfirmsIndicationsAndPassesNotifications() throws {
    var c = ATTBearerClient()
    let (id, _) = try c.send(read3)
    let ind = ATTHandleValueIndication(handle: 9, value: [1])
    // An indication may arrive while a request is outstanding; its confirmation is not queued.
    #expect(c.receive(.handleValueIndication(ind)) == [.indication(ind), .send(.handleValueConfirmation(ATTHandleValueConfirmation()))])
    let ntf = ATTHandleValueNotification(handle: 9, value: [2])
    #expect(c.receive(.handleValueNotification(ntf)) == [.notification(ntf)])
    #expect(c.state == .awaitingResponse(id, request: .readRequest))
}

@Test func serverQueuesIndicationsUntilConfirmed() throws {
    var s = ATTBearerServer()
    let first = try s.indicate(handle: 3, value: [1])
    #expect(first == [.send(.handleValueIndication(ATTHandleValueIndication(handle: 3, value: [1]))), .startConfirmationTimer])
    #expect(try s.indicate(handle: 5, value: [2]).isEmpty)
    #expect(try s.indicate(handle: 7, value: [3]).isEmpty)
    #expect(s.queuedIndications == 2)
    #expect(
        s.receiveConfirmation() == [
            .stopConfirmationTimer, .indicationConfirmed(handle: 3),
            .send(.handleValueIndication(ATTHandleValueIndication(handle: 5, value: [2]))),
            .startConfirmationTimer,
        ])
    _ = s.receiveConfirmation()
    #expect(s.receiveConfirmation() == [.stopConfirmationTimer, .indicationConfirmed(handle: 7)])
    #expect(s.indicationState == .idle)
    #expect(s.receiveConfirmation() == [.protocolError(.unexpectedConfirmation)])
}

@Test func serverIndicationTimeout() throws {
    var s = ATTBearerServer()
    _ = try s.indicate(handle: 3, value: [1])
    _ = try s.indicate(handle: 4, value: [1])
    #expect(s.timeout() == [.indicationAbandoned(handle: 3), .indicationAbandoned(handle: 4)])
    #expect(throws: ATTBearerError.bearerTimedOut) { try s.indicate(handle: 3, value: []) }
    #expect(s.receiveConfirmation().isEmpty)
}

@Test func serverMTUExchangeOnceAndTruncation() throws {
    var s = ATTBearerServer(preferredMTU: 100)
    let (rsp, new) = s.exchangeMTU(ATTExchangeMTURequest(clientRxMTU: 50))
    #expect(rsp == .exchangeMTUResponse(ATTExchangeMTUResponse(serverRxMTU: 100)))
    #expect(new == 50)
    // A repeated exchange is answered but changes nothing.
    let (rsp2, new2) = s.exchangeMTU(ATTExchangeMTURequest(clientRxMTU: 517))
    #expect(rsp2 == rsp && new2 == nil && s.mtu == 50)
    // Values are cut to ATT_MTU − 3 = 47 octets.
    let long = Array(UInt8(0)..<UInt8(60))
    #expect(s.notification(handle: 1, value: long) == .handleValueNotification(ATTHandleValueNotification(handle: 1, value: Array(long.prefix(47)))))
    let ind = try s.indicate(handle: 1, value: long)
    #expect(ind.first == .send(.handleValueIndication(ATTHandleValueIndication(handle: 1, value: Array(long.prefix(47))))))
}

@Test func negotiatedMTU() {
    #expect(ATTMTU.negotiated(client: 517, server: 247) == 247)
    #expect(ATTMTU.negotiated(client: 20, server: 247) == 23)
    #expect(ATTMTU.negotiated(client: 1000, server: 2000) == 517)
}

@Test func clientPassesMultipleNotificationsAndDropsNothingElse() throws {
    var c = ATTBearerClient()
    let multi = ATTMultipleHandleValueNotification(handleLengthValueTupleList: [
        ATTHandleValue(handle: 1, value: [1]), ATTHandleValue(handle: 2, value: []),
    ])
    #expect(c.receive(bytes: ATTPDU.multipleHandleValueNotification(multi).encode()) == [.multipleNotification(multi)])
    #expect(c.state == .idle && c.queuedCount == 0)
}

@Test func randomOctetsNeverCrashTheDecoder() {
    var state: UInt64 = 0x0123_4567_89AB_CDEF
    func next() -> UInt64 { state ^= state << 13; state ^= state >> 7; state ^= state << 17; return state }
    var decoded = 0
    for _ in 0..<20000 {
        var bytes: [UInt8] = [UInt8(truncatingIfNeeded: next() % 0x24)]
        if next() % 8 == 0 { bytes[0] |= 0x40 }
        for _ in 0..<Int(next() % 24) { bytes.append(UInt8(truncatingIfNeeded: next())) }
        if let pdu = try? ATTPDU.decode(bytes) {
            decoded += 1
            // Whatever decodes re-encodes to the same octets, except where decoding is lenient
            // (a cut Read Multiple Variable Response).
            if pdu.opcode != .readMultipleVariableResponse { #expect(pdu.encode() == bytes, "\(bytes.hexString)") }
        }
    }
    #expect(decoded > 1000)
}
