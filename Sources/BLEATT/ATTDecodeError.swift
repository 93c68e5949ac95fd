// What went wrong decoding an ATT PDU, and what the specification says a server answers.

/// An ATT PDU that could not be decoded.
///
/// A server answers a malformed request with ATT_ERROR_RSP / Invalid PDU on that request's opcode
/// (Vol 3 Part F §3.4.1.1); a malformed command, notification, indication, confirmation or response
/// gets no answer (commands are ignored, §3.3; the client role reports the rest as a protocol error).
public struct ATTDecodeError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Reason: Sendable, Equatable {
        /// The PDU had no opcode octet.
        case empty
        /// The parameters ended before a field was complete.
        case truncated
        /// Octets were left over after a fixed-length PDU.
        case trailingBytes
        /// A field held a value the format forbids (bad format, bad length, too few entries…).
        case invalidValue(String)
    }

    /// The opcode of the offending PDU, nil when the PDU was empty.
    public var opcode: ATTOpcode?
    public var reason: Reason

    public init(opcode: ATTOpcode?, reason: Reason) {
        self.opcode = opcode
        self.reason = reason
    }

    /// The Error Response a server must send for this PDU, or nil when it must stay silent.
    public var serverErrorResponse: ATTErrorResponse? {
        guard let opcode, opcode.isRequest else { return nil }
        return ATTErrorResponse(requestOpcode: opcode, handle: 0x0000, error: .invalidPDU)
    }

    public var description: String {
        let what = opcode.map { "\($0)" } ?? "ATT PDU"
        switch reason {
        case .empty: return "empty ATT PDU"
        case .truncated: return "\(what): truncated"
        case .trailingBytes: return "\(what): unexpected trailing octets"
        case let .invalidValue(s): return "\(what): \(s)"
        }
    }
}

extension ATTOpcode {
    /// The answer a server owes a PDU with this opcode that it does not support or understand:
    /// Request Not Supported for anything that is not a command (Vol 3 Part F §3.4.1.1), nothing
    /// for commands (§3.3: commands that are not understood are ignored).
    public var unsupportedServerResponse: ATTErrorResponse? {
        if isCommand { return nil }
        switch kind {
        case .response, .notification, .indication, .confirmation, .command: return nil
        case .request, .unknown:
            return ATTErrorResponse(requestOpcode: self, handle: 0x0000, error: .requestNotSupported)
        }
    }
}
