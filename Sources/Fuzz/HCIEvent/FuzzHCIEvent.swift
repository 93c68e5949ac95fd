// libFuzzer target: HCI event decoding (BLEHCI HCIEvent.decode) and ACL header decoding. The first input
// octet chooses the packet type. Property: what decodes re-encodes to something that decodes equal.
import BLEHCI
import BLEWire
import FuzzSupport

func fuzzOne(_ data: [UInt8]) {
    guard let first = data.first else { return }
    let body = Array(data.dropFirst())
    if first & 1 == 0 {
        guard let event = try? HCIEvent.decode(HCIPacket(type: .event, bytes: body)) else { return }
        let again = try? HCIEvent.decode(event.encode())
        fuzzCheck(again == event, "event round trip: \(event) → \(String(describing: again))")
    } else {
        guard let acl = try? ACLPacket.decode(HCIPacket(type: .acl, bytes: body)) else { return }
        let again = try? ACLPacket.decode(acl.encode())
        fuzzCheck(again == acl, "ACL round trip")
    }
}

func seeds() -> [(String, [UInt8])] {
    let peer = BluetoothAddress(bytes: [0x55, 0x44, 0x33, 0x22, 0x11, 0xC0], type: .random)
    let events: [(String, HCIEvent)] = [
        ("command-complete", .commandComplete(numHCICommandPackets: 1, opcode: .reset, returnParameters: [0])),
        ("command-status", .commandStatus(status: .success, numHCICommandPackets: 1, opcode: .leCreateConnection)),
        ("disconnection", .disconnectionComplete(status: .success, handle: 0x40, reason: .connectionTimeout)),
        ("completed-packets", .numberOfCompletedPackets([CompletedPackets(handle: 0x40, count: 3), CompletedPackets(handle: 0x41, count: 1)])),
        ("encryption-change", .encryptionChange(status: .success, handle: 0x40, enabled: 1)),
        ("key-refresh", .encryptionKeyRefreshComplete(status: .success, handle: 0x40)),
        ("remote-version", .readRemoteVersionInformationComplete(status: .success, handle: 0x40, version: 0x0C, companyIdentifier: 0x05F1, subversion: 1)),
        ("hardware-error", .hardwareError(3)),
        (
            "le-connection-complete",
            .le(
                .connectionComplete(
                    LEConnectionComplete(
                        status: .success, connectionHandle: 0x40, role: 0, peerAddressType: 1, peerAddress: peer,
                        connectionInterval: 0x28, peripheralLatency: 0, supervisionTimeout: 0x1F4, centralClockAccuracy: 0)))
        ),
        (
            "le-enhanced-connection-complete",
            .le(
                .enhancedConnectionComplete(
                    LEEnhancedConnectionComplete(
                        status: .success, connectionHandle: 0x41, role: 1, peerAddressType: 0,
                        peerAddress: .zero, connectionInterval: 6, peripheralLatency: 0, supervisionTimeout: 100, centralClockAccuracy: 1)))
        ),
        (
            "le-advertising-report",
            .le(
                .advertisingReport([
                    LEAdvertisingReport(eventType: .advInd, addressType: 1, address: peer, data: [2, 1, 6], rssi: -60),
                    LEAdvertisingReport(eventType: .scanRsp, addressType: 0, address: .zero, data: [], rssi: 127),
                ]))
        ),
        (
            "le-connection-update",
            .le(
                .connectionUpdateComplete(
                    LEConnectionUpdateComplete(
                        status: .success, connectionHandle: 0x40, connectionInterval: 12,
                        peripheralLatency: 1, supervisionTimeout: 200)))
        ),
        ("le-remote-features", .le(.readRemoteFeaturesComplete(status: .success, handle: 0x40, features: 0x21))),
        ("le-ltk-request", .le(.longTermKeyRequest(handle: 0x40, random: 0xAABB, ediv: 0x1234))),
        ("le-conn-param-request", .le(.remoteConnectionParameterRequest(handle: 0x40, intervalMin: 6, intervalMax: 12, maxLatency: 0, timeout: 100))),
        ("le-data-length", .le(.dataLengthChange(LEDataLengthChange(connectionHandle: 0x40, maxTxOctets: 251, maxTxTime: 2120, maxRxOctets: 251, maxRxTime: 2120)))),
        ("le-phy-update", .le(.phyUpdateComplete(status: .success, handle: 0x40, txPHY: 2, rxPHY: 2))),
    ]
    var out = events.map { ("event-" + $0.0, [UInt8(0)] + $0.1.encode().bytes) }
    out.append(("acl-first", [1] + ACLPacket(handle: 0x40, boundary: .firstFlushable, data: [3, 0, 4, 0, 0x0A, 3, 0]).encode().bytes))
    out.append(("acl-continuing", [1] + ACLPacket(handle: 0x41, boundary: .continuing, data: [1, 2, 3]).encode().bytes))
    return out
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    fuzzOne(count == 0 ? [] : Array(UnsafeBufferPointer(start: start, count: count)))
    return 0
}

#if FUZZING
@_cdecl("FuzzHCIEvent_main")
public func fuzzEntry(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    FuzzMain.libFuzzer(argc, argv, fuzzerTestOneInput)
}
#else
@main struct Main {
    static func main() { FuzzMain.run(name: "FuzzHCIEvent", test: fuzzOne, seeds: seeds) }
}
#endif
