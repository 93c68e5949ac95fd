// The host's outbound ACL builder (one array per packet straight from the payload) against the general
// L2CAP fragmenter and ACL encoder, and the inbound fast path for whole frames against the recombiner.
import Testing
import BLEWire
import BLEHCI
import BLEL2CAP
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
}
