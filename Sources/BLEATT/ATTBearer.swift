// Shared vocabulary of the two ATT bearer roles (Vol 3 Part F §3.3).

/// ATT_MTU limits (Vol 3 Part F §3.2.8; Vol 3 Part G §5.2.1: 23 on the LE fixed channel).
public enum ATTMTU {
    public static let `default`: UInt16 = 23
    /// The largest ATT_MTU this stack negotiates: a 512-octet attribute value plus header room.
    public static let maximum: UInt16 = 517

    /// The ATT_MTU both sides use after an exchange: the smaller Rx MTU, never below the default.
    public static func negotiated(client: UInt16, server: UInt16) -> UInt16 {
        min(max(min(client, server), ATTMTU.default), ATTMTU.maximum)
    }
}

/// Identifies one request queued on an `ATTBearerClient`.
public struct ATTRequestID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "request#\(rawValue)" }
}

/// How a request ended.
public enum ATTTransactionOutcome: Sendable, Equatable {
    /// The matching response PDU.
    case response(ATTPDU)
    /// The server answered with ATT_ERROR_RSP.
    case error(ATTErrorResponse)
    /// No response within 30 s (the host called `timeout()`, §3.3.3).
    case timedOut
    /// The request was never answered because the bearer became unusable (timeout or close).
    case bearerClosed
}

/// A peer broke the ATT protocol. The host usually disconnects.
public enum ATTProtocolError: Error, Sendable, Equatable {
    /// A response arrived while no request was outstanding, or of the wrong opcode.
    case unexpectedResponse(ATTOpcode)
    /// An Error Response named a request opcode other than the outstanding request's.
    case mismatchedErrorResponse(ATTErrorResponse)
    /// A Handle Value Confirmation arrived while no indication was outstanding.
    case unexpectedConfirmation
    /// An indication arrived before the previous one was confirmed (§3.4.7.2).
    case indicationNotConfirmed
    /// A PDU that could not be decoded.
    case malformed(ATTDecodeError)
    /// A request arrived while the same client's previous request was still unanswered (§3.3.2).
    case requestWhileOutstanding(ATTOpcode)
    /// A PDU the receiving role does not accept (e.g. a request handed to the client role).
    case wrongRole(ATTOpcode)
}

/// A caller misused a bearer.
public enum ATTBearerError: Error, Sendable, Equatable {
    /// The PDU is not of the kind this call sends.
    case wrongKind(ATTOpcode)
    /// A transaction timed out earlier: nothing more may be sent on this bearer (§3.3.3).
    case bearerTimedOut
    /// The bearer was closed.
    case bearerClosed
    /// Exchange MTU may be sent once per connection (Vol 3 Part G §4.3.1).
    case mtuAlreadyExchanged
    /// The encoded PDU is longer than ATT_MTU.
    case pduTooLarge(size: Int, mtu: UInt16)
}
