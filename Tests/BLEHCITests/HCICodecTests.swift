// HCI codecs: hand-checked bytes from the specification, round trips of every command, event, LE
// subevent, return-parameter struct and ACL packet, every-prefix truncation, and H4 framing fed byte by byte.
import Testing
import BLEWire
@testable import BLEHCI

let peer = BluetoothAddress(string: "C0:11:22:33:44:55", type: .random)!

let allCommands: [HCICommand] = [
    .reset, .readLocalVersionInformation, .readBDADDR, .readLocalSupportedCommands, .readLocalSupportedFeatures, .readBufferSize,
    .setEventMask(0x2000_9FFF_FFFF_FFFF), .setEventMaskPage2(0x1), .leSetEventMask(0x0000_0000_0000_0A7F), .leReadBufferSize,
    .leReadLocalSupportedFeatures, .leSetRandomAddress(peer),
    .leSetAdvertisingParameters(
        LESetAdvertisingParameters(
            advertisingIntervalMin: 0xA0, advertisingIntervalMax: 0xB0, advertisingType: .scannableUndirected,
            ownAddressType: 1, peerAddressType: 1, peerAddress: peer, advertisingChannelMap: 7, advertisingFilterPolicy: 0)),
    .leReadAdvertisingPhysicalChannelTxPower, .leSetAdvertisingData([2, 1, 6, 3, 3, 0x0D, 0x18]), .leSetScanResponseData([]),
    .leSetAdvertisingData(Array(repeating: 0xAB, count: 31)),
    .leSetAdvertisingEnable(true), .leSetAdvertisingEnable(false),
    .leSetScanParameters(LESetScanParameters(scanType: .active, scanInterval: 0x60, scanWindow: 0x30, ownAddressType: 0, scanningFilterPolicy: 0)),
    .leSetScanEnable(enable: true, filterDuplicates: false),
    .leCreateConnection(
        LECreateConnection(
            leScanInterval: 0x60, leScanWindow: 0x30, initiatorFilterPolicy: 0, peerAddressType: 1, peerAddress: peer,
            ownAddressType: 0, connectionIntervalMin: 0x18, connectionIntervalMax: 0x28, maxLatency: 0,
            supervisionTimeout: 0x1F4, minCELength: 0, maxCELength: 0)),
    .leCreateConnectionCancel, .disconnect(handle: 0x40, reason: .remoteUserTerminated),
    .leReadFilterAcceptListSize, .leClearFilterAcceptList, .leAddDeviceToFilterAcceptList(peer),
    .leRemoveDeviceFromFilterAcceptList(BluetoothAddress(bytes: [1, 2, 3, 4, 5, 6], type: .public)),
    .leConnectionUpdate(LEConnectionUpdate(connectionHandle: 0x40, connectionIntervalMin: 6, connectionIntervalMax: 12, maxLatency: 0, supervisionTimeout: 100)),
    .leReadRemoteFeatures(handle: 0x41), .leSetDataLength(handle: 0x40, txOctets: 251, txTime: 2120), .leReadSuggestedDefaultDataLength,
    .leWriteSuggestedDefaultDataLength(txOctets: 251, txTime: 2120), .leReadMaximumDataLength, .leReadPHY(handle: 0x40),
    .leSetDefaultPHY(allPHYs: 0, txPHYs: 3, rxPHYs: 3), .leSetPHY(LESetPHY(connectionHandle: 0x40, txPHYs: 2, rxPHYs: 2)), .leRand,
    .leEncrypt(key: Array(0..<16), plaintext: Array(16..<32)), .leStartEncryption(handle: 0x40, random: 0x1122334455667788, ediv: 0x9AB, ltk: Array(0..<16)),
    .leLongTermKeyRequestReply(handle: 0x40, ltk: Array(repeating: 7, count: 16)), .leLongTermKeyRequestNegativeReply(handle: 0x40),
    .readRSSI(handle: 0x40), .readRemoteVersionInformation(handle: 0x40),
    .setControllerToHostFlowControl(0x01), .hostBufferSize(HostBufferSize(aclDataPacketLength: 1021, totalNumACLDataPackets: 64)),
    .hostNumberOfCompletedPackets([]), .hostNumberOfCompletedPackets([CompletedPackets(handle: 0x40, count: 3), CompletedPackets(handle: 0x0EFF, count: 0xFFFF)]),
    .unknown(opcode: HCIOpcode(ogf: 0x3F, ocf: 0x0001), parameters: [1, 2, 3]),
]

let allEvents: [HCIEvent] = [
    .commandComplete(numHCICommandPackets: 1, opcode: .reset, returnParameters: [0]),
    .commandStatus(status: .success, numHCICommandPackets: 1, opcode: .leCreateConnection),
    .disconnectionComplete(status: .success, handle: 0x40, reason: .connectionTimeout),
    .numberOfCompletedPackets([CompletedPackets(handle: 0x40, count: 3), CompletedPackets(handle: 0x41, count: 1)]),
    .encryptionChange(status: .success, handle: 0x40, enabled: 1),
    .encryptionKeyRefreshComplete(status: .success, handle: 0x40),
    .readRemoteVersionInformationComplete(status: .success, handle: 0x40, version: 0x0C, companyIdentifier: 0x05F1, subversion: 1),
    .hardwareError(3), .dataBufferOverflow(1),
    .le(
        .connectionComplete(
            LEConnectionComplete(
                status: .success, connectionHandle: 0x40, role: 0, peerAddressType: 1, peerAddress: peer,
                connectionInterval: 0x28, peripheralLatency: 0, supervisionTimeout: 0x1F4, centralClockAccuracy: 0))),
    .le(
        .enhancedConnectionComplete(
            LEEnhancedConnectionComplete(
                status: .success, connectionHandle: 0x41, role: 1, peerAddressType: 0, peerAddress: .zero,
                connectionInterval: 6, peripheralLatency: 0, supervisionTimeout: 100, centralClockAccuracy: 1))),
    .le(
        .advertisingReport([
            LEAdvertisingReport(eventType: .advInd, addressType: 1, address: peer, data: [2, 1, 6], rssi: -60),
            LEAdvertisingReport(eventType: .scanRsp, addressType: 0, address: .zero, data: [], rssi: 127),
        ])),
    .le(.connectionUpdateComplete(LEConnectionUpdateComplete(status: .success, connectionHandle: 0x40, connectionInterval: 12, peripheralLatency: 1, supervisionTimeout: 200))),
    .le(.readRemoteFeaturesComplete(status: .success, handle: 0x40, features: 0x21)),
    .le(.longTermKeyRequest(handle: 0x40, random: 0xAABB, ediv: 0x1234)),
    .le(.remoteConnectionParameterRequest(handle: 0x40, intervalMin: 6, intervalMax: 12, maxLatency: 0, timeout: 100)),
    .le(.dataLengthChange(LEDataLengthChange(connectionHandle: 0x40, maxTxOctets: 251, maxTxTime: 2120, maxRxOctets: 251, maxRxTime: 2120))),
    .le(.phyUpdateComplete(status: .success, handle: 0x40, txPHY: 2, rxPHY: 2)),
    .le(.unknown(subevent: 0x22, parameters: [9, 9])),
    .unknown(code: 0xFF, parameters: [0x01, 0x02]),
]

@Suite struct HCISpecBytesTests {
    @Test func resetAndItsAnswer() throws {
        #expect(HCICommand.reset.encode().h4Bytes == [0x01, 0x03, 0x0C, 0x00])
        #expect(
            try HCIEvent.decode(HCIPacket(type: .event, bytes: [0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00]))
                == .commandComplete(numHCICommandPackets: 1, opcode: .reset, returnParameters: [0x00]))
    }

    @Test func leSetAdvertisingEnableAndDisconnect() {
        #expect(HCICommand.leSetAdvertisingEnable(true).encode().bytes == [0x0A, 0x20, 0x01, 0x01])
        #expect(HCICommand.disconnect(handle: 0x0040, reason: .remoteUserTerminated).encode().bytes == [0x06, 0x04, 0x03, 0x40, 0x00, 0x13])
        // The advertising data is always 1 + 31 octets (§7.8.7).
        #expect(HCICommand.leSetAdvertisingData([2, 1, 6]).encode().bytes.count == 3 + 32)
    }

    @Test func multipleReportsAndCompletedPacketsInterleaveElementByElement() throws {
        let two = HCIEvent.le(
            .advertisingReport([
                LEAdvertisingReport(eventType: .advInd, addressType: 0, address: BluetoothAddress(bytes: [1, 2, 3, 4, 5, 6]), data: [0xAA], rssi: -10),
                LEAdvertisingReport(eventType: .scanRsp, addressType: 1, address: BluetoothAddress(bytes: [7, 8, 9, 10, 11, 12], type: .random), data: [], rssi: -20),
            ]))
        #expect(
            two.encode().bytes == [
                0x3E, 0x17, 0x02, 0x02,
                0x00, 0x00, 1, 2, 3, 4, 5, 6, 0x01, 0xAA, 0xF6,
                0x04, 0x01, 7, 8, 9, 10, 11, 12, 0x00, 0xEC,
            ])
        // Number Of Completed Packets: handle, count, handle, count (Vol 4 Part E §7.7.19).
        #expect(
            HCIEvent.numberOfCompletedPackets([CompletedPackets(handle: 0x40, count: 3), CompletedPackets(handle: 0x41, count: 1)]).encode().bytes
                == [0x13, 0x09, 0x02, 0x40, 0x00, 0x03, 0x00, 0x41, 0x00, 0x01, 0x00])
    }

    @Test func aclHeaderFlags() throws {
        let p = ACLPacket(handle: 0x0041, boundary: .continuing, data: [1, 2]).encode()
        #expect(p.bytes == [0x41, 0x10, 0x02, 0x00, 1, 2])
        #expect(try ACLPacket.decode(HCIPacket(type: .acl, bytes: [0x41, 0x20, 0x01, 0x00, 9])) == ACLPacket(handle: 0x41, boundary: .firstFlushable, data: [9]))
        #expect(throws: HCIDecodeError.self) { try ACLPacket.decode(HCIPacket(type: .acl, bytes: [0x41, 0x20, 0x05, 0x00, 9])) }
    }
}

@Suite struct HCIRoundTripTests {
    @Test func everyCommandRoundTrips() throws {
        for c in allCommands { #expect(try HCICommand.decode(c.encode()) == c, "\(c)") }
    }

    @Test func everyEventRoundTrips() throws {
        for e in allEvents { #expect(try HCIEvent.decode(e.encode()) == e, "\(e)") }
    }

    @Test func everyStrictPrefixOfACommandFails() {
        for c in allCommands {
            let bytes = c.encode().bytes
            for n in 0..<bytes.count {
                #expect(throws: (any Error).self, "\(c) prefix \(n)") { try HCICommand.decode(HCIPacket(type: .command, bytes: Array(bytes.prefix(n)))) }
            }
        }
    }

    @Test func everyStrictPrefixOfAnEventFails() {
        for e in allEvents {
            let bytes = e.encode().bytes
            for n in 0..<bytes.count {
                #expect(throws: (any Error).self, "\(e) prefix \(n)") { try HCIEvent.decode(HCIPacket(type: .event, bytes: Array(bytes.prefix(n)))) }
            }
        }
    }

    @Test func lengthFieldsThatLieAreRejected() {
        // A known event whose declared length covers fewer parameters than it needs.
        #expect(throws: HCIDecodeError.self) { try HCIEvent.decode(HCIPacket(type: .event, bytes: [0x05, 0x02, 0x00, 0x40])) }
        // A known command with a trailing byte.
        #expect(throws: HCIDecodeError.self) { try HCICommand.decode(HCIPacket(type: .command, bytes: [0x03, 0x0C, 0x01, 0x00])) }
    }

    @Test func returnParametersRoundTripAndTruncate() throws {
        func check<T: HCIReturnParameters>(_ v: T) throws {
            #expect(try T(decoding: v.encode()) == v)
            let b = v.encode()
            for n in 0..<b.count { #expect(throws: (any Error).self) { try T(decoding: Array(b.prefix(n))) } }
            #expect(throws: (any Error).self) { try T(decoding: b + [0]) }
        }
        try check(StatusReturn(status: .success))
        try check(ConnectionHandleReturn(status: .success, handle: 0x40))
        try check(LEReadFilterAcceptListSizeReturn(status: .success, size: 16))
        try check(ReadLocalVersionReturn(status: .success, hciVersion: 12, hciSubversion: 1, lmpVersion: 12, companyIdentifier: 0x5F1, lmpSubversion: 2))
        try check(ReadBDADDRReturn(status: .success, address: BluetoothAddress(string: "00:11:22:33:44:55")!))
        try check(ReadLocalSupportedCommandsReturn(status: .success, supportedCommands: Array(repeating: 0xFF, count: 64)))
        try check(ReadLocalSupportedFeaturesReturn(status: .success, features: 0x1_0000_0021))
        try check(LEReadBufferSizeReturn(status: .success, aclDataPacketLength: 251, totalNumACLDataPackets: 8))
        try check(ReadBufferSizeReturn(status: .success, aclDataPacketLength: 1021, syncDataPacketLength: 0, totalNumACLDataPackets: 8, totalNumSyncDataPackets: 0))
        try check(LERandReturn(status: .success, randomNumber: 0x0102030405060708))
        try check(LEEncryptReturn(status: .success, encryptedData: Array(0..<16)))
        try check(ReadRSSIReturn(status: .success, handle: 0x40, rssi: -55))
        try check(LEReadPHYReturn(status: .success, handle: 0x40, txPHY: 2, rxPHY: 1))
        try check(LEReadMaximumDataLengthReturn(status: .success, supportedMaxTxOctets: 251, supportedMaxTxTime: 2120, supportedMaxRxOctets: 251, supportedMaxRxTime: 2120))
        try check(LEReadSuggestedDefaultDataLengthReturn(status: .success, suggestedMaxTxOctets: 27, suggestedMaxTxTime: 328))
        try check(LEReadAdvertisingTxPowerReturn(status: .success, txPowerLevel: -4))
    }

    @Test func aclRoundTripAndTruncation() throws {
        let a = ACLPacket(handle: 0xABC, boundary: .firstNonFlushable, data: Array(0..<40))
        #expect(try ACLPacket.decode(a.encode()) == a)
        let b = a.encode().bytes
        for n in 0..<b.count { #expect(throws: HCIDecodeError.self) { try ACLPacket.decode(HCIPacket(type: .acl, bytes: Array(b.prefix(n)))) } }
    }

    @Test func namesOfOpcodesAndStatuses() {
        #expect(HCIOpcode.reset.description == "HCI_Reset")
        #expect(HCIOpcode(rawValue: 0xFC55).description == "HCI opcode 0xfc55")
        #expect(HCIOpcode.zephyrReadStaticAddresses.description == "Zephyr_Read_Static_Addresses")
        #expect(HCIStatus.connectionTimeout.description == "Connection Timeout (0x08)")
        #expect(HCIStatus(rawValue: 0xEE).description == "HCI error 0xee")
    }
}

@Suite struct H4FramerTests {
    var stream: [UInt8] {
        var s: [UInt8] = []
        for e in allEvents { s += e.encode().h4Bytes }
        s += ACLPacket(handle: 0x40, boundary: .firstNonFlushable, data: Array(0..<200)).encode().h4Bytes
        for c in allCommands { s += c.encode().h4Bytes }
        return s
    }

    var expected: [HCIPacket] {
        allEvents.map { $0.encode() } + [ACLPacket(handle: 0x40, boundary: .firstNonFlushable, data: Array(0..<200)).encode()] + allCommands.map { $0.encode() }
    }

    @Test func byteByByte() throws {
        var f = H4Framer()
        var got: [HCIPacket] = []
        for b in stream {
            f.append([b])
            while let p = try f.nextPacket() { got.append(p) }
        }
        #expect(got == expected)
        #expect(f.bufferedCount == 0)
    }

    /// What a reader that waits for several bytes at a time may wait for: never more than the packet begun lacks.
    /// Fed byte by byte, a packet is completed exactly by a byte before which one was missing.
    @Test func missingCountIsWhatThePacketBegunLacks() throws {
        var f = H4Framer()
        #expect(f.missingCount == 3)
        f.append([HCIPacketType.acl.rawValue])
        #expect(f.missingCount == 4)
        f.append([0x40, 0x00, 200])
        #expect(f.missingCount == 1)   // the high byte of the length
        f.append([0])
        #expect(f.missingCount == 200)
        f.append([UInt8](repeating: 7, count: 199))
        #expect(f.missingCount == 1)
        f.append([7])
        #expect(try f.nextPacket() != nil)
        #expect(f.missingCount == 3)
        var g = H4Framer()
        var completions = 0
        for b in stream {
            let missing = g.missingCount
            #expect(missing >= 1)
            g.append([b])
            var framed = 0
            while try g.nextPacket() != nil { framed += 1 }
            if framed > 0 {
                #expect(missing == 1)
                completions += framed
            }
        }
        #expect(completions == expected.count)
        var resyncing = H4Framer(synchronizesOnReset: true)
        #expect(resyncing.missingCount == 1)
        resyncing.append([0xFF])
        #expect(resyncing.missingCount == 1)
    }

    @Test func mixedChunks() throws {
        let s = stream
        for chunk in [2, 7, 64, 1000] {
            var f = H4Framer()
            var got: [HCIPacket] = []
            var i = 0
            while i < s.count {
                f.append(s[i..<min(s.count, i + chunk)])
                i += chunk
                while let p = try f.nextPacket() { got.append(p) }
            }
            #expect(got == expected, "chunk \(chunk)")
        }
    }

    /// With `mergesCompletedPackets`, a run of one-entry Number Of Completed Packets events for one handle, whole in
    /// the buffer, is one event with the counts added up; anything else ends the run and comes out as it was sent.
    /// `framedCount` counts the events the controller sent. Off (the default), every event comes out alone.
    @Test func aRunOfCompletionsForOneHandleIsOneEventWhenAsked() throws {
        func done(_ handle: UInt16, _ count: UInt16) -> HCIPacket {
            HCIEvent.numberOfCompletedPackets([CompletedPackets(handle: handle, count: count)]).encode()
        }
        let two = HCIEvent.numberOfCompletedPackets([CompletedPackets(handle: 0x40, count: 1), CompletedPackets(handle: 0x41, count: 1)]).encode()
        let data = ACLPacket(handle: 0x40, boundary: .firstNonFlushable, data: [1, 2, 3]).encode()
        let sent = [done(0x40, 1), done(0x40, 1), done(0x40, 3), data, done(0x40, 2), done(0x41, 1), done(0x41, 1), two, done(0x40, 1), done(0x40, 0xFFFF), done(0x40, 1)]
        var f = H4Framer()
        f.mergesCompletedPackets = true
        f.append(sent.flatMap(\.h4Bytes))
        var got: [HCIPacket] = []
        while let p = try f.nextPacket() { got.append(p) }
        // Merged: the first three (5 packets), the two for 0x41. The one before the data stays alone, as does an
        // event with two entries, and a count that would pass 0xFFFF starts a new event.
        #expect(got == [done(0x40, 5), data, done(0x40, 2), done(0x41, 2), two, done(0x40, 1), done(0x40, 0xFFFF), done(0x40, 1)])
        #expect(f.framedCount == sent.count)
        // A merged event decodes as the controller's events would: the same handle, the same total.
        #expect(try HCIEvent.decode(got[0]) == .numberOfCompletedPackets([CompletedPackets(handle: 0x40, count: 5)]))

        // An event not yet whole ends the run; it merges with what follows it once it has come.
        var g = H4Framer()
        g.mergesCompletedPackets = true
        let bytes = [done(0x40, 1), done(0x40, 1), done(0x40, 1)].flatMap(\.h4Bytes)
        g.append(bytes[..<20])
        var h: [HCIPacket] = []
        while let p = try g.nextPacket() { h.append(p) }
        #expect(h == [done(0x40, 2)])
        g.append(bytes[20...] + done(0x40, 4).h4Bytes)
        while let p = try g.nextPacket() { h.append(p) }
        #expect(h == [done(0x40, 2), done(0x40, 5)])
        #expect(g.framedCount == 4)

        // Off: each event as it was sent.
        var off = H4Framer()
        off.append(sent.flatMap(\.h4Bytes))
        var all: [HCIPacket] = []
        while let p = try off.nextPacket() { all.append(p) }
        #expect(all == sent)
        #expect(off.framedCount == sent.count)
    }

    /// With `mergesACLContinuations`, the continuation fragments (boundary 01) that follow an ACL packet for the same
    /// handle, whole in the buffer, come out in it: its header, the length of all their data. A start fragment,
    /// another handle, another packet type or a fragment not yet whole ends the run; `framedCount` counts every
    /// fragment. Recombined, the frames are those the fragments carry.
    @Test func continuationsComeInThePacketBeforeThemWhenAsked() throws {
        func fragment(_ handle: UInt16, _ boundary: ACLPacketBoundary, _ data: [UInt8]) -> HCIPacket {
            ACLPacket(handle: handle, boundary: boundary, data: data).encode()
        }
        // An L2CAP basic frame (length, channel 0x0040, payload) cut into 27-octet fragments, as rootcanal does.
        let frame: [UInt8] = [100, 0, 0x40, 0] + (0..<100).map { UInt8($0) }
        let pieces = stride(from: 0, to: frame.count, by: 27).map { Array(frame[$0..<min(frame.count, $0 + 27)]) }
        let first = fragment(0x40, .firstNonFlushable, pieces[0])
        let rest = pieces.dropFirst().map { fragment(0x40, .continuing, $0) }
        let other = fragment(0x41, .continuing, [9, 9])
        let done = HCIEvent.numberOfCompletedPackets([CompletedPackets(handle: 0x40, count: 1)]).encode()
        let sent =
            [first] + rest + [
                other, fragment(0x40, .continuing, [7]), done, fragment(0x40, .continuing, [8]), fragment(0x40, .firstNonFlushable, [1, 2, 3, 4]), fragment(0x40, .continuing, [5]),
            ]
        var f = H4Framer()
        f.mergesACLContinuations = true
        f.append(sent.flatMap(\.h4Bytes))
        var got: [HCIPacket] = []
        while let p = try f.nextPacket() { got.append(p) }
        #expect(
            got == [
                fragment(0x40, .firstNonFlushable, frame), other, fragment(0x40, .continuing, [7]), done, fragment(0x40, .continuing, [8]),
                fragment(0x40, .firstNonFlushable, [1, 2, 3, 4, 5]),
            ])
        #expect(f.framedCount == sent.count)

        // A fragment not yet whole ends the run; it and what follows it make the next packet.
        var g = H4Framer()
        g.mergesACLContinuations = true
        let bytes = ([first] + rest).flatMap(\.h4Bytes)
        let cut = first.h4Bytes.count + rest[0].h4Bytes.count + 3
        g.append(bytes[..<cut])
        var h: [HCIPacket] = []
        while let p = try g.nextPacket() { h.append(p) }
        #expect(h == [fragment(0x40, .firstNonFlushable, pieces[0] + pieces[1])])
        g.append(bytes[cut...])
        while let p = try g.nextPacket() { h.append(p) }
        #expect(h == [fragment(0x40, .firstNonFlushable, pieces[0] + pieces[1]), fragment(0x40, .continuing, Array(pieces[2...].joined()))])
        // Their data, in order, is the frame.
        #expect(try h.flatMap { try ACLPacket.decode($0).data } == frame)

        // Off (the default): every fragment as it was sent.
        var off = H4Framer()
        off.append(sent.flatMap(\.h4Bytes))
        var all: [HCIPacket] = []
        while let p = try off.nextPacket() { all.append(p) }
        #expect(all == sent)
    }

    /// A small event equal to the last one shares its bytes (rootcanal sends 20 identical completion events a
    /// connection event): the same storage, no allocation; any other packet gets bytes of its own, and every
    /// packet still reads as what the controller sent.
    @Test func repeatedSmallEventsShareTheirBytes() throws {
        let done = HCIEvent.numberOfCompletedPackets([CompletedPackets(handle: 0x0EFE, count: 1)]).encode()
        let other = HCIEvent.numberOfCompletedPackets([CompletedPackets(handle: 0x0EFE, count: 2)]).encode()
        let data = ACLPacket(handle: 0x40, boundary: .firstNonFlushable, data: [1, 2, 3, 4]).encode()
        let sent = [done, done, done, data, done, other, other, done]
        var f = H4Framer()
        // Split anywhere: an event that arrives in pieces is compared once whole.
        let bytes = sent.flatMap(\.h4Bytes)
        f.append(bytes[..<13])
        var got: [HCIPacket] = []
        while let p = try f.nextPacket() { got.append(p) }
        f.append(bytes[13...])
        while let p = try f.nextPacket() { got.append(p) }
        #expect(got == sent)
        func storage(_ p: HCIPacket) -> UnsafePointer<UInt8>? { p.bytes.withUnsafeBufferPointer { $0.baseAddress } }
        #expect(storage(got[0]) == storage(got[1]) && storage(got[1]) == storage(got[2]))
        // The ACL packet between them leaves the last event as it was.
        #expect(storage(got[4]) == storage(got[2]))
        #expect(storage(got[5]) != storage(got[4]) && storage(got[6]) == storage(got[5]))
        #expect(storage(got[7]) != storage(got[6]) && storage(got[7]) != storage(got[0]))
        // A larger event is never compared: each has bytes of its own.
        let name = HCIEvent.commandComplete(numHCICommandPackets: 1, opcode: HCIOpcode(rawValue: 0x0C14), returnParameters: [0] + Array(repeating: 0x41, count: 248)).encode()
        var g = H4Framer()
        g.append(name.h4Bytes + name.h4Bytes)
        let a = try #require(try g.nextPacket()), b = try #require(try g.nextPacket())
        #expect(a == name && b == name && storage(a) != storage(b))
    }

    @Test func garbageAndOversizeAreErrors() {
        var f = H4Framer()
        f.append([0x09, 0x00])
        #expect(throws: H4Error.unknownPacketIndicator(0x09)) { try f.nextPacket() }
        var g = H4Framer(maxPacketSize: 100)
        g.append([0x02, 0x40, 0x00, 0xFF, 0x00])
        #expect(throws: H4Error.packetTooLarge(259)) { try g.nextPacket() }
    }
}

/// The arrays of handled packets carry the next ones (`HCIPacketBufferPool`, `H4Framer.recycle`).
@Suite struct PacketBufferPoolTests {
    func base(_ b: [UInt8]) -> UnsafeRawPointer? { b.withUnsafeBytes { $0.baseAddress } }

    @Test func aRecycledArrayCarriesTheNextPacketAndOneStillHeldIsNotOverwritten() throws {
        var f = H4Framer()
        let acl: (UInt8) -> [UInt8] = { [0x02, 0x01, 0x20, 0x05, 0x00, $0, $0, $0, $0, $0] }
        f.append(acl(1))
        var first: HCIPacket? = try #require(try f.nextPacket())
        let storage = base(first!.bytes)
        f.recycle([first!])
        first = nil   // handled: only the framer holds its array now
        #expect(f.recycledCount == 1 && first == nil)
        f.append(acl(2))
        let second = try #require(try f.nextPacket())
        #expect(second.bytes == Array(acl(2).dropFirst()))
        #expect(base(second.bytes) == storage, "the recycled array was reused")
        // `second` is given back but still held here: the next packet must not be written into it.
        f.recycle([second])
        f.append(acl(3))
        let third = try #require(try f.nextPacket())
        #expect(second.bytes == Array(acl(2).dropFirst()))
        #expect(third.bytes == Array(acl(3).dropFirst()))
        #expect(base(third.bytes) != base(second.bytes))
    }

    @Test func packetsOfOtherSizesAreBuiltExactlyInRecycledArrays() throws {
        var f = H4Framer()
        var packets: [HCIPacket] = []
        for n in [5, 27, 3, 0, 251, 27] {
            let payload = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ n) }
            f.append([0x02, 0x40, 0x00, UInt8(n & 0xFF), UInt8(n >> 8)] + payload)
            let p = try #require(try f.nextPacket())
            #expect(p.type == .acl)
            #expect(p.bytes == [0x40, 0x00, UInt8(n & 0xFF), UInt8(n >> 8)] + payload, "ACL of \(n)")
            packets.append(p)
            f.recycle([p])
            packets.removeAll()
        }
    }

    /// Sizes in turn (a full fragment, the end of a frame, a short one): each is built in the array given back with
    /// its own size, in place, not in the last one given back grown or shrunk to it.
    @Test func eachSizeIsBuiltInAnArrayOfItsOwnSize() throws {
        var pool = HCIPacketBufferPool()
        let sizes = [1025, 11, 10]
        var bases: [Int: UnsafeRawPointer?] = [:]
        for round in 0..<3 {
            var made: [[UInt8]] = []
            for n in sizes {
                let b = pool.make(count: n) { $0.initializeMemory(as: UInt8.self, repeating: UInt8(truncatingIfNeeded: n + round)) }
                #expect(b == [UInt8](repeating: UInt8(truncatingIfNeeded: n + round), count: n))
                if round == 0 { bases[n] = base(b) } else { #expect(base(b) == bases[n]!, "size \(n), round \(round)") }
                made.append(b)
            }
            for b in made { pool.recycle(b) }
        }
    }

    @Test func sharedSmallEventsAreNotTakenBackAndThePoolIsBounded() throws {
        var f = H4Framer()
        let nocp: [UInt8] = [0x04, 0x13, 0x05, 0x01, 0x40, 0x00, 0x01, 0x00]
        f.append(nocp)
        let e = try #require(try f.nextPacket())
        f.recycle([e])
        #expect(f.recycledCount == 0, "a small event shares its bytes with the framer: never recycled")
        var pool = HCIPacketBufferPool()
        for _ in 0..<(HCIPacketBufferPool.limit + 10) { pool.recycle([UInt8](repeating: 1, count: 31)) }
        #expect(pool.count == HCIPacketBufferPool.limit)
        var big = HCIPacketBufferPool()
        big.recycle([UInt8](repeating: 0, count: HCIPacketBufferPool.maximumCapacity + 1))
        #expect(big.count == 0, "an array above the capacity bound is let go")
        let made = pool.make(count: 4) { $0.copyBytes(from: [9, 8, 7, 6]) }
        #expect(made == [9, 8, 7, 6])
        #expect(pool.count == HCIPacketBufferPool.limit - 1)
    }
}
