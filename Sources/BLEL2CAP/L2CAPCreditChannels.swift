// The credit-based channels of one LE link (Vol 3 Part A §4.22–4.28, §10.1) as a pure state machine: it
// allocates dynamic CIDs, answers the peer's connection, disconnection, credit and reconfigure commands,
// runs our own requests with their identifiers and RTX timers, and owns each channel's data path
// (`L2CAPCreditChannel`). The host feeds it commands, K-frames and API calls and carries out the actions.
//
// Identifiers of our requests come from the caller (the link's signalling state, which numbers every
// request of the link). Channels are named by our CID.
public struct L2CAPCreditChannels: Sendable {
    /// The dynamic CID range on LE-U (§2.1, Table 2.3).
    public static let dynamicCIDs: ClosedRange<UInt16> = 0x0040...0x007F

    /// Why a channel ended.
    public enum CloseReason: Sendable, Equatable, CustomStringConvertible {
        /// The peer sent a Disconnection Request.
        case peerDisconnected
        /// We asked (the response came, or the RTX timer ran out).
        case localDisconnect
        /// The peer broke the credit-based rules; we disconnected the channel.
        case violation(String)
        /// The ACL link went down.
        case linkClosed

        public var description: String {
            switch self {
            case .peerDisconnected: return "the peer closed the channel"
            case .localDisconnect: return "closed"
            case let .violation(why): return "protocol violation: \(why)"
            case .linkClosed: return "the link was disconnected"
            }
        }
    }

    /// Why one of our connection requests failed.
    public enum OpenFailure: Error, Sendable, Equatable, CustomStringConvertible {
        case refused(L2CAPConnectionResult)
        /// The peer answered with Command Reject (it does not know the command).
        case rejected
        /// No response within the RTX time.
        case timeout
        case linkClosed
        /// The response did not make sense (bad CID, bad parameters).
        case invalidResponse(String)

        public var description: String {
            switch self {
            case let .refused(r): return "refused: \(r)"
            case .rejected: return "the peer rejected the request"
            case .timeout: return "no response from the peer"
            case .linkClosed: return "the link was disconnected"
            case let .invalidResponse(why): return "invalid response: \(why)"
            }
        }
    }

    public enum Action: Sendable, Equatable {
        /// A C-frame payload for CID 0x0005.
        case sendSignal([UInt8])
        /// Start (or stop) the RTX timer of our request `identifier`; when it fires call `timeout(identifier:)`.
        case startTimer(identifier: UInt8)
        case stopTimer(identifier: UInt8)
        /// A channel opened: ours (`token` from `open`) or the peer's to a published SPSM (`token` nil).
        case opened(localCID: UInt16, token: UInt64?)
        case openFailed(token: UInt64, OpenFailure)
        /// A complete SDU for the application.
        case received(localCID: UInt16, [UInt8])
        /// The peer granted credits: queued K-frames may go now.
        case canSend(localCID: UInt16)
        case closed(localCID: UInt16, CloseReason)
        /// Our Reconfigure Request was answered.
        case reconfigured(localCIDs: [UInt16], result: UInt16)
    }

    enum PendingRequest: Sendable {
        case open(token: UInt64, psm: UInt16, localCIDs: [UInt16], parameters: L2CAPChannelParameters, enhanced: Bool)
        case disconnect(localCID: UInt16, reportsClose: Bool)
        case reconfigure(localCIDs: [UInt16], mtu: UInt16, mps: UInt16)
    }

    public private(set) var channels: [UInt16: L2CAPCreditChannel] = [:]
    /// CIDs held by requests in flight or channels being disconnected (frames to them are dropped).
    private var reserved: Set<UInt16> = []
    private var pending: [UInt8: PendingRequest] = [:]

    public init() {}

    public var isEmpty: Bool { channels.isEmpty && pending.isEmpty }

    func isFree(_ cid: UInt16) -> Bool { channels[cid] == nil && !reserved.contains(cid) }

    mutating func allocate(_ n: Int) -> [UInt16]? {
        var out: [UInt16] = []
        for cid in Self.dynamicCIDs where isFree(cid) {
            out.append(cid)
            if out.count == n { break }
        }
        guard out.count == n else { return nil }
        reserved.formUnion(out)
        return out
    }

    // MARK: Our requests

    /// Opens `count` channels to `psm`: the LE Credit Based Connection Request for one channel unless
    /// `enhanced`, else the Enhanced Credit Based Connection Request (1 to 5 channels, MTU and MPS ≥ 64).
    public mutating func open(
        psm: UInt16, parameters p: L2CAPChannelParameters, count: Int = 1, enhanced: Bool = false,
        token: UInt64, identifier: UInt8
    ) -> [Action] {
        precondition((1...5).contains(count) && (count == 1 || enhanced), "one LE channel, or 1 to 5 enhanced ones")
        guard let cids = allocate(count) else { return [.openFailed(token: token, .refused(.noResources))] }
        let credits = L2CAPCreditChannel.initialCredits(window: p.window, mps: p.mps)
        pending[identifier] = .open(token: token, psm: psm, localCIDs: cids, parameters: p, enhanced: enhanced)
        let signal: L2CAPSignal =
            enhanced
            ? .creditBasedConnectionRequest(identifier: identifier, spsm: psm, mtu: p.mtu, mps: p.mps, initialCredits: credits, sourceCIDs: cids)
            : .leCreditBasedConnectionRequest(identifier: identifier, spsm: psm, sourceCID: cids[0], mtu: p.mtu, mps: p.mps, initialCredits: credits)
        return [.sendSignal(signal.encode()), .startTimer(identifier: identifier)]
    }

    /// Asks the peer to close a channel; frames to it are dropped from now on.
    public mutating func disconnect(localCID: UInt16, identifier: UInt8) -> [Action] {
        disconnect(localCID: localCID, identifier: identifier, reportsClose: true)
    }

    mutating func disconnect(localCID: UInt16, identifier: UInt8, reportsClose: Bool) -> [Action] {
        guard let ch = channels.removeValue(forKey: localCID) else { return [] }
        reserved.insert(localCID)
        pending[identifier] = .disconnect(localCID: localCID, reportsClose: reportsClose)
        return [
            .sendSignal(L2CAPSignal.disconnectionRequest(identifier: identifier, destinationCID: ch.remoteCID, sourceCID: localCID).encode()),
            .startTimer(identifier: identifier),
        ]
    }

    /// Raises our MTU and MPS on enhanced channels (§4.27).
    public mutating func reconfigure(localCIDs: [UInt16], mtu: UInt16, mps: UInt16, identifier: UInt8) -> [Action] {
        guard !localCIDs.isEmpty, localCIDs.count <= 5, localCIDs.allSatisfy({ channels[$0] != nil }) else {
            return [.reconfigured(localCIDs: localCIDs, result: L2CAPReconfigureResult.invalidDestinationCID.rawValue)]
        }
        pending[identifier] = .reconfigure(localCIDs: localCIDs, mtu: mtu, mps: mps)
        return [
            .sendSignal(L2CAPSignal.creditBasedReconfigureRequest(identifier: identifier, mtu: mtu, mps: mps, destinationCIDs: localCIDs).encode()),
            .startTimer(identifier: identifier),
        ]
    }

    /// The RTX timer of our request ran out (§6.2.1): the request is abandoned.
    public mutating func timeout(identifier: UInt8) -> [Action] {
        guard let p = pending.removeValue(forKey: identifier) else { return [] }
        switch p {
        case let .open(token, _, cids, _, _):
            reserved.subtract(cids)
            return [.openFailed(token: token, .timeout)]
        case let .disconnect(cid, reports):
            reserved.remove(cid)
            return reports ? [.closed(localCID: cid, .localDisconnect)] : []
        case let .reconfigure(cids, _, _):
            return [.reconfigured(localCIDs: cids, result: L2CAPReconfigureResult.unacceptableParameters.rawValue)]
        }
    }

    /// The link went down: every channel closes and every request fails.
    public mutating func linkClosed() -> [Action] {
        var out: [Action] = []
        for id in pending.keys.sorted() {
            switch pending[id]! {
            case let .open(token, _, _, _, _): out.append(.openFailed(token: token, .linkClosed))
            case let .disconnect(cid, reports): if reports { out.append(.closed(localCID: cid, .localDisconnect)) }
            case .reconfigure: break
            }
            out.append(.stopTimer(identifier: id))
        }
        for cid in channels.keys.sorted() { out.append(.closed(localCID: cid, .linkClosed)) }
        pending.removeAll()
        channels.removeAll()
        reserved.removeAll()
        return out
    }

    // MARK: Data path

    /// A channel's counters, read in place. Mutating although it changes nothing: a getter (`channels[cid]`, or
    /// `channels.values[i]`) copies the channel, retaining and releasing its queues and its reassembly buffer (the
    /// empty one too, whose shared storage takes the runtime's slow path), on every K-frame sent.
    public mutating func counters(of localCID: UInt16) -> L2CAPCreditChannel.Counters? {
        guard let i = channels.index(forKey: localCID) else { return nil }
        return Self.counters(of: &channels.values[i])
    }

    private static func counters(of channel: inout L2CAPCreditChannel) -> L2CAPCreditChannel.Counters { channel.counters }

    /// Queues an SDU (at most the peer's MTU) on a channel. False when the channel is unknown.
    @discardableResult
    public mutating func enqueue(_ sdu: [UInt8], on localCID: UInt16) -> Bool {
        guard channels[localCID] != nil else { return false }
        channels[localCID]!.enqueue(sdu)
        return true
    }

    /// The next K-frame a credit lets go, with the peer's CID to send it to.
    public mutating func nextFrame(on localCID: UInt16) -> (remoteCID: UInt16, payload: [UInt8])? {
        // One lookup, and the channel taken from in place (`channels[cid]?.remoteCID` copied it, queues and all).
        guard let i = channels.index(forKey: localCID) else { return nil }
        return Self.nextFrame(of: &channels.values[i])
    }

    private static func nextFrame(of channel: inout L2CAPCreditChannel) -> (remoteCID: UInt16, payload: [UInt8])? {
        guard let f = channel.nextFrame() else { return nil }
        return (channel.remoteCID, f)
    }

    /// A K-frame arrived for one of our CIDs. Frames for unknown CIDs are ignored (§10.1: the CID is not
    /// ours). A violation disconnects the channel.
    public mutating func receiveFrame(_ payload: [UInt8], on localCID: UInt16, identifier: () -> UInt8) -> [Action] {
        // The channel is changed in place, found once (`channels[cid] != nil` copied it, with the SDU being built).
        guard let i = channels.index(forKey: localCID) else { return [] }
        do {
            guard let sdu = try channels.values[i].receive(payload) else { return [] }
            return [.received(localCID: localCID, sdu)]
        } catch {
            return violation(error, on: localCID, identifier: identifier())
        }
    }

    /// The application consumed `octets` of a channel's data: credits go back when a batch is due.
    public mutating func consumed(_ octets: Int, on localCID: UInt16, identifier: () -> UInt8) -> [Action] {
        guard let i = channels.index(forKey: localCID) else { return [] }
        let grant = channels.values[i].consumed(octets)
        guard grant > 0 else { return [] }
        return [.sendSignal(L2CAPSignal.flowControlCreditIndication(identifier: identifier(), cid: localCID, credits: grant).encode())]
    }

    mutating func violation(_ v: L2CAPCreditChannel.Violation, on localCID: UInt16, identifier: UInt8) -> [Action] {
        var out = disconnect(localCID: localCID, identifier: identifier, reportsClose: false)
        out.append(.closed(localCID: localCID, .violation(v.description)))
        return out
    }

    // MARK: The peer's commands

    /// Handles one credit-based or disconnection command. `servers` names the published SPSMs.
    public mutating func receive(
        _ signal: L2CAPSignal, security: L2CAPLinkSecurity,
        servers: (UInt16) -> L2CAPServerPolicy?, identifier: () -> UInt8
    ) -> [Action] {
        switch signal {
        case let .leCreditBasedConnectionRequest(id, spsm, scid, mtu, mps, credits):
            return connectionRequest(
                id: id, spsm: spsm, sourceCIDs: [scid], mtu: mtu, mps: mps, credits: credits, enhanced: false,
                security: security, servers: servers)
        case let .creditBasedConnectionRequest(id, spsm, mtu, mps, credits, scids):
            return connectionRequest(
                id: id, spsm: spsm, sourceCIDs: scids, mtu: mtu, mps: mps, credits: credits, enhanced: true,
                security: security, servers: servers)
        case let .leCreditBasedConnectionResponse(id, dcid, mtu, mps, credits, result):
            return connectionResponse(id: id, destinationCIDs: [dcid], mtu: mtu, mps: mps, credits: credits, result: result, enhanced: false)
        case let .creditBasedConnectionResponse(id, mtu, mps, credits, result, dcids):
            return connectionResponse(id: id, destinationCIDs: dcids, mtu: mtu, mps: mps, credits: credits, result: result, enhanced: true)
        case let .flowControlCreditIndication(_, cid, credits):
            // The CID is the sender's: find our channel whose remote CID it is (§4.24).
            guard let local = channels.first(where: { $0.value.remoteCID == cid })?.key else { return [] }
            do {
                try channels[local]!.addSendCredits(credits)
            } catch {
                return violation(error, on: local, identifier: identifier())
            }
            return credits > 0 ? [.canSend(localCID: local)] : []
        case let .disconnectionRequest(id, dcid, scid):
            guard let ch = channels[dcid], ch.remoteCID == scid else {
                if reserved.contains(dcid) {
                    // Both sides disconnecting at once: answer, ours completes with its own response.
                    return [.sendSignal(L2CAPSignal.disconnectionResponse(identifier: id, destinationCID: dcid, sourceCID: scid).encode())]
                }
                return [.sendSignal(Self.invalidCID(id, dcid, scid))]
            }
            channels[dcid] = nil
            return [
                .sendSignal(L2CAPSignal.disconnectionResponse(identifier: id, destinationCID: dcid, sourceCID: scid).encode()),
                .closed(localCID: dcid, .peerDisconnected),
            ]
        case let .disconnectionResponse(id, _, scid):
            guard case let .disconnect(cid, reports)? = pending[id], cid == scid else { return [] }
            pending[id] = nil
            reserved.remove(cid)
            return [.stopTimer(identifier: id)] + (reports ? [.closed(localCID: cid, .localDisconnect)] : [])
        case let .creditBasedReconfigureRequest(id, mtu, mps, cids):
            return reconfigureRequest(id: id, mtu: mtu, mps: mps, remoteCIDs: cids)
        case let .creditBasedReconfigureResponse(id, result):
            guard case let .reconfigure(cids, mtu, mps)? = pending[id] else { return [] }
            pending[id] = nil
            if result == 0 { for c in cids { channels[c]?.reconfigured(mtu: mtu, mps: mps) } }
            return [.stopTimer(identifier: id), .reconfigured(localCIDs: cids, result: result)]
        case let .commandReject(id, _, _):
            guard let p = pending.removeValue(forKey: id) else { return [] }
            switch p {
            case let .open(token, _, cids, _, _):
                reserved.subtract(cids)
                return [.stopTimer(identifier: id), .openFailed(token: token, .rejected)]
            case let .disconnect(cid, reports):
                reserved.remove(cid)
                return [.stopTimer(identifier: id)] + (reports ? [.closed(localCID: cid, .localDisconnect)] : [])
            case let .reconfigure(cids, _, _):
                return [.stopTimer(identifier: id), .reconfigured(localCIDs: cids, result: L2CAPReconfigureResult.unacceptableParameters.rawValue)]
            }
        default:
            return []
        }
    }

    static func invalidCID(_ id: UInt8, _ dcid: UInt16, _ scid: UInt16) -> [UInt8] {
        // Command Reject, reason 0x0002 invalid CID in request, with the local and remote CIDs (§4.1).
        L2CAPSignal.commandReject(
            identifier: id, reason: 0x0002,
            data: [UInt8(dcid & 0xFF), UInt8(dcid >> 8), UInt8(scid & 0xFF), UInt8(scid >> 8)]
        ).encode()
    }

    mutating func connectionRequest(
        id: UInt8, spsm: UInt16, sourceCIDs: [UInt16], mtu: UInt16, mps: UInt16, credits: UInt16,
        enhanced: Bool, security: L2CAPLinkSecurity, servers: (UInt16) -> L2CAPServerPolicy?
    ) -> [Action] {
        func refuse(_ r: L2CAPConnectionResult, _ policy: L2CAPChannelParameters? = nil) -> [Action] {
            let signal: L2CAPSignal =
                enhanced
                ? .creditBasedConnectionResponse(
                    identifier: id, mtu: policy?.mtu ?? 0, mps: policy?.mps ?? 0, initialCredits: 0, result: r.rawValue,
                    destinationCIDs: sourceCIDs.map { _ in 0 })
                : .leCreditBasedConnectionResponse(identifier: id, destinationCID: 0, mtu: 0, mps: 0, initialCredits: 0, result: r.rawValue)
            return [.sendSignal(signal.encode())]
        }
        guard let policy = servers(spsm) else { return refuse(.spsmNotSupported) }
        if let r = security.refusal(for: policy.security) { return refuse(r) }
        // MTU and MPS: at least 23 (LE) or 64 (enhanced); MPS at most 65533 (§4.22, §4.25).
        let minimum: UInt16 = enhanced ? 64 : 23
        guard mtu >= minimum, (minimum...65_533).contains(mps) else { return refuse(enhanced ? .invalidParameters : .unacceptableParameters) }
        var p = policy.parameters
        if enhanced { p.mtu = max(p.mtu, 64); p.mps = max(p.mps, 64) }
        var destinations: [UInt16] = []
        var result = L2CAPConnectionResult.success
        var opened: [UInt16] = []
        for scid in sourceCIDs {
            if !Self.dynamicCIDs.contains(scid) {
                result = .invalidSourceCID
                destinations.append(0)
            } else if channels.values.contains(where: { $0.remoteCID == scid }) || sourceCIDs.filter({ $0 == scid }).count > 1 {
                result = .sourceCIDAlreadyAllocated
                destinations.append(0)
            } else if let cid = allocate(1)?.first {
                reserved.remove(cid)
                channels[cid] = L2CAPCreditChannel(
                    psm: spsm, localCID: cid, remoteCID: scid, localMTU: p.mtu, localMPS: p.mps,
                    remoteMTU: mtu, remoteMPS: mps, sendCredits: credits,
                    receiveCredits: L2CAPCreditChannel.initialCredits(window: p.window, mps: p.mps),
                    receiveWindow: p.window)
                destinations.append(cid)
                opened.append(cid)
            } else {
                result = .noResources
                destinations.append(0)
            }
        }
        if !enhanced, result != .success { return refuse(result) }
        let initial = L2CAPCreditChannel.initialCredits(window: p.window, mps: p.mps)
        let signal: L2CAPSignal =
            enhanced
            ? .creditBasedConnectionResponse(
                identifier: id, mtu: p.mtu, mps: p.mps, initialCredits: opened.isEmpty ? 0 : initial,
                result: result.rawValue, destinationCIDs: destinations)
            : .leCreditBasedConnectionResponse(
                identifier: id, destinationCID: destinations[0], mtu: p.mtu, mps: p.mps,
                initialCredits: initial, result: 0)
        return [.sendSignal(signal.encode())] + opened.map { .opened(localCID: $0, token: nil) }
    }

    mutating func connectionResponse(
        id: UInt8, destinationCIDs: [UInt16], mtu: UInt16, mps: UInt16, credits: UInt16,
        result: UInt16, enhanced: Bool
    ) -> [Action] {
        guard case let .open(token, psm, cids, p, wasEnhanced)? = pending[id], wasEnhanced == enhanced else { return [] }
        pending[id] = nil
        reserved.subtract(cids)
        var out: [Action] = [.stopTimer(identifier: id)]
        let minimum: UInt16 = enhanced ? 64 : 23
        let accepted = destinationCIDs.enumerated().filter { $0.element != 0 }
        if accepted.isEmpty || (!enhanced && result != 0) {
            out.append(.openFailed(token: token, .refused(L2CAPConnectionResult(rawValue: result == 0 ? L2CAPConnectionResult.noResources.rawValue : result))))
            return out
        }
        guard destinationCIDs.count == cids.count, mtu >= minimum, (minimum...65_533).contains(mps),
            accepted.allSatisfy({ Self.dynamicCIDs.contains($0.element) })
        else {
            out.append(.openFailed(token: token, .invalidResponse("MTU \(mtu), MPS \(mps), CIDs \(destinationCIDs)")))
            return out
        }
        let initial = L2CAPCreditChannel.initialCredits(window: p.window, mps: p.mps)
        for (i, dcid) in accepted {
            let cid = cids[i]
            channels[cid] = L2CAPCreditChannel(
                psm: psm, localCID: cid, remoteCID: dcid, localMTU: p.mtu, localMPS: p.mps,
                remoteMTU: mtu, remoteMPS: mps, sendCredits: credits, receiveCredits: initial,
                receiveWindow: p.window)
            out.append(.opened(localCID: cid, token: token))
        }
        return out
    }

    mutating func reconfigureRequest(id: UInt8, mtu: UInt16, mps: UInt16, remoteCIDs: [UInt16]) -> [Action] {
        func answer(_ r: L2CAPReconfigureResult) -> [Action] {
            [.sendSignal(L2CAPSignal.creditBasedReconfigureResponse(identifier: id, result: r.rawValue).encode())]
        }
        let locals = remoteCIDs.map { r in channels.first(where: { $0.value.remoteCID == r })?.key }
        guard locals.allSatisfy({ $0 != nil }) else { return answer(.invalidDestinationCID) }
        guard mtu >= 64, mps >= 64 else { return answer(.unacceptableParameters) }
        let chans = locals.map { channels[$0!]! }
        if chans.contains(where: { mtu < $0.remoteMTU }) { return answer(.mtuReductionNotAllowed) }
        if chans.count > 1, chans.contains(where: { mps < $0.remoteMPS }) { return answer(.mpsReductionNotAllowed) }
        for cid in locals { channels[cid!]!.peerReconfigured(mtu: mtu, mps: mps) }
        return answer(.success)
    }
}
