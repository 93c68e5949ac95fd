// Credit-based channels as pure machines: the new signalling PDUs on the wire, credit accounting,
// segmentation and reassembly, every refusal and violation, and two links' machines against each other.
import Testing
import BLEWire
@testable import BLEL2CAP

private let enhancedSamples: [L2CAPSignal] = [
    .creditBasedConnectionRequest(identifier: 3, spsm: 0x81, mtu: 512, mps: 247, initialCredits: 8, sourceCIDs: [0x40, 0x41, 0x42]),
    .creditBasedConnectionResponse(identifier: 3, mtu: 1024, mps: 100, initialCredits: 2, result: 0x0009, destinationCIDs: [0x44, 0, 0x45]),
    .creditBasedReconfigureRequest(identifier: 4, mtu: 600, mps: 247, destinationCIDs: [0x40]),
    .creditBasedReconfigureResponse(identifier: 4, result: 1),
    .flowControlCreditIndication(identifier: 5, cid: 0x40, credits: 65535),
]

@Suite struct L2CAPEnhancedSignalCodecTests {
    @Test func roundTripAndEveryTruncation() throws {
        for s in enhancedSamples {
            let bytes = s.encode()
            #expect(try L2CAPSignal.decodeAll(bytes) == [s])
            for n in 1..<bytes.count {
                #expect(throws: (any Error).self) { _ = try L2CAPSignal.decodeAll(Array(bytes[0..<n])) }
            }
        }
    }

    @Test func cidListsHoldOneToFiveCIDs() {
        // An enhanced request with no CID, six CIDs, or half a CID is malformed.
        for cids in [[UInt16](), [0x40, 0x41, 0x42, 0x43, 0x44, 0x45]] {
            let b = L2CAPSignal.creditBasedConnectionRequest(identifier: 1, spsm: 0x80, mtu: 64, mps: 64, initialCredits: 1, sourceCIDs: cids).encode()
            #expect(throws: (any Error).self) { _ = try L2CAPSignal.decodeAll(b) }
        }
        var odd = L2CAPSignal.creditBasedReconfigureRequest(identifier: 1, mtu: 64, mps: 64, destinationCIDs: [0x40]).encode()
        odd.append(0x41)
        odd[2] += 1
        #expect(throws: (any Error).self) { _ = try L2CAPSignal.decodeAll(odd) }
    }
}

@Suite struct L2CAPCreditChannelTests {
    func channel(
        localMTU: UInt16 = 100, localMPS: UInt16 = 30, remoteMTU: UInt16 = 100, remoteMPS: UInt16 = 30,
        send: UInt16 = 10, receive: UInt16 = 10, window: Int = 300
    ) -> L2CAPCreditChannel {
        L2CAPCreditChannel(
            psm: 0x80, localCID: 0x40, remoteCID: 0x50, localMTU: localMTU, localMPS: localMPS, remoteMTU: remoteMTU,
            remoteMPS: remoteMPS, sendCredits: send, receiveCredits: receive, receiveWindow: window)
    }

    @Test func segmentsOverMPSWithTheSDULengthFirstAndSpendsOneCreditPerFrame() {
        var ch = channel(send: 3)
        ch.enqueue(Array(0..<70))
        // 2 + 28 | 30 | 12 → three K-frames.
        #expect(ch.queuedFrames == 3)
        let f1 = ch.nextFrame(), f2 = ch.nextFrame(), f3 = ch.nextFrame()
        #expect(f1 == [70, 0] + Array(0..<28))
        #expect(f2 == Array(28..<58))
        #expect(f3 == Array(58..<70))
        #expect(ch.sendCredits == 0 && ch.nextFrame() == nil && ch.queuedOctets == 0)
        // Without credits nothing leaves; a credit lets exactly one frame go.
        ch.enqueue([1, 2, 3])
        #expect(ch.nextFrame() == nil)
        try? ch.addSendCredits(1)
        #expect(ch.nextFrame() == [3, 0, 1, 2, 3])
        #expect(ch.nextFrame() == nil)
    }

    @Test func reassemblesAndCountsReceiveCredits() throws {
        var ch = channel()
        #expect(try ch.receive([5, 0, 1, 2]) == nil)
        #expect(try ch.receive([3, 4, 5]) == [1, 2, 3, 4, 5])
        #expect(try ch.receive([0, 0]) == [])   // an empty SDU
        #expect(ch.receiveCredits == 7 && ch.unconsumed == 5)
    }

    @Test func violationsDisconnect() {
        var ch = channel()
        #expect(throws: L2CAPCreditChannel.Violation.frameLongerThanMPS(31)) { _ = try ch.receive([UInt8](repeating: 0, count: 31)) }
        ch = channel()
        #expect(throws: L2CAPCreditChannel.Violation.sduLongerThanMTU(101)) { _ = try ch.receive([101, 0, 1]) }
        ch = channel()
        _ = try? ch.receive([4, 0, 1])
        #expect(throws: L2CAPCreditChannel.Violation.sduOverrun(expected: 4, received: 5)) { _ = try ch.receive([2, 3, 4, 5]) }
        ch = channel()
        #expect(throws: L2CAPCreditChannel.Violation.emptyFirstFrame) { _ = try ch.receive([1]) }
        ch = channel(receive: 1)
        _ = try? ch.receive([1, 0, 9])
        #expect(throws: L2CAPCreditChannel.Violation.frameWithoutCredit) { _ = try ch.receive([1, 0, 9]) }
        ch = channel(send: 65_000)
        #expect(throws: L2CAPCreditChannel.Violation.creditOverflow(65_536)) { try ch.addSendCredits(536) }
        #expect((try? ch.addSendCredits(535)) != nil)
    }

    /// One SDU through a sender's segmentation, the host's ACL fragmentation into `aclBuffer`-octet packets, the
    /// peer's recombination and reassembly; checks each K-frame against Vol 3 Part A §3.4.3 on the way.
    func carry(_ sdu: [UInt8], from tx: inout L2CAPCreditChannel, to rx: inout L2CAPCreditChannel, aclBuffer: Int) throws -> [UInt8]? {
        tx.enqueue(sdu)
        var recombiner = L2CAPRecombiner(maximumFrameLength: Int(rx.localMPS))
        var delivered: [UInt8]?
        var frames = 0
        while let kFrame = tx.nextFrame() {
            frames += 1
            // Each K-frame's information payload fits the peer's MPS; only the first carries the SDU length.
            #expect(kFrame.count <= Int(tx.remoteMPS))
            if frames == 1 { #expect(Int(kFrame[0]) | Int(kFrame[1]) << 8 == sdu.count) }
            let fragments = L2CAPFragmenter.fragment(kFrame, channelID: L2CAPChannelID(rawValue: tx.remoteCID), maximumFragmentSize: aclBuffer)
            #expect(fragments.allSatisfy { $0.bytes.count <= aclBuffer })
            var frame: L2CAPFrame?
            for f in fragments {
                #expect(frame == nil)
                frame = try recombiner.append(f.bytes, boundary: f.boundary)
            }
            let whole = try #require(frame)
            #expect(whole.payload == kFrame)
            if let done = try rx.receive(whole.payload) {
                #expect(delivered == nil)
                delivered = done
            }
        }
        // Segments: the first K-frame holds MPS − 2 octets of the SDU, each further one MPS.
        let mps = Int(tx.remoteMPS), rest = max(0, sdu.count - (mps - 2))
        #expect(frames == 1 + (rest + mps - 1) / mps)
        _ = rx.consumed(delivered?.count ?? 0)
        return delivered
    }

    /// `ble bench peer --l2cap` on bluez: bumble-bench's channel (MTU and MPS 1024, 128 credits) over the guest's
    /// 1021-octet LE ACL buffers, carrying its stream (a 3-octet RESET, then 1024-octet SDUs); and Multipeer's
    /// kernel channel (MTU 65535, MPS 1017). Segmentation, fragmentation and reassembly give back each SDU whole.
    @Test func benchSizesOverA1021OctetACLBufferSegmentAndReassembleWithinTheRules() throws {
        for (mtu, mps, sizes) in [(UInt16(1024), UInt16(1024), [3, 1024, 1022, 1023, 1, 0]), (65535, 1017, [1015, 1016, 1017, 65535, 3, 2034])] {
            var tx = channel(remoteMTU: mtu, remoteMPS: mps, send: 65535)
            var rx = channel(localMTU: mtu, localMPS: mps, receive: 65535, window: 65535 * Int(mps))
            for (i, n) in sizes.enumerated() {
                let sdu = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ i) }
                #expect(try carry(sdu, from: &tx, to: &rx, aclBuffer: 1021) == sdu, "SDU of \(n) octets, MPS \(mps)")
            }
            #expect(tx.queuedFrames == 0 && rx.unconsumed == 0)
        }
        // The exact shape btmon showed for a 1024-octet SDU at MPS 1024: K-frames of 1024 and 2 octets, the first in
        // ACL packets of 1021 and 7 octets.
        var tx = channel(remoteMTU: 1024, remoteMPS: 1024, send: 10)
        tx.enqueue([UInt8](repeating: 0xA5, count: 1024))
        let frames = [tx.nextFrame(), tx.nextFrame()].compactMap { $0 }
        try #require(frames.count == 2)
        let (first, second) = (frames[0], frames[1])
        #expect(first.count == 1024 && Array(first.prefix(2)) == [0x00, 0x04] && second == [0xA5, 0xA5])
        #expect(L2CAPFragmenter.fragment(first, channelID: L2CAPChannelID(rawValue: 0x40), maximumFragmentSize: 1021).map(\.bytes.count) == [1021, 7])
    }

    /// The frames of `bench-bluez`'s failed run (btmon): the kernel sent bumble-bench's SDUs as they were, with no
    /// SDU length field, because the socket it connected was never bound to an LE address type and so stayed in
    /// basic mode (l2cap_sock_connect picks LE flow control from the bound source's type), though it had asked for an
    /// LE credit-based channel. Our host read the RESET SDU [00 01 00] as "an SDU of 256, 1 octet so far", then the
    /// next 1024-octet frame overran it: the error the run reported. The same SDUs as K-frames arrive whole.
    @Test func sdusSentWithoutTheirLengthFieldGiveTheBenchRunsErrorAndAsKFramesArriveWhole() throws {
        var rx = channel(localMTU: 1024, localMPS: 1024, receive: 128, window: 128 * 1024)
        let reset: [UInt8] = [0x00, 0x01, 0x00]
        let sequence = [0x03, 0xFE, 0x01, 0x00] + [UInt8](repeating: 0, count: 1020)
        #expect(try rx.receive(reset) == nil)
        do {
            _ = try rx.receive(sequence)
            Issue.record("a frame past the announced SDU length was taken")
        } catch {
            #expect(error == .sduOverrun(expected: 256, received: 1025))
            #expect(error.description == "K-frames carry 1025 octets for an SDU of 256")
        }
        var tx = channel(remoteMTU: 1024, remoteMPS: 1024, send: 128)
        rx = channel(localMTU: 1024, localMPS: 1024, receive: 128, window: 128 * 1024)
        #expect(try carry(reset, from: &tx, to: &rx, aclBuffer: 1021) == reset)
        #expect(try carry(sequence, from: &tx, to: &rx, aclBuffer: 1021) == sequence)
    }

    @Test func creditsReturnAsTheApplicationConsumesSoASlowReaderStopsTheSender() throws {
        // Window 300 octets of 30-octet frames: 10 credits. The peer spends them all on 10 one-frame SDUs.
        var ch = channel(receive: 10, window: 300)
        for _ in 0..<10 { _ = try ch.receive([28, 0] + [UInt8](repeating: 7, count: 28)) }
        #expect(ch.receiveCredits == 0 && ch.unconsumed == 280)
        // Nothing consumed: nothing granted; the sender is stopped.
        #expect(ch.consumed(0) == 0)
        // Consuming returns credits for what left the buffer, in batches of a quarter of the window (2 frames).
        #expect(ch.consumed(28) == 1)   // the sender had none left: one credit at once
        #expect(ch.consumed(28) == 0)   // waits for a batch
        #expect(ch.consumed(56) == 3)
        #expect(ch.receiveCredits == 4)
        // Never more than the window: unconsumed + credits × MPS ≤ 300.
        #expect(ch.unconsumed + ch.receiveCredits * 30 <= 300)
        #expect(ch.consumed(10_000) == 6)
        #expect(ch.receiveCredits == 10)
    }
}

/// Two links' signalling states wired back to back: what one sends, the other receives.
struct SignalPair {
    var a = L2CAPSignalingState(role: .central)
    var b = L2CAPSignalingState(role: .peripheral)
    var aSecurity = L2CAPLinkSecurity()
    var bServers: [UInt16: L2CAPServerPolicy] = [0x80: L2CAPServerPolicy(parameters: .init(mtu: 200, mps: 50, window: 500))]
    var aEvents: [L2CAPCreditChannels.Action] = []
    var bEvents: [L2CAPCreditChannels.Action] = []

    /// Delivers `actions` of side `fromA` to the other side until nothing more is sent.
    mutating func run(_ actions: [L2CAPSignalingState.Action], fromA: Bool) {
        var queue: [(Bool, L2CAPSignalingState.Action)] = actions.map { (fromA, $0) }
        while !queue.isEmpty {
            let (isA, action) = queue.removeFirst()
            switch action {
            case let .send(bytes):
                let servers = bServers
                let out = isA ? b.receive(bytes, security: aSecurity, servers: { servers[$0] }) : a.receive(bytes, security: aSecurity)
                queue += out.map { (!isA, $0) }
            case let .channel(e):
                if isA { aEvents.append(e) } else { bEvents.append(e) }
            default: break
            }
        }
    }

    /// Moves every K-frame the side can send to the other side's machine.
    mutating func flush(fromA: Bool) {
        let src = fromA ? a : b
        for cid in src.credit.channels.keys.sorted() {
            while true {
                guard let (remote, frame) = fromA ? a.credit.nextFrame(on: cid) : b.credit.nextFrame(on: cid) else { break }
                let out = fromA ? b.channelFrame(frame, on: remote) : a.channelFrame(frame, on: remote)
                run(out, fromA: !fromA)
            }
        }
    }
}

@Suite struct L2CAPCreditChannelsTests {
    @Test func openSendAndCloseBothWays() throws {
        var p = SignalPair()
        p.run(p.a.openChannel(psm: 0x80, parameters: .init(mtu: 300, mps: 40, window: 400), token: 7), fromA: true)
        guard case let .opened(aCID, token)? = p.aEvents.last, token == 7,
            case let .opened(bCID, nil)? = p.bEvents.last
        else { Issue.record("not opened: \(p.aEvents) \(p.bEvents)"); return }
        let ach = try #require(p.a.credit.channels[aCID]), bch = try #require(p.b.credit.channels[bCID])
        #expect(ach.remoteCID == bCID && bch.remoteCID == aCID)
        #expect(ach.remoteMTU == 200 && ach.remoteMPS == 50 && ach.sendCredits == 10)   // b's window 500 / 50
        #expect(bch.remoteMTU == 300 && bch.remoteMPS == 40 && bch.sendCredits == 10)   // a's window 400 / 40
        // 1000 octets from a in SDUs of 200: b receives them in order; b's credits run out, then come back
        // as b consumes.
        let data = (0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        for i in stride(from: 0, to: 1000, by: 200) { p.a.credit.enqueue(Array(data[i..<i + 200]), on: aCID) }
        var received: [UInt8] = []
        for _ in 0..<40 {
            p.flush(fromA: true)
            let got = p.bEvents.compactMap { if case let .received(_, d) = $0 { return d } else { return nil } }
            p.bEvents.removeAll()
            received += got.flatMap { $0 }
            if got.isEmpty && received.count == 1000 { break }
            for d in got { p.run(p.b.channelConsumed(d.count, on: bCID), fromA: false) }
        }
        #expect(received == data)
        #expect(p.aEvents.contains(.canSend(localCID: aCID)))
        // b closes; both sides report it once.
        p.aEvents.removeAll(); p.bEvents.removeAll()
        p.run(p.b.disconnectChannel(bCID), fromA: false)
        #expect(p.aEvents.filter { if case .closed = $0 { return true } else { return false } } == [.closed(localCID: aCID, .peerDisconnected)])
        #expect(p.bEvents.contains(.closed(localCID: bCID, .localDisconnect)))
        #expect(p.a.credit.isEmpty && p.b.credit.isEmpty)
    }

    @Test func refusals() {
        // Unknown SPSM, missing security, bad parameters, bad or duplicate source CIDs.
        var p = SignalPair()
        p.run(p.a.openChannel(psm: 0x99, parameters: .init(), token: 1), fromA: true)
        #expect(p.aEvents.last == .openFailed(token: 1, .refused(.spsmNotSupported)))
        p.bServers[0x80]!.security = .encryption()
        p.run(p.a.openChannel(psm: 0x80, parameters: .init(), token: 2), fromA: true)
        #expect(p.aEvents.last == .openFailed(token: 2, .refused(.insufficientAuthentication)))
        p.aSecurity = L2CAPLinkSecurity(encrypted: true, authenticated: false, keySize: 7)
        p.run(p.a.openChannel(psm: 0x80, parameters: .init(), token: 3), fromA: true)
        #expect(p.aEvents.last == .openFailed(token: 3, .refused(.encryptionKeySizeTooShort)))
        p.bServers[0x80]!.security = .authentication()
        p.aSecurity.keySize = 16
        p.run(p.a.openChannel(psm: 0x80, parameters: .init(), token: 4), fromA: true)
        #expect(p.aEvents.last == .openFailed(token: 4, .refused(.insufficientAuthentication)))
        p.aSecurity.authenticated = true
        p.run(p.a.openChannel(psm: 0x80, parameters: .init(), token: 5), fromA: true)
        #expect(p.aEvents.last.map { if case .opened = $0 { return true } else { return false } } == true)

        var b = L2CAPSignalingState(role: .peripheral)
        let servers: (UInt16) -> L2CAPServerPolicy? = { $0 == 0x80 ? L2CAPServerPolicy() : nil }
        func result(_ s: L2CAPSignal) -> UInt16? {
            guard case let .send(bytes)? = b.receive(s.encode(), servers: servers).first,
                let rsp = try? L2CAPSignal.decodeAll(bytes).first
            else { return nil }
            if case let .leCreditBasedConnectionResponse(_, _, _, _, _, r) = rsp { return r }
            if case let .creditBasedConnectionResponse(_, _, _, _, r, _) = rsp { return r }
            return nil
        }
        #expect(result(.leCreditBasedConnectionRequest(identifier: 1, spsm: 0x80, sourceCID: 0x0004, mtu: 100, mps: 100, initialCredits: 1)) == 0x0009)
        #expect(result(.leCreditBasedConnectionRequest(identifier: 2, spsm: 0x80, sourceCID: 0x40, mtu: 22, mps: 100, initialCredits: 1)) == 0x000B)
        #expect(result(.leCreditBasedConnectionRequest(identifier: 3, spsm: 0x80, sourceCID: 0x40, mtu: 100, mps: 65_534, initialCredits: 1)) == 0x000B)
        #expect(result(.leCreditBasedConnectionRequest(identifier: 4, spsm: 0x80, sourceCID: 0x40, mtu: 100, mps: 100, initialCredits: 1)) == 0)
        #expect(result(.leCreditBasedConnectionRequest(identifier: 5, spsm: 0x80, sourceCID: 0x40, mtu: 100, mps: 100, initialCredits: 1)) == 0x000A)
        #expect(result(.creditBasedConnectionRequest(identifier: 6, spsm: 0x80, mtu: 63, mps: 64, initialCredits: 1, sourceCIDs: [0x41])) == 0x000C)
        // Enhanced: one bad CID refuses that one only.
        #expect(result(.creditBasedConnectionRequest(identifier: 7, spsm: 0x80, mtu: 64, mps: 64, initialCredits: 1, sourceCIDs: [0x41, 0x40, 0x42])) == 0x000A)
        #expect(b.credit.channels.count == 3)
    }

    @Test func enhancedOpensSeveralAndReconfigures() {
        var p = SignalPair()
        p.run(p.a.openChannel(psm: 0x80, parameters: .init(mtu: 100, mps: 64, window: 640), count: 5, enhanced: true, token: 9), fromA: true)
        let opened = p.aEvents.compactMap { if case let .opened(cid, 9) = $0 { return cid } else { return nil } }
        #expect(opened.count == 5 && p.b.credit.channels.count == 5)
        // a raises its MTU on two channels; b may now send larger SDUs on them. A lower MTU is refused.
        p.aEvents.removeAll()
        p.run(p.a.reconfigureChannels(Array(opened[0..<2]), mtu: 500, mps: 64), fromA: true)
        #expect(p.aEvents.last == .reconfigured(localCIDs: Array(opened[0..<2]), result: 0))
        #expect(p.b.credit.channels.values.filter { $0.remoteMTU == 500 }.count == 2)
        #expect(p.a.credit.channels[opened[0]]?.localMTU == 500)
        p.run(p.a.reconfigureChannels([opened[0]], mtu: 200, mps: 64), fromA: true)
        #expect(p.aEvents.last == .reconfigured(localCIDs: [opened[0]], result: 1))
    }

    @Test func timeoutsViolationsAndTheLinkGoingDown() throws {
        var a = L2CAPSignalingState(role: .central)
        let out = a.openChannel(psm: 0x80, parameters: .init(), token: 3)
        guard case let .channel(.startTimer(id))? = out.last else { Issue.record("no timer"); return }
        #expect(a.channelTimeout(identifier: id) == [.channel(.openFailed(token: 3, .timeout))])
        // A late response to the abandoned request is ignored.
        #expect(a.receive(L2CAPSignal.leCreditBasedConnectionResponse(identifier: id, destinationCID: 0x40, mtu: 100, mps: 100, initialCredits: 1, result: 0).encode()).isEmpty)

        // A credit overflow disconnects the channel: a Disconnection Request and one close.
        var p = SignalPair()
        p.run(p.a.openChannel(psm: 0x80, parameters: .init(), token: 1), fromA: true)
        let cid = try #require(p.a.credit.channels.keys.first)
        let remote = p.a.credit.channels[cid]!.remoteCID
        let overflow = p.a.receive(L2CAPSignal.flowControlCreditIndication(identifier: 9, cid: remote, credits: 65_535).encode())
        #expect(
            overflow.contains {
                if case let .send(b) = $0, b.first == L2CAPSignalCode.disconnectionRequest { return true }; return false
            })
        #expect(
            overflow.filter {
                if case .channel(.closed) = $0 { return true }; return false
            }.count == 1)
        #expect(p.a.credit.channels.isEmpty)
        // Frames for a CID nobody owns are ignored.
        #expect(p.b.channelFrame([1, 0, 1], on: 0x7F).isEmpty)
        // The link goes down: open channels close, requests in flight fail.
        var c = SignalPair()
        c.run(c.a.openChannel(psm: 0x80, parameters: .init(), token: 1), fromA: true)
        _ = c.a.openChannel(psm: 0x80, parameters: .init(), token: 2)
        let down = c.a.linkClosed()
        #expect(down.contains(.channel(.openFailed(token: 2, .linkClosed))))
        #expect(
            down.filter {
                if case .channel(.closed(_, .linkClosed)) = $0 { return true }; return false
            }.count == 1)
        #expect(c.a.credit.isEmpty)
    }

    @Test func disconnectionOfAnUnknownCIDIsRejected() {
        var b = L2CAPSignalingState(role: .peripheral)
        let out = b.receive(L2CAPSignal.disconnectionRequest(identifier: 4, destinationCID: 0x40, sourceCID: 0x41).encode())
        #expect(out == [.send(L2CAPSignal.commandReject(identifier: 4, reason: 2, data: [0x40, 0, 0x41, 0]).encode())])
    }
}
