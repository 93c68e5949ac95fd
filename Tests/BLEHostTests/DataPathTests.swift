// The host's outbound ACL builder (one array per packet straight from the payload) against the general
// L2CAP fragmenter and ACL encoder, and the inbound fast path for whole frames against the recombiner.
import Foundation
import Testing
import BLEWire
import BLEHCI
import BLEL2CAP
import BLETransport
import BLEVirtualRadio
@testable import BLEHost

@Suite struct ACLBuilderTests {
    func reference(_ payload: [UInt8], cid: L2CAPChannelID, handle: UInt16, fragmentSize: Int) -> [HCIPacket] {
        L2CAPFragmenter.fragment(payload, channelID: cid, maximumFragmentSize: fragmentSize).map {
            ACLPacket(handle: handle, boundary: $0.boundary == .first ? .firstNonFlushable : .continuing, data: $0.bytes).encode()
        }
    }

    @Test func buildsTheSamePacketsAsFragmentingAFrame() {
        for fragmentSize in [1, 3, 4, 5, 8, 27, 251, 1021] {
            for length in [0, 1, 3, 4, 19, 23, 27, 244, 247, 251, 1000, 4096] {
                let payload = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 7) }
                var built: [HCIPacket] = []
                LEHost.forEachACLPacket(carrying: payload, cid: .att, handle: 0x0ABC, fragmentSize: fragmentSize) { built.append($0) }
                #expect(built == reference(payload, cid: .att, handle: 0x0ABC, fragmentSize: fragmentSize), "fragment \(fragmentSize), payload \(length)")
                // Each packet decodes, and the recombiner gets the payload back.
                var r = L2CAPRecombiner(maximumFrameLength: 65_535)
                var frames: [L2CAPFrame] = []
                for p in built {
                    let acl = try? ACLPacket.decode(p)
                    #expect(acl != nil)
                    if let acl, let f = try? r.append(acl.data, boundary: acl.boundary == .continuing ? .continuing : .first) { frames.append(f) }
                }
                #expect(frames == [L2CAPFrame(channelID: .att, payload: payload)])
            }
        }
    }

    /// A frame that waits whole (over a transport that takes H4 bytes) is cut, a few fragments at a time as credits
    /// come, into exactly the packets the reference fragmenter makes, and counts down the fragments it still makes.
    @Test func aWaitingFrameIsCutIntoTheSamePacketsWhateverTheCredits() {
        for fragmentSize in [4, 5, 27, 251, 1021] {
            for length in [0, 1, 19, 23, 27, 244, 1000, 1026, 4096] {
                let payload = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 7) }
                let expected = reference(payload, cid: L2CAPChannelID(rawValue: 0x0041), handle: 0x0ABC, fragmentSize: fragmentSize).flatMap(\.h4Bytes)
                let total = WaitingACL.frame(.init(payload: payload, cid: 0x0041, fragmentSize: fragmentSize)).fragmentsLeft
                for credits in [1, 3, total] {
                    var item = WaitingACL.frame(.init(payload: payload, cid: 0x0041, fragmentSize: fragmentSize))
                    var bytes: [UInt8] = []
                    var cuts = 0
                    while true {
                        let left = item.fragmentsLeft
                        let n = min(credits, left)
                        let done = item.cut(n, handle: 0x0ABC, into: &bytes)
                        cuts += 1
                        #expect(item.fragmentsLeft == left - n)
                        if done { break }
                        if cuts > total { Issue.record("never done: fragment \(fragmentSize), payload \(length)"); break }
                    }
                    #expect(bytes == expected, "fragment \(fragmentSize), payload \(length), \(credits) at a time")
                    #expect(item.fragmentsLeft == 0)
                }
            }
        }
    }
}

/// The host builds fragments in the arrays of packets it sent only over a transport that is done with them once
/// `send` returns; the virtual controller keeps the packet it is given, so reusing its array would cost a copy.
@Suite struct SentPacketReuseTests {
    @Test func onlyATransportThatLetsGoOfSentPacketsGetsItsArraysReused() throws {
        let loop = EventLoop(label: "reuse.test", clock: .virtual)
        let stream = StreamTransport.tcpClient(host: "127.0.0.1", port: 9)
        #expect(LEHost(transport: stream, loop: loop).recyclesSentPackets)
        let capture = FileManager.default.temporaryDirectory.appendingPathComponent("reuse-\(UUID().uuidString).btsnoop").path
        defer { try? FileManager.default.removeItem(atPath: capture) }
        let snooped = SnoopingTransport(stream, writer: try BTSnoopWriter(path: capture))
        #expect(LEHost(transport: snooped, loop: loop).recyclesSentPackets, "a capture copies each packet as it goes")
        let air = VirtualAir(loop: loop)
        #expect(!LEHost(transport: air.addController(), loop: loop).recyclesSentPackets)
        #expect(!LEHost(transport: ScriptedController(label: "s", loop: loop), loop: loop).recyclesSentPackets)
    }

    /// A host takes a run of completion events as one (it only counts the buffers they free); the transport
    /// merges them only for a sink that asks (BLETransportTests.StreamCoalescingTests).
    @Test func aHostTakesMergedCompletions() {
        let loop = EventLoop(label: "merge.test", clock: .virtual)
        #expect(LEHost(transport: StreamTransport.tcpClient(host: "127.0.0.1", port: 9), loop: loop).acceptsMergedCompletions)
    }
}
