// The framer of a UART opened mid-stream: everything before the controller's answer to HCI_Reset is
// discarded, whichever way the bytes arrive; and the extended advertising codecs round-trip.
import Testing
import BLEHCI
import BLEWire

@Suite struct H4ResyncTests {
    static let resetComplete: [UInt8] = [0x04, 0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00]
    static let event: [UInt8] = [0x04, 0x0E, 0x04, 0x01, 0x01, 0x10, 0x00]   // Command Complete, Read Local Version (status only)
    static let garbage: [UInt8] = [0x00, 0x3E, 0x13, 0x02, 0x01, 0x04, 0x0E, 0xFF, 0x07, 0x04, 0x0E, 0x04]

    func packets(_ chunks: [[UInt8]]) throws -> ([HCIPacket], Int) {
        var f = H4Framer(synchronizesOnReset: true)
        var out: [HCIPacket] = []
        for c in chunks {
            f.append(c)
            while let p = try f.nextPacket() { out.append(p) }
        }
        return (out, f.discardedCount)
    }

    @Test func garbageBeforeTheResetAnswerIsDiscarded() throws {
        let stream = Self.garbage + Self.resetComplete + Self.event
        let (all, discarded) = try packets([stream])
        #expect(all.map(\.bytes) == [Array(Self.resetComplete.dropFirst()), Array(Self.event.dropFirst())])
        #expect(discarded == Self.garbage.count)
        // Byte by byte, and at every split, the same packets come out.
        let (single, d1) = try packets(stream.map { [$0] })
        #expect(single == all && d1 == Self.garbage.count)
        for cut in 1..<stream.count {
            let (split, _) = try packets([Array(stream[..<cut]), Array(stream[cut...])])
            #expect(split == all, "split at \(cut)")
        }
    }

    @Test func aCommandStatusForResetAlsoSynchronises() throws {
        let status: [UInt8] = [0x04, 0x0F, 0x04, 0x00, 0x01, 0x03, 0x0C]
        let (all, discarded) = try packets([[0x02, 0x40, 0x00] + status])
        #expect(all.count == 1 && all[0].bytes == Array(status.dropFirst()))
        #expect(discarded == 3)
    }

    @Test func withoutTheAnswerNothingComesOutAndMemoryStaysSmall() throws {
        var f = H4Framer(synchronizesOnReset: true)
        for _ in 0..<1000 {
            f.append([UInt8](repeating: 0x04, count: 1) + [0x0E, 0x04, 0x01, 0x01, 0x10, 0x00])
            #expect(try f.nextPacket() == nil)
        }
        #expect(f.awaitingSynchronization)
        #expect(f.bufferedCount < 8)
    }

    @Test func aPlainFramerStillRejectsGarbage() {
        var f = H4Framer()
        f.append(Self.garbage)
        #expect(throws: H4Error.self) { try f.nextPacket() }
    }

    @Test func extendedCommandsRoundTrip() throws {
        let commands: [HCICommand] = [
            .leSetExtendedAdvertisingParameters(
                LESetExtendedAdvertisingParameters(
                    eventProperties: [.legacy, .connectable, .scannable],
                    primaryIntervalMin: 0x30, primaryIntervalMax: 0x40, ownAddressType: 1)),
            .leSetAdvertisingSetRandomAddress(handle: 0, address: BluetoothAddress(bytes: [1, 2, 3, 4, 5, 0xC6], type: .random)),
            .leSetExtendedAdvertisingData(LESetExtendedAdvertisingData(data: Array(0..<200))),
            .leSetExtendedScanResponseData(LESetExtendedAdvertisingData(operation: .last, data: [1, 2])),
            .leSetExtendedAdvertisingEnable(enable: true, sets: [LEExtendedAdvertisingSet(advertisingHandle: 0), LEExtendedAdvertisingSet(advertisingHandle: 3, duration: 100)]),
            .leReadMaximumAdvertisingDataLength, .leReadNumberOfSupportedAdvertisingSets, .leRemoveAdvertisingSet(2), .leClearAdvertisingSets,
            .leSetExtendedScanParameters(
                LESetExtendedScanParameters(
                    ownAddressType: 0, scanningPHYs: 0x05,
                    phys: [
                        LEExtendedScanPHY(scanType: .active, scanInterval: 0x10, scanWindow: 0x10), LEExtendedScanPHY(scanType: .passive, scanInterval: 0x20, scanWindow: 0x10),
                    ])),
            .leSetExtendedScanEnable(enable: true, filterDuplicates: 1, duration: 0, period: 0),
            .leExtendedCreateConnection(
                LEExtendedCreateConnection(
                    LECreateConnection(
                        leScanInterval: 0x60, leScanWindow: 0x30, initiatorFilterPolicy: 0, peerAddressType: 1,
                        peerAddress: BluetoothAddress(bytes: [6, 5, 4, 3, 2, 0xC1], type: .random), ownAddressType: 0, connectionIntervalMin: 0x18,
                        connectionIntervalMax: 0x28, maxLatency: 0, supervisionTimeout: 0x1F4, minCELength: 0, maxCELength: 0))),
        ]
        for c in commands {
            let p = c.encode()
            #expect(try HCICommand.decode(p) == c, "\(c.opcode)")
            for n in 3..<p.bytes.count {
                var cut = p
                cut.bytes = Array(p.bytes.prefix(n))
                cut.bytes[2] = UInt8(n - 3)
                #expect(throws: (any Error).self) { try HCICommand.decode(cut) }
            }
        }
        // The data fragments of a long advertisement: first, intermediate, last.
        let f = LESetExtendedAdvertisingData.fragments(handle: 1, data: Array(repeating: 7, count: 600))
        #expect(f.map(\.operation) == [.first, .intermediate, .last] && f.map(\.data.count) == [251, 251, 98])
    }

    @Test func extendedEventsRoundTrip() throws {
        let events: [HCIEvent] = [
            .le(
                .extendedAdvertisingReport([
                    LEExtendedAdvertisingReport(
                        eventType: [.connectable], addressType: 1,
                        address: BluetoothAddress(bytes: [1, 2, 3, 4, 5, 0xC0], type: .random),
                        secondaryPHY: 2, advertisingSID: 3, rssi: -60, data: Array(0..<100))
                ])),
            .le(
                .advertisingSetTerminated(
                    LEAdvertisingSetTerminated(
                        status: .success, advertisingHandle: 0, connectionHandle: 0x40,
                        numCompletedExtendedAdvertisingEvents: 0))),
        ]
        for e in events {
            let p = e.encode()
            #expect(try HCIEvent.decode(p) == e)
            for n in 2..<p.bytes.count {
                var cut = p
                cut.bytes = Array(p.bytes.prefix(n))
                cut.bytes[1] = UInt8(n - 2)
                #expect(throws: (any Error).self) { try HCIEvent.decode(cut) }
            }
        }
        #expect(LEExtendedAdvertisingEventType(rawValue: 0x0021).dataStatus == 1)
    }
}
