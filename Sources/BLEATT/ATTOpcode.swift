// ATT opcodes (Vol 3 Part F §3.3.1 and the PDU table of §3.4.8).

/// The one-octet ATT opcode. Bits 0–5 are the method, bit 6 the Command flag, bit 7 the
/// Authentication Signature flag (Vol 3 Part F §3.3.1). Unknown values are kept.
public struct ATTOpcode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public init(_ rawValue: UInt8) { self.rawValue = rawValue }

    public static let errorResponse = ATTOpcode(0x01)
    public static let exchangeMTURequest = ATTOpcode(0x02)
    public static let exchangeMTUResponse = ATTOpcode(0x03)
    public static let findInformationRequest = ATTOpcode(0x04)
    public static let findInformationResponse = ATTOpcode(0x05)
    public static let findByTypeValueRequest = ATTOpcode(0x06)
    public static let findByTypeValueResponse = ATTOpcode(0x07)
    public static let readByTypeRequest = ATTOpcode(0x08)
    public static let readByTypeResponse = ATTOpcode(0x09)
    public static let readRequest = ATTOpcode(0x0A)
    public static let readResponse = ATTOpcode(0x0B)
    public static let readBlobRequest = ATTOpcode(0x0C)
    public static let readBlobResponse = ATTOpcode(0x0D)
    public static let readMultipleRequest = ATTOpcode(0x0E)
    public static let readMultipleResponse = ATTOpcode(0x0F)
    public static let readByGroupTypeRequest = ATTOpcode(0x10)
    public static let readByGroupTypeResponse = ATTOpcode(0x11)
    public static let writeRequest = ATTOpcode(0x12)
    public static let writeResponse = ATTOpcode(0x13)
    public static let prepareWriteRequest = ATTOpcode(0x16)
    public static let prepareWriteResponse = ATTOpcode(0x17)
    public static let executeWriteRequest = ATTOpcode(0x18)
    public static let executeWriteResponse = ATTOpcode(0x19)
    public static let handleValueNotification = ATTOpcode(0x1B)
    public static let handleValueIndication = ATTOpcode(0x1D)
    public static let handleValueConfirmation = ATTOpcode(0x1E)
    public static let readMultipleVariableRequest = ATTOpcode(0x20)
    public static let readMultipleVariableResponse = ATTOpcode(0x21)
    public static let multipleHandleValueNotification = ATTOpcode(0x23)
    public static let writeCommand = ATTOpcode(0x52)
    public static let signedWriteCommand = ATTOpcode(0xD2)

    /// Bits 0–5.
    public var method: UInt8 { rawValue & 0x3F }
    /// Bit 6, the Command Flag: a command gets no response and is ignored when not understood.
    public var isCommand: Bool { rawValue & 0x40 != 0 }
    /// Bit 7, the Authentication Signature Flag: a 12-octet signature ends the PDU.
    public var hasSignature: Bool { rawValue & 0x80 != 0 }

    /// The role a PDU plays in ATT's flow (Vol 3 Part F §3.3.2). Unknown opcodes are `.unknown`
    /// unless the Command flag marks them as commands.
    public enum Kind: Sendable, Hashable {
        case request, response, command, notification, indication, confirmation, unknown
    }

    public var kind: Kind {
        if Self.requestToResponse[rawValue] != nil { return .request }
        switch self {
        case .errorResponse, .exchangeMTUResponse, .findInformationResponse, .findByTypeValueResponse,
            .readByTypeResponse, .readResponse, .readBlobResponse, .readMultipleResponse,
            .readByGroupTypeResponse, .writeResponse, .prepareWriteResponse, .executeWriteResponse,
            .readMultipleVariableResponse:
            return .response
        case .handleValueNotification, .multipleHandleValueNotification: return .notification
        case .handleValueIndication: return .indication
        case .handleValueConfirmation: return .confirmation
        default: return isCommand ? .command : .unknown
        }
    }

    /// True for the request opcodes this stack knows.
    public var isRequest: Bool { kind == .request }
    /// True for response opcodes, the Error Response included.
    public var isResponse: Bool { kind == .response }

    /// The request → response pairing table (Vol 3 Part F §3.4.8).
    static let requestToResponse: [UInt8: UInt8] = [
        0x02: 0x03, 0x04: 0x05, 0x06: 0x07, 0x08: 0x09, 0x0A: 0x0B, 0x0C: 0x0D, 0x0E: 0x0F,
        0x10: 0x11, 0x12: 0x13, 0x16: 0x17, 0x18: 0x19, 0x20: 0x21,
    ]

    /// The opcode of the successful response to `request`, or nil if `request` is not a known request.
    public static func responseOpcode(for request: ATTOpcode) -> ATTOpcode? {
        requestToResponse[request.rawValue].map(ATTOpcode.init(rawValue:))
    }

    /// The opcode of the successful response to this request.
    public var responseOpcode: ATTOpcode? { Self.responseOpcode(for: self) }

    public var name: String? {
        switch self {
        case .errorResponse: return "ATT_ERROR_RSP"
        case .exchangeMTURequest: return "ATT_EXCHANGE_MTU_REQ"
        case .exchangeMTUResponse: return "ATT_EXCHANGE_MTU_RSP"
        case .findInformationRequest: return "ATT_FIND_INFORMATION_REQ"
        case .findInformationResponse: return "ATT_FIND_INFORMATION_RSP"
        case .findByTypeValueRequest: return "ATT_FIND_BY_TYPE_VALUE_REQ"
        case .findByTypeValueResponse: return "ATT_FIND_BY_TYPE_VALUE_RSP"
        case .readByTypeRequest: return "ATT_READ_BY_TYPE_REQ"
        case .readByTypeResponse: return "ATT_READ_BY_TYPE_RSP"
        case .readRequest: return "ATT_READ_REQ"
        case .readResponse: return "ATT_READ_RSP"
        case .readBlobRequest: return "ATT_READ_BLOB_REQ"
        case .readBlobResponse: return "ATT_READ_BLOB_RSP"
        case .readMultipleRequest: return "ATT_READ_MULTIPLE_REQ"
        case .readMultipleResponse: return "ATT_READ_MULTIPLE_RSP"
        case .readByGroupTypeRequest: return "ATT_READ_BY_GROUP_TYPE_REQ"
        case .readByGroupTypeResponse: return "ATT_READ_BY_GROUP_TYPE_RSP"
        case .writeRequest: return "ATT_WRITE_REQ"
        case .writeResponse: return "ATT_WRITE_RSP"
        case .prepareWriteRequest: return "ATT_PREPARE_WRITE_REQ"
        case .prepareWriteResponse: return "ATT_PREPARE_WRITE_RSP"
        case .executeWriteRequest: return "ATT_EXECUTE_WRITE_REQ"
        case .executeWriteResponse: return "ATT_EXECUTE_WRITE_RSP"
        case .handleValueNotification: return "ATT_HANDLE_VALUE_NTF"
        case .handleValueIndication: return "ATT_HANDLE_VALUE_IND"
        case .handleValueConfirmation: return "ATT_HANDLE_VALUE_CFM"
        case .readMultipleVariableRequest: return "ATT_READ_MULTIPLE_VARIABLE_REQ"
        case .readMultipleVariableResponse: return "ATT_READ_MULTIPLE_VARIABLE_RSP"
        case .multipleHandleValueNotification: return "ATT_MULTIPLE_HANDLE_VALUE_NTF"
        case .writeCommand: return "ATT_WRITE_CMD"
        case .signedWriteCommand: return "ATT_SIGNED_WRITE_CMD"
        default: return nil
        }
    }

    public var description: String {
        let hex = "0x" + [rawValue].hexString
        return name.map { "\($0) (\(hex))" } ?? "opcode \(hex)"
    }
}
