// The client role of one ATT bearer (Vol 3 Part F §3.3).
//
// Pure state, no I/O and no clock. The host feeds it calls and received PDUs and carries out the
// returned actions: it sends `.send` PDUs, runs a 30-second timer between `.startTransactionTimer` and
// `.stopTransactionTimer` and calls `timeout()` if it fires, and delivers `.complete` outcomes.
//
// Rules enforced: one request outstanding at a time, further requests wait in FIFO order (§3.3.2);
// a response or Error Response must match the outstanding request, otherwise it is a protocol error;
// after a transaction timeout no PDU may be sent on the bearer (§3.3.3). Indications are confirmed
// at once (§3.4.7.3). The ATT_MTU is shared with the server role: the host copies changes across.

/// What an `ATTBearerClient` asks the host to do.
public enum ATTBearerClientAction: Sendable, Equatable {
    case send(ATTPDU)
    case startTransactionTimer
    case stopTransactionTimer
    case complete(ATTRequestID, ATTTransactionOutcome)
    case mtuChanged(UInt16)
    case notification(ATTHandleValueNotification)
    case multipleNotification(ATTMultipleHandleValueNotification)
    case indication(ATTHandleValueIndication)
    case protocolError(ATTProtocolError)
}

public struct ATTBearerClient: Sendable {
    public enum State: Sendable, Equatable {
        case idle
        case awaitingResponse(ATTRequestID, request: ATTOpcode)
        /// A transaction timed out: the bearer is dead (§3.3.3).
        case timedOut
        case closed
    }

    private struct Queued: Sendable { var id: ATTRequestID; var pdu: ATTPDU }

    public private(set) var state: State = .idle
    /// The current ATT_MTU.
    public private(set) var mtu: UInt16 = ATTMTU.default
    /// The Client Rx MTU offered in Exchange MTU.
    public let preferredMTU: UInt16
    public private(set) var mtuExchangeStarted = false
    private var queue: [Queued] = []
    private var pendingMTURequest: UInt16?
    private var nextID: UInt64 = 1

    public init(preferredMTU: UInt16 = ATTMTU.maximum) {
        self.preferredMTU = max(ATTMTU.default, preferredMTU)
    }

    /// Requests waiting behind the outstanding one.
    public var queuedCount: Int { queue.count }

    /// Queues a request; it is sent at once if none is outstanding.
    public mutating func send(_ request: ATTPDU) throws(ATTBearerError) -> (id: ATTRequestID, actions: [ATTBearerClientAction]) {
        try checkOpen()
        guard request.opcode.isRequest else { throw .wrongKind(request.opcode) }
        if case .exchangeMTURequest = request {
            guard !mtuExchangeStarted else { throw .mtuAlreadyExchanged }
            mtuExchangeStarted = true
        }
        let size = request.encodedSize
        guard size <= Int(mtu) else { throw .pduTooLarge(size: size, mtu: mtu) }
        let id = ATTRequestID(rawValue: nextID)
        nextID += 1
        queue.append(Queued(id: id, pdu: request))
        return (id, startNextIfIdle())
    }

    /// Sends Exchange MTU with `preferredMTU`.
    public mutating func exchangeMTU() throws(ATTBearerError) -> (id: ATTRequestID, actions: [ATTBearerClientAction]) {
        try send(.exchangeMTURequest(ATTExchangeMTURequest(clientRxMTU: preferredMTU)))
    }

    /// Sends a command (Write Command, Signed Write Command): no transaction, no queueing.
    public mutating func sendCommand(_ command: ATTPDU) throws(ATTBearerError) -> [ATTBearerClientAction] {
        try checkOpen()
        guard command.opcode.kind == .command else { throw .wrongKind(command.opcode) }
        let size = command.encodedSize
        guard size <= Int(mtu) else { throw .pduTooLarge(size: size, mtu: mtu) }
        return [.send(command)]
    }

    /// Sets the ATT_MTU after the server role completed an exchange started by the peer.
    public mutating func updateMTU(_ newMTU: UInt16) {
        mtu = min(max(newMTU, ATTMTU.default), ATTMTU.maximum)
        mtuExchangeStarted = true
    }

    /// Handles a PDU from the peer's server role: responses, notifications, indications.
    public mutating func receive(_ pdu: ATTPDU) -> [ATTBearerClientAction] {
        switch state {
        case .timedOut, .closed: return []
        case .idle, .awaitingResponse: break
        }
        switch pdu {
        case let .handleValueNotification(n): return [.notification(n)]
        case let .multipleHandleValueNotification(n): return [.multipleNotification(n)]
        case let .handleValueIndication(i):
            return [.indication(i), .send(.handleValueConfirmation(ATTHandleValueConfirmation()))]
        default: break
        }
        guard pdu.opcode.isResponse else { return [.protocolError(.wrongRole(pdu.opcode))] }
        guard case let .awaitingResponse(id, requestOpcode) = state else {
            return [.protocolError(.unexpectedResponse(pdu.opcode))]
        }
        var actions: [ATTBearerClientAction]
        if case let .errorResponse(e) = pdu {
            guard e.requestOpcode == requestOpcode else { return [.protocolError(.mismatchedErrorResponse(e))] }
            actions = [.stopTransactionTimer, .complete(id, .error(e))]
            if requestOpcode == .exchangeMTURequest { pendingMTURequest = nil }
        } else {
            guard pdu.opcode == requestOpcode.responseOpcode else {
                return [.protocolError(.unexpectedResponse(pdu.opcode))]
            }
            actions = [.stopTransactionTimer]
            if case let .exchangeMTUResponse(r) = pdu, let offered = pendingMTURequest {
                pendingMTURequest = nil
                let new = ATTMTU.negotiated(client: offered, server: r.serverRxMTU)
                if new != mtu { mtu = new; actions.append(.mtuChanged(new)) }
            }
            actions.append(.complete(id, .response(pdu)))
        }
        state = .idle
        actions += startNextIfIdle()
        return actions
    }

    /// Decodes and handles raw octets; an undecodable PDU is reported as a protocol error.
    public mutating func receive(bytes: [UInt8]) -> [ATTBearerClientAction] {
        do { return receive(try ATTPDU.decode(bytes)) } catch { return [.protocolError(.malformed(error))] }
    }

    /// The 30-second transaction timer fired (§3.3.3). The outstanding request times out, queued
    /// ones are abandoned, and the bearer accepts nothing more.
    public mutating func timeout() -> [ATTBearerClientAction] {
        guard case let .awaitingResponse(id, _) = state else { return [] }
        state = .timedOut
        var actions: [ATTBearerClientAction] = [.complete(id, .timedOut)]
        for q in queue { actions.append(.complete(q.id, .bearerClosed)) }
        queue.removeAll()
        return actions
    }

    /// The link went down: every request ends with `.bearerClosed`.
    public mutating func close() -> [ATTBearerClientAction] {
        var actions: [ATTBearerClientAction] = []
        switch state {
        case let .awaitingResponse(id, _): actions = [.stopTransactionTimer, .complete(id, .bearerClosed)]
        case .idle, .timedOut, .closed: break
        }
        for q in queue { actions.append(.complete(q.id, .bearerClosed)) }
        queue.removeAll()
        state = .closed
        return actions
    }

    private func checkOpen() throws(ATTBearerError) {
        switch state {
        case .timedOut: throw .bearerTimedOut
        case .closed: throw .bearerClosed
        case .idle, .awaitingResponse: return
        }
    }

    private mutating func startNextIfIdle() -> [ATTBearerClientAction] {
        guard case .idle = state, !queue.isEmpty else { return [] }
        let next = queue.removeFirst()
        state = .awaitingResponse(next.id, request: next.pdu.opcode)
        if case let .exchangeMTURequest(r) = next.pdu { pendingMTURequest = r.clientRxMTU }
        return [.send(next.pdu), .startTransactionTimer]
    }
}
