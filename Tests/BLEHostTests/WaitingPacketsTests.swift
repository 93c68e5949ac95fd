// The packets that wait for controller buffers, in a transfer that never lets them run out: rootcanal frees its
// 20 buffers 17 and 3 at a time while a 1 KB L2CAP SDU queues 40 fragments at once, so the host's queue of
// waiting packets was never empty for a whole transfer, and it kept every packet it had ever sent (3 MB of
// heap per MB sent, grown a page at a time).
import Testing
import BLEWire
import BLEHCI
import BLETransport
import BLEL2CAP
@testable import BLEHost

@Suite struct WaitingPacketsTests {
    /// A host on a scripted controller with 20 LE buffers of 27 octets, connected on handle 0x40.
    static func connectedHost() -> (EventLoop, ScriptedController, LEHost) {
        let loop = EventLoop(label: "waiting", clock: .virtual)
        let c = ScriptedController(label: "w", loop: loop)
        c.commands = ControllerStartupTests.v40
        c.leBuffer = (27, 20)
        let host = LEHost(transport: c, loop: loop, name: "w")
        loop.sync { host.powerOn() }
        loop.advance(by: .seconds(1))
        c.connect(handle: 0x40)
        loop.advance(by: .milliseconds(10))
        return (loop, c, host)
    }

    static let packet = ACLPacket(handle: 0x40, boundary: .firstNonFlushable, data: [UInt8](repeating: 7, count: 27)).encode()

    /// Number Of Completed Packets for `n` packets of handle 0x40.
    static func completed(_ n: UInt16) -> HCIPacket {
        HCIEvent.numberOfCompletedPackets([CompletedPackets(handle: 0x40, count: n)]).encode()
    }

    @Test func aQueueThatNeverEmptiesHoldsOnlyWhatWaits() throws {
        let (loop, c, host) = Self.connectedHost()
        var waiting: [Int] = [], slots: [Int] = []
        loop.sync {
            for _ in 0..<60 { host.sendACL(Self.packet, handle: 0x40) }
            // Each round the controller frees 17 buffers, then 3, and the sender queues 20 more.
            for _ in 0..<1000 {
                host.transport(didReceive: Self.completed(17))
                host.transport(didReceive: Self.completed(3))
                for _ in 0..<20 { host.sendACL(Self.packet, handle: 0x40) }
                waiting.append(host.aclWaiting.count)
                slots.append(host.aclWaiting.storageCount)
            }
        }
        // 20 in the controller, 40 waiting, every round; 20,000 packets went through the queue meanwhile.
        #expect(c.aclSent == 20 + 20_000)
        #expect(waiting.allSatisfy { $0 == 40 })
        #expect(slots.max()! <= 2 * 40 + 64)
    }

    /// The tally a TCP transport reads (`aclPacketTally`): packets handed to the transport, and those the controller
    /// is done with, completed or dropped with their link; packets still waiting for buffers count in neither.
    @Test func theTallyCountsWhatWasSentAndWhatIsDone() throws {
        let (loop, _, host) = Self.connectedHost()
        let start = try #require(host.aclPacketTally)
        loop.sync { for _ in 0..<25 { host.sendACL(Self.packet, handle: 0x40) } }
        // 20 buffers: 20 sent, 5 waiting.
        #expect(host.aclPacketTally! == (start.sent + 20, start.done))
        loop.sync { host.transport(didReceive: Self.completed(17)) }
        #expect(host.aclPacketTally! == (start.sent + 25, start.done + 17))
        loop.sync { host.transport(didReceive: Self.completed(3)) }
        #expect(host.aclPacketTally! == (start.sent + 25, start.done + 20))
        // A completion for more than is in flight counts what was in flight.
        loop.sync { host.transport(didReceive: Self.completed(9)) }
        #expect(host.aclPacketTally! == (start.sent + 25, start.done + 25))
        loop.sync { for _ in 0..<4 { host.sendACL(Self.packet, handle: 0x40) } }
        #expect(host.aclPacketTally! == (start.sent + 29, start.done + 25))
        // The link ends: the controller drops what it held.
        loop.sync { host.transport(didReceive: HCIEvent.disconnectionComplete(status: .success, handle: 0x40, reason: .remoteUserTerminated).encode()) }
        loop.advance(by: .milliseconds(10))
        #expect(host.aclPacketTally! == (start.sent + 29, start.done + 29))
    }

    /// rootcanal reports every packet the air carried in a Number Of Completed Packets event of its own, 17 or 20
    /// of them in one read: the credits they free are spent once, after the read's last packet, in one send.
    /// Over a transport that takes H4 bytes, an L2CAP frame waits whole and is cut as credits free up: the controller
    /// gets the fragments a fragmenter makes, in order with the packets queued around them, as many at a time as
    /// credits allow and in one send per batch of credits; the host counts the fragments still to make.
    @Test func framesWaitWholeAndAreCutAsCreditsCome() throws {
        let loop = EventLoop(label: "late", clock: .virtual)
        let c = ScriptedController(label: "late", loop: loop)
        c.commands = ControllerStartupTests.v40
        c.leBuffer = (27, 20)
        c.takesH4Bytes = true
        c.keepsACL = true
        let host = LEHost(transport: c, loop: loop, name: "late")
        loop.sync { host.powerOn() }
        loop.advance(by: .seconds(1))
        c.connect(handle: 0x40)
        loop.advance(by: .milliseconds(10))
        #expect(host.cutsFramesLate)
        let frames = (0..<3).map { k in (0..<1026).map { UInt8(truncatingIfNeeded: $0 &+ k) } }
        let between = ACLPacket(handle: 0x40, boundary: .firstNonFlushable, data: [1, 2, 3]).encode()
        var expected: [HCIPacket] = []
        for (k, f) in frames.enumerated() {
            expected += L2CAPFragmenter.fragment(f, channelID: L2CAPChannelID(rawValue: 0x41), maximumFragmentSize: 27).map {
                ACLPacket(handle: 0x40, boundary: $0.boundary == .first ? .firstNonFlushable : .continuing, data: $0.bytes).encode()
            }
            if k == 0 { expected.append(between) }
        }
        let start = c.acl.count
        var waiting: [Int] = []
        loop.sync {
            host.queueFrame(frames[0], cid: 0x41, handle: 0x40)
            host.sendACL(between, handle: 0x40)
            host.queueFrame(frames[1], cid: 0x41, handle: 0x40)
            host.queueFrame(frames[2], cid: 0x41, handle: 0x40)
            waiting.append(host.aclWaitingPackets)
        }
        // 39 fragments a frame, one packet between: 20 left at once, 98 wait.
        #expect(c.aclSent - start == 20 && waiting == [98])
        let sends = c.aclSends
        var rounds = 0
        while loop.sync({ host.aclWaitingPackets }) > 0 && rounds < 100 {
            loop.sync {
                host.transport(didReceive: Self.completed(17))
                host.transport(didReceive: Self.completed(3))
            }
            rounds += 1
        }
        #expect(rounds == 5)
        #expect(c.aclSends == sends + 10, "one send for each batch of credits")
        #expect(Array(c.acl[start...]) == expected)
        #expect(loop.sync { host.aclWaiting.isEmpty })
        // A link that closes drops what waits for it, frames and all.
        loop.sync {
            host.queueFrame(frames[0], cid: 0x41, handle: 0x40)
            host.queueFrame(frames[1], cid: 0x41, handle: 0x40)
            host.removeWaitingACL(for: 0x40)
        }
        #expect(loop.sync { host.aclWaitingPackets == 0 && host.aclWaiting.isEmpty })
    }

    @Test func theCompletionsOfOneReadAreSpentInOneSend() throws {
        let (loop, c, host) = Self.connectedHost()
        loop.sync { for _ in 0..<60 { host.sendACL(Self.packet, handle: 0x40) } }
        #expect(c.aclSent == 20)
        let sendsBefore = c.aclSends
        loop.sync { host.transport(didReceivePackets: Array(repeating: Self.completed(1), count: 17)) }
        #expect(c.aclSent == 37)
        #expect(c.aclSends == sendsBefore + 1)
        // Alone, a completion is spent at once, as before; more than the host sent frees no more than it sent.
        loop.sync { host.transport(didReceivePackets: [Self.completed(3)]) }
        #expect(c.aclSent == 40)
        #expect(c.aclSends == sendsBefore + 2)
        loop.sync { host.transport(didReceivePackets: Array(repeating: Self.completed(20), count: 3)) }
        #expect(c.aclSent == 60)
        #expect(host.aclWaiting.isEmpty)
        #expect(host.aclCredits == 0)
        loop.sync { host.transport(didReceivePackets: [Self.completed(20), Self.completed(20)]) }
        #expect(host.aclCredits == 20)
    }
}
