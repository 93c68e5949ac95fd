// The ATT protocol data units (Vol 3 Part F §3.4).
//
// One case per PDU, each carrying a struct named after the PDU with its parameters in specification
// order. Codecs live in ATTPDU+Wire.swift. Handles are plain UInt16 (0x0000 is reserved, §3.2.2).

import BLEWire

/// Every ATT PDU. `.unknown` keeps PDUs whose opcode this stack does not know.
public enum ATTPDU: Sendable, Equatable {
    case errorResponse(ATTErrorResponse)
    case exchangeMTURequest(ATTExchangeMTURequest)
    case exchangeMTUResponse(ATTExchangeMTUResponse)
    case findInformationRequest(ATTFindInformationRequest)
    case findInformationResponse(ATTFindInformationResponse)
    case findByTypeValueRequest(ATTFindByTypeValueRequest)
    case findByTypeValueResponse(ATTFindByTypeValueResponse)
    case readByTypeRequest(ATTReadByTypeRequest)
    case readByTypeResponse(ATTReadByTypeResponse)
    case readRequest(ATTReadRequest)
    case readResponse(ATTReadResponse)
    case readBlobRequest(ATTReadBlobRequest)
    case readBlobResponse(ATTReadBlobResponse)
    case readMultipleRequest(ATTReadMultipleRequest)
    case readMultipleResponse(ATTReadMultipleResponse)
    case readMultipleVariableRequest(ATTReadMultipleVariableRequest)
    case readMultipleVariableResponse(ATTReadMultipleVariableResponse)
    case readByGroupTypeRequest(ATTReadByGroupTypeRequest)
    case readByGroupTypeResponse(ATTReadByGroupTypeResponse)
    case writeRequest(ATTWriteRequest)
    case writeResponse(ATTWriteResponse)
    case writeCommand(ATTWriteCommand)
    case signedWriteCommand(ATTSignedWriteCommand)
    case prepareWriteRequest(ATTPrepareWriteRequest)
    case prepareWriteResponse(ATTPrepareWriteResponse)
    case executeWriteRequest(ATTExecuteWriteRequest)
    case executeWriteResponse(ATTExecuteWriteResponse)
    case handleValueNotification(ATTHandleValueNotification)
    case handleValueIndication(ATTHandleValueIndication)
    case handleValueConfirmation(ATTHandleValueConfirmation)
    case multipleHandleValueNotification(ATTMultipleHandleValueNotification)
    case unknown(opcode: ATTOpcode, parameters: [UInt8])

    public var opcode: ATTOpcode {
        switch self {
        case .errorResponse: return .errorResponse
        case .exchangeMTURequest: return .exchangeMTURequest
        case .exchangeMTUResponse: return .exchangeMTUResponse
        case .findInformationRequest: return .findInformationRequest
        case .findInformationResponse: return .findInformationResponse
        case .findByTypeValueRequest: return .findByTypeValueRequest
        case .findByTypeValueResponse: return .findByTypeValueResponse
        case .readByTypeRequest: return .readByTypeRequest
        case .readByTypeResponse: return .readByTypeResponse
        case .readRequest: return .readRequest
        case .readResponse: return .readResponse
        case .readBlobRequest: return .readBlobRequest
        case .readBlobResponse: return .readBlobResponse
        case .readMultipleRequest: return .readMultipleRequest
        case .readMultipleResponse: return .readMultipleResponse
        case .readMultipleVariableRequest: return .readMultipleVariableRequest
        case .readMultipleVariableResponse: return .readMultipleVariableResponse
        case .readByGroupTypeRequest: return .readByGroupTypeRequest
        case .readByGroupTypeResponse: return .readByGroupTypeResponse
        case .writeRequest: return .writeRequest
        case .writeResponse: return .writeResponse
        case .writeCommand: return .writeCommand
        case .signedWriteCommand: return .signedWriteCommand
        case .prepareWriteRequest: return .prepareWriteRequest
        case .prepareWriteResponse: return .prepareWriteResponse
        case .executeWriteRequest: return .executeWriteRequest
        case .executeWriteResponse: return .executeWriteResponse
        case .handleValueNotification: return .handleValueNotification
        case .handleValueIndication: return .handleValueIndication
        case .handleValueConfirmation: return .handleValueConfirmation
        case .multipleHandleValueNotification: return .multipleHandleValueNotification
        case let .unknown(opcode, _): return opcode
        }
    }
}

// MARK: - Error handling (§3.4.1)

/// ATT_ERROR_RSP (Vol 3 Part F §3.4.1.1): Request Opcode In Error, Attribute Handle In Error, Error Code.
public struct ATTErrorResponse: Sendable, Equatable {
    public var requestOpcode: ATTOpcode
    public var handle: UInt16
    public var error: ATTErrorCode
    public init(requestOpcode: ATTOpcode, handle: UInt16, error: ATTErrorCode) {
        self.requestOpcode = requestOpcode
        self.handle = handle
        self.error = error
    }
}

// MARK: - MTU exchange (§3.4.2)

/// ATT_EXCHANGE_MTU_REQ (Vol 3 Part F §3.4.2.1): Client Rx MTU.
public struct ATTExchangeMTURequest: Sendable, Equatable {
    public var clientRxMTU: UInt16
    public init(clientRxMTU: UInt16) { self.clientRxMTU = clientRxMTU }
}

/// ATT_EXCHANGE_MTU_RSP (Vol 3 Part F §3.4.2.2): Server Rx MTU.
public struct ATTExchangeMTUResponse: Sendable, Equatable {
    public var serverRxMTU: UInt16
    public init(serverRxMTU: UInt16) { self.serverRxMTU = serverRxMTU }
}

// MARK: - Find information (§3.4.3)

/// ATT_FIND_INFORMATION_REQ (Vol 3 Part F §3.4.3.1): Starting Handle, Ending Handle.
public struct ATTFindInformationRequest: Sendable, Equatable {
    public var startingHandle: UInt16
    public var endingHandle: UInt16
    public init(startingHandle: UInt16, endingHandle: UInt16) {
        self.startingHandle = startingHandle
        self.endingHandle = endingHandle
    }
}

/// A handle and its attribute type.
public struct ATTHandleUUID: Sendable, Equatable {
    public var handle: UInt16
    public var uuid: BluetoothUUID
    public init(handle: UInt16, uuid: BluetoothUUID) { self.handle = handle; self.uuid = uuid }
}

/// ATT_FIND_INFORMATION_RSP (Vol 3 Part F §3.4.3.2): Format, Information Data.
/// Format 0x01 carries 16-bit UUIDs, 0x02 128-bit UUIDs; all entries of one response share it.
public struct ATTFindInformationResponse: Sendable, Equatable {
    public enum Format: UInt8, Sendable {
        case uuid16 = 0x01
        case uuid128 = 0x02
        public var entrySize: Int { self == .uuid16 ? 4 : 18 }
    }
    public var format: Format
    public var information: [ATTHandleUUID]
    public init(format: Format, information: [ATTHandleUUID]) {
        self.format = format
        self.information = information
    }
}

// MARK: - Find by type value (§3.4.3.3)

/// ATT_FIND_BY_TYPE_VALUE_REQ (Vol 3 Part F §3.4.3.3): Starting Handle, Ending Handle,
/// Attribute Type (16-bit UUID), Attribute Value.
public struct ATTFindByTypeValueRequest: Sendable, Equatable {
    public var startingHandle: UInt16
    public var endingHandle: UInt16
    public var attributeType: UInt16
    public var attributeValue: [UInt8]
    public init(startingHandle: UInt16, endingHandle: UInt16, attributeType: UInt16, attributeValue: [UInt8]) {
        self.startingHandle = startingHandle
        self.endingHandle = endingHandle
        self.attributeType = attributeType
        self.attributeValue = attributeValue
    }
}

/// One Handles Information entry: Found Attribute Handle, Group End Handle.
public struct ATTHandlesInformation: Sendable, Equatable {
    public var foundAttributeHandle: UInt16
    public var groupEndHandle: UInt16
    public init(foundAttributeHandle: UInt16, groupEndHandle: UInt16) {
        self.foundAttributeHandle = foundAttributeHandle
        self.groupEndHandle = groupEndHandle
    }
}

/// ATT_FIND_BY_TYPE_VALUE_RSP (Vol 3 Part F §3.4.3.4): Handles Information List (one or more).
public struct ATTFindByTypeValueResponse: Sendable, Equatable {
    public var handlesInformationList: [ATTHandlesInformation]
    public init(handlesInformationList: [ATTHandlesInformation]) {
        self.handlesInformationList = handlesInformationList
    }
}

// MARK: - Read by type (§3.4.4.1)

/// ATT_READ_BY_TYPE_REQ (Vol 3 Part F §3.4.4.1): Starting Handle, Ending Handle, Attribute Type
/// (2 or 16 octets).
public struct ATTReadByTypeRequest: Sendable, Equatable {
    public var startingHandle: UInt16
    public var endingHandle: UInt16
    public var attributeType: BluetoothUUID
    public init(startingHandle: UInt16, endingHandle: UInt16, attributeType: BluetoothUUID) {
        self.startingHandle = startingHandle
        self.endingHandle = endingHandle
        self.attributeType = attributeType
    }
}

/// A handle and a value (one Attribute Data entry, or one tuple of a notification).
public struct ATTHandleValue: Sendable, Equatable {
    public var handle: UInt16
    public var value: [UInt8]
    public init(handle: UInt16, value: [UInt8]) { self.handle = handle; self.value = value }
}

/// ATT_READ_BY_TYPE_RSP (Vol 3 Part F §3.4.4.2): Length, Attribute Data List.
/// Length (derived when encoding) is 2 + the value size, the same for every entry.
public struct ATTReadByTypeResponse: Sendable, Equatable {
    public var attributeDataList: [ATTHandleValue]
    public init(attributeDataList: [ATTHandleValue]) { self.attributeDataList = attributeDataList }
}

// MARK: - Read, Read Blob (§3.4.4.3–§3.4.4.6)

/// ATT_READ_REQ (Vol 3 Part F §3.4.4.3): Attribute Handle.
public struct ATTReadRequest: Sendable, Equatable {
    public var handle: UInt16
    public init(handle: UInt16) { self.handle = handle }
}

/// ATT_READ_RSP (Vol 3 Part F §3.4.4.4): Attribute Value.
public struct ATTReadResponse: Sendable, Equatable {
    public var value: [UInt8]
    public init(value: [UInt8]) { self.value = value }
}

/// ATT_READ_BLOB_REQ (Vol 3 Part F §3.4.4.5): Attribute Handle, Value Offset.
public struct ATTReadBlobRequest: Sendable, Equatable {
    public var handle: UInt16
    public var offset: UInt16
    public init(handle: UInt16, offset: UInt16) { self.handle = handle; self.offset = offset }
}

/// ATT_READ_BLOB_RSP (Vol 3 Part F §3.4.4.6): Part Attribute Value.
public struct ATTReadBlobResponse: Sendable, Equatable {
    public var partValue: [UInt8]
    public init(partValue: [UInt8]) { self.partValue = partValue }
}

// MARK: - Read Multiple (§3.4.4.7–§3.4.4.8)

/// ATT_READ_MULTIPLE_REQ (Vol 3 Part F §3.4.4.7): Set Of Handles (two or more).
public struct ATTReadMultipleRequest: Sendable, Equatable {
    public var handles: [UInt16]
    public init(handles: [UInt16]) { self.handles = handles }
}

/// ATT_READ_MULTIPLE_RSP (Vol 3 Part F §3.4.4.8): Set Of Values, concatenated without lengths.
public struct ATTReadMultipleResponse: Sendable, Equatable {
    public var values: [UInt8]
    public init(values: [UInt8]) { self.values = values }
}

// MARK: - Read Multiple Variable (§3.4.4.11–§3.4.4.12)

/// ATT_READ_MULTIPLE_VARIABLE_REQ (Vol 3 Part F §3.4.4.11): Set Of Handles (two or more).
public struct ATTReadMultipleVariableRequest: Sendable, Equatable {
    public var handles: [UInt16]
    public init(handles: [UInt16]) { self.handles = handles }
}

/// One Length Value Tuple. `valueLength` is the full attribute length; `value` may be shorter in the
/// last tuple of a response cut at ATT_MTU − 1 (§3.4.4.12).
public struct ATTLengthValue: Sendable, Equatable {
    public var valueLength: UInt16
    public var value: [UInt8]
    public init(valueLength: UInt16, value: [UInt8]) { self.valueLength = valueLength; self.value = value }
    public init(value: [UInt8]) { self.valueLength = UInt16(clamping: value.count); self.value = value }
    public var isTruncated: Bool { value.count < Int(valueLength) }
}

/// ATT_READ_MULTIPLE_VARIABLE_RSP (Vol 3 Part F §3.4.4.12): Length Value Tuple List.
public struct ATTReadMultipleVariableResponse: Sendable, Equatable {
    public var lengthValueTupleList: [ATTLengthValue]
    public init(lengthValueTupleList: [ATTLengthValue]) { self.lengthValueTupleList = lengthValueTupleList }
}

// MARK: - Read by group type (§3.4.4.9–§3.4.4.10)

/// ATT_READ_BY_GROUP_TYPE_REQ (Vol 3 Part F §3.4.4.9): Starting Handle, Ending Handle,
/// Attribute Group Type (2 or 16 octets).
public struct ATTReadByGroupTypeRequest: Sendable, Equatable {
    public var startingHandle: UInt16
    public var endingHandle: UInt16
    public var attributeGroupType: BluetoothUUID
    public init(startingHandle: UInt16, endingHandle: UInt16, attributeGroupType: BluetoothUUID) {
        self.startingHandle = startingHandle
        self.endingHandle = endingHandle
        self.attributeGroupType = attributeGroupType
    }
}

/// One Attribute Data entry of a Read By Group Type response.
public struct ATTGroupData: Sendable, Equatable {
    public var handle: UInt16
    public var endGroupHandle: UInt16
    public var value: [UInt8]
    public init(handle: UInt16, endGroupHandle: UInt16, value: [UInt8]) {
        self.handle = handle
        self.endGroupHandle = endGroupHandle
        self.value = value
    }
}

/// ATT_READ_BY_GROUP_TYPE_RSP (Vol 3 Part F §3.4.4.10): Length, Attribute Data List.
/// Length (derived when encoding) is 4 + the value size, the same for every entry.
public struct ATTReadByGroupTypeResponse: Sendable, Equatable {
    public var attributeDataList: [ATTGroupData]
    public init(attributeDataList: [ATTGroupData]) { self.attributeDataList = attributeDataList }
}

// MARK: - Writes (§3.4.5)

/// ATT_WRITE_REQ (Vol 3 Part F §3.4.5.1): Attribute Handle, Attribute Value.
public struct ATTWriteRequest: Sendable, Equatable {
    public var handle: UInt16
    public var value: [UInt8]
    public init(handle: UInt16, value: [UInt8]) { self.handle = handle; self.value = value }
}

/// ATT_WRITE_RSP (Vol 3 Part F §3.4.5.2): no parameters.
public struct ATTWriteResponse: Sendable, Equatable {
    public init() {}
}

/// ATT_WRITE_CMD (Vol 3 Part F §3.4.5.3): Attribute Handle, Attribute Value.
public struct ATTWriteCommand: Sendable, Equatable {
    public var handle: UInt16
    public var value: [UInt8]
    public init(handle: UInt16, value: [UInt8]) { self.handle = handle; self.value = value }
}

/// ATT_SIGNED_WRITE_CMD (Vol 3 Part F §3.4.5.4): Attribute Handle, Attribute Value,
/// Authentication Signature (12 octets: SignCounter then the CMAC's 8 octets, Vol 3 Part H §2.4.5).
public struct ATTSignedWriteCommand: Sendable, Equatable {
    public var handle: UInt16
    public var value: [UInt8]
    public var signature: [UInt8]
    public init(handle: UInt16, value: [UInt8], signature: [UInt8]) {
        precondition(signature.count == 12, "an ATT authentication signature has 12 octets")
        self.handle = handle
        self.value = value
        self.signature = signature
    }
}

// MARK: - Queued writes (§3.4.6)

/// ATT_PREPARE_WRITE_REQ (Vol 3 Part F §3.4.6.1): Attribute Handle, Value Offset, Part Attribute Value.
public struct ATTPrepareWriteRequest: Sendable, Equatable {
    public var handle: UInt16
    public var offset: UInt16
    public var partValue: [UInt8]
    public init(handle: UInt16, offset: UInt16, partValue: [UInt8]) {
        self.handle = handle
        self.offset = offset
        self.partValue = partValue
    }
}

/// ATT_PREPARE_WRITE_RSP (Vol 3 Part F §3.4.6.2): the request's parameters echoed.
public struct ATTPrepareWriteResponse: Sendable, Equatable {
    public var handle: UInt16
    public var offset: UInt16
    public var partValue: [UInt8]
    public init(handle: UInt16, offset: UInt16, partValue: [UInt8]) {
        self.handle = handle
        self.offset = offset
        self.partValue = partValue
    }
}

/// ATT_EXECUTE_WRITE_REQ (Vol 3 Part F §3.4.6.3): Flags.
public struct ATTExecuteWriteRequest: Sendable, Equatable {
    /// 0x00 cancels all prepared writes, 0x01 writes them all; other values are reserved (kept).
    public struct Flags: RawRepresentable, Sendable, Hashable {
        public var rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        public static let cancelAll = Flags(rawValue: 0x00)
        public static let writeAll = Flags(rawValue: 0x01)
    }
    public var flags: Flags
    public init(flags: Flags) { self.flags = flags }
}

/// ATT_EXECUTE_WRITE_RSP (Vol 3 Part F §3.4.6.4): no parameters.
public struct ATTExecuteWriteResponse: Sendable, Equatable {
    public init() {}
}

// MARK: - Server-initiated (§3.4.7)

/// ATT_HANDLE_VALUE_NTF (Vol 3 Part F §3.4.7.1): Attribute Handle, Attribute Value.
public struct ATTHandleValueNotification: Sendable, Equatable {
    public var handle: UInt16
    public var value: [UInt8]
    public init(handle: UInt16, value: [UInt8]) { self.handle = handle; self.value = value }
}

/// ATT_HANDLE_VALUE_IND (Vol 3 Part F §3.4.7.2): Attribute Handle, Attribute Value.
public struct ATTHandleValueIndication: Sendable, Equatable {
    public var handle: UInt16
    public var value: [UInt8]
    public init(handle: UInt16, value: [UInt8]) { self.handle = handle; self.value = value }
}

/// ATT_HANDLE_VALUE_CFM (Vol 3 Part F §3.4.7.3): no parameters.
public struct ATTHandleValueConfirmation: Sendable, Equatable {
    public init() {}
}

/// ATT_MULTIPLE_HANDLE_VALUE_NTF (Vol 3 Part F §3.4.7.4): Handle Length Value Tuple List (two or more).
public struct ATTMultipleHandleValueNotification: Sendable, Equatable {
    public var handleLengthValueTupleList: [ATTHandleValue]
    public init(handleLengthValueTupleList: [ATTHandleValue]) {
        self.handleLengthValueTupleList = handleLengthValueTupleList
    }
}
