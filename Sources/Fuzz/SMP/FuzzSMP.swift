// libFuzzer target: SMP PDU decoding (BLESMP SMPPDU.decode). Property: what decodes re-encodes to bytes
// that decode equal.
import BLESMP
import BLEWire
import FuzzSupport

func fuzzOne(_ data: [UInt8]) {
    guard let pdu = try? SMPPDU.decode(data) else { return }
    let again = try? SMPPDU.decode(pdu.encode())
    fuzzCheck(again == pdu, "SMP round trip: \(pdu) → \(String(describing: again))")
}

func seeds() -> [(String, [UInt8])] {
    let features = PairingFeatures(
        ioCapability: .keyboardDisplay, authRequirements: [.bonding, .mitm, .secureConnections],
        initiatorKeys: [.encryptionKey, .identityKey], responderKeys: .le)
    let pdus: [(String, SMPPDU)] = [
        ("pairing-request", .pairingRequest(features)),
        (
            "pairing-response",
            .pairingResponse(
                PairingFeatures(
                    ioCapability: .noInputNoOutput, authRequirements: [.bonding],
                    maximumKeySize: 7, initiatorKeys: [], responderKeys: [.encryptionKey]))
        ),
        ("pairing-confirm", .pairingConfirm(Array(0..<16))),
        ("pairing-random", .pairingRandom(Array(16..<32))),
        ("pairing-failed", .pairingFailed(PairingFailureReason(rawValue: 0x05))),
        ("encryption-information", .encryptionInformation(ltk: Array(repeating: 0x11, count: 16))),
        ("central-identification", .centralIdentification(ediv: 0x1234, rand: 0x0102_0304_0506_0708)),
        ("identity-information", .identityInformation(irk: Array(repeating: 0x22, count: 16))),
        ("identity-address", .identityAddressInformation(BluetoothAddress(bytes: [1, 2, 3, 4, 5, 0xC6], type: .random))),
        ("signing-information", .signingInformation(csrk: Array(repeating: 0x33, count: 16))),
        ("security-request", .securityRequest([.bonding, .mitm])),
        ("public-key", .pairingPublicKey(x: Array(0..<32), y: Array(32..<64))),
        ("dhkey-check", .pairingDHKeyCheck(Array(repeating: 0x44, count: 16))),
        ("keypress", .keypressNotification(2)),
    ]
    return pdus.map { ($0.0, $0.1.encode()) }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    fuzzOne(count == 0 ? [] : Array(UnsafeBufferPointer(start: start, count: count)))
    return 0
}

#if FUZZING
@_cdecl("FuzzSMP_main")
public func fuzzEntry(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    FuzzMain.libFuzzer(argc, argv, fuzzerTestOneInput)
}
#else
@main struct Main {
    static func main() { FuzzMain.run(name: "FuzzSMP", test: fuzzOne, seeds: seeds) }
}
#endif
