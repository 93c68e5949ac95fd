// libFuzzer target: ATT PDU decoding (BLEATT ATTPDU.decode). Property: a PDU that decodes re-encodes to
// bytes that decode to the same PDU.
import BLEATT
import BLEWire
import FuzzSupport

func fuzzOne(_ data: [UInt8]) {
    guard let pdu = try? ATTPDU.decode(data) else { return }
    let again = try? ATTPDU.decode(pdu.encode())
    fuzzCheck(again == pdu, "ATT round trip: \(pdu) → \(String(describing: again))")
}

func seeds() -> [(String, [UInt8])] {
    let nus = BluetoothUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!
    let pdus: [(String, ATTPDU)] = [
        ("error-response", .errorResponse(ATTErrorResponse(requestOpcode: .readRequest, handle: 0x1234, error: .readNotPermitted))),
        ("mtu-request", .exchangeMTURequest(ATTExchangeMTURequest(clientRxMTU: 517))),
        ("mtu-response", .exchangeMTUResponse(ATTExchangeMTUResponse(serverRxMTU: 247))),
        ("find-information-request", .findInformationRequest(ATTFindInformationRequest(startingHandle: 1, endingHandle: 0xFFFF))),
        (
            "find-information-response-16",
            .findInformationResponse(
                ATTFindInformationResponse(
                    format: .uuid16,
                    information: [
                        ATTHandleUUID(handle: 3, uuid: BluetoothUUID(0x2803)), ATTHandleUUID(handle: 4, uuid: BluetoothUUID(0x2A00)),
                    ]))
        ),
        (
            "find-information-response-128",
            .findInformationResponse(
                ATTFindInformationResponse(
                    format: .uuid128,
                    information: [
                        ATTHandleUUID(handle: 0x10, uuid: nus)
                    ]))
        ),
        (
            "find-by-type-value-request",
            .findByTypeValueRequest(ATTFindByTypeValueRequest(startingHandle: 1, endingHandle: 0xFFFF, attributeType: 0x2800, attributeValue: [0x0D, 0x18]))
        ),
        (
            "find-by-type-value-response",
            .findByTypeValueResponse(
                ATTFindByTypeValueResponse(handlesInformationList: [
                    ATTHandlesInformation(foundAttributeHandle: 0x20, groupEndHandle: 0x2F)
                ]))
        ),
        ("read-by-type-request", .readByTypeRequest(ATTReadByTypeRequest(startingHandle: 1, endingHandle: 0x10, attributeType: BluetoothUUID(0x2803)))),
        ("read-by-type-request-128", .readByTypeRequest(ATTReadByTypeRequest(startingHandle: 1, endingHandle: 0x10, attributeType: nus))),
        (
            "read-by-type-response",
            .readByTypeResponse(
                ATTReadByTypeResponse(attributeDataList: [
                    ATTHandleValue(handle: 2, value: [0x02, 0x03, 0x00, 0x00, 0x2A]), ATTHandleValue(handle: 4, value: [0x02, 0x05, 0x00, 0x01, 0x2A]),
                ]))
        ),
        ("read-request", .readRequest(ATTReadRequest(handle: 3))),
        ("read-response", .readResponse(ATTReadResponse(value: Array("Hello".utf8)))),
        ("read-blob-request", .readBlobRequest(ATTReadBlobRequest(handle: 3, offset: 22))),
        ("read-blob-response", .readBlobResponse(ATTReadBlobResponse(partValue: [1, 2, 3]))),
        ("read-multiple-request", .readMultipleRequest(ATTReadMultipleRequest(handles: [3, 5, 7]))),
        ("read-multiple-variable-request", .readMultipleVariableRequest(ATTReadMultipleVariableRequest(handles: [3, 5]))),
        (
            "read-multiple-variable-response",
            .readMultipleVariableResponse(
                ATTReadMultipleVariableResponse(lengthValueTupleList: [
                    ATTLengthValue(value: [0xAA]), ATTLengthValue(value: []), ATTLengthValue(value: [1, 2, 3]),
                ]))
        ),
        ("read-by-group-type-request", .readByGroupTypeRequest(ATTReadByGroupTypeRequest(startingHandle: 1, endingHandle: 0xFFFF, attributeGroupType: .primaryService))),
        (
            "read-by-group-type-response",
            .readByGroupTypeResponse(
                ATTReadByGroupTypeResponse(attributeDataList: [
                    ATTGroupData(handle: 1, endGroupHandle: 5, value: [0x00, 0x18]), ATTGroupData(handle: 6, endGroupHandle: 9, value: [0x01, 0x18]),
                ]))
        ),
        ("write-request", .writeRequest(ATTWriteRequest(handle: 9, value: [0x01, 0x00]))),
        ("write-response", .writeResponse(ATTWriteResponse())),
        ("write-command", .writeCommand(ATTWriteCommand(handle: 0x10, value: [9, 8, 7]))),
        ("signed-write-command", .signedWriteCommand(ATTSignedWriteCommand(handle: 0x11, value: [0x42], signature: Array(1...12)))),
        ("prepare-write-request", .prepareWriteRequest(ATTPrepareWriteRequest(handle: 0x12, offset: 18, partValue: [1, 2]))),
        ("execute-write-request", .executeWriteRequest(ATTExecuteWriteRequest(flags: .writeAll))),
        ("notification", .handleValueNotification(ATTHandleValueNotification(handle: 0x15, value: [0x64]))),
        ("indication", .handleValueIndication(ATTHandleValueIndication(handle: 3, value: [0x01, 0x00, 0xFF, 0xFF]))),
        ("confirmation", .handleValueConfirmation(ATTHandleValueConfirmation())),
        (
            "multiple-notification",
            .multipleHandleValueNotification(
                ATTMultipleHandleValueNotification(handleLengthValueTupleList: [
                    ATTHandleValue(handle: 0x15, value: [1]), ATTHandleValue(handle: 0x17, value: [2, 3]),
                ]))
        ),
    ]
    return pdus.map { ($0.0, $0.1.encode()) }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    fuzzOne(count == 0 ? [] : Array(UnsafeBufferPointer(start: start, count: count)))
    return 0
}

#if FUZZING
@_cdecl("FuzzATT_main")
public func fuzzEntry(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    FuzzMain.libFuzzer(argc, argv, fuzzerTestOneInput)
}
#else
@main struct Main {
    static func main() { FuzzMain.run(name: "FuzzATT", test: fuzzOne, seeds: seeds) }
}
#endif
