import Testing
import BLEWire
@testable import BLEATT

/// One sample of every PDU, with non-trivial field values.
let samplePDUs: [ATTPDU] = [
    .errorResponse(ATTErrorResponse(requestOpcode: .readRequest, handle: 0x1234, error: .readNotPermitted)),
    .exchangeMTURequest(ATTExchangeMTURequest(clientRxMTU: 517)),
    .exchangeMTUResponse(ATTExchangeMTUResponse(serverRxMTU: 247)),
    .findInformationRequest(ATTFindInformationRequest(startingHandle: 1, endingHandle: 0xFFFF)),
    .findInformationResponse(
        ATTFindInformationResponse(
            format: .uuid16,
            information: [
                ATTHandleUUID(handle: 3, uuid: BluetoothUUID(0x2803)), ATTHandleUUID(handle: 4, uuid: BluetoothUUID(0x2A00)),
            ])),
    .findInformationResponse(
        ATTFindInformationResponse(
            format: .uuid128,
            information: [
                ATTHandleUUID(handle: 0x10, uuid: BluetoothUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!)
            ])),
    .findByTypeValueRequest(
        ATTFindByTypeValueRequest(
            startingHandle: 1, endingHandle: 0xFFFF, attributeType: 0x2800,
            attributeValue: [0x0D, 0x18])),
    .findByTypeValueResponse(
        ATTFindByTypeValueResponse(handlesInformationList: [
            ATTHandlesInformation(foundAttributeHandle: 0x20, groupEndHandle: 0x2F),
            ATTHandlesInformation(foundAttributeHandle: 0x40, groupEndHandle: 0xFFFF),
        ])),
    .readByTypeRequest(ATTReadByTypeRequest(startingHandle: 1, endingHandle: 0x10, attributeType: BluetoothUUID(0x2803))),
    .readByTypeRequest(
        ATTReadByTypeRequest(
            startingHandle: 1, endingHandle: 0x10,
            attributeType: BluetoothUUID(string: "6E400002-B5A3-F393-E0A9-E50E24DCCA9E")!)),
    .readByTypeResponse(
        ATTReadByTypeResponse(attributeDataList: [
            ATTHandleValue(handle: 2, value: [0x02, 0x03, 0x00, 0x00, 0x2A]),
            ATTHandleValue(handle: 4, value: [0x02, 0x05, 0x00, 0x01, 0x2A]),
        ])),
    .readRequest(ATTReadRequest(handle: 0x0003)),
    .readResponse(ATTReadResponse(value: Array("Hello".utf8))),
    .readBlobRequest(ATTReadBlobRequest(handle: 0x0003, offset: 22)),
    .readBlobResponse(ATTReadBlobResponse(partValue: [1, 2, 3])),
    .readMultipleRequest(ATTReadMultipleRequest(handles: [3, 5, 7])),
    .readMultipleResponse(ATTReadMultipleResponse(values: [1, 2, 3, 4])),
    .readMultipleVariableRequest(ATTReadMultipleVariableRequest(handles: [3, 5])),
    .readMultipleVariableResponse(
        ATTReadMultipleVariableResponse(lengthValueTupleList: [
            ATTLengthValue(value: [0xAA]), ATTLengthValue(value: []), ATTLengthValue(value: [1, 2, 3]),
        ])),
    .readByGroupTypeRequest(
        ATTReadByGroupTypeRequest(
            startingHandle: 1, endingHandle: 0xFFFF,
            attributeGroupType: .primaryService)),
    .readByGroupTypeResponse(
        ATTReadByGroupTypeResponse(attributeDataList: [
            ATTGroupData(handle: 1, endGroupHandle: 5, value: [0x00, 0x18]),
            ATTGroupData(handle: 6, endGroupHandle: 9, value: [0x01, 0x18]),
        ])),
    .writeRequest(ATTWriteRequest(handle: 0x0009, value: [0x01, 0x00])),
    .writeResponse(ATTWriteResponse()),
    .writeCommand(ATTWriteCommand(handle: 0x0010, value: [9, 8, 7])),
    .signedWriteCommand(ATTSignedWriteCommand(handle: 0x0011, value: [0x42], signature: Array(1...12))),
    .prepareWriteRequest(ATTPrepareWriteRequest(handle: 0x0012, offset: 18, partValue: [1, 2])),
    .prepareWriteResponse(ATTPrepareWriteResponse(handle: 0x0012, offset: 18, partValue: [1, 2])),
    .executeWriteRequest(ATTExecuteWriteRequest(flags: .writeAll)),
    .executeWriteRequest(ATTExecuteWriteRequest(flags: .cancelAll)),
    .executeWriteResponse(ATTExecuteWriteResponse()),
    .handleValueNotification(ATTHandleValueNotification(handle: 0x0015, value: [0x64])),
    .handleValueIndication(ATTHandleValueIndication(handle: 0x0003, value: [0x01, 0x00, 0xFF, 0xFF])),
    .handleValueConfirmation(ATTHandleValueConfirmation()),
    .multipleHandleValueNotification(
        ATTMultipleHandleValueNotification(handleLengthValueTupleList: [
            ATTHandleValue(handle: 0x15, value: [1]), ATTHandleValue(handle: 0x17, value: [2, 3]),
        ])),
    .unknown(opcode: ATTOpcode(0x30), parameters: [1, 2, 3]),
]

/// The smallest valid encoding of every request: each strict prefix must be rejected.
let minimalRequests: [ATTPDU] = [
    .exchangeMTURequest(ATTExchangeMTURequest(clientRxMTU: 23)),
    .findInformationRequest(ATTFindInformationRequest(startingHandle: 1, endingHandle: 2)),
    .findByTypeValueRequest(
        ATTFindByTypeValueRequest(
            startingHandle: 1, endingHandle: 2, attributeType: 0x2800,
            attributeValue: [])),
    .readByTypeRequest(ATTReadByTypeRequest(startingHandle: 1, endingHandle: 2, attributeType: BluetoothUUID(0x2803))),
    .readRequest(ATTReadRequest(handle: 1)),
    .readBlobRequest(ATTReadBlobRequest(handle: 1, offset: 1)),
    .readMultipleRequest(ATTReadMultipleRequest(handles: [1, 2])),
    .readMultipleVariableRequest(ATTReadMultipleVariableRequest(handles: [1, 2])),
    .readByGroupTypeRequest(ATTReadByGroupTypeRequest(startingHandle: 1, endingHandle: 2, attributeGroupType: .primaryService)),
    .writeRequest(ATTWriteRequest(handle: 1, value: [])),
    .prepareWriteRequest(ATTPrepareWriteRequest(handle: 1, offset: 0, partValue: [])),
    .executeWriteRequest(ATTExecuteWriteRequest(flags: .writeAll)),
]

@Test func everySampleRoundTrips() throws {
    for pdu in samplePDUs {
        let bytes = pdu.encode()
        #expect(bytes.first == pdu.opcode.rawValue)
        #expect(try ATTPDU.decode(bytes) == pdu, "\(pdu.opcode)")
        #expect(pdu.encodedSize == bytes.count)
        var w = ByteWriter()
        w.write(UInt8(0xEE))
        pdu.encode(into: &w)
        #expect(Array(w.bytes.dropFirst()) == bytes)
    }
    // Every known opcode is covered by the samples.
    let covered = Set(samplePDUs.map(\.opcode.rawValue))
    for raw in UInt8.min...UInt8.max where ATTOpcode(raw).name != nil {
        #expect(covered.contains(raw), "no sample for \(ATTOpcode(raw))")
    }
}

@Test func everyStrictPrefixOfARequestIsInvalidPDU() {
    for pdu in minimalRequests {
        let bytes = pdu.encode()
        for n in 0..<bytes.count {
            let prefix = Array(bytes.prefix(n))
            #expect(throws: ATTDecodeError.self, "\(pdu.opcode) prefix \(n)") { try ATTPDU.decode(prefix) }
            do {
                _ = try ATTPDU.decode(prefix)
            } catch {
                if n == 0 {
                    #expect(error.serverErrorResponse == nil)
                } else {
                    #expect(
                        error.serverErrorResponse
                            == ATTErrorResponse(
                                requestOpcode: pdu.opcode, handle: 0,
                                error: .invalidPDU))
                }
            }
        }
    }
}

@Test func prefixesOf128BitTypeRequestsAreInvalidExceptThe16BitForm() throws {
    let uuid = BluetoothUUID(string: "6E400002-B5A3-F393-E0A9-E50E24DCCA9E")!
    for pdu in [
        ATTPDU.readByTypeRequest(ATTReadByTypeRequest(startingHandle: 1, endingHandle: 2, attributeType: uuid)),
        .readByGroupTypeRequest(ATTReadByGroupTypeRequest(startingHandle: 1, endingHandle: 2, attributeGroupType: uuid)),
    ] {
        let bytes = pdu.encode()
        for n in 1..<bytes.count where n != 7 {
            #expect(throws: ATTDecodeError.self) { try ATTPDU.decode(Array(bytes.prefix(n))) }
        }
        // Seven octets are a complete request with a 16-bit type: valid, and not the original.
        #expect(try ATTPDU.decode(Array(bytes.prefix(7))) != pdu)
    }
}

@Test func everyStrictPrefixOfAnyPDUFailsOrDiffers() {
    for pdu in samplePDUs {
        let bytes = pdu.encode()
        for n in 0..<bytes.count {
            if let decoded = try? ATTPDU.decode(Array(bytes.prefix(n))) {
                #expect(decoded != pdu)
            }
        }
    }
}

@Test func fixedLayoutPDUsRejectEveryPrefixAndTrailingOctet() {
    let fixed: [ATTPDU] = [
        .errorResponse(ATTErrorResponse(requestOpcode: .readRequest, handle: 1, error: .invalidHandle)),
        .exchangeMTUResponse(ATTExchangeMTUResponse(serverRxMTU: 100)),
        .findInformationResponse(ATTFindInformationResponse(format: .uuid16, information: [ATTHandleUUID(handle: 1, uuid: BluetoothUUID(0x2800))])),
        .findByTypeValueResponse(ATTFindByTypeValueResponse(handlesInformationList: [ATTHandlesInformation(foundAttributeHandle: 1, groupEndHandle: 2)])),
        .readByTypeResponse(ATTReadByTypeResponse(attributeDataList: [ATTHandleValue(handle: 1, value: [1])])),
        .readByGroupTypeResponse(ATTReadByGroupTypeResponse(attributeDataList: [ATTGroupData(handle: 1, endGroupHandle: 2, value: [1, 2])])),
        .signedWriteCommand(ATTSignedWriteCommand(handle: 1, value: [], signature: Array(repeating: 7, count: 12))),
        .multipleHandleValueNotification(
            ATTMultipleHandleValueNotification(handleLengthValueTupleList: [
                ATTHandleValue(handle: 1, value: []), ATTHandleValue(handle: 2, value: [5]),
            ])),
    ]
    for pdu in fixed {
        let bytes = pdu.encode()
        for n in 0..<bytes.count {
            #expect(throws: ATTDecodeError.self, "\(pdu.opcode) prefix \(n)") { try ATTPDU.decode(Array(bytes.prefix(n))) }
        }
    }
    for pdu in minimalRequests + fixed
    where ![
        .findByTypeValueRequest, .writeRequest, .prepareWriteRequest, .signedWriteCommand,
        .readMultipleRequest, .readMultipleVariableRequest,
        .multipleHandleValueNotification, .findInformationResponse,
        .findByTypeValueResponse, .readByTypeResponse, .readByGroupTypeResponse,
    ].contains(pdu.opcode) {
        #expect(throws: ATTDecodeError.self, "\(pdu.opcode) with a trailing octet") { try ATTPDU.decode(pdu.encode() + [0]) }
    }
}

// MARK: - Bytes checked by hand against Vol 3 Part F §3.4

@Test func handCheckedEncodings() throws {
    // Exchange MTU Request, Client Rx MTU 517 = 0x0205, little-endian.
    #expect(ATTPDU.exchangeMTURequest(ATTExchangeMTURequest(clientRxMTU: 517)).encode() == [0x02, 0x05, 0x02])
    // Error Response: Read Request (0x0A) on handle 0x0003 failed with Attribute Not Found (0x0A).
    #expect(
        ATTPDU.errorResponse(ATTErrorResponse(requestOpcode: .readRequest, handle: 3, error: .attributeNotFound)).encode()
            == [0x01, 0x0A, 0x03, 0x00, 0x0A])
    // Primary service discovery: Read By Group Type 0x0001…0xFFFF, type 0x2800.
    #expect(
        ATTPDU.readByGroupTypeRequest(
            ATTReadByGroupTypeRequest(
                startingHandle: 1, endingHandle: 0xFFFF,
                attributeGroupType: .primaryService)
        ).encode()
            == [0x10, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28])
    // A characteristic declaration in a Read By Type Response: length 7, handle 2, properties 0x02
    // (read), value handle 3, UUID 0x2A00.
    let rsp = try ATTPDU.decode([0x09, 0x07, 0x02, 0x00, 0x02, 0x03, 0x00, 0x00, 0x2A])
    #expect(
        rsp
            == .readByTypeResponse(
                ATTReadByTypeResponse(attributeDataList: [
                    ATTHandleValue(handle: 2, value: [0x02, 0x03, 0x00, 0x00, 0x2A])
                ])))
    // Find Information Response, format 0x01: handle 3 is a CCCD (0x2902).
    #expect(
        try ATTPDU.decode([0x05, 0x01, 0x03, 0x00, 0x02, 0x29])
            == .findInformationResponse(
                ATTFindInformationResponse(
                    format: .uuid16,
                    information: [
                        ATTHandleUUID(handle: 3, uuid: .clientCharacteristicConfiguration)
                    ])))
    // A 128-bit UUID in a request goes little-endian: the last text byte first.
    let uuid = BluetoothUUID(string: "00112233-4455-6677-8899-AABBCCDDEEFF")!
    #expect(
        ATTPDU.readByTypeRequest(ATTReadByTypeRequest(startingHandle: 1, endingHandle: 2, attributeType: uuid)).encode()
            == [
                0x08, 0x01, 0x00, 0x02, 0x00, 0xFF, 0xEE, 0xDD, 0xCC, 0xBB, 0xAA, 0x99, 0x88,
                0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00,
            ])
    // Signed Write Command: opcode 0xD2, handle, value, then the 12-octet signature last.
    let signed = try ATTPDU.decode([0xD2, 0x05, 0x00, 0xAB] + Array(0..<12))
    #expect(signed == .signedWriteCommand(ATTSignedWriteCommand(handle: 5, value: [0xAB], signature: Array(0..<12))))
    // Multiple Handle Value Notification: handle 0x0015, length 1, value 0x64; handle 0x0017, length 0.
    #expect(
        try ATTPDU.decode([0x23, 0x15, 0x00, 0x01, 0x00, 0x64, 0x17, 0x00, 0x00, 0x00])
            == .multipleHandleValueNotification(
                ATTMultipleHandleValueNotification(handleLengthValueTupleList: [
                    ATTHandleValue(handle: 0x15, value: [0x64]), ATTHandleValue(handle: 0x17, value: []),
                ])))
    // Confirmation, Write Response and Execute Write Response are a lone opcode.
    #expect(ATTPDU.handleValueConfirmation(ATTHandleValueConfirmation()).encode() == [0x1E])
    #expect(ATTPDU.writeResponse(ATTWriteResponse()).encode() == [0x13])
    #expect(ATTPDU.executeWriteResponse(ATTExecuteWriteResponse()).encode() == [0x19])
}

@Test func malformedPDUsMapToTheSpecAnswer() {
    func error(_ bytes: [UInt8]) -> ATTDecodeError? {
        do { _ = try ATTPDU.decode(bytes); return nil } catch { return error }
    }
    // A 4-octet attribute type is not allowed in Read By Type (only 2 or 16).
    let bad = error([0x08, 0x01, 0x00, 0xFF, 0xFF, 0x00, 0x28, 0x00, 0x00])
    #expect(bad?.serverErrorResponse == ATTErrorResponse(requestOpcode: .readByTypeRequest, handle: 0, error: .invalidPDU))
    // Read Multiple with a single handle.
    #expect(error([0x0E, 0x01, 0x00])?.serverErrorResponse?.error == .invalidPDU)
    // Exchange MTU with a trailing octet.
    #expect(error([0x02, 0x17, 0x00, 0x00])?.reason == .trailingBytes)
    // A malformed response or command is never answered.
    #expect(error([0x05, 0x03, 0x01, 0x00, 0x00, 0x28]) != nil)
    #expect(error([0x05, 0x03, 0x01, 0x00, 0x00, 0x28])?.serverErrorResponse == nil)
    #expect(error([0x52, 0x01])?.serverErrorResponse == nil)
    #expect(error([0x09, 0x01, 0x01])?.reason == .invalidValue("Read By Type length 1 < 2"))
    #expect(error([0x11, 0x03, 0x01, 0x00, 0x02])?.serverErrorResponse == nil)
}

@Test func unknownOpcodesAreKeptAndAnsweredPerSpec() throws {
    let request = try ATTPDU.decode([0x3F, 0xAA])
    #expect(request == .unknown(opcode: ATTOpcode(0x3F), parameters: [0xAA]))
    #expect(
        request.opcode.unsupportedServerResponse
            == ATTErrorResponse(requestOpcode: ATTOpcode(0x3F), handle: 0, error: .requestNotSupported))
    // An unknown command (bit 6 set) is ignored.
    let command = try ATTPDU.decode([0x7F, 1, 2])
    #expect(command.opcode.isCommand)
    #expect(command.opcode.kind == .command)
    #expect(command.opcode.unsupportedServerResponse == nil)
    // A server that does not support a known request answers Request Not Supported.
    #expect(ATTOpcode.readMultipleVariableRequest.unsupportedServerResponse?.error == .requestNotSupported)
    #expect(ATTOpcode.handleValueConfirmation.unsupportedServerResponse == nil)
}

@Test func opcodeBitsAndPairing() {
    #expect(ATTOpcode.writeCommand.isCommand)
    #expect(!ATTOpcode.writeCommand.hasSignature)
    #expect(ATTOpcode.signedWriteCommand.isCommand && ATTOpcode.signedWriteCommand.hasSignature)
    #expect(ATTOpcode.signedWriteCommand.method == ATTOpcode.writeRequest.method)
    #expect(!ATTOpcode.writeRequest.isCommand)
    let pairs: [(ATTOpcode, ATTOpcode)] = [
        (.exchangeMTURequest, .exchangeMTUResponse), (.findInformationRequest, .findInformationResponse),
        (.findByTypeValueRequest, .findByTypeValueResponse), (.readByTypeRequest, .readByTypeResponse),
        (.readRequest, .readResponse), (.readBlobRequest, .readBlobResponse),
        (.readMultipleRequest, .readMultipleResponse), (.readByGroupTypeRequest, .readByGroupTypeResponse),
        (.writeRequest, .writeResponse), (.prepareWriteRequest, .prepareWriteResponse),
        (.executeWriteRequest, .executeWriteResponse), (.readMultipleVariableRequest, .readMultipleVariableResponse),
    ]
    for (req, rsp) in pairs {
        #expect(req.isRequest && !req.isResponse)
        #expect(rsp.isResponse && !rsp.isRequest)
        #expect(ATTOpcode.responseOpcode(for: req) == rsp)
        // In ATT every response opcode is its request's plus one.
        #expect(rsp.rawValue == req.rawValue + 1)
    }
    #expect(ATTOpcode.errorResponse.isResponse)
    #expect(ATTOpcode.responseOpcode(for: .writeCommand) == nil)
    #expect(ATTOpcode.handleValueIndication.kind == .indication)
    #expect(ATTOpcode.multipleHandleValueNotification.kind == .notification)
    #expect(ATTOpcode(0x30).kind == .unknown)
    #expect(ATTErrorCode(0x85).isApplicationError)
    #expect(ATTErrorCode.cccdImproperlyConfigured.rawValue == 0xFD)
    #expect(ATTErrorCode(0x42).name == "Reserved")
}

@Test func decodesInsideALargerBufferWithoutCopyingTheFrame() throws {
    // An L2CAP frame: length 0x0005, CID 0x0004, then the ATT PDU.
    let frame: [UInt8] = [0x05, 0x00, 0x04, 0x00, 0x12, 0x09, 0x00, 0x01, 0x00]
    let pdu = try ATTPDU.decode(frame[4...])
    #expect(pdu == .writeRequest(ATTWriteRequest(handle: 9, value: [0x01, 0x00])))
}

@Test func readMultipleVariableResponseCutAtMTU() throws {
    // Declared length 4, only two octets made it before ATT_MTU − 1.
    let pdu = try ATTPDU.decode([0x21, 0x01, 0x00, 0xAA, 0x04, 0x00, 0x01, 0x02])
    guard case let .readMultipleVariableResponse(r) = pdu else { Issue.record("wrong PDU"); return }
    #expect(r.lengthValueTupleList.count == 2)
    #expect(r.lengthValueTupleList[1].isTruncated)
    #expect(r.lengthValueTupleList[1].value == [1, 2])
}
