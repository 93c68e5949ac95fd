// libFuzzer target: ACL → L2CAP recombination (BLEL2CAP L2CAPRecombiner, one per connection handle, as the
// host keeps them) and LE signalling (L2CAPSignal.decodeAll and the L2CAPSignalingState machine, both
// roles). The input is an H4 byte stream of ACL packets (BLEHCI H4Framer, ACLPacket.decode).
// Properties: a recombined frame fragmented again and recombined afresh comes back equal; a decoded signal
// re-encodes to bytes that decode equal; the signalling machine only ever sends well-formed commands.
import BLEHCI
import BLEL2CAP
import FuzzSupport

func fuzzOne(_ data: [UInt8]) {
    var framer = H4Framer()
    framer.append(data)
    var recombiners: [UInt16: L2CAPRecombiner] = [:]
    var central = L2CAPSignalingState(role: .central)
    var peripheral = L2CAPSignalingState(role: .peripheral)
    while let packet = try? framer.nextPacket() {
        guard packet.type == .acl, let acl = try? ACLPacket.decode(packet) else { continue }
        var r = recombiners[acl.handle] ?? L2CAPRecombiner(maximumFrameLength: 65_535)
        var frames: [L2CAPFrame] = []
        do {
            if let f = try r.append(acl.data, boundary: acl.boundary == .continuing ? .continuing : .first) { frames.append(f) }
        } catch L2CAPRecombinationError.incompleteFrameDropped {
            if let f = r.pendingFrame() { frames.append(f) }
        } catch {}
        recombiners[acl.handle] = r
        for frame in frames {
            check(frame)
            guard frame.channelID.rawValue == 0x0005 else { continue }
            if let signals = try? L2CAPSignal.decodeAll(frame.payload) {
                for s in signals {
                    fuzzCheck((try? L2CAPSignal.decodeAll(s.encode())) == [s], "signal round trip: \(s)")
                }
            }
            for action in central.receive(frame.payload) + peripheral.receive(frame.payload) {
                if case .send(let bytes) = action {
                    fuzzCheck((try? L2CAPSignal.decodeAll(bytes))?.count == 1, "the machine sent a malformed command")
                }
            }
        }
    }
}

/// Fragmenting a frame and recombining the fragments gives the frame back.
func check(_ frame: L2CAPFrame) {
    var fresh = L2CAPRecombiner(maximumFrameLength: 65_535)
    var out: L2CAPFrame?
    for fragment in L2CAPFragmenter.fragment(frame.payload, channelID: frame.channelID, maximumFragmentSize: 27) {
        out = try? fresh.append(fragment.bytes, boundary: fragment.boundary)
    }
    fuzzCheck(out == frame, "fragment/recombine round trip")
}

func acl(_ handle: UInt16, _ boundary: ACLPacketBoundary, _ data: [UInt8]) -> [UInt8] {
    let p = ACLPacket(handle: handle, boundary: boundary, data: data).encode()
    return [p.type.rawValue] + p.bytes
}

func frames(_ handle: UInt16, cid: UInt16, _ payload: [UInt8], mps: Int) -> [UInt8] {
    L2CAPFragmenter.fragment(payload, channelID: L2CAPChannelID(rawValue: cid), maximumFragmentSize: mps).flatMap {
        acl(handle, $0.boundary == .first ? .firstFlushable : .continuing, $0.bytes)
    }
}

func seeds() -> [(String, [UInt8])] {
    let update = L2CAPSignal.connectionParameterUpdateRequest(identifier: 1, intervalMin: 6, intervalMax: 12, latency: 0, timeout: 100).encode()
    let creditRequest = L2CAPSignal.leCreditBasedConnectionRequest(identifier: 2, spsm: 0x80, sourceCID: 0x40, mtu: 512, mps: 247, initialCredits: 10).encode()
    let disconnect = L2CAPSignal.disconnectionRequest(identifier: 3, destinationCID: 0x40, sourceCID: 0x41).encode()
    let reject = L2CAPSignal.commandReject(identifier: 4, reason: 0, data: []).encode()
    let credits = L2CAPSignal.flowControlCreditIndication(identifier: 5, cid: 0x40, credits: 3).encode()
    let attRead: [UInt8] = [0x0A, 0x03, 0x00]
    return [
        ("att-read-whole", frames(0x40, cid: 4, attRead, mps: 27)),
        ("att-long-fragmented", frames(0x40, cid: 4, [0x52, 0x10, 0x00] + Array(repeating: 0xAB, count: 100), mps: 27)),
        ("signal-param-update", frames(0x40, cid: 5, update, mps: 27)),
        ("signal-credit-request", frames(0x41, cid: 5, creditRequest, mps: 8)),
        ("signal-disconnect-reject-credits", frames(0x40, cid: 5, disconnect, mps: 27) + frames(0x40, cid: 5, reject, mps: 27) + frames(0x40, cid: 5, credits, mps: 27)),
        (
            "two-handles-interleaved",
            acl(0x40, .firstFlushable, [20, 0, 4, 0, 1, 2]) + acl(0x41, .firstFlushable, [3, 0, 4, 0, 0x0A, 3, 0])
                + acl(0x40, .continuing, Array(repeating: 9, count: 18))
        ),
        // Issue 16's sequence: a start fragment announcing 32 octets with 1 following, then a complete frame.
        ("incomplete-then-complete", acl(0x40, .firstFlushable, [32, 0, 4, 0, 0x0A]) + acl(0x40, .firstFlushable, [3, 0, 4, 0, 0x0A, 3, 0])),
        ("continuation-without-start", acl(0x40, .continuing, [1, 2, 3]) + frames(0x40, cid: 4, attRead, mps: 27)),
    ]
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    fuzzOne(count == 0 ? [] : Array(UnsafeBufferPointer(start: start, count: count)))
    return 0
}

#if FUZZING
@_cdecl("FuzzL2CAP_main")
public func fuzzEntry(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    FuzzMain.libFuzzer(argc, argv, fuzzerTestOneInput)
}
#else
@main struct Main {
    static func main() { FuzzMain.run(name: "FuzzL2CAP", test: fuzzOne, seeds: seeds) }
}
#endif
