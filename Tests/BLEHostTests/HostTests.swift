// The host core on the virtual radio, on a virtual clock: our GATT client against our GATT server
// through every layer (HCI, ACL credits, L2CAP, ATT), every procedure; ATT timeouts; failure paths.
import Foundation
import Testing
import BLEWire
import BLEHCI
import BLEATT
import BLEGATT
import BLETransport
import BLEVirtualRadio
@testable import BLEHost

final class CentralRecorder: HostCentralDelegate, @unchecked Sendable {
    var reports: [AdvertisingReport] = []
    var connections: [HostConnection] = []
    var failures: [(BluetoothAddress, HCIStatus)] = []
    var disconnects: [HCIStatus] = []
    var values: [(UInt16, [UInt8], Bool)] = []
    var readyToWrite = 0
    func host(_ host: LEHost, didReceive report: AdvertisingReport) { reports.append(report) }
    func host(_ host: LEHost, didConnect connection: HostConnection) { connections.append(connection) }
    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) { failures.append((address, status)) }
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) { disconnects.append(reason) }
    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {
        values.append((handle, value, isIndication))
    }
    func host(_ host: LEHost, connectionIsReadyToSendWriteWithoutResponse connection: HostConnection) { readyToWrite += 1 }
}

final class PeripheralRecorder: HostPeripheralDelegate, @unchecked Sendable {
    weak var host: LEHost?
    var answerReads = true
    var dynamic: [UInt16: [UInt8]] = [:]
    var reads: [HostReadRequest] = []
    var writes: [HostWriteRequest] = []
    var subscriptions: [(UInt16, Bool, Bool)] = []
    var connections: [HostConnection] = []
    var disconnects: [HCIStatus] = []
    func host(_ host: LEHost, didConnect connection: HostConnection) { connections.append(connection) }
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) { disconnects.append(reason) }
    func host(_ host: LEHost, didReceiveRead request: HostReadRequest) {
        reads.append(request)
        guard answerReads else { return }
        let v = dynamic[request.attributeHandle] ?? []
        host.respondToRead(id: request.id, result: Int(request.offset) <= v.count ? .success(Array(v[Int(request.offset)...])) : .failure(.invalidOffset))
    }
    /// Called with each write, before it is answered.
    var onWrite: ((LEHost, HostWriteRequest) -> Void)?
    func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) {
        writes.append(request)
        onWrite?(host, request)
        host.respondToWrite(id: request.id, error: nil)
    }
    func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {
        subscriptions.append((valueHandle, notify, indicate))
    }
    /// Packets waiting for controller buffers each time the host reported room for updates.
    var readyWaiting: [Int] = []
    func hostIsReadyToUpdateSubscribers(_ host: LEHost) { readyWaiting.append(host.aclWaiting.count) }
    var storedWrites: [(UInt16, [UInt8])] = []
    func host(_ host: LEHost, connection: HostConnection, didWriteStoredValue value: [UInt8], forHandle handle: UInt16) {
        storedWrites.append((handle, value))
    }
}

/// A central and a peripheral host on a virtual-clock air, connected.
final class LinkedHosts: @unchecked Sendable {
    let air = VirtualAir(loop: EventLoop(label: "host.test", clock: .virtual))
    let central: LEHost
    let peripheral: LEHost
    let c = CentralRecorder()
    let p = PeripheralRecorder()
    var handles: GATTServiceHandles!
    let longValue = (0..<480).map { UInt8($0 % 253) }

    init(connect: Bool = true, capture: String? = nil) throws {
        central = try HostFactory.makeHost(on: air, name: "central", position: VirtualPosition(x: 0, y: 0), capture: capture)
        peripheral = try HostFactory.makeHost(on: air, name: "peripheral", position: VirtualPosition(x: 3, y: 0))
        p.host = peripheral
        air.loop.sync {
            central.centralDelegate = c
            peripheral.peripheralDelegate = p
            central.powerOn()
            peripheral.powerOn()
        }
        air.loop.advance(by: .milliseconds(10))
        #expect(air.loop.sync { central.powerState == .on && peripheral.powerState == .on })
        let secondary = try air.loop.sync {
            try peripheral.addService(
                GATTServiceDefinition(
                    uuid: BluetoothUUID(0x180F), isPrimary: false,
                    characteristics: [
                        GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A19), properties: [.read], permissions: .readable, value: [88])
                    ]))
        }
        handles = try air.loop.sync {
            try peripheral.addService(
                GATTServiceDefinition(
                    uuid: BluetoothUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!,
                    includedServices: [secondary.reference],
                    characteristics: [
                        GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A37), properties: [.notify, .indicate], permissions: [], value: nil),
                        GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A38), properties: [.read], permissions: .readable, value: [0x01]),
                        GATTCharacteristicDefinition(uuid: BluetoothUUID(string: "6E400002-B5A3-F393-E0A9-E50E24DCCA9E")!, properties: [.read], permissions: .readable, value: nil),
                        GATTCharacteristicDefinition(
                            uuid: BluetoothUUID(string: "6E400003-B5A3-F393-E0A9-E50E24DCCA9E")!,
                            properties: [.read, .write, .writeWithoutResponse], permissions: .readWrite, value: [0]),
                    ]))
        }
        p.dynamic[handles.characteristics[2].value] = longValue
        air.loop.sync { peripheral.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6, 3, 3, 0x0D, 0x18], scanResponse: [4, 9, 0x4F, 0x43, 0x42])) }
        guard connect else { return }
        let target = BluetoothAddress(bytes: (peripheral.transport as! VirtualController).address.bytes)
        air.loop.sync { central.connect(to: target) }
        air.loop.advance(by: .milliseconds(300))
        #expect(c.connections.count == 1 && p.connections.count == 1)
    }

    var link: HostConnection { c.connections[0] }

    /// Runs a GATT procedure and lets virtual time pass until it completes.
    func gatt(_ procedure: GATTClient.Procedure, within: LoopTime = .seconds(1)) -> Result<GATTClient.Outcome, GATTClient.Failure>? {
        var result: Result<GATTClient.Outcome, GATTClient.Failure>?
        air.loop.sync { link.gatt(procedure) { result = $0 } }
        air.loop.advance(by: within)
        return result
    }
}

@Suite struct HostStartupAndGAPTests {
    @Test func startupScanAndConnect() throws {
        let t = try LinkedHosts(connect: false)
        #expect(t.air.loop.sync { t.central.aclBufferSize == 251 && t.central.aclBufferCount == 8 })
        t.air.loop.sync { t.central.startScanning(active: true) }
        t.air.loop.advance(by: .milliseconds(400))
        let kinds = Set(t.c.reports.map(\.kind))
        #expect(kinds == [.connectableUndirected, .scanResponse])
        #expect(t.c.reports.first { $0.kind == .scanResponse }?.data == [4, 9, 0x4F, 0x43, 0x42])
        #expect(t.c.reports.allSatisfy { $0.rssi < -45 && $0.rssi > -55 })   // 3 m
        // Connect; advertising resumes after the connection as the peripheral still wants it.
        let target = t.c.reports[0].address
        t.air.loop.sync {
            t.central.stopScanning(); t.central.connect(to: target)
        }
        t.air.loop.advance(by: .milliseconds(300))
        #expect(t.c.connections.count == 1 && t.c.connections[0].role == .central)
        #expect(t.p.connections.first?.role == .peripheral)
        #expect(t.air.loop.sync { t.peripheral.isAdvertising })
        // A connection to nobody is cancelled with Unknown Connection Identifier.
        let nobody = BluetoothAddress(string: "01:02:03:04:05:06")!
        t.air.loop.sync { t.central.connect(to: nobody) }
        t.air.loop.advance(by: .seconds(1))
        t.air.loop.sync { t.central.cancelConnect(to: nobody) }
        t.air.loop.advance(by: .milliseconds(10))
        #expect(t.c.failures.map(\.1) == [.unknownConnectionIdentifier])
    }

    @Test func advertisingSurvivesAnAddressChangeWhileItStarts() throws {
        // Advertising (re)started and privacy turned on in one turn: the rotation's LE Set Random Address and its
        // restart interleave with the start's own commands. A controller refuses new advertising parameters while
        // it advertises; that refusal used to end advertising for good, at the next rotation or disconnection.
        let t = try LinkedHosts(connect: false)
        t.air.loop.sync {
            t.peripheral.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6, 3, 3, 0x0D, 0x18]))
            t.peripheral.enablePrivacy(rotatingEvery: .seconds(1))
        }
        t.air.loop.advance(by: .milliseconds(200))
        let first = t.air.loop.sync { (t.peripheral.isAdvertising, t.peripheral.wantsAdvertising != nil, t.peripheral.currentPrivateAddress) }
        #expect(first.0 && first.1 && first.2 != nil, "advertising \(first.0), wanted \(first.1), at \(String(describing: first.2))")
        // Three rotations later it still advertises, from its newest address, and a scanner hears it there.
        t.air.loop.advance(by: .milliseconds(3_300))
        let later = t.air.loop.sync { (t.peripheral.isAdvertising, t.peripheral.wantsAdvertising != nil, t.peripheral.currentPrivateAddress) }
        #expect(later.0 && later.1 && later.2 != nil && later.2 != first.2)
        t.air.loop.sync { t.central.startScanning(active: false) }
        t.air.loop.advance(by: .milliseconds(400))
        #expect(t.c.reports.contains { $0.address == later.2 })
    }

    @Test func disconnectReasonsFromEachSideAndSupervisionTimeout() throws {
        let t = try LinkedHosts()
        t.air.loop.sync { t.link.disconnect() }
        t.air.loop.advance(by: .milliseconds(10))
        #expect(t.c.disconnects == [.connectionTerminatedByLocalHost])
        #expect(t.p.disconnects == [.remoteUserTerminated])
        // Reconnect, then the peripheral's radio goes away: the central times out.
        let target = BluetoothAddress(bytes: (t.peripheral.transport as! VirtualController).address.bytes)
        t.air.loop.advance(by: .milliseconds(300))
        t.air.loop.sync { t.central.connect(to: target) }
        t.air.loop.advance(by: .milliseconds(300))
        #expect(t.c.connections.count == 2)
        (t.peripheral.transport as! VirtualController).powerOff()
        t.air.loop.advance(by: .seconds(6))
        #expect(t.c.disconnects.last == .connectionTimeout)
        #expect(t.air.loop.sync { t.peripheral.powerState } == .off)
    }
}

@Suite struct HostGATTTests {
    @Test func everyClientProcedureAgainstOurServer() throws {
        let t = try LinkedHosts()
        #expect(t.gatt(.exchangeMTU(clientRxMTU: 247)) == .success(.mtu(247)))
        #expect(t.link.attMTU == 247)
        guard case let .success(.services(services)) = t.gatt(.discoverAllPrimaryServices) else { Issue.record("services"); return }
        #expect(services.map(\.uuid.uuidString) == ["1800", "1801", "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"])
        let main = services[2]
        #expect(t.gatt(.discoverPrimaryServices(uuid: main.uuid)) == .success(.services([main])))
        guard case let .success(.includedServices(incs)) = t.gatt(.findIncludedServices(start: main.handle, end: main.endHandle)) else { return }
        #expect(incs.map(\.uuid) == [BluetoothUUID(0x180F)])
        guard case let .success(.characteristics(chars)) = t.gatt(.discoverCharacteristics(start: main.handle, end: main.endHandle, uuid: nil)) else { return }
        #expect(chars.map(\.valueHandle) == t.handles.characteristics.map(\.value))
        guard case let .success(.descriptors(ds)) = t.gatt(.discoverDescriptors(start: chars[0].valueHandle + 1, end: chars[1].declarationHandle - 1)) else { return }
        #expect(ds.map(\.uuid) == [.clientCharacteristicConfiguration])
        // Reads: short, long (dynamic, answered by the app at each offset), multiple, by UUID.
        #expect(t.gatt(.read(handle: chars[1].valueHandle)) == .success(.value([0x01])))
        #expect(t.gatt(.readLong(handle: chars[2].valueHandle)) == .success(.value(t.longValue)))
        #expect(t.p.reads.map(\.offset) == [0, 246])   // ATT_MTU − 1 octets per part
        #expect(t.gatt(.readMultiple(handles: [chars[1].valueHandle, chars[3].valueHandle])) == .success(.value([0x01, 0x00])))
        #expect(t.gatt(.readMultipleVariable(handles: [chars[1].valueHandle, chars[3].valueHandle])) == .success(.values([[0x01], [0x00]])))
        #expect(
            t.gatt(.readUsingCharacteristicUUID(start: 1, end: 0xFFFF, uuid: BluetoothUUID(0x2A38)))
                == .success(.handleValues([GATTHandleValue(handle: chars[1].valueHandle, value: [0x01])])))
        // Writes: short, long, without response.
        let target = chars[3].valueHandle
        #expect(t.gatt(.write(handle: target, value: [7, 7])) == .success(.written))
        #expect(t.gatt(.read(handle: target)) == .success(.value([7, 7])))
        let big = (0..<400).map { UInt8($0 % 200) }
        #expect(t.gatt(.write(handle: target, value: big)) == .success(.written))
        #expect(t.gatt(.readLong(handle: target)) == .success(.value(big)))
        #expect(t.air.loop.sync { t.link.writeWithoutResponse(handle: target, value: [9]) })
        t.air.loop.advance(by: .milliseconds(10))
        #expect(t.gatt(.read(handle: target)) == .success(.value([9])))
        // Errors come back as ATT errors.
        #expect(t.gatt(.read(handle: 0x0EEE)) == .failure(.att(.invalidHandle, handle: 0x0EEE)))
        #expect(t.gatt(.write(handle: chars[1].valueHandle, value: [1])) == .failure(.att(.writeNotPermitted, handle: chars[1].valueHandle)))
    }

    @Test func notificationsAndIndicationsReachTheCentral() throws {
        let t = try LinkedHosts()
        let hr = t.handles.characteristics[0]
        let cccd = try #require(hr.clientConfiguration)
        // Both enabled: the server notifies (the cheaper of the two).
        #expect(t.gatt(.write(handle: cccd, value: [0x03, 0x00])) == .success(.written))
        #expect(t.p.subscriptions.last.map { $0.0 == hr.value && $0.1 && $0.2 } == true)
        var sent = 0
        for i in 0..<6 where t.air.loop.sync({ t.peripheral.updateValue([UInt8(i)], forHandle: hr.value) }) { sent += 1 }
        t.air.loop.advance(by: .milliseconds(50))
        #expect(sent == 6)
        #expect(t.c.values.map(\.1) == (0..<6).map { [UInt8($0)] })
        #expect(t.c.values.allSatisfy { !$0.2 })
        // Indications only: each waits for the previous confirmation, all arrive in order.
        #expect(t.gatt(.write(handle: cccd, value: [0x02, 0x00])) == .success(.written))
        t.c.values.removeAll()
        t.air.loop.sync { for i in 10..<15 { _ = t.peripheral.updateValue([UInt8(i)], forHandle: hr.value) } }
        t.air.loop.advance(by: .milliseconds(50))
        #expect(t.c.values.map(\.1) == (10..<15).map { [UInt8($0)] })
        #expect(t.c.values.allSatisfy { $0.2 })
        // Unsubscribed: nothing more is sent.
        #expect(t.gatt(.write(handle: cccd, value: [0x00, 0x00])) == .success(.written))
        t.c.values.removeAll()
        t.air.loop.sync { _ = t.peripheral.updateValue([1], forHandle: hr.value) }
        t.air.loop.advance(by: .milliseconds(50))
        #expect(t.c.values.isEmpty)
    }

    /// Updates submitted from outside the loop (as Core Bluetooth's updateValue does) are taken until 64 wait,
    /// and room is reported once fewer than 16 do: refills of about 48, each a thread hand-off to the
    /// submitter's queue (it was 32, room below 16: refills of 16). All arrive, in order.
    @Test func theTransmitQueueTakes64UpdatesAndReportsRoomBelow16() throws {
        let t = try LinkedHosts()
        let hr = t.handles.characteristics[0]
        let cccd = try #require(hr.clientConfiguration)
        #expect(t.gatt(.write(handle: cccd, value: [0x01, 0x00])) == .success(.written))
        // Inside one loop turn nothing is sent meanwhile: exactly the queue's limit is taken.
        let accepted = t.air.loop.sync { () -> Int in
            var n = 0
            while n < 1000, t.peripheral.submitUpdate([UInt8(n & 0xFF)], forHandle: hr.value) { n += 1 }
            return n
        }
        #expect(accepted == 64)
        t.air.loop.advance(by: .milliseconds(200))
        #expect(t.c.values.map(\.1) == (0..<64).map { [UInt8($0)] })
        #expect(t.p.readyWaiting.count == 1)
        #expect(t.p.readyWaiting.allSatisfy { $0 < 16 })
    }

    /// Number Of Completed Packets is read in place (LEHost.handleCompletedPacketsInPlace): it takes exactly the
    /// packets the event decoder takes as that event, and leaves every other packet to it.
    @Test func completedPacketsReadInPlaceTakeWhatTheDecoderTakes() throws {
        let t = try LinkedHosts(connect: false)
        let samples: [[UInt8]] = [
            [0x13, 0x05, 0x01, 0xEE, 0x0E, 0x02, 0x00],
            [0x13, 0x09, 0x02, 0xEE, 0x0E, 0x01, 0x00, 0xEF, 0x0E, 0x03, 0x00],
            [0x13, 0x01, 0x00],
            [0x13, 0x05, 0x02, 0xEE, 0x0E, 0x02, 0x00],   // Num_Handles says two entries, one follows
            [0x13, 0x06, 0x01, 0xEE, 0x0E, 0x02, 0x00],   // the parameter length disagrees
            [0x13, 0x05, 0x01, 0xEE, 0x0E, 0x02],   // cut short
            [0x13, 0x00],
            [0x13],
            [0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00],   // another event
        ]
        for b in samples {
            var decoded = false
            if case .numberOfCompletedPackets? = try? HCIEvent.decode(HCIPacket(type: .event, bytes: b)) { decoded = true }
            // Unknown handles: the credits they name are ignored either way.
            let took = t.air.loop.sync { t.central.handleCompletedPacketsInPlace(b) }
            #expect(took == decoded, "\(b)")
        }
    }

    @Test func unansweredRequestTimesOutAfterThirtySeconds() throws {
        let t = try LinkedHosts()
        t.p.answerReads = false
        var result: Result<GATTClient.Outcome, GATTClient.Failure>?
        var later: Result<GATTClient.Outcome, GATTClient.Failure>?
        let dyn = t.handles.characteristics[2].value
        t.air.loop.sync {
            t.link.gatt(.read(handle: dyn)) { result = $0 }
            t.link.gatt(.read(handle: t.handles.characteristics[1].value)) { later = $0 }
        }
        t.air.loop.advance(by: .seconds(29))
        #expect(result == nil && later == nil)
        t.air.loop.advance(by: .seconds(2))
        #expect(result == .failure(.timeout))
        #expect(later == .failure(.bearerClosed))
        // No further ATT on this bearer (Vol 3 Part F §3.3.3): as iOS does, the link goes down, and the
        // central hears "connection timeout".
        t.air.loop.advance(by: .milliseconds(100))
        #expect(t.c.disconnects == [.connectionTimeout])
        #expect(t.gatt(.read(handle: 1)) == .failure(.disconnected))
    }

    /// Both sides exchange the MTU at once, as BlueZ does against `ble gatt` (issue 27): ATT_MTU is one value per
    /// bearer, so the exchange our server role answered raises it for our client role too.
    @Test func crossingMTUExchangesAgreeOnOneBearerMTU() throws {
        let t = try LinkedHosts()
        let pc = try #require(t.p.connections.first)
        var ours: UInt16?, theirs: UInt16?
        t.air.loop.sync {
            t.link.exchangeMTU(517) { ours = $0 }
            pc.exchangeMTU(517) { theirs = $0 }
        }
        t.air.loop.advance(by: .seconds(1))
        #expect(ours == 517 && theirs == 517)
        #expect(t.link.attMTU == 517 && pc.attMTU == 517)
        // A value longer than 23 octets comes back whole in one Read Response.
        let long = t.handles.characteristics[2].value
        #expect(t.gatt(.read(handle: long)) == .success(.value(t.longValue)))
    }

    /// The peer answers our Exchange MTU Request with an Error Response after its own exchange, which our server
    /// role answered: the bearer keeps the MTU that exchange set (it once fell back to 23, and the peer's next
    /// 30-octet Read By Type Response was refused as longer than ATT_MTU).
    @Test func aRefusedMTUExchangeKeepsTheMTUThePeersExchangeSet() throws {
        let t = try LinkedHosts()
        let pc = try #require(t.p.connections.first)
        var ours: UInt16?
        t.air.loop.sync {
            t.link.exchangeMTU(517) { ours = $0 }
            t.peripheral.sendATT(.exchangeMTURequest(ATTExchangeMTURequest(clientRxMTU: 517)), on: pc)
            t.peripheral.sendATT(
                .errorResponse(ATTErrorResponse(requestOpcode: .exchangeMTURequest, handle: 0, error: .requestNotSupported)), on: pc)
        }
        t.air.loop.advance(by: .seconds(1))
        #expect(ours == 517)
        #expect(t.link.attMTU == 517)
        let long = t.handles.characteristics[2].value
        #expect(t.gatt(.read(handle: long)) == .success(.value(t.longValue)))
        // Write Commands are sized by the bearer's MTU too: 500 octets go out as one.
        let writable = t.handles.characteristics[3].value
        let sent = t.air.loop.sync { t.link.writeWithoutResponse(handle: writable, value: [UInt8](repeating: 9, count: 500)) }
        #expect(sent)
        t.air.loop.advance(by: .milliseconds(100))
        #expect(t.gatt(.read(handle: writable)) == .success(.value([UInt8](repeating: 9, count: 500))))
    }

    /// A notification in one ACL packet takes the central's short path (no frame built, no PDU decoded); one in
    /// several packets, or any while ATT tracing is on, takes the general one. Both deliver the same values in
    /// the order sent, and both drop what the general path drops: a PDU longer than ATT_MTU, or one too short
    /// to hold a handle.
    @Test func notificationsTakeEitherPathWithTheSameResult() throws {
        let t = try LinkedHosts()
        let pc = try #require(t.p.connections.first)
        let aclSize = t.air.loop.sync { t.peripheral.aclBufferSize }
        let long = (0..<(aclSize + 40)).map { UInt8(truncatingIfNeeded: $0) }   // fragmented: the general path
        func notify(_ handle: UInt16, _ value: [UInt8]) {
            t.peripheral.sendATT(.handleValueNotification(ATTHandleValueNotification(handle: handle, value: value)), on: pc)
        }
        func run(_ burst: @escaping () -> Void) -> [(UInt16, [UInt8])] {
            t.c.values.removeAll()
            t.air.loop.sync { burst() }
            t.air.loop.advance(by: .milliseconds(100))
            #expect(t.c.values.allSatisfy { !$0.2 })
            return t.c.values.map { ($0.0, $0.1) }
        }
        // At ATT_MTU 23, every PDU here fits one ACL packet.
        let atDefaultMTU = {
            notify(0x0021, [1, 2, 3])
            notify(0x0022, [])   // an empty value is still a notification
            t.peripheral.sendL2CAP([ATTOpcode.handleValueNotification.rawValue, 0x25], cid: .att, on: pc)   // no whole handle
            notify(0x0023, [UInt8](repeating: 5, count: 21))   // 24 octets: one more than ATT_MTU
            notify(0x0024, [UInt8](repeating: 6, count: 20))   // exactly ATT_MTU
        }
        let expectedAtDefault: [(UInt16, [UInt8])] = [(0x0021, [1, 2, 3]), (0x0022, []), (0x0024, [UInt8](repeating: 6, count: 20))]
        // At ATT_MTU 517, longer ones come in several packets.
        let atLargeMTU = {
            notify(0x0031, [7])
            notify(0x0032, long)
            notify(0x0033, [UInt8](repeating: 5, count: 515))   // 518 octets: one more than ATT_MTU
            notify(0x0034, [UInt8](repeating: 6, count: 514))   // exactly ATT_MTU
            notify(0x0035, [8, 9])
        }
        let expectedAtLarge: [(UInt16, [UInt8])] = [
            (0x0031, [7]), (0x0032, long), (0x0034, [UInt8](repeating: 6, count: 514)), (0x0035, [8, 9]),
        ]
        func check(_ got: [(UInt16, [UInt8])], _ want: [(UInt16, [UInt8])], _ what: String) {
            #expect(got.map(\.0) == want.map(\.0), "\(what)")
            #expect(got.map(\.1) == want.map(\.1), "\(what)")
        }
        func traced(_ on: Bool) {
            t.air.loop.sync { t.central.loggers.att.logLevel = on ? .trace : .info }
            #expect(t.air.loop.sync { t.central.loggers.attTraces } == on)
        }
        check(run(atDefaultMTU), expectedAtDefault, "short path, MTU 23")
        traced(true)
        check(run(atDefaultMTU), expectedAtDefault, "traced, MTU 23")
        traced(false)
        t.air.loop.sync { t.link.exchangeMTU(517) }
        t.air.loop.advance(by: .seconds(1))
        #expect(t.link.attMTU == 517)
        check(run(atLargeMTU), expectedAtLarge, "short path, MTU 517")
        traced(true)
        check(run(atLargeMTU), expectedAtLarge, "traced, MTU 517")
        traced(false)
        // The link is still usable: nothing above was taken for a protocol error.
        #expect(t.gatt(.read(handle: t.handles.characteristics[1].value)) == .success(.value([0x01])))
    }

    /// A write to a value the database stores is answered by the server and reported to the peripheral's delegate
    /// (`ble serve` prints it): a Write Request and a Write Command, not a CCCD write.
    @Test func writesToStoredValuesAreReported() throws {
        let t = try LinkedHosts()
        let target = t.handles.characteristics[3].value
        #expect(t.gatt(.write(handle: target, value: [0x68, 0x69])) == .success(.written))
        t.air.loop.sync { _ = t.link.writeWithoutResponse(handle: target, value: [1]) }
        t.air.loop.advance(by: .milliseconds(100))
        #expect(t.gatt(.write(handle: try #require(t.handles.characteristics[0].clientConfiguration), value: [1, 0])) == .success(.written))
        #expect(t.p.storedWrites.map(\.0) == [target, target])
        #expect(t.p.storedWrites.map(\.1) == [[0x68, 0x69], [1]])
        #expect(t.p.writes.isEmpty)
    }

    @Test func pdusLongerThanTheMTUAreProtocolViolations() throws {
        let t = try LinkedHosts()
        // A Write Request of 100 octets at ATT_MTU 23 (97 octets of value): refused, nothing written.
        let writable = t.handles.characteristics[3].value
        t.air.loop.sync { t.central.sendATT(.writeRequest(ATTWriteRequest(handle: writable, value: [UInt8](repeating: 7, count: 97))), on: t.link) }
        t.air.loop.advance(by: .milliseconds(100))
        func stored() -> GATTAttributeValue? { t.air.loop.sync { t.peripheral.gattServer.database.attribute(at: writable)?.value } }
        #expect(stored() == .stored([0]))
        // The same value within the MTU is written.
        t.air.loop.sync { t.central.sendATT(.writeRequest(ATTWriteRequest(handle: writable, value: [7, 7])), on: t.link) }
        t.air.loop.advance(by: .milliseconds(100))
        #expect(stored() == .stored([7, 7]))
        // A Read Response longer than ATT_MTU fails the read it answers.
        t.p.answerReads = false
        var result: Result<GATTClient.Outcome, GATTClient.Failure>?
        t.air.loop.sync { t.link.gatt(.read(handle: t.handles.characteristics[2].value)) { result = $0 } }
        t.air.loop.advance(by: .milliseconds(100))
        let pc = try #require(t.p.connections.first)
        t.air.loop.sync { t.peripheral.sendATT(.readResponse(ATTReadResponse(value: [UInt8](repeating: 1, count: 100))), on: pc) }
        t.air.loop.advance(by: .milliseconds(100))
        guard case .failure(.invalidResponse)? = result else { Issue.record("got \(String(describing: result))"); return }
    }

    @Test func disconnectMidReadFailsThePendingProcedure() throws {
        let t = try LinkedHosts()
        t.p.answerReads = false
        var result: Result<GATTClient.Outcome, GATTClient.Failure>?
        t.air.loop.sync { t.link.gatt(.read(handle: t.handles.characteristics[2].value)) { result = $0 } }
        t.air.loop.advance(by: .milliseconds(10))
        t.air.loop.sync { t.peripheral.disconnect(handle: t.p.connections[0].handle) }
        t.air.loop.advance(by: .milliseconds(10))
        #expect(result == .failure(.disconnected))
        #expect(t.c.disconnects == [.remoteUserTerminated])
        #expect(t.air.loop.pendingTimerCount <= 2)   // only the two advertising timers remain
    }

    @Test func writeWithoutResponseBackPressureFollowsControllerCredits() throws {
        let t = try LinkedHosts()
        let target = t.handles.characteristics[3].value
        var accepted = 0
        var refused = false
        var readyBefore = -1
        t.air.loop.sync {
            while t.link.canSendWriteWithoutResponse && accepted < 1000 {
                t.link.writeWithoutResponse(handle: target, value: [UInt8(accepted & 0xFF)])
                accepted += 1
            }
            // Full: the next write is refused and the delegate will hear when room frees.
            refused = !t.link.writeWithoutResponse(handle: target, value: [0xEE])
            readyBefore = t.c.readyToWrite
        }
        // 8 controller buffers plus the host's own queue of 8, then "full".
        #expect(accepted == 8 + 8)
        #expect(refused)
        #expect(readyBefore == 0)
        t.air.loop.advance(by: .milliseconds(10))
        #expect(t.c.readyToWrite == 1)
        #expect(t.air.loop.sync { t.link.canSendWriteWithoutResponse })
        #expect(t.gatt(.read(handle: target)) == .success(.value([UInt8((accepted - 1) & 0xFF)])))
    }
}

@Suite struct CaptureTests {
    /// A whole session captured in btsnoop and decoded by Wireshark's dissectors: nothing malformed.
    @Test func tsharkFindsNoMalformedPacketsInAFullSession() throws {
        let tshark = ["/usr/bin/tshark", "/usr/local/bin/tshark"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let tshark else {
            Issue.record("tshark is missing: scripts/test installs it (apt-get install tshark)")
            return
        }
        let path = NSTemporaryDirectory() + "ocb-session-\(UUID().uuidString.prefix(8)).btsnoop"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let t = try LinkedHosts(capture: path)
        _ = t.gatt(.exchangeMTU(clientRxMTU: 100))
        guard case let .success(.services(services)) = t.gatt(.discoverAllPrimaryServices) else { Issue.record("discovery"); return }
        for s in services {
            _ = t.gatt(.findIncludedServices(start: s.handle, end: s.endHandle))
            _ = t.gatt(.discoverCharacteristics(start: s.handle, end: s.endHandle, uuid: nil))
        }
        let chars = t.handles.characteristics
        _ = t.gatt(.discoverDescriptors(start: chars[0].value + 1, end: chars[1].declaration - 1))
        _ = t.gatt(.readLong(handle: chars[2].value))
        _ = t.gatt(.write(handle: chars[3].value, value: Array(repeating: 5, count: 200)))
        _ = t.gatt(.read(handle: 0x0EEE))
        _ = t.gatt(.write(handle: try #require(chars[0].clientConfiguration), value: [1, 0]))
        t.air.loop.sync { _ = t.peripheral.updateValue([1, 2, 3], forHandle: chars[0].value) }
        t.air.loop.sync { t.link.disconnect() }
        t.air.loop.advance(by: .milliseconds(50))
        func tsharkLines(_ args: [String]) throws -> [String] {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: tshark)
            p.arguments = ["-r", path] + args
            let out = Pipe()
            p.standardOutput = out
            p.standardError = FileHandle.nullDevice
            try p.run()
            let data = out.fileHandleForReading.readDataToEndOfFile()
            p.waitUntilExit()
            return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
        }
        let all = try tsharkLines([])
        #expect(all.count > 60)
        #expect(all.contains { $0.contains("Read Blob Request") })
        #expect(all.contains { $0.contains("Prepare Write Request") })
        #expect(all.contains { $0.contains("Handle Value Notification") })
        #expect(all.contains { $0.contains("Disconnect") })
        let bad = try tsharkLines(["-Y", "_ws.malformed || _ws.expert.severity >= error"])
        #expect(bad.isEmpty, "tshark flagged: \(bad.prefix(5))")
    }
}
