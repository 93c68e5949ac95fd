// Encoding and decoding of ATT PDUs (Vol 3 Part F §3.3, §3.4).
//
// Decoding is strict: fixed-length PDUs must have exactly their length, lists must have whole entries
// and the minimum count the specification requires. Failures become `ATTDecodeError`, which says
// what a server answers. Decoding reads from an `ArraySlice` so a PDU inside a larger buffer (an
// L2CAP frame) is parsed in place; only values handed out are copied into arrays.

import BLEWire

extension ATTPDU {
    /// The PDU's octets: opcode then parameters.
    public func encode() -> [UInt8] {
        var w = ByteWriter(capacity: encodedSize)
        encode(into: &w)
        return w.bytes
    }

    /// Appends the PDU's octets to `w`.
    public func encode(into w: inout ByteWriter) {
        w.write(opcode.rawValue)
        switch self {
        case let .errorResponse(p):
            w.write(p.requestOpcode.rawValue); w.write(p.handle); w.write(p.error.rawValue)
        case let .exchangeMTURequest(p): w.write(p.clientRxMTU)
        case let .exchangeMTUResponse(p): w.write(p.serverRxMTU)
        case let .findInformationRequest(p): w.write(p.startingHandle); w.write(p.endingHandle)
        case let .findInformationResponse(p):
            w.write(p.format.rawValue)
            for e in p.information {
                w.write(e.handle)
                switch p.format {
                case .uuid16:
                    precondition(e.uuid.uuid16 != nil, "format 0x01 needs 16-bit UUIDs")
                    w.write(e.uuid.uuid16!)
                case .uuid128: w.write(contentsOf: e.uuid.expanded.littleEndianBytes)
                }
            }
        case let .findByTypeValueRequest(p):
            w.write(p.startingHandle); w.write(p.endingHandle); w.write(p.attributeType)
            w.write(contentsOf: p.attributeValue)
        case let .findByTypeValueResponse(p):
            for e in p.handlesInformationList { w.write(e.foundAttributeHandle); w.write(e.groupEndHandle) }
        case let .readByTypeRequest(p):
            w.write(p.startingHandle); w.write(p.endingHandle); Self.writeAttributeType(p.attributeType, &w)
        case let .readByTypeResponse(p):
            let size = p.attributeDataList.first?.value.count ?? 0
            precondition(size <= 253, "a Read By Type entry holds at most 253 value octets")
            w.write(UInt8(2 + size))
            for e in p.attributeDataList {
                precondition(e.value.count == size, "all Read By Type entries have the same length")
                w.write(e.handle); w.write(contentsOf: e.value)
            }
        case let .readRequest(p): w.write(p.handle)
        case let .readResponse(p): w.write(contentsOf: p.value)
        case let .readBlobRequest(p): w.write(p.handle); w.write(p.offset)
        case let .readBlobResponse(p): w.write(contentsOf: p.partValue)
        case let .readMultipleRequest(p): for h in p.handles { w.write(h) }
        case let .readMultipleResponse(p): w.write(contentsOf: p.values)
        case let .readMultipleVariableRequest(p): for h in p.handles { w.write(h) }
        case let .readMultipleVariableResponse(p):
            for t in p.lengthValueTupleList { w.write(t.valueLength); w.write(contentsOf: t.value) }
        case let .readByGroupTypeRequest(p):
            w.write(p.startingHandle); w.write(p.endingHandle); Self.writeAttributeType(p.attributeGroupType, &w)
        case let .readByGroupTypeResponse(p):
            let size = p.attributeDataList.first?.value.count ?? 0
            precondition(size <= 251, "a Read By Group Type entry holds at most 251 value octets")
            w.write(UInt8(4 + size))
            for e in p.attributeDataList {
                precondition(e.value.count == size, "all Read By Group Type entries have the same length")
                w.write(e.handle); w.write(e.endGroupHandle); w.write(contentsOf: e.value)
            }
        case let .writeRequest(p): w.write(p.handle); w.write(contentsOf: p.value)
        case .writeResponse: break
        case let .writeCommand(p): w.write(p.handle); w.write(contentsOf: p.value)
        case let .signedWriteCommand(p):
            w.write(p.handle); w.write(contentsOf: p.value); w.write(contentsOf: p.signature)
        case let .prepareWriteRequest(p): w.write(p.handle); w.write(p.offset); w.write(contentsOf: p.partValue)
        case let .prepareWriteResponse(p): w.write(p.handle); w.write(p.offset); w.write(contentsOf: p.partValue)
        case let .executeWriteRequest(p): w.write(p.flags.rawValue)
        case .executeWriteResponse: break
        case let .handleValueNotification(p): w.write(p.handle); w.write(contentsOf: p.value)
        case let .handleValueIndication(p): w.write(p.handle); w.write(contentsOf: p.value)
        case .handleValueConfirmation: break
        case let .multipleHandleValueNotification(p):
            for t in p.handleLengthValueTupleList {
                w.write(t.handle); w.write(UInt16(t.value.count)); w.write(contentsOf: t.value)
            }
        case let .unknown(_, parameters): w.write(contentsOf: parameters)
        }
    }

    /// Attribute types in requests are 16-bit or 128-bit (32-bit UUIDs are sent as 128-bit, §3.2.1).
    private static func writeAttributeType(_ uuid: BluetoothUUID, _ w: inout ByteWriter) {
        if let short = uuid.uuid16, uuid.wireSize == 2 { w.write(short) } else { w.write(contentsOf: uuid.expanded.littleEndianBytes) }
    }

    public static func decode(_ bytes: [UInt8]) throws(ATTDecodeError) -> ATTPDU {
        try decode(bytes[...])
    }

    /// Decodes one complete PDU (opcode and parameters) from `bytes`.
    public static func decode(_ bytes: ArraySlice<UInt8>) throws(ATTDecodeError) -> ATTPDU {
        guard let first = bytes.first else { throw ATTDecodeError(opcode: nil, reason: .empty) }
        let opcode = ATTOpcode(rawValue: first)
        var r = ByteReader(bytes.dropFirst())
        do {
            return try decodeParameters(opcode, &r)
        } catch let e as ATTDecodeError {
            throw e
        } catch let e as WireError {
            switch e {
            case .truncated: throw ATTDecodeError(opcode: opcode, reason: .truncated)
            case .trailingBytes: throw ATTDecodeError(opcode: opcode, reason: .trailingBytes)
            case let .invalidValue(s): throw ATTDecodeError(opcode: opcode, reason: .invalidValue(s))
            }
        } catch {
            throw ATTDecodeError(opcode: opcode, reason: .invalidValue("\(error)"))
        }
    }

    private static func invalid(_ what: String) -> WireError { WireError.invalidValue(what) }

    private static func readHandles(_ r: inout ByteReader) throws -> [UInt16] {
        guard r.remaining % 2 == 0 else { throw invalid("Set Of Handles has an odd length") }
        var handles: [UInt16] = []
        handles.reserveCapacity(r.remaining / 2)
        while !r.isAtEnd { handles.append(try r.readUInt16()) }
        guard handles.count >= 2 else { throw invalid("Set Of Handles needs two or more handles") }
        return handles
    }

    private static func readAttributeType(_ r: inout ByteReader) throws -> BluetoothUUID {
        switch r.remaining {
        case 2, 16: return try r.readUUID(size: r.remaining)
        case 0, 1: throw WireError.truncated(needed: 2, available: r.remaining)
        default: throw invalid("attribute type of \(r.remaining) octets (must be 2 or 16)")
        }
    }

    private static func decodeParameters(_ opcode: ATTOpcode, _ r: inout ByteReader) throws -> ATTPDU {
        let pdu: ATTPDU
        switch opcode {
        case .errorResponse:
            pdu = .errorResponse(
                ATTErrorResponse(
                    requestOpcode: ATTOpcode(try r.readUInt8()),
                    handle: try r.readUInt16(), error: ATTErrorCode(try r.readUInt8())))
        case .exchangeMTURequest: pdu = .exchangeMTURequest(ATTExchangeMTURequest(clientRxMTU: try r.readUInt16()))
        case .exchangeMTUResponse: pdu = .exchangeMTUResponse(ATTExchangeMTUResponse(serverRxMTU: try r.readUInt16()))
        case .findInformationRequest:
            pdu = .findInformationRequest(
                ATTFindInformationRequest(
                    startingHandle: try r.readUInt16(),
                    endingHandle: try r.readUInt16()))
        case .findInformationResponse:
            let raw = try r.readUInt8()
            guard let format = ATTFindInformationResponse.Format(rawValue: raw) else {
                throw invalid("Find Information format 0x\([raw].hexString)")
            }
            guard r.remaining > 0 else { throw WireError.truncated(needed: format.entrySize, available: 0) }
            guard r.remaining % format.entrySize == 0 else { throw invalid("partial Information Data entry") }
            var info: [ATTHandleUUID] = []
            info.reserveCapacity(r.remaining / format.entrySize)
            while !r.isAtEnd {
                info.append(ATTHandleUUID(handle: try r.readUInt16(), uuid: try r.readUUID(size: format.entrySize - 2)))
            }
            pdu = .findInformationResponse(ATTFindInformationResponse(format: format, information: info))
        case .findByTypeValueRequest:
            pdu = .findByTypeValueRequest(
                ATTFindByTypeValueRequest(
                    startingHandle: try r.readUInt16(), endingHandle: try r.readUInt16(),
                    attributeType: try r.readUInt16(), attributeValue: r.readRemaining()))
        case .findByTypeValueResponse:
            guard r.remaining > 0 else { throw WireError.truncated(needed: 4, available: 0) }
            guard r.remaining % 4 == 0 else { throw invalid("partial Handles Information entry") }
            var list: [ATTHandlesInformation] = []
            while !r.isAtEnd {
                list.append(ATTHandlesInformation(foundAttributeHandle: try r.readUInt16(), groupEndHandle: try r.readUInt16()))
            }
            pdu = .findByTypeValueResponse(ATTFindByTypeValueResponse(handlesInformationList: list))
        case .readByTypeRequest:
            pdu = .readByTypeRequest(
                ATTReadByTypeRequest(
                    startingHandle: try r.readUInt16(), endingHandle: try r.readUInt16(),
                    attributeType: try readAttributeType(&r)))
        case .readByTypeResponse:
            let length = Int(try r.readUInt8())
            guard length >= 2 else { throw invalid("Read By Type length \(length) < 2") }
            guard r.remaining > 0 else { throw WireError.truncated(needed: length, available: 0) }
            guard r.remaining % length == 0 else { throw invalid("partial Attribute Data entry") }
            var list: [ATTHandleValue] = []
            while !r.isAtEnd {
                list.append(ATTHandleValue(handle: try r.readUInt16(), value: try r.readBytes(length - 2)))
            }
            pdu = .readByTypeResponse(ATTReadByTypeResponse(attributeDataList: list))
        case .readRequest: pdu = .readRequest(ATTReadRequest(handle: try r.readUInt16()))
        case .readResponse: pdu = .readResponse(ATTReadResponse(value: r.readRemaining()))
        case .readBlobRequest:
            pdu = .readBlobRequest(ATTReadBlobRequest(handle: try r.readUInt16(), offset: try r.readUInt16()))
        case .readBlobResponse: pdu = .readBlobResponse(ATTReadBlobResponse(partValue: r.readRemaining()))
        case .readMultipleRequest: pdu = .readMultipleRequest(ATTReadMultipleRequest(handles: try readHandles(&r)))
        case .readMultipleResponse: pdu = .readMultipleResponse(ATTReadMultipleResponse(values: r.readRemaining()))
        case .readMultipleVariableRequest:
            pdu = .readMultipleVariableRequest(ATTReadMultipleVariableRequest(handles: try readHandles(&r)))
        case .readMultipleVariableResponse:
            // The list may be cut at ATT_MTU − 1 (§3.4.4.12): the last value may be short, and a lone
            // trailing octet of a cut length field is dropped.
            guard r.remaining >= 2 else { throw WireError.truncated(needed: 2, available: r.remaining) }
            var list: [ATTLengthValue] = []
            while r.remaining >= 2 {
                let length = try r.readUInt16()
                let take = min(Int(length), r.remaining)
                list.append(ATTLengthValue(valueLength: length, value: try r.readBytes(take)))
            }
            _ = r.readRemaining()
            pdu = .readMultipleVariableResponse(ATTReadMultipleVariableResponse(lengthValueTupleList: list))
        case .readByGroupTypeRequest:
            pdu = .readByGroupTypeRequest(
                ATTReadByGroupTypeRequest(
                    startingHandle: try r.readUInt16(),
                    endingHandle: try r.readUInt16(),
                    attributeGroupType: try readAttributeType(&r)))
        case .readByGroupTypeResponse:
            let length = Int(try r.readUInt8())
            guard length >= 4 else { throw invalid("Read By Group Type length \(length) < 4") }
            guard r.remaining > 0 else { throw WireError.truncated(needed: length, available: 0) }
            guard r.remaining % length == 0 else { throw invalid("partial Attribute Data entry") }
            var list: [ATTGroupData] = []
            while !r.isAtEnd {
                list.append(
                    ATTGroupData(
                        handle: try r.readUInt16(), endGroupHandle: try r.readUInt16(),
                        value: try r.readBytes(length - 4)))
            }
            pdu = .readByGroupTypeResponse(ATTReadByGroupTypeResponse(attributeDataList: list))
        case .writeRequest: pdu = .writeRequest(ATTWriteRequest(handle: try r.readUInt16(), value: r.readRemaining()))
        case .writeResponse: pdu = .writeResponse(ATTWriteResponse())
        case .writeCommand: pdu = .writeCommand(ATTWriteCommand(handle: try r.readUInt16(), value: r.readRemaining()))
        case .signedWriteCommand:
            let handle = try r.readUInt16()
            guard r.remaining >= 12 else { throw WireError.truncated(needed: 12, available: r.remaining) }
            let value = try r.readBytes(r.remaining - 12)
            pdu = .signedWriteCommand(ATTSignedWriteCommand(handle: handle, value: value, signature: try r.readBytes(12)))
        case .prepareWriteRequest:
            pdu = .prepareWriteRequest(
                ATTPrepareWriteRequest(
                    handle: try r.readUInt16(), offset: try r.readUInt16(),
                    partValue: r.readRemaining()))
        case .prepareWriteResponse:
            pdu = .prepareWriteResponse(
                ATTPrepareWriteResponse(
                    handle: try r.readUInt16(), offset: try r.readUInt16(),
                    partValue: r.readRemaining()))
        case .executeWriteRequest:
            pdu = .executeWriteRequest(ATTExecuteWriteRequest(flags: .init(rawValue: try r.readUInt8())))
        case .executeWriteResponse: pdu = .executeWriteResponse(ATTExecuteWriteResponse())
        case .handleValueNotification:
            pdu = .handleValueNotification(ATTHandleValueNotification(handle: try r.readUInt16(), value: r.readRemaining()))
        case .handleValueIndication:
            pdu = .handleValueIndication(ATTHandleValueIndication(handle: try r.readUInt16(), value: r.readRemaining()))
        case .handleValueConfirmation: pdu = .handleValueConfirmation(ATTHandleValueConfirmation())
        case .multipleHandleValueNotification:
            var list: [ATTHandleValue] = []
            repeat {
                let handle = try r.readUInt16()
                let length = Int(try r.readUInt16())
                list.append(ATTHandleValue(handle: handle, value: try r.readBytes(length)))
            } while !r.isAtEnd
            guard list.count >= 2 else { throw invalid("Multiple Handle Value Notification needs two or more tuples") }
            pdu = .multipleHandleValueNotification(ATTMultipleHandleValueNotification(handleLengthValueTupleList: list))
        default:
            return .unknown(opcode: opcode, parameters: r.readRemaining())
        }
        try r.expectEnd()
        return pdu
    }
}

extension ATTPDU {
    /// The number of octets `encode()` produces, computed without encoding.
    public var encodedSize: Int {
        func attributeTypeSize(_ uuid: BluetoothUUID) -> Int { uuid.wireSize == 2 ? 2 : 16 }
        let parameters: Int
        switch self {
        case .errorResponse: parameters = 4
        case .exchangeMTURequest, .exchangeMTUResponse: parameters = 2
        case .findInformationRequest: parameters = 4
        case let .findInformationResponse(p): parameters = 1 + p.information.count * p.format.entrySize
        case let .findByTypeValueRequest(p): parameters = 6 + p.attributeValue.count
        case let .findByTypeValueResponse(p): parameters = 4 * p.handlesInformationList.count
        case let .readByTypeRequest(p): parameters = 4 + attributeTypeSize(p.attributeType)
        case let .readByTypeResponse(p): parameters = 1 + p.attributeDataList.reduce(0) { $0 + 2 + $1.value.count }
        case .readRequest: parameters = 2
        case let .readResponse(p): parameters = p.value.count
        case .readBlobRequest: parameters = 4
        case let .readBlobResponse(p): parameters = p.partValue.count
        case let .readMultipleRequest(p): parameters = 2 * p.handles.count
        case let .readMultipleResponse(p): parameters = p.values.count
        case let .readMultipleVariableRequest(p): parameters = 2 * p.handles.count
        case let .readMultipleVariableResponse(p): parameters = p.lengthValueTupleList.reduce(0) { $0 + 2 + $1.value.count }
        case let .readByGroupTypeRequest(p): parameters = 4 + attributeTypeSize(p.attributeGroupType)
        case let .readByGroupTypeResponse(p): parameters = 1 + p.attributeDataList.reduce(0) { $0 + 4 + $1.value.count }
        case let .writeRequest(p): parameters = 2 + p.value.count
        case .writeResponse, .executeWriteResponse, .handleValueConfirmation: parameters = 0
        case let .writeCommand(p): parameters = 2 + p.value.count
        case let .signedWriteCommand(p): parameters = 2 + p.value.count + p.signature.count
        case let .prepareWriteRequest(p): parameters = 4 + p.partValue.count
        case let .prepareWriteResponse(p): parameters = 4 + p.partValue.count
        case .executeWriteRequest: parameters = 1
        case let .handleValueNotification(p): parameters = 2 + p.value.count
        case let .handleValueIndication(p): parameters = 2 + p.value.count
        case let .multipleHandleValueNotification(p):
            parameters = p.handleLengthValueTupleList.reduce(0) { $0 + 4 + $1.value.count }
        case let .unknown(_, p): parameters = p.count
        }
        return 1 + parameters
    }
}
