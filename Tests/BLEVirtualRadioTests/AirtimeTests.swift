// The airtime model: packet durations from the Core Specification's packet formats (and the limits the
// specification itself derives from them), the theoretical maximum against published measurements of a
// real controller, and the virtual radio moving data at the model's pace when the model is on.
import Testing
import BLEWire
import BLEHCI
import BLETransport
@testable import BLEVirtualRadio

@Suite struct AirtimeModelTests {
    @Test func packetDurationsFollowThePacketFormats() {
        let m1 = AirtimeModel(phy: .le1M)
        #expect(m1.packetDuration(payload: 0) == 80)   // empty packet: 10 octets at 1 µs/bit
        #expect(m1.packetDuration(payload: 27) == 296)
        #expect(m1.packetDuration(payload: 251) == 2088)
        let m2 = AirtimeModel(phy: .le2M)
        #expect(m2.packetDuration(payload: 0) == 44)   // 2-octet preamble, 0.5 µs/bit
        #expect(m2.packetDuration(payload: 251) == 1048)
        #expect(AirtimeModel(phy: .codedS8).packetDuration(payload: 0) == 720)
        #expect(AirtimeModel(phy: .codedS2).packetDuration(payload: 0) == 462)
        // The specification's own figures for the largest packets with a MIC (Vol 6 Part B §4.5.10):
        // 328 µs for 27 octets on LE 1M, 2120 µs for 251 on LE 1M, 17040 µs for 251 on LE Coded S=8.
        #expect(AirtimeModel(phy: .le1M, encrypted: true).packetDuration(payload: 27) == 328)
        #expect(AirtimeModel(phy: .le1M, encrypted: true).packetDuration(payload: 251) == 2120)
        #expect(AirtimeModel(phy: .codedS8, encrypted: true).packetDuration(payload: 251) == 17040)
        // An exchange is data, T_IFS, the empty acknowledgement, T_IFS.
        #expect(m2.exchangeDuration(payload: 251) == 1048 + 150 + 44 + 150)
    }

    @Test func theoreticalMaximumAgainstPublishedMeasurements() {
        // Nordic S132/S140 SoftDevice Specification, "Bluetooth Low Energy data throughput": notifications,
        // ATT_MTU 247, data length 251, interval = event length = 50 ms: 702.8 kbit/s on LE 1M, 1327.5 on
        // LE 2M (and 1376.2 on LE 2M at 400 ms). With the SoftDevice's scheduling reserve the model must
        // agree within 5 %; the specification-ideal model is an upper bound above every measurement.
        for (phy, interval, published) in [(LEPHY.le1M, 50.0, 702.8), (.le2M, 50.0, 1327.5), (.le2M, 400.0, 1376.2)] {
            let fitted = AirtimeModel.nordicSoftDevice(phy: phy, dataLength: 251, connectionIntervalMilliseconds: interval)
            let kbps = fitted.theoreticalThroughput(attPayload: 244) * 8 / 1000
            #expect(abs(kbps - published) / published < 0.05, "\(phy) \(interval) ms: model \(kbps) kbit/s vs published \(published)")
            let ideal = AirtimeModel(phy: phy, dataLength: 251, connectionIntervalMilliseconds: interval).theoreticalThroughput(attPayload: 244) * 8 / 1000
            #expect(ideal >= published && ideal < published * 1.12)
        }
        // Fewer exchanges fit in a shorter event; a 20-octet payload on 27-octet packets is one packet each.
        let full = AirtimeModel(phy: .le1M, dataLength: 251, connectionIntervalMilliseconds: 30)
        let half = AirtimeModel(phy: .le1M, dataLength: 251, connectionIntervalMilliseconds: 30, eventLengthMilliseconds: 15)
        #expect(half.theoreticalThroughput(attPayload: 244) < full.theoreticalThroughput(attPayload: 244) * 0.55)
        #expect(AirtimeModel(dataLength: 27).fragments(attPayload: 20) == [27])
        #expect(AirtimeModel(dataLength: 27).fragments(attPayload: 244) == [27, 27, 27, 27, 27, 27, 27, 27, 27, 8])
    }
}

/// Two controllers on a virtual-clock air with the model on, driven directly over HCI.
@Suite struct AirtimeRadioTests {
    final class Sink: HCITransportSink, @unchecked Sendable {
        var events: [HCIEvent] = []
        var acl: [ACLPacket] = []
        var arrivals: [LoopTime] = []
        let loop: EventLoop
        init(loop: EventLoop) { self.loop = loop }
        func transport(didReceive packet: HCIPacket) {
            switch packet.type {
            case .event: if let e = try? HCIEvent.decode(packet) { events.append(e) }
            case .acl: if let a = try? ACLPacket.decode(packet) { acl.append(a); arrivals.append(loop.now) }
            default: break
            }
        }
        func transportDidClose(error: (any Error)?) {}
        var credits: Int {
            events.reduce(0) { n, e in
                if case let .numberOfCompletedPackets(l) = e { return n + l.reduce(0) { $0 + Int($1.count) } }; return n
            }
        }
        var handle: UInt16? {
            for e in events {
                if case let .le(.connectionComplete(c)) = e { return c.connectionHandle }
                if case let .le(.enhancedConnectionComplete(c)) = e { return c.connectionHandle }
            }
            return nil
        }
    }

    /// Sends `count` ACL packets of `size` octets from the central as credits allow; returns the measured
    /// throughput in octets per virtual second at the peripheral.
    func stream(model: AirtimeModel, phy: UInt8, dataLength: UInt16, intervalUnits: UInt16, size: Int, count: Int) -> Double {
        let air = VirtualAir(loop: EventLoop(label: "airtime.test", clock: .virtual))
        air.airtime = model
        let a = air.addController(), b = air.addController()
        let sa = Sink(loop: air.loop), sb = Sink(loop: air.loop)
        air.loop.sync {
            try! a.open(sink: sa); try! b.open(sink: sb)
            for c in [a, b] {
                c.send(HCICommand.setEventMask(0x2000_9FFF_FFFF_FFFF).encode())
                c.send(HCICommand.leSetEventMask(0xFFF).encode())
            }
            b.send(
                HCICommand.leSetAdvertisingParameters(
                    LESetAdvertisingParameters(
                        advertisingIntervalMin: 0x20, advertisingIntervalMax: 0x20,
                        advertisingType: .connectableUndirected, ownAddressType: 0, peerAddressType: 0, peerAddress: .zero, advertisingChannelMap: 7, advertisingFilterPolicy: 0)
                ).encode())
            b.send(HCICommand.leSetAdvertisingEnable(true).encode())
            a.send(
                HCICommand.leCreateConnection(
                    LECreateConnection(
                        leScanInterval: 0x60, leScanWindow: 0x30, initiatorFilterPolicy: 0,
                        peerAddressType: 0, peerAddress: b.address, ownAddressType: 0, connectionIntervalMin: intervalUnits, connectionIntervalMax: intervalUnits,
                        maxLatency: 0, supervisionTimeout: 400, minCELength: 0, maxCELength: 0)
                ).encode())
        }
        air.loop.advance(by: .milliseconds(200))
        guard let h = sa.handle else { Issue.record("no connection: \(sa.events)"); return 0 }
        air.loop.sync {
            a.send(HCICommand.leSetPHY(LESetPHY(connectionHandle: h, txPHYs: phy, rxPHYs: phy)).encode())
            a.send(HCICommand.leSetDataLength(handle: h, txOctets: dataLength, txTime: 17040).encode())
        }
        air.loop.advance(by: .milliseconds(100))
        var sent = 0
        func pump() {
            // Eight controller buffers, refilled as Number Of Completed Packets returns them.
            while sent < count && sent - sa.credits < 8 {
                let payload = [UInt8](repeating: UInt8(sent & 0xFF), count: size)
                a.send(ACLPacket(handle: h, boundary: .firstNonFlushable, broadcast: 0, data: payload).encode())
                sent += 1
            }
        }
        while sb.acl.count < count {
            air.loop.sync { pump() }
            air.loop.advance(by: .milliseconds(0.5))
        }
        let span = Double(sb.arrivals.last! - sb.arrivals.first!) / 1e9
        return Double((count - 1) * (size - 7)) / span
    }

    @Test func dataMovesAtTheModelsPaceAndLossSlowsIt() {
        for (phy, phyBits, dl, ci) in [(LEPHY.le1M, UInt8(1), 251, 30.0), (.le2M, 2, 251, 50.0), (.le1M, 1, 27, 7.5)] {
            let model = AirtimeModel(phy: phy, dataLength: dl, connectionIntervalMilliseconds: ci)
            let theoretical = model.theoreticalThroughput(attPayload: dl - 7)
            let measured = stream(model: AirtimeModel(), phy: phyBits, dataLength: UInt16(dl), intervalUnits: UInt16(ci / 1.25), size: dl, count: 600)
            #expect(abs(measured - theoretical) / theoretical < 0.03, "\(phy) DL \(dl) CI \(ci): \(measured) vs \(theoretical)")
        }
        let clean = stream(model: AirtimeModel(), phy: 2, dataLength: 251, intervalUnits: 24, size: 251, count: 400)
        let lossy = stream(model: AirtimeModel(lossRate: 0.2), phy: 2, dataLength: 251, intervalUnits: 24, size: 251, count: 400)
        // A fifth of the packets sent twice: about a fifth less throughput.
        #expect(lossy < clean * 0.9 && lossy > clean * 0.7, "\(lossy) vs \(clean)")
    }
}
