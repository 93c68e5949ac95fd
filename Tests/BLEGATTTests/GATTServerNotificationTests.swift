import Testing
import BLEATT
import BLEWire
@testable import BLEGATT

private func enable(_ s: inout GATTServer, cccd: UInt16, _ bits: UInt16, for client: GATTClientID) {
    let pdu = ATTPDU.writeRequest(ATTWriteRequest(handle: cccd, value: [UInt8(bits & 0xFF), UInt8(bits >> 8)]))
    let actions = s.handle(pdu, from: client)
    #expect(actions.last == .send(.writeResponse(ATTWriteResponse()), to: client))
}

@Test func notificationsNeedTheClientsCCCD() throws {
    var s = try makeServer()
    #expect(s.notify(handle: 12, value: [50], to: alice).isEmpty)
    enable(&s, cccd: 13, 0x0001, for: alice)
    #expect(
        s.notify(handle: 12, value: [50], to: alice)
            == [.send(.handleValueNotification(ATTHandleValueNotification(handle: 12, value: [50])), to: alice)])
    #expect(s.notify(handle: 12, value: [50], to: bob).isEmpty)
    // Cut to ATT_MTU − 3 = 20 octets.
    let long = Array(UInt8(0)..<30)
    #expect(
        s.notify(handle: 12, value: long, to: alice)
            == [.send(.handleValueNotification(ATTHandleValueNotification(handle: 12, value: Array(long.prefix(20)))), to: alice)])
    // Disabling stops them.
    enable(&s, cccd: 13, 0x0000, for: alice)
    #expect(s.notify(handle: 12, value: [50], to: alice).isEmpty)
    // Indications need the indication bit.
    #expect(s.indicate(handle: 12, value: [1], to: alice).isEmpty)
}

@Test func indicationsWaitForConfirmation() throws {
    var s = try makeServer()
    #expect(s.indicate(handle: 17, value: [1], to: alice).isEmpty)
    let changed = s.handle(bytes: [UInt8](hexString: "12 1300 0200")!, from: alice)
    #expect(changed.first == .subscriptionChanged(client: alice, characteristicValueHandle: 17, notify: false, indicate: true))
    #expect(s.notify(handle: 17, value: [1], to: alice).isEmpty, "notifications are not enabled")

    let ind = { (v: UInt8) in ATTPDU.handleValueIndication(ATTHandleValueIndication(handle: 17, value: [v])) }
    #expect(s.indicate(handle: 17, value: [1], to: alice) == [.send(ind(1), to: alice), .startConfirmationTimer(client: alice)])
    #expect(s.indicate(handle: 17, value: [2], to: alice).isEmpty)
    #expect(s.indicate(handle: 17, value: [3], to: alice).isEmpty)
    #expect(
        s.handle(bytes: [0x1E], from: alice) == [
            .stopConfirmationTimer(client: alice), .indicationConfirmed(client: alice, handle: 17),
            .send(ind(2), to: alice), .startConfirmationTimer(client: alice),
        ])
    // Requests are served while an indication is outstanding.
    #expect(s.exchange("0a 0300") == "0b54657374")
    #expect(s.handle(bytes: [0x1E], from: alice).contains(.send(ind(3), to: alice)))
    #expect(s.handle(bytes: [0x1E], from: alice) == [.stopConfirmationTimer(client: alice), .indicationConfirmed(client: alice, handle: 17)])
    #expect(s.handle(bytes: [0x1E], from: alice) == [.protocolError(client: alice, .unexpectedConfirmation)])
}

@Test func confirmationTimeoutEndsIndications() throws {
    var s = try makeServer()
    enable(&s, cccd: 19, 0x0002, for: alice)
    _ = s.indicate(handle: 17, value: [1], to: alice)
    _ = s.indicate(handle: 17, value: [2], to: alice)
    #expect(s.confirmationTimeout(alice) == [.indicationAbandoned(client: alice, handle: 17), .indicationAbandoned(client: alice, handle: 17)])
    #expect(s.indicate(handle: 17, value: [3], to: alice).isEmpty)
}

@Test func disconnectClearsStateAndHandsBondedConfigurationOut() throws {
    var s = try makeServer()
    enable(&s, cccd: 13, 0x0001, for: alice)
    enable(&s, cccd: 19, 0x0002, for: alice)
    _ = s.indicate(handle: 17, value: [1], to: alice)
    s.updateSecurity(.encryptedUnauthenticated, bonded: true, for: alice)
    let gone = s.clientDisconnected(alice)
    #expect(
        gone == [
            .stopConfirmationTimer(client: alice), .indicationAbandoned(client: alice, handle: 17),
            .subscriptionChanged(client: alice, characteristicValueHandle: 12, notify: false, indicate: false),
            .subscriptionChanged(client: alice, characteristicValueHandle: 17, notify: false, indicate: false),
            .saveClientConfiguration(client: alice, values: [13: 1, 19: 2]),
        ])
    #expect(s.clientDisconnected(alice).isEmpty)
    // The same peer reconnects with the stored values.
    let again = GATTClientID(3)
    s.clientConnected(again, security: .encryptedUnauthenticated, bonded: true, clientConfiguration: [13: 1, 19: 2, 3: 1])
    #expect(s.subscription(of: again, valueHandle: 12) == .notification)
    #expect(s.notify(handle: 12, value: [9], to: again).count == 1)
    #expect(s.subscription(of: again, valueHandle: 3) == [], "values for handles that are not CCCDs are dropped")

    // A client that is not bonded starts over.
    enable(&s, cccd: 13, 0x0001, for: bob)
    let bobGone = s.clientDisconnected(bob)
    #expect(bobGone == [.subscriptionChanged(client: bob, characteristicValueHandle: 12, notify: false, indicate: false)])
    s.clientConnected(bob)
    #expect(s.exchange("0a 0d00", from: bob) == "0b0000")
}

@Test func pendingApplicationRequestsDieWithTheClient() throws {
    var s = try makeServer()
    let a = s.handle(bytes: [0x0A, 0x16, 0x00], from: alice)
    guard case let .readRequest(id, _, _, _) = a.first else { Issue.record("\(a)"); return }
    _ = s.clientDisconnected(alice)
    #expect(s.completeRead(id: id, result: .success([1])).isEmpty)
}

@Test func serviceChangedIndicatesSubscribedClients() throws {
    var s = try makeServer()
    enable(&s, cccd: 9, 0x0002, for: alice)
    let added = try s.addService(
        GATTServiceDefinition(
            uuid: BluetoothUUID(0x181A),
            characteristics: [
                GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A6E), properties: [.read, .notify], permissions: .readable, value: [0, 0])
            ]))
    #expect(added.range == 25...28)
    #expect(
        s.serviceChanged(added.range) == [
            .send(.handleValueIndication(ATTHandleValueIndication(handle: 8, value: [25, 0, 28, 0])), to: alice),
            .startConfirmationTimer(client: alice),
        ])
    enable(&s, cccd: 28, 0x0001, for: bob)
    try s.removeService(added.range)
    #expect(s.exchange("0a 1b00", from: bob) == err(0x0A, 0x001B, 0x01))
    #expect(s.subscription(of: bob, valueHandle: 27) == [])
}
