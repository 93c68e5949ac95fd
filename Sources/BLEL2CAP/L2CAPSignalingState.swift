// The LE signalling channel of one link (Vol 3 Part A §4), as a pure state machine: it answers what it
// can by itself (Command Reject, credit-based connection refusals) and hands the host the decisions it
// must take (connection parameter updates). Identifiers of our own requests cycle 1…255 (0 is invalid).
import BLEWire

public struct L2CAPSignalingState: Sendable {
    public enum Role: Sendable { case central, peripheral }

    public enum Action: Sendable, Equatable {
        /// A C-frame payload to send on CID 0x0005.
        case send([UInt8])
        /// The peer (a peripheral) asks the central for new parameters; answer with
        /// `connectionParameterUpdateResponse(identifier:accepted:)`.
        case connectionParameterUpdateRequested(identifier: UInt8, minInterval: UInt16, maxInterval: UInt16, latency: UInt16, timeout: UInt16)
        /// The central answered our request.
        case connectionParameterUpdateResponse(identifier: UInt8, accepted: Bool)
        /// The peer rejected one of our commands.
        case commandRejected(identifier: UInt8, reason: UInt16)
        /// Something happened to a credit-based channel (`credit`).
        case channel(L2CAPCreditChannels.Action)
    }

    public let role: Role
    private var ids = IdentifierCounter()
    private var outstanding: Set<UInt8> = []
    /// The link's credit-based channels; their requests share this state's identifiers.
    public var credit = L2CAPCreditChannels()

    public init(role: Role) { self.role = role }

    /// Command Reject reasons (§4.1).
    public static let notUnderstood: UInt16 = 0x0000

    /// Handles one C-frame. `security` and `servers` decide the peer's credit-based connection requests.
    public mutating func receive(
        _ payload: [UInt8], security: L2CAPLinkSecurity = .init(),
        servers: (UInt16) -> L2CAPServerPolicy? = { _ in nil }
    ) -> [Action] {
        let commands: [L2CAPSignal]
        do {
            commands = try L2CAPSignal.decodeAll(payload)
        } catch {
            // Malformed: reject with the identifier if we can read it (§4.1; identifier 0 is never used).
            let id = payload.count >= 2 ? payload[1] : 0
            return id == 0 ? [] : [.send(L2CAPSignal.commandReject(identifier: id, reason: Self.notUnderstood, data: []).encode())]
        }
        var actions: [Action] = []
        for c in commands {
            switch c {
            case let .connectionParameterUpdateRequest(id, mn, mx, lat, to):
                if role == .central {
                    actions.append(.connectionParameterUpdateRequested(identifier: id, minInterval: mn, maxInterval: mx, latency: lat, timeout: to))
                } else {
                    // Only the central may receive this request (§4.20).
                    actions.append(.send(L2CAPSignal.commandReject(identifier: id, reason: Self.notUnderstood, data: []).encode()))
                }
            case let .connectionParameterUpdateResponse(id, result):
                if outstanding.remove(id) != nil { actions.append(.connectionParameterUpdateResponse(identifier: id, accepted: result == 0)) }
            case let .commandReject(id, reason, _):
                if outstanding.remove(id) != nil {
                    actions.append(.commandRejected(identifier: id, reason: reason))
                } else {
                    actions += creditReceive(c, security: security, servers: servers)
                }
            case .leCreditBasedConnectionRequest, .leCreditBasedConnectionResponse, .flowControlCreditIndication,
                .disconnectionRequest, .disconnectionResponse, .creditBasedConnectionRequest, .creditBasedConnectionResponse,
                .creditBasedReconfigureRequest, .creditBasedReconfigureResponse:
                actions += creditReceive(c, security: security, servers: servers)
            case let .unknown(_, id, _):
                guard id != 0 else { continue }
                actions.append(.send(L2CAPSignal.commandReject(identifier: id, reason: Self.notUnderstood, data: []).encode()))
            }
        }
        return actions
    }

    /// C-frames to send stay `.send`; the rest become `.channel`.
    /// Static: called as `channelActions(credit.someMutation(…))` on an instance method, a call on `self`
    /// copied the whole state (every table of `credit`) before the argument mutated it, so the mutation found
    /// its channel table shared and copied it, for every K-frame received.
    static func channelActions(_ actions: [L2CAPCreditChannels.Action]) -> [Action] {
        actions.map { if case let .sendSignal(b) = $0 { return .send(b) } else { return .channel($0) } }
    }

    /// Opens credit-based channels (see `L2CAPCreditChannels.open`).
    public mutating func openChannel(
        psm: UInt16, parameters: L2CAPChannelParameters, count: Int = 1, enhanced: Bool = false,
        token: UInt64
    ) -> [Action] {
        let id = nextIdentifier()
        return Self.channelActions(credit.open(psm: psm, parameters: parameters, count: count, enhanced: enhanced, token: token, identifier: id))
    }

    public mutating func disconnectChannel(_ localCID: UInt16) -> [Action] {
        let id = nextIdentifier()
        return Self.channelActions(credit.disconnect(localCID: localCID, identifier: id))
    }

    public mutating func reconfigureChannels(_ localCIDs: [UInt16], mtu: UInt16, mps: UInt16) -> [Action] {
        let id = nextIdentifier()
        return Self.channelActions(credit.reconfigure(localCIDs: localCIDs, mtu: mtu, mps: mps, identifier: id))
    }

    mutating func creditReceive(_ c: L2CAPSignal, security: L2CAPLinkSecurity, servers: (UInt16) -> L2CAPServerPolicy?) -> [Action] {
        var counter = ids
        defer { ids = counter }
        return Self.channelActions(credit.receive(c, security: security, servers: servers, identifier: { counter.next() }))
    }

    /// A K-frame for one of our CIDs (the hot path: no actions unless an SDU completes).
    public mutating func channelFrame(_ payload: [UInt8], on localCID: UInt16) -> [Action] {
        var counter = ids
        defer { ids = counter }
        return Self.channelActions(credit.receiveFrame(payload, on: localCID, identifier: { counter.next() }))
    }

    public mutating func channelConsumed(_ octets: Int, on localCID: UInt16) -> [Action] {
        var counter = ids
        defer { ids = counter }
        return Self.channelActions(credit.consumed(octets, on: localCID, identifier: { counter.next() }))
    }

    public mutating func channelTimeout(identifier: UInt8) -> [Action] { Self.channelActions(credit.timeout(identifier: identifier)) }

    public mutating func linkClosed() -> [Action] { Self.channelActions(credit.linkClosed()) }

    /// The answer to a Connection Parameter Update Request.
    public func connectionParameterUpdateResponse(identifier: UInt8, accepted: Bool) -> [UInt8] {
        L2CAPSignal.connectionParameterUpdateResponse(identifier: identifier, result: accepted ? 0 : 1).encode()
    }

    /// A peripheral's request for new connection parameters.
    public mutating func connectionParameterUpdateRequest(minInterval: UInt16, maxInterval: UInt16, latency: UInt16, timeout: UInt16) -> [UInt8] {
        let id = nextIdentifier()
        outstanding.insert(id)
        return L2CAPSignal.connectionParameterUpdateRequest(
            identifier: id, intervalMin: minInterval, intervalMax: maxInterval,
            latency: latency, timeout: timeout
        ).encode()
    }

    mutating func nextIdentifier() -> UInt8 { ids.next() }
}

/// Identifiers of our requests on one link cycle 129…199 (any non-zero value is valid, §4): never one the Linux
/// kernel uses for its own requests. Linux (l2cap_get_ident) takes 1…128, and keeps the identifier of a peer's
/// LE credit-based connection request on the channel it accepted (chan->ident); when its own next request carries
/// the same identifier, the answer to it is matched to that older channel (__l2cap_get_chan_by_ident in
/// l2cap_le_connect_rsp, Linux 6.1), which then takes the new channel's CIDs. Our identifiers cannot meet its own.
struct IdentifierCounter: Sendable {
    static let range: ClosedRange<UInt8> = 129...199
    private var last: UInt8 = range.upperBound
    mutating func next() -> UInt8 {
        last = last >= Self.range.upperBound ? Self.range.lowerBound : last + 1
        return last
    }
}
