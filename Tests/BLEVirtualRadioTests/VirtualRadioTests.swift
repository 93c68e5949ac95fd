// The virtual controller driven with raw HCI by a scripted host, on a virtual clock.
import Foundation
import Testing
import TestSupport
import BLEWire
import BLEHCI
import BLETransport
@testable import BLEVirtualRadio

/// Records what a controller sends to its host.
final class ScriptedHost: HCITransportSink, @unchecked Sendable {
    let controller: VirtualController
    let loop: EventLoop
    private let lock = NSLock()
    private var packets: [HCIPacket] = []
    private(set) var closed = false

    init(_ air: VirtualAir, position: VirtualPosition? = nil, address: BluetoothAddress? = nil) throws {
        controller = air.addController(address: address, position: position)
        loop = air.loop
        try controller.open(sink: self)
        // The default event mask leaves out LE Meta (Vol 4 Part E §7.3.1): unmask it as hosts do.
        run(.setEventMask(0x2000_1FFF_FFFF_FFFF))
        clear()
    }

    func transport(didReceive packet: HCIPacket) { lock.lock(); packets.append(packet); lock.unlock() }
    func transportDidClose(error: (any Error)?) { lock.lock(); closed = true; lock.unlock() }

    var events: [HCIEvent] { lock.lock(); defer { lock.unlock() }; return packets.filter { $0.type == .event }.compactMap { try? HCIEvent.decode($0) } }
    var acl: [ACLPacket] { lock.lock(); defer { lock.unlock() }; return packets.filter { $0.type == .acl }.compactMap { try? ACLPacket.decode($0) } }
    var aclPackets: [HCIPacket] { lock.lock(); defer { lock.unlock() }; return packets.filter { $0.type == .acl } }
    func clear() { lock.lock(); packets.removeAll(); lock.unlock() }

    /// Sends a command and returns the events it caused (after running queued work).
    @discardableResult
    func run(_ c: HCICommand) -> [HCIEvent] {
        let before = events.count
        controller.send(c.encode())
        loop.runPending()
        return Array(events.dropFirst(before))
    }

    func returnParameters(_ c: HCICommand) -> [UInt8]? {
        for e in run(c) { if case let .commandComplete(_, op, p) = e, op == c.opcode { return p } }
        return nil
    }

    var reports: [LEAdvertisingReport] { events.flatMap { e -> [LEAdvertisingReport] in if case let .le(.advertisingReport(r)) = e { return r } else { return [] } } }

    var connectionCompletes: [LEConnectionComplete] {
        events.compactMap { if case let .le(.connectionComplete(c)) = $0 { return c } else { return nil } }
    }

    func startAdvertising(type: LEAdvertisingType = .connectableUndirected, data: [UInt8] = [2, 1, 6], scanResponse: [UInt8] = [], interval: UInt16 = 0xA0) {
        run(.leSetAdvertisingParameters(LESetAdvertisingParameters(advertisingIntervalMin: interval, advertisingIntervalMax: interval, advertisingType: type)))
        run(.leSetAdvertisingData(data))
        run(.leSetScanResponseData(scanResponse))
        run(.leSetAdvertisingEnable(true))
    }

    func startScanning(active: Bool, filterDuplicates: Bool = false) {
        run(.leSetScanParameters(LESetScanParameters(scanType: active ? .active : .passive)))
        run(.leSetScanEnable(enable: true, filterDuplicates: filterDuplicates))
    }

    func createConnection(to a: BluetoothAddress) -> [HCIEvent] {
        run(
            .leCreateConnection(
                LECreateConnection(
                    leScanInterval: 0x60, leScanWindow: 0x30, initiatorFilterPolicy: 0, peerAddressType: 0,
                    peerAddress: a, ownAddressType: 0, connectionIntervalMin: 0x18, connectionIntervalMax: 0x28,
                    maxLatency: 0, supervisionTimeout: 0x64, minCELength: 0, maxCELength: 0)))
    }
}

func virtualAir() -> VirtualAir { VirtualAir(loop: EventLoop(label: "radio.test", clock: .virtual)) }

@Suite struct ControllerCommandTests {
    @Test func resetVersionAddressAndBuffers() throws {
        let air = virtualAir()
        let h = try ScriptedHost(air)
        #expect(h.run(.reset) == [.commandComplete(numHCICommandPackets: 1, opcode: .reset, returnParameters: [0])])
        let v = try ReadLocalVersionReturn(decoding: try #require(h.returnParameters(.readLocalVersionInformation)))
        #expect(v.hciVersion == 0x0C)
        let a = try ReadBDADDRReturn(decoding: try #require(h.returnParameters(.readBDADDR)))
        #expect(a.address.bytes == h.controller.address.bytes)
        let b = try LEReadBufferSizeReturn(decoding: try #require(h.returnParameters(.leReadBufferSize)))
        #expect(b.aclDataPacketLength == 251 && b.totalNumACLDataPackets == 8)
        let cmds = try ReadLocalSupportedCommandsReturn(decoding: try #require(h.returnParameters(.readLocalSupportedCommands)))
        #expect(cmds.supports(octet: 5, bit: 7))   // HCI_Reset
        #expect(cmds.supports(octet: 26, bit: 4))   // HCI_LE_Create_Connection
        let f = try ReadLocalSupportedFeaturesReturn(decoding: try #require(h.returnParameters(.leReadLocalSupportedFeatures)))
        #expect(LEFeatures(rawValue: f.features).contains(.encryption))
    }

    @Test func leEncryptIsAES128() throws {
        let air = virtualAir()
        let h = try ScriptedHost(air)
        // FIPS-197 Appendix C.1, sent little-endian as HCI does.
        let key: [UInt8] = Array(0x00...0x0F).map(UInt8.init)
        let plaintext: [UInt8] = [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF]
        let r = try LEEncryptReturn(decoding: try #require(h.returnParameters(.leEncrypt(key: key.reversed(), plaintext: plaintext.reversed()))))
        #expect(r.status == .success)
        #expect(Array(r.encryptedData.reversed()) == [0x69, 0xC4, 0xE0, 0xD8, 0x6A, 0x7B, 0x04, 0x30, 0xD8, 0xCD, 0xB7, 0x80, 0x70, 0xB4, 0xC5, 0x5A])
    }

    @Test func unknownAndMalformedCommandsGetErrors() throws {
        let air = virtualAir()
        let h = try ScriptedHost(air)
        #expect(h.returnParameters(.unknown(opcode: HCIOpcode(ogf: 0x3F, ocf: 0x123), parameters: [1])) == [HCIStatus.unknownCommand.rawValue])
        h.controller.send(HCIPacket(type: .command, bytes: [0x06, 0x20, 0x01, 0x00]))   // LE Set Advertising Parameters, 1 byte
        air.loop.runPending()
        #expect(h.events.last == .commandComplete(numHCICommandPackets: 1, opcode: .leSetAdvertisingParameters, returnParameters: [0x12]))
        #expect(
            h.run(.disconnect(handle: 0x99, reason: .remoteUserTerminated))
                == [.commandStatus(status: .unknownConnectionIdentifier, numHCICommandPackets: 1, opcode: .disconnect)])
        h.startAdvertising()
        // Changing parameters while advertising is disallowed (§7.8.5).
        #expect(h.returnParameters(.leSetAdvertisingParameters(LESetAdvertisingParameters())) == [HCIStatus.commandDisallowed.rawValue])
        #expect(h.returnParameters(.leSetAdvertisingParameters(LESetAdvertisingParameters())) != nil)
        #expect(h.returnParameters(.leCreateConnectionCancel) == [HCIStatus.commandDisallowed.rawValue])
    }
}

@Suite struct AirTests {
    @Test func passiveScanSeesAdvertisingWithRSSIFallingWithDistance() throws {
        let air = virtualAir()
        let near = try ScriptedHost(air, position: VirtualPosition(x: 1, y: 0))
        let far = try ScriptedHost(air, position: VirtualPosition(x: 30, y: 0))
        let scanner = try ScriptedHost(air, position: .origin)
        near.startAdvertising(data: [2, 1, 6, 3, 9, 0x41, 0x42], scanResponse: [3, 9, 0x43, 0x44])
        far.startAdvertising(type: .nonConnectableUndirected, data: [2, 1, 4])
        scanner.startScanning(active: false)
        air.loop.advance(by: .milliseconds(500))
        let fromNear = scanner.reports.filter { $0.address.bytes == near.controller.address.bytes }
        let fromFar = scanner.reports.filter { $0.address.bytes == far.controller.address.bytes }
        #expect(fromNear.count >= 3 && fromNear.count <= 5)   // 100 ms interval + 0–10 ms delay over 500 ms
        #expect(fromNear.allSatisfy { $0.eventType == .advInd && $0.data == [2, 1, 6, 3, 9, 0x41, 0x42] })
        #expect(fromFar.allSatisfy { $0.eventType == .advNonconnInd })
        // Passive scanning never gets scan responses.
        #expect(!scanner.reports.contains { $0.eventType == .scanRsp })
        let rNear = try #require(fromNear.first?.rssi), rFar = try #require(fromFar.first?.rssi)
        #expect(rNear == -40 && rFar < rNear - 25)
    }

    @Test func activeScanGetsScanResponsesAndDuplicatesCanBeFiltered() throws {
        let air = virtualAir()
        let adv = try ScriptedHost(air)
        let active = try ScriptedHost(air)
        let filtered = try ScriptedHost(air)
        adv.startAdvertising(scanResponse: [3, 9, 0x43, 0x44])
        active.startScanning(active: true)
        filtered.startScanning(active: true, filterDuplicates: true)
        air.loop.advance(by: .seconds(1))
        #expect(active.reports.filter { $0.eventType == .scanRsp }.count >= 8)
        #expect(active.reports.first { $0.eventType == .scanRsp }?.data == [3, 9, 0x43, 0x44])
        #expect(filtered.reports.map(\.eventType) == [.advInd, .scanRsp])
        // Nothing while advertising is off.
        adv.run(.leSetAdvertisingEnable(false))
        active.clear()
        air.loop.advance(by: .seconds(1))
        #expect(active.reports.isEmpty)
    }

    @Test func connectionDataAndDisconnectionFromEachSide() throws {
        let air = virtualAir()
        let p = try ScriptedHost(air)
        let c = try ScriptedHost(air)
        p.startAdvertising()
        #expect(c.createConnection(to: p.controller.address) == [.commandStatus(status: .success, numHCICommandPackets: 1, opcode: .leCreateConnection)])
        air.loop.advance(by: .milliseconds(200))
        let cc = try #require(c.connectionCompletes.first)
        let pc = try #require(p.connectionCompletes.first)
        #expect(cc.status == .success && cc.role == 0 && cc.peerAddress.bytes == p.controller.address.bytes)
        #expect(pc.status == .success && pc.role == 1 && pc.peerAddress.bytes == c.controller.address.bytes)
        #expect(cc.connectionInterval == 0x28 && cc.supervisionTimeout == 0x64)
        // Legacy advertising stops when the connection is made.
        #expect(p.controller.advertising == false)

        // ACL both ways, in order, with the credits returned.
        for i in 0..<5 { c.controller.send(ACLPacket(handle: cc.connectionHandle, boundary: .firstNonFlushable, data: [UInt8(i)]).encode()) }
        p.controller.send(ACLPacket(handle: pc.connectionHandle, boundary: .firstNonFlushable, data: [0xAA]).encode())
        air.loop.runPending()
        #expect(p.acl.map(\.data) == (0..<5).map { [UInt8($0)] })
        #expect(p.acl.allSatisfy { $0.handle == pc.connectionHandle })
        #expect(c.acl.map(\.data) == [[0xAA]])
        let credits = c.events.compactMap { e -> Int? in if case let .numberOfCompletedPackets(l) = e { return l.reduce(0) { $0 + Int($1.count) } } else { return nil } }
        #expect(credits.reduce(0, +) == 5)

        // Remote user terminated from the central: local 0x16, remote sees the reason given.
        c.run(.disconnect(handle: cc.connectionHandle, reason: .remoteUserTerminated))
        air.loop.runPending()
        #expect(c.events.contains(.disconnectionComplete(status: .success, handle: cc.connectionHandle, reason: .connectionTerminatedByLocalHost)))
        #expect(p.events.contains(.disconnectionComplete(status: .success, handle: pc.connectionHandle, reason: .remoteUserTerminated)))
    }

    /// The controller forwards ACL data without decoding it: the peer gets the same octets with its own
    /// handle in place of the sender's, whatever the flags; packets the controller cannot take are dropped
    /// without a credit; a silenced controller's data is lost with its credit returned; and data and events
    /// reach a host in the order they were produced, a burst at a time.
    @Test func aclCrossesWithThePeerHandleAndItsFlagsAndOctetsUntouched() throws {
        let air = virtualAir()
        let other = try ScriptedHost(air), p = try ScriptedHost(air), c = try ScriptedHost(air)
        // A first link from the central, so that its handle for the second differs from the peripheral's.
        other.startAdvertising()
        _ = c.createConnection(to: other.controller.address)
        air.loop.advance(by: .milliseconds(200))
        c.clear()
        p.startAdvertising()
        _ = c.createConnection(to: p.controller.address)
        air.loop.advance(by: .milliseconds(200))
        let ch = try #require(c.connectionCompletes.first { $0.status == .success }).connectionHandle
        let ph = try #require(p.connectionCompletes.first).connectionHandle
        #expect(ch != ph)
        p.clear(); c.clear(); other.clear()
        func credits(_ h: ScriptedHost) -> Int {
            h.events.reduce(0) { n, e in if case let .numberOfCompletedPackets(l) = e { return n + l.reduce(0) { $0 + Int($1.count) } } else { return n } }
        }

        // Every boundary and broadcast flag, and sizes from empty to the buffer size.
        let sent: [ACLPacket] = [
            ACLPacket(handle: ch, boundary: .firstNonFlushable, data: [0x05, 0x00, 0x04, 0x00, 0x1B, 0x2A, 0x00]),
            ACLPacket(handle: ch, boundary: .continuing, broadcast: 1, data: (0..<251).map { UInt8($0 & 0xFF) }),
            ACLPacket(handle: ch, boundary: .firstFlushable, broadcast: 2, data: []),
            ACLPacket(handle: ch, boundary: .complete, broadcast: 3, data: [0xFF]),
        ]
        for a in sent { c.controller.send(a.encode()) }
        air.loop.runPending()
        let got = p.aclPackets
        let expected = sent.map { ACLPacket(handle: ph, boundary: $0.boundary, broadcast: $0.broadcast, data: $0.data).encode() }
        #expect(got == expected)
        #expect(credits(c) == 4)
        // The sender's own packets are untouched (the rewrite works on the peer's copy).
        #expect(try ACLPacket.decode(sent[1].encode()).handle == ch)

        // Malformed (length field disagreeing with the size) or for no link: dropped, no credit.
        p.clear(); c.clear()
        var bad = ACLPacket(handle: ch, boundary: .firstNonFlushable, data: [1, 2, 3]).encode()
        bad.bytes[2] = 9
        c.controller.send(bad)
        c.controller.send(HCIPacket(type: .acl, bytes: [UInt8(ch & 0xFF)]))
        c.controller.send(ACLPacket(handle: 0x0EEE, boundary: .firstNonFlushable, data: [1]).encode())
        air.loop.runPending()
        #expect(p.aclPackets.isEmpty)
        #expect(credits(c) == 0)

        // Silenced: the data is lost on the air, the credit still comes back; restored: data flows again.
        air.silence(c.controller)
        air.loop.runPending()
        c.controller.send(ACLPacket(handle: ch, boundary: .firstNonFlushable, data: [7]).encode())
        air.loop.runPending()
        #expect(p.aclPackets.isEmpty)
        #expect(credits(c) == 1)
        air.silence(c.controller, false)
        air.loop.runPending()
        c.controller.send(ACLPacket(handle: ch, boundary: .firstNonFlushable, data: [8]).encode())
        air.loop.runPending()
        #expect(p.acl.map(\.data) == [[8]])

        // A burst both ways, with a command in the middle: each host sees its packets in the order produced.
        p.clear(); c.clear()
        for i in 0..<20 {
            c.controller.send(ACLPacket(handle: ch, boundary: .firstNonFlushable, data: [UInt8(i)]).encode())
            if i == 10 { c.controller.send(HCICommand.readBDADDR.encode()) }
            p.controller.send(ACLPacket(handle: ph, boundary: .firstNonFlushable, data: [UInt8(100 + i)]).encode())
        }
        air.loop.runPending()
        #expect(p.acl.map(\.data) == (0..<20).map { [UInt8($0)] })
        #expect(c.acl.map(\.data) == (0..<20).map { [UInt8(100 + $0)] })
        #expect(credits(c) == 20 && credits(p) == 20)
        #expect(c.events.contains { if case let .commandComplete(_, op, _) = $0 { return op == .readBDADDR } else { return false } })
        #expect(other.aclPackets.isEmpty)
    }

    @Test func removedPeerTimesOutAfterTheSupervisionTimeout() throws {
        let air = virtualAir()
        let p = try ScriptedHost(air)
        let c = try ScriptedHost(air)
        p.startAdvertising()
        _ = c.createConnection(to: p.controller.address)
        air.loop.advance(by: .milliseconds(200))
        let cc = try #require(c.connectionCompletes.first)
        air.remove(p.controller)
        air.loop.advance(by: .milliseconds(900))   // timeout is 0x64 × 10 ms = 1 s
        #expect(!c.events.contains { if case .disconnectionComplete = $0 { return true } else { return false } })
        air.loop.advance(by: .milliseconds(200))
        #expect(c.events.contains(.disconnectionComplete(status: .success, handle: cc.connectionHandle, reason: .connectionTimeout)))
        #expect(p.closed)
    }

    @Test func cancelledConnectionAndEnhancedCompleteByMask() throws {
        let air = virtualAir()
        let c = try ScriptedHost(air)
        _ = c.createConnection(to: BluetoothAddress(string: "11:22:33:44:55:66")!)
        let events = c.run(.leCreateConnectionCancel)
        #expect(events.first == .commandComplete(numHCICommandPackets: 1, opcode: .leCreateConnectionCancel, returnParameters: [0]))
        #expect(c.connectionCompletes.first?.status == .unknownConnectionIdentifier)

        let p = try ScriptedHost(air)
        let e = try ScriptedHost(air)
        e.run(.leSetEventMask(0x0000_0000_0000_021F))   // bit 9: LE Enhanced Connection Complete
        p.startAdvertising()
        _ = e.createConnection(to: p.controller.address)
        air.loop.advance(by: .milliseconds(200))
        #expect(e.events.contains { if case .le(.enhancedConnectionComplete) = $0 { return true } else { return false } })
        #expect(e.connectionCompletes.isEmpty)
        // A masked-off event is not delivered at all.
        p.run(.setEventMask(0))
        e.run(
            .disconnect(
                handle: try #require(e.events.compactMap { if case let .le(.enhancedConnectionComplete(x)) = $0 { return x.connectionHandle } else { return nil } }.first),
                reason: .remoteUserTerminated))
        air.loop.runPending()
        #expect(!p.events.contains { if case .disconnectionComplete = $0 { return true } else { return false } })
    }

    @Test func oneCentralTwoPeripherals() throws {
        let air = virtualAir()
        let p1 = try ScriptedHost(air), p2 = try ScriptedHost(air), c = try ScriptedHost(air)
        p1.startAdvertising(); p2.startAdvertising()
        _ = c.createConnection(to: p1.controller.address)
        air.loop.advance(by: .milliseconds(200))
        _ = c.createConnection(to: p2.controller.address)
        air.loop.advance(by: .milliseconds(200))
        let handles = c.connectionCompletes.filter { $0.status == .success }.map(\.connectionHandle)
        #expect(handles.count == 2 && Set(handles).count == 2)
    }

    @Test func encryptionWithMatchingAndMismatchingKeys() throws {
        let air = virtualAir()
        let p = try ScriptedHost(air), c = try ScriptedHost(air)
        p.startAdvertising()
        _ = c.createConnection(to: p.controller.address)
        air.loop.advance(by: .milliseconds(200))
        let ch = try #require(c.connectionCompletes.first).connectionHandle
        let ph = try #require(p.connectionCompletes.first).connectionHandle
        let key = Array(repeating: UInt8(0x42), count: 16)
        c.run(.leStartEncryption(handle: ch, random: 1, ediv: 2, ltk: key))
        #expect(p.events.contains(.le(.longTermKeyRequest(handle: ph, random: 1, ediv: 2))))
        p.run(.leLongTermKeyRequestReply(handle: ph, ltk: key))
        #expect(c.events.contains(.encryptionChange(status: .success, handle: ch, enabled: 1)))
        #expect(p.events.contains(.encryptionChange(status: .success, handle: ph, enabled: 1)))
        c.run(.leStartEncryption(handle: ch, random: 1, ediv: 2, ltk: key))
        p.run(.leLongTermKeyRequestReply(handle: ph, ltk: Array(repeating: 0, count: 16)))
        #expect(c.events.contains(.disconnectionComplete(status: .success, handle: ch, reason: .connectionTerminatedMICFailure)))
    }

    @Test func powerOffDropsLinksAndClosesTheTransport() throws {
        let air = virtualAir()
        let p = try ScriptedHost(air), c = try ScriptedHost(air)
        p.startAdvertising()
        _ = c.createConnection(to: p.controller.address)
        air.loop.advance(by: .milliseconds(200))
        c.controller.powerOff()
        air.loop.advance(by: .seconds(2))
        #expect(c.closed)
        #expect(p.events.contains { if case let .disconnectionComplete(_, _, reason) = $0 { return reason == .connectionTimeout } else { return false } })
    }
}

@Suite struct RadioServerTests {
    @Test func twoTCPClientsSeeEachOther() async throws {
        let air = VirtualAir(loop: EventLoop(label: "radio.server.test", clock: .real))
        let server = try RadioServer(air: air, port: 0)
        server.start()
        defer { server.stop() }
        func client() throws -> (StreamConnection, NSLock, Box) {
            let fd = try Sockets.connectTCP(host: "127.0.0.1", port: server.port)
            let c = StreamConnection(fd: fd, isTCP: true, label: "test")
            let lock = NSLock(), box = Box()
            c.start(
                onPacket: { p in
                    lock.lock(); box.packets.append(p); lock.unlock()
                }, onClose: { _ in })
            return (c, lock, box)
        }
        let (a, _, _) = try client()
        let (b, bl, bb) = try client()
        a.write(HCICommand.leSetAdvertisingParameters(LESetAdvertisingParameters(advertisingIntervalMin: 0x20, advertisingIntervalMax: 0x20)).encode().h4Bytes)
        a.write(HCICommand.leSetAdvertisingData([2, 1, 6]).encode().h4Bytes)
        a.write(HCICommand.leSetAdvertisingEnable(true).encode().h4Bytes)
        b.write(HCICommand.setEventMask(0x2000_1FFF_FFFF_FFFF).encode().h4Bytes)
        b.write(HCICommand.leSetScanParameters(LESetScanParameters()).encode().h4Bytes)
        b.write(HCICommand.leSetScanEnable(enable: true, filterDuplicates: false).encode().h4Bytes)
        let deadline = Date().addingTimeInterval(5)
        var sawReport = false
        while !sawReport && Date() < deadline {
            try await pause(nanoseconds: 20_000_000)
            sawReport = bl.withLock { bb.packets.contains { if case .le(.advertisingReport) = try? HCIEvent.decode($0) { return true } else { return false } } }
        }
        #expect(sawReport)
        #expect(server.connectionCount == 2)
        a.close(); b.close()
    }
}

final class Box: @unchecked Sendable { var packets: [HCIPacket] = [] }
