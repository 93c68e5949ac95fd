// libFuzzer target: advertising data parsing (BLEGAP AdvertisingData, strict and lenient) and every
// accessor a scanner calls on a report (name, UUIDs, service data, manufacturer data, TX power, appearance,
// connection interval range). Properties: strict decoding re-encodes to the significant bytes; lenient
// decoding never keeps more structures than exist.
import BLEGAP
import BLEWire
import FuzzSupport

func touch(_ ad: AdvertisingData) {
    _ = ad.flags
    _ = ad.localName
    _ = ad.isLocalNameComplete
    _ = ad.serviceUUIDs
    _ = ad.solicitedServiceUUIDs
    _ = ad.serviceData
    _ = ad.manufacturerData
    _ = ad.txPowerLevel
    _ = ad.appearance
    _ = ad.connectionIntervalRange
}

func fuzzOne(_ data: [UInt8]) {
    let lenient = AdvertisingData(lenient: data)
    touch(lenient)
    if let strict = try? AdvertisingData(decoding: data) {
        touch(strict)
        fuzzCheck(strict == lenient, "strict and lenient disagree on valid data")
        let again = try? AdvertisingData(decoding: strict.encode())
        fuzzCheck(again == strict, "advertising data round trip")
    }
    fuzzCheck(lenient.structures.count <= data.count / 2 + 1, "more structures than bytes allow")
}

func seeds() -> [(String, [UInt8])] {
    let packed = AdvertisingPacker.pack(
        localName: "OpenCoreBluetooth heart rate monitor",
        serviceUUIDs: [BluetoothUUID(0x180D), BluetoothUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!])
    let rich = AdvertisingData([
        ADStructure(type: .flags, data: [0x06]),
        ADStructure(type: ADType(0x0A), data: [0xF4]),   // TX power
        ADStructure(type: ADType(0x16), data: [0x0F, 0x18, 0x64]),   // service data, 16-bit
        ADStructure(type: .appearance, data: [0x41, 0x03]),
        ADStructure(type: ADType(0x12), data: [0x06, 0x00, 0x0C, 0x00]),   // connection interval range
        ADStructure(type: .manufacturerSpecificData, data: [0x4C, 0x00, 0x02, 0x15]),
    ])
    return [
        ("flags-uuid16", [2, 1, 6, 3, 3, 0x0D, 0x18]),
        ("packed-advertising", packed.advertisingData),
        ("packed-scan-response", packed.scanResponseData),
        ("rich", rich.encode()),
        ("name-and-padding", [4, 9, 0x4F, 0x43, 0x42, 0, 0, 0]),
        ("service-data-32-128", [7, 0x20, 1, 2, 3, 4, 0xAA, 0xBB, 18, 0x21] + Array(0..<16) + [0x5A]),
    ]
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    fuzzOne(count == 0 ? [] : Array(UnsafeBufferPointer(start: start, count: count)))
    return 0
}

#if FUZZING
@_cdecl("FuzzAdvertisingData_main")
public func fuzzEntry(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    FuzzMain.libFuzzer(argc, argv, fuzzerTestOneInput)
}
#else
@main struct Main {
    static func main() { FuzzMain.run(name: "FuzzAdvertisingData", test: fuzzOne, seeds: seeds) }
}
#endif
