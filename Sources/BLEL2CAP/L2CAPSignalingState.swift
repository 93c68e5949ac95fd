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
    }

    public let role: Role
    private var lastIdentifier: UInt8 = 0
    private var outstanding: Set<UInt8> = []

    public init(role: Role) { self.role = role }

    /// Command Reject reasons (§4.1).
    public static let notUnderstood: UInt16 = 0x0000

    public mutating func receive(_ payload: [UInt8]) -> [Action] {
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
                if outstanding.remove(id) != nil { actions.append(.commandRejected(identifier: id, reason: reason)) }
            case let .leCreditBasedConnectionRequest(id, _, _, _, _, _):
                // No credit-based channel servers yet: "SPSM not supported" (§4.23, result 0x0002).
                actions.append(.send(L2CAPSignal.leCreditBasedConnectionResponse(identifier: id, destinationCID: 0, mtu: 0, mps: 0,
                                                                                 initialCredits: 0, result: 0x0002).encode()))
            case let .disconnectionRequest(id, dcid, scid):
                // No dynamic channels: the CID is invalid (§4.1, reason 0x0002 with local and remote CIDs).
                var w = ByteWriter()
                w.write(dcid); w.write(scid)
                actions.append(.send(L2CAPSignal.commandReject(identifier: id, reason: 0x0002, data: w.bytes).encode()))
            case .leCreditBasedConnectionResponse, .flowControlCreditIndication, .disconnectionResponse:
                break
            case let .unknown(_, id, _):
                guard id != 0 else { continue }
                actions.append(.send(L2CAPSignal.commandReject(identifier: id, reason: Self.notUnderstood, data: []).encode()))
            }
        }
        return actions
    }

    /// The answer to a Connection Parameter Update Request.
    public func connectionParameterUpdateResponse(identifier: UInt8, accepted: Bool) -> [UInt8] {
        L2CAPSignal.connectionParameterUpdateResponse(identifier: identifier, result: accepted ? 0 : 1).encode()
    }

    /// A peripheral's request for new connection parameters.
    public mutating func connectionParameterUpdateRequest(minInterval: UInt16, maxInterval: UInt16, latency: UInt16, timeout: UInt16) -> [UInt8] {
        let id = nextIdentifier()
        outstanding.insert(id)
        return L2CAPSignal.connectionParameterUpdateRequest(identifier: id, intervalMin: minInterval, intervalMax: maxInterval,
                                                            latency: latency, timeout: timeout).encode()
    }

    mutating func nextIdentifier() -> UInt8 {
        lastIdentifier = lastIdentifier == 255 ? 1 : lastIdentifier + 1
        return lastIdentifier
    }
}
