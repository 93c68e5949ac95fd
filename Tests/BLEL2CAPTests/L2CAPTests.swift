// L2CAP: signalling codecs (round trip, every-prefix truncation), fragmentation and recombination at
// several buffer sizes and one octet at a time, malformed fragment streams, and the signalling machine.
import Testing
import BLEWire
@testable import BLEL2CAP

let allSignals: [L2CAPSignal] = [
    .commandReject(identifier: 1, reason: 0x0000, data: []),
    .commandReject(identifier: 2, reason: 0x0002, data: [0x40, 0x00, 0x41, 0x00]),
    .disconnectionRequest(identifier: 3, destinationCID: 0x40, sourceCID: 0x41),
    .disconnectionResponse(identifier: 3, destinationCID: 0x40, sourceCID: 0x41),
    .connectionParameterUpdateRequest(identifier: 4, intervalMin: 6, intervalMax: 12, latency: 0, timeout: 100),
    .connectionParameterUpdateResponse(identifier: 4, result: 1),
    .leCreditBasedConnectionRequest(identifier: 5, spsm: 0x80, sourceCID: 0x40, mtu: 512, mps: 247, initialCredits: 10),
    .leCreditBasedConnectionResponse(identifier: 5, destinationCID: 0x41, mtu: 512, mps: 247, initialCredits: 10, result: 0),
    .flowControlCreditIndication(identifier: 6, cid: 0x40, credits: 3),
    .unknown(code: 0x7E, identifier: 7, data: [1, 2, 3]),
]

@Suite struct L2CAPSignalCodecTests {
    @Test func specBytes() throws {
        // Connection Parameter Update Request (Vol 3 Part A §4.20): code 0x12, id, length 8, four fields.
        #expect(
            L2CAPSignal.connectionParameterUpdateRequest(identifier: 1, intervalMin: 0x0006, intervalMax: 0x000C, latency: 0, timeout: 0x0064).encode()
                == [0x12, 0x01, 0x08, 0x00, 0x06, 0x00, 0x0C, 0x00, 0x00, 0x00, 0x64, 0x00])
        #expect(try L2CAPSignal.decodeAll([0x01, 0x09, 0x02, 0x00, 0x00, 0x00]) == [.commandReject(identifier: 9, reason: 0, data: [])])
    }

    @Test func roundTripAndEveryPrefix() throws {
        for s in allSignals {
            let b = s.encode()
            #expect(try L2CAPSignal.decodeAll(b) == [s])
            for n in 1..<b.count {
                #expect(throws: (any Error).self, "\(s) prefix \(n)") { try L2CAPSignal.decodeAll(Array(b.prefix(n))) }
            }
        }
        // Several commands in one C-frame.
        let joined = allSignals.flatMap { $0.encode() }
        #expect(try L2CAPSignal.decodeAll(joined) == allSignals)
    }

    @Test func knownCommandWithWrongLengthIsRejected() {
        #expect(throws: (any Error).self) { try L2CAPSignal.decodeAll([0x13, 0x01, 0x03, 0x00, 0x00, 0x00, 0x00]) }
    }
}

@Suite struct FragmentationTests {
    @Test(arguments: [27, 251, 1021])
    func fragmentThenRecombine(bufferSize: Int) throws {
        for length in [0, 1, 22, 23, 247, 251, 512, 2000] {
            let payload = (0..<length).map { UInt8(truncatingIfNeeded: $0 * 7) }
            let frags = L2CAPFragmenter.fragment(payload, channelID: .att, maximumFragmentSize: bufferSize)
            #expect(frags.allSatisfy { $0.bytes.count <= bufferSize && !$0.bytes.isEmpty })
            #expect(frags.first?.boundary == .first)
            #expect(frags.dropFirst().allSatisfy { $0.boundary == .continuing })
            var r = L2CAPRecombiner(maximumFrameLength: 65_535)
            var out: [L2CAPFrame] = []
            for f in frags { if let frame = try r.append(f.bytes, boundary: f.boundary) { out.append(frame) } }
            #expect(out == [L2CAPFrame(channelID: .att, payload: payload)])
            #expect(r.isIdle)
        }
    }

    /// Fragments handed as slices of a larger buffer (as the host hands `packet.bytes[4...]`, whose indices
    /// start at 4) recombine exactly as the same fragments in arrays of their own: whole frames in one
    /// fragment, frames in many, and the errors (too long, overflow, a continuation without a start).
    @Test(arguments: [27, 251])
    func fragmentsAsSlicesRecombineAsArraysDo(bufferSize: Int) throws {
        for length in [0, 1, 22, 23, 247, 600] {
            let payload = (0..<length).map { UInt8(truncatingIfNeeded: $0 * 13 + 5) }
            var arrays = L2CAPRecombiner(maximumFrameLength: 65_535), slices = arrays
            for f in L2CAPFragmenter.fragment(payload, channelID: .leSignaling, maximumFragmentSize: bufferSize) {
                let packet: [UInt8] = [0xAA, 0xBB, 0xCC, 0xDD] + f.bytes
                let a = try arrays.append(f.bytes, boundary: f.boundary)
                let b = try slices.append(packet[4...], boundary: f.boundary)
                #expect(a == b)
            }
            #expect(slices.isIdle)
        }
        func outcome(_ r: inout L2CAPRecombiner, _ fragments: [([UInt8], L2CAPFragment.Boundary)], sliced: Bool) -> [String] {
            fragments.map { bytes, boundary in
                do {
                    let f = sliced ? try r.append(([9, 9, 9, 9] + bytes)[4...], boundary: boundary) : try r.append(bytes, boundary: boundary)
                    return f.map { "\($0.channelID):\($0.payload)" } ?? "nil"
                } catch {
                    return "\(error)"
                }
            }
        }
        let streams: [[([UInt8], L2CAPFragment.Boundary)]] = [
            [([0x10, 0x00, 0x40, 0x00, 1, 2], .continuing)],
            [([0xFF, 0x00, 0x40, 0x00], .first)],
            [([0x03, 0x00, 0x40, 0x00, 1], .first), ([2, 3, 4], .continuing)],
            [([0x02, 0x00, 0x40, 0x00, 1, 2], .first)],
            [([0x05], .first), ([0x00, 0x40, 0x00, 1, 2, 3, 4, 5], .continuing)],
        ]
        for stream in streams {
            var a = L2CAPRecombiner(maximumFrameLength: 100), b = a
            #expect(outcome(&a, stream, sliced: false) == outcome(&b, stream, sliced: true))
        }
    }

    @Test func oneOctetAtATime() throws {
        let payload = Array(0..<100).map(UInt8.init)
        let whole = L2CAPFragmenter.fragment(payload, channelID: .smp, maximumFragmentSize: 10_000)[0].bytes
        var r = L2CAPRecombiner(maximumFrameLength: 1000)
        var got: L2CAPFrame?
        for (i, b) in whole.enumerated() {
            let f = try r.append([b], boundary: i == 0 ? .first : .continuing)
            if i < whole.count - 1 { #expect(f == nil) } else { got = f }
        }
        #expect(got == L2CAPFrame(channelID: .smp, payload: payload))
    }

    @Test func malformedStreams() throws {
        var r = L2CAPRecombiner(maximumFrameLength: 100)
        #expect(throws: L2CAPRecombinationError.continuationWithoutStart) { try r.append([1, 2], boundary: .continuing) }
        #expect(throws: L2CAPRecombinationError.frameTooLong(0x200)) { try r.append([0x00, 0x02, 0x04, 0x00, 1], boundary: .first) }
        #expect(r.isIdle)
        // More octets than announced.
        _ = try r.append([0x03, 0x00, 0x04, 0x00, 1], boundary: .first)
        #expect(throws: L2CAPRecombinationError.overflow(expected: 7, received: 9)) { try r.append([2, 3, 4, 5], boundary: .continuing) }
        // A new start while a frame is incomplete drops the old one, and the new one still completes.
        _ = try r.append([0x05, 0x00, 0x04, 0x00, 1], boundary: .first)
        #expect(throws: L2CAPRecombinationError.incompleteFrameDropped(received: 5, expected: 9)) {
            try r.append([0x01, 0x00, 0x04, 0x00, 9], boundary: .first)
        }
        #expect(r.pendingFrame() == L2CAPFrame(channelID: .att, payload: [9]))
        #expect(r.isIdle)
    }
}

@Suite struct SignalingStateTests {
    @Test func centralIsAskedToUpdateParameters() {
        var s = L2CAPSignalingState(role: .central)
        let req = L2CAPSignal.connectionParameterUpdateRequest(identifier: 7, intervalMin: 6, intervalMax: 12, latency: 0, timeout: 100).encode()
        #expect(s.receive(req) == [.connectionParameterUpdateRequested(identifier: 7, minInterval: 6, maxInterval: 12, latency: 0, timeout: 100)])
        #expect(s.connectionParameterUpdateResponse(identifier: 7, accepted: false) == [0x13, 0x07, 0x02, 0x00, 0x01, 0x00])
    }

    @Test func peripheralRejectsTheRequestAndUnknownCodes() {
        var s = L2CAPSignalingState(role: .peripheral)
        let req = L2CAPSignal.connectionParameterUpdateRequest(identifier: 7, intervalMin: 6, intervalMax: 12, latency: 0, timeout: 100).encode()
        #expect(s.receive(req) == [.send(L2CAPSignal.commandReject(identifier: 7, reason: 0, data: []).encode())])
        #expect(s.receive([0x7F, 0x22, 0x00, 0x00]) == [.send(L2CAPSignal.commandReject(identifier: 0x22, reason: 0, data: []).encode())])
        // Credit-based channels are refused: SPSM not supported.
        let cb = L2CAPSignal.leCreditBasedConnectionRequest(identifier: 9, spsm: 0x80, sourceCID: 0x40, mtu: 100, mps: 100, initialCredits: 1).encode()
        #expect(s.receive(cb) == [.send(L2CAPSignal.leCreditBasedConnectionResponse(identifier: 9, destinationCID: 0, mtu: 0, mps: 0, initialCredits: 0, result: 2).encode())])
        // Garbage with an identifier is rejected; without one it is dropped.
        #expect(s.receive([0x12, 0x05, 0x08]) == [.send(L2CAPSignal.commandReject(identifier: 5, reason: 0, data: []).encode())])
        #expect(s.receive([0x12]) == [])
    }

    @Test func ownRequestsGetTheirAnswersAndIdentifiersAreNeverZero() {
        var s = L2CAPSignalingState(role: .peripheral)
        var ids = Set<UInt8>()
        for _ in 0..<600 {
            let bytes = s.connectionParameterUpdateRequest(minInterval: 6, maxInterval: 12, latency: 0, timeout: 100)
            #expect(bytes[1] != 0)
            ids.insert(bytes[1])
        }
        // They cycle through 129…199 (never an identifier the Linux kernel uses for its own requests).
        #expect(ids == Set(IdentifierCounter.range))
        let req = s.connectionParameterUpdateRequest(minInterval: 6, maxInterval: 12, latency: 0, timeout: 100)
        #expect(
            s.receive(L2CAPSignal.connectionParameterUpdateResponse(identifier: req[1], result: 0).encode())
                == [.connectionParameterUpdateResponse(identifier: req[1], accepted: true)])
        // An answer nobody asked for is ignored.
        #expect(s.receive(L2CAPSignal.connectionParameterUpdateResponse(identifier: req[1], result: 0).encode()) == [])
    }
}

/// Our signalling identifiers stay out of the Linux kernel's own (1…128): a Linux peer matches the answer to its own
/// request by identifier among channels that include the ones it accepted from us, keyed by our request's identifier.
@Test func ourSignallingIdentifiersNeverMeetTheLinuxKernels() {
    var counter = IdentifierCounter()
    var seen: [UInt8] = []
    for _ in 0..<300 { seen.append(counter.next()) }
    #expect(seen.allSatisfy { (129...199).contains($0) })
    #expect(seen.first == 129 && seen[70] == 199 && seen[71] == 129)
}
