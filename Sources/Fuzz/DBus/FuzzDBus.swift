// libFuzzer target: D-Bus messages as a bus would send them (the BlueZ backend's input). Framing, then the
// whole decode, then a re-encode of whatever decoded. Any error thrown is fine; a trap or a hang is a finding.
import DBus
import FuzzSupport

func fuzzOne(_ data: [UInt8]) {
    var rest = data[...]
    while let length = try? DBusMessage.frameLength(rest, limit: 1 << 20), rest.count >= length {
        let whole = Array(rest.prefix(length))
        rest = rest.dropFirst(length)
        guard let message = try? DBusMessage.decode(whole) else { continue }
        if case .unknown = message.kind { continue }
        // What decoded must encode again, and decoding that must give the same octets once more (octets, not
        // values: a NaN is not equal to itself).
        guard let again = try? message.encoded(serial: message.serial) else { continue }
        guard let back = try? DBusMessage.decode(again), (try? back.encoded(serial: back.serial)) == again else {
            fatalError("a decoded message did not survive a re-encode")
        }
    }
}

func seeds() throws -> [(String, [UInt8])] {
    var out: [(String, [UInt8])] = []
    let samples: [DBusMessage] = [
        .methodCall(destination: "org.bluez", path: "/org/bluez/hci0", interface: "org.bluez.Adapter1", member: "StartDiscovery"),
        .signal(
            path: "/org/bluez/hci0/dev_00_11_22_33_44_55", interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
            body: [
                .string("org.bluez.Device1"),
                .stringVariantDictionary([
                    "RSSI": .int16(-60), "ManufacturerData": .dictionary(key: .uint16, value: .variant, [DBusDictEntry(.uint16(0x4c), .variant(.bytes([1, 2])))]),
                ]),
                .array(.string, []),
            ]),
        .methodCall(
            destination: "org.bluez", path: "/org/bluez/hci0/dev_00_11_22_33_44_55/service0010/char0011",
            interface: "org.bluez.GattCharacteristic1", member: "WriteValue",
            body: [.bytes([1, 2, 3]), .stringVariantDictionary(["offset": .uint16(0), "type": .string("request")])]),
    ]
    for (i, m) in samples.enumerated() { out.append(("message-\(i).bin", try m.encoded(serial: UInt32(i + 1)))) }
    return out
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    fuzzOne(count == 0 ? [] : Array(UnsafeBufferPointer(start: start, count: count)))
    return 0
}

#if FUZZING
@_cdecl("FuzzDBus_main")
public func fuzzEntry(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    FuzzMain.libFuzzer(argc, argv, fuzzerTestOneInput)
}
#else
@main struct Main {
    static func main() { FuzzMain.run(name: "FuzzDBus", test: fuzzOne, seeds: seeds) }
}
#endif
