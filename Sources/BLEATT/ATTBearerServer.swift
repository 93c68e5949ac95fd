// The server role of one ATT bearer (Vol 3 Part F §3.3, §3.4.2, §3.4.7).
//
// Pure state, no I/O and no clock. It owns the parts of ATT that are not about the attribute
// database: the ATT_MTU (Exchange MTU is answered once; a repeated request is answered again with
// the same value and leaves ATT_MTU unchanged), and the indication flow: at most one indication
// awaits its confirmation, later ones wait in FIFO order (§3.4.7.2). The host runs a 30-second timer
// between `.startConfirmationTimer` and `.stopConfirmationTimer` and calls `timeout()` if it fires;
// after that nothing more is sent on the bearer (§3.3.3).

/// What an `ATTBearerServer` asks the host to do.
public enum ATTBearerServerAction: Sendable, Equatable {
    case send(ATTPDU)
    case startConfirmationTimer
    case stopConfirmationTimer
    case indicationConfirmed(handle: UInt16)
    /// Queued or outstanding indications dropped because the bearer timed out or closed.
    case indicationAbandoned(handle: UInt16)
    case protocolError(ATTProtocolError)
}

public struct ATTBearerServer: Sendable {
    public enum IndicationState: Sendable, Equatable {
        case idle
        case awaitingConfirmation(handle: UInt16)
        case timedOut
        case closed
    }

    public private(set) var indicationState: IndicationState = .idle
    public private(set) var mtu: UInt16 = ATTMTU.default
    /// The Server Rx MTU answered to Exchange MTU.
    public let preferredMTU: UInt16
    public private(set) var mtuExchanged = false
    private var pending: [ATTHandleValueIndication] = []

    public init(preferredMTU: UInt16 = ATTMTU.maximum) {
        self.preferredMTU = min(max(ATTMTU.default, preferredMTU), ATTMTU.maximum)
    }

    /// Indications waiting behind the outstanding one.
    public var queuedIndications: Int { pending.count }

    /// Answers ATT_EXCHANGE_MTU_REQ (§3.4.2). Returns the response and the new ATT_MTU if it changed.
    public mutating func exchangeMTU(_ request: ATTExchangeMTURequest) -> (response: ATTPDU, newMTU: UInt16?) {
        let response = ATTPDU.exchangeMTUResponse(ATTExchangeMTUResponse(serverRxMTU: preferredMTU))
        guard !mtuExchanged else { return (response, nil) }
        mtuExchanged = true
        let new = ATTMTU.negotiated(client: request.clientRxMTU, server: preferredMTU)
        guard new != mtu else { return (response, nil) }
        mtu = new
        return (response, new)
    }

    /// Sets the ATT_MTU after the client role of this bearer completed an exchange.
    public mutating func updateMTU(_ newMTU: UInt16) {
        mtu = min(max(newMTU, ATTMTU.default), ATTMTU.maximum)
        mtuExchanged = true
    }

    /// The largest attribute value a notification or indication carries: ATT_MTU − 3.
    public var maximumValueLength: Int { Int(mtu) - 3 }

    /// A notification of `value`, truncated to ATT_MTU − 3 (§3.4.7.1).
    public func notification(handle: UInt16, value: [UInt8]) -> ATTPDU {
        // A value that fits (the usual case) is carried as it is, without a copy.
        .handleValueNotification(
            ATTHandleValueNotification(handle: handle, value: value.count <= maximumValueLength ? value : Array(value.prefix(maximumValueLength))))
    }

    /// Sends an indication now, or queues it behind the one awaiting confirmation.
    public mutating func indicate(handle: UInt16, value: [UInt8]) throws(ATTBearerError) -> [ATTBearerServerAction] {
        switch indicationState {
        case .timedOut: throw .bearerTimedOut
        case .closed: throw .bearerClosed
        case .awaitingConfirmation:
            pending.append(ATTHandleValueIndication(handle: handle, value: value))
            return []
        case .idle:
            return start(ATTHandleValueIndication(handle: handle, value: value))
        }
    }

    /// Handles ATT_HANDLE_VALUE_CFM.
    public mutating func receiveConfirmation() -> [ATTBearerServerAction] {
        switch indicationState {
        case .timedOut, .closed: return []
        case .idle: return [.protocolError(.unexpectedConfirmation)]
        case let .awaitingConfirmation(handle):
            indicationState = .idle
            var actions: [ATTBearerServerAction] = [.stopConfirmationTimer, .indicationConfirmed(handle: handle)]
            if !pending.isEmpty { actions += start(pending.removeFirst()) }
            return actions
        }
    }

    /// The confirmation timer fired (§3.3.3): the bearer is dead.
    public mutating func timeout() -> [ATTBearerServerAction] {
        guard case let .awaitingConfirmation(handle) = indicationState else { return [] }
        indicationState = .timedOut
        let actions: [ATTBearerServerAction] =
            [.indicationAbandoned(handle: handle)]
            + pending.map { .indicationAbandoned(handle: $0.handle) }
        pending.removeAll()
        return actions
    }

    /// The link went down.
    public mutating func close() -> [ATTBearerServerAction] {
        var actions: [ATTBearerServerAction] = []
        if case let .awaitingConfirmation(handle) = indicationState {
            actions = [.stopConfirmationTimer, .indicationAbandoned(handle: handle)]
        }
        actions += pending.map { .indicationAbandoned(handle: $0.handle) }
        pending.removeAll()
        indicationState = .closed
        return actions
    }

    private mutating func start(_ indication: ATTHandleValueIndication) -> [ATTBearerServerAction] {
        indicationState = .awaitingConfirmation(handle: indication.handle)
        let value = Array(indication.value.prefix(maximumValueLength))
        return [
            .send(.handleValueIndication(ATTHandleValueIndication(handle: indication.handle, value: value))),
            .startConfirmationTimer,
        ]
    }
}
