// L2CAP credit-based channels through the whole host on the virtual radio (virtual clock): open, transfer
// both ways, a slow reader, many channels on one link, encryption required, a link lost mid-transfer.
import Testing
import BLEWire
import BLEL2CAP
import BLEVirtualRadio
import BLETransport
@testable import BLEHost

/// What a channel delivered, and whether the reader consumes it at once.
final class ChannelSink: @unchecked Sendable {
    var data: [UInt8] = []
    var closed: [L2CAPCreditChannels.CloseReason] = []
    var consumes = true
    var held = 0
    func attach(_ ch: HostL2CAPChannel) {
        ch.onReceive = { [unowned self, unowned ch] sdu in
            data += sdu
            if consumes { ch.consumed(sdu.count) } else { held += sdu.count }
        }
        ch.onClose = { [unowned self] in closed.append($0) }
    }
}

extension LinkedHosts {
    /// Publishes a PSM on the peripheral and opens a channel to it from the central.
    func openChannel(
        security: L2CAPSecurityRequirement = .none, params: L2CAPChannelParameters? = nil,
        within: LoopTime = .seconds(1)
    ) -> (Result<[HostL2CAPChannel], L2CAPOpenError>?, [HostL2CAPChannel]) {
        var accepted: [HostL2CAPChannel] = []
        let psm = air.loop.sync { peripheral.publishL2CAP(security: security) { accepted.append($0) } }
        var result: Result<[HostL2CAPChannel], L2CAPOpenError>?
        air.loop.sync { link.openL2CAPChannel(psm: psm!, parameters: params) { result = $0 } }
        air.loop.advance(by: within)
        return (result, accepted)
    }
}

@Suite struct HostChannelTests {
    @Test func openAndMoveDataBothWays() throws {
        let t = try LinkedHosts()
        let (result, accepted) = t.openChannel()
        let ours = try #require(try result?.get().first)
        let theirs = try #require(accepted.first)
        #expect(ours.psm == 0x80 && theirs.psm == 0x80 && ours.remoteCID == theirs.localCID)
        #expect(t.air.loop.sync { ours.peerMTU == 2048 && ours.peerMPS == 247 })
        let a = ChannelSink(), b = ChannelSink()
        t.air.loop.sync {
            a.attach(ours); b.attach(theirs)
        }
        // 200 KB from the central, 50 KB back, queued as the app would (retrying when full).
        let up = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let down = (0..<50_000).map { UInt8(truncatingIfNeeded: $0 &* 17) }
        var upSent = 0, downSent = 0
        for _ in 0..<400 {
            t.air.loop.sync {
                while upSent < up.count, ours.send(Array(up[upSent..<min(up.count, upSent + 4000)])) { upSent = min(up.count, upSent + 4000) }
                while downSent < down.count, theirs.send(Array(down[downSent..<min(down.count, downSent + 1000)])) { downSent = min(down.count, downSent + 1000) }
            }
            t.air.loop.advance(by: .milliseconds(50))
            if b.data.count == up.count && a.data.count == down.count { break }
        }
        #expect(b.data == up)
        #expect(a.data == down)
        // Closing from the peripheral closes both ends.
        t.air.loop.sync { theirs.close() }
        t.air.loop.advance(by: .milliseconds(200))
        #expect(a.closed == [.peerDisconnected] && b.closed == [.localDisconnect])
        #expect(t.air.loop.sync { t.link.l2capChannels.isEmpty })
    }

    @Test func closeSendsWhatIsQueuedFirst() throws {
        let t = try LinkedHosts()
        let (result, accepted) = t.openChannel()
        let ours = try #require(try result?.get().first), theirs = try #require(accepted.first)
        let b = ChannelSink()
        t.air.loop.sync { b.attach(theirs) }
        let data = (0..<60_000).map { UInt8(truncatingIfNeeded: $0 &* 3) }
        t.air.loop.sync {
            #expect(ours.send(data))
            ours.close()
            #expect(!ours.send([1]))   // nothing more after close
        }
        t.air.loop.advance(by: .seconds(2))
        #expect(b.data == data && b.closed == [.peerDisconnected])
        // close(discardingQueued:) closes at once.
        let (r2, acc2) = t.openChannel()
        let second = try #require(try r2?.get().first)
        let sink2 = ChannelSink()
        t.air.loop.sync {
            sink2.attach(try! #require(acc2.first)); _ = second.send([UInt8](repeating: 9, count: 60_000)); second.close(discardingQueued: true)
        }
        t.air.loop.advance(by: .seconds(1))
        #expect(sink2.data.count < 60_000 && sink2.closed == [.peerDisconnected])
    }

    @Test func aSlowReaderStopsTheSenderWithoutGrowingMemory() throws {
        let t = try LinkedHosts()
        let (result, accepted) = t.openChannel()
        let ours = try #require(try result?.get().first), theirs = try #require(accepted.first)
        let b = ChannelSink()
        b.consumes = false
        t.air.loop.sync { b.attach(theirs) }
        var refused = false
        var writable = 0
        t.air.loop.sync { ours.onWritable = { writable += 1 } }
        for _ in 0..<100 {
            t.air.loop.sync {
                while ours.send([UInt8](repeating: 1, count: 2000)) {}
                refused = true
            }
            t.air.loop.advance(by: .milliseconds(50))
        }
        // The receiver holds at most its 64 KB window; the sender's queue is bounded by its limit.
        #expect(refused)
        #expect(b.held <= 64 * 1024 && b.held > 50_000)
        #expect(t.air.loop.sync { ours.sendCredits == 0 && ours.state!.queuedOctets <= 64 * 1024 + 2050 })
        // The reader catches up: credits flow again, the writer hears it has room, the rest arrives.
        t.air.loop.sync {
            theirs.consumed(b.held); b.held = 0; b.consumes = true
        }
        t.air.loop.advance(by: .seconds(2))
        #expect(writable >= 1)
        #expect(t.air.loop.sync { ours.state!.queuedOctets == 0 })
    }

    @Test func manyChannelsOnOneLinkAndTheLinkGoingDown() throws {
        let t = try LinkedHosts()
        var accepted: [HostL2CAPChannel] = []
        let psm = t.air.loop.sync { t.peripheral.publishL2CAP(psm: 0x0025) { accepted.append($0) } }
        #expect(psm == 0x25)
        #expect(t.air.loop.sync { t.peripheral.publishL2CAP(psm: 0x0025) { _ in } } == nil)
        var opened: [HostL2CAPChannel] = []
        for _ in 0..<10 { t.air.loop.sync { t.link.openL2CAPChannel(psm: 0x25) { if case let .success(c) = $0 { opened += c } } } }
        var enhanced: Result<[HostL2CAPChannel], L2CAPOpenError>?
        t.air.loop.sync { t.link.openL2CAPChannel(psm: 0x25, count: 5, enhanced: true) { enhanced = $0 } }
        t.air.loop.advance(by: .seconds(1))
        #expect(opened.count == 10 && (try? enhanced?.get().count) == 5 && accepted.count == 15)
        #expect(Set(opened.map(\.localCID)).count == 10)
        // Each channel carries its own data.
        let sinks = accepted.map { ch -> ChannelSink in
            let s = ChannelSink(); t.air.loop.sync { s.attach(ch) }; return s
        }
        t.air.loop.sync { for (i, ch) in opened.enumerated() { ch.send([UInt8](repeating: UInt8(i), count: 3000)) } }
        t.air.loop.advance(by: .seconds(1))
        for (i, ch) in opened.enumerated() {
            let s = sinks[accepted.firstIndex { $0.localCID == ch.remoteCID }!]
            #expect(s.data == [UInt8](repeating: UInt8(i), count: 3000))
        }
        // A PSM nobody published is refused; unpublishing refuses new channels and keeps open ones.
        var refused: Result<[HostL2CAPChannel], L2CAPOpenError>?
        t.air.loop.sync {
            _ = t.peripheral.unpublishL2CAP(psm: 0x25); t.link.openL2CAPChannel(psm: 0x25) { refused = $0 }
        }
        t.air.loop.advance(by: .milliseconds(300))
        #expect(refused.map { if case .failure(.failed(.refused(.spsmNotSupported))) = $0 { true } else { false } } == true)
        #expect(t.air.loop.sync { t.link.l2capChannels.count } == 15)
        // The link drops: every channel closes with linkClosed on both sides.
        let mine = opened.map { ch -> ChannelSink in
            let s = ChannelSink(); t.air.loop.sync { s.attach(ch) }; return s
        }
        t.air.loop.sync { t.link.disconnect() }
        t.air.loop.advance(by: .milliseconds(300))
        #expect(mine.allSatisfy { $0.closed == [.linkClosed] } && sinks.allSatisfy { $0.closed == [.linkClosed] })
        #expect(opened.allSatisfy { !$0.isOpen })
    }

    @Test func encryptionRequiredPairsTransparentlyThenOpens() throws {
        let t = try LinkedHosts()
        let (result, accepted) = t.openChannel(security: .encryption(), within: .seconds(3))
        #expect((try? result?.get().count) == 1 && accepted.count == 1)
        #expect(t.air.loop.sync { t.link.security.encrypted })
    }

    @Test func noResponseTimesOut() throws {
        let t = try LinkedHosts()
        // The peripheral's controller vanishes without a word: the request goes unanswered, and the RTX
        // timer (2 s here) ends it before the supervision timeout ends the link.
        t.air.loop.sync { t.central.signalingTimeout = .seconds(2) }
        var result: Result<[HostL2CAPChannel], L2CAPOpenError>?
        t.air.loop.sync {
            t.peripheral.transport.close()   // the peripheral vanishes without a word
            t.link.openL2CAPChannel(psm: 0x80) { result = $0 }
        }
        t.air.loop.advance(by: .seconds(3))
        #expect(result.map { if case .failure(.failed(.timeout)) = $0 { true } else { false } } == true, "\(String(describing: result))")
    }
}
