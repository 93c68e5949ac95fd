// The packets that wait for controller buffers, in a transfer that never lets them run out: rootcanal frees its
// 20 buffers 17 and 3 at a time while a 1 KB L2CAP SDU queues 40 fragments at once, so the host's queue of
// waiting packets was never empty for a whole transfer, and it kept every packet it had ever sent (3 MB of
// heap per MB sent, grown a page at a time).
import Testing
import BLEWire
import BLEHCI
import BLETransport
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

    /// rootcanal reports every packet the air carried in a Number Of Completed Packets event of its own, 17 or 20
    /// of them in one read: the credits they free are spent once, after the read's last packet, in one send.
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
