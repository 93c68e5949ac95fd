// libFuzzer target: btsnoop capture reading (BLETransport BTSnoopReader.parse). Property: every record
// read keeps a known packet type; errors are fine, traps are findings.
import BLEHCI
import BLETransport
import Foundation
import FuzzSupport

func fuzzOne(_ data: [UInt8]) {
    guard let records = try? BTSnoopReader.parse(data) else { return }
    fuzzCheck(records.count <= data.count / 24 + 1, "more records than the bytes hold")
}

func be32(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }

/// A capture as BTSnoopWriter lays it out (RFC 1761 style, datalink 1002 = H4), built by hand here.
func capture(_ records: [(flags: UInt32, h4: [UInt8])]) -> [UInt8] {
    var out = Array("btsnoop\0".utf8) + be32(1) + be32(1002)
    for (i, r) in records.enumerated() {
        out += be32(UInt32(r.h4.count)) + be32(UInt32(r.h4.count)) + be32(r.flags) + be32(0)
        out += be32(0x00E0_3AB4) + be32(0x4000_0000 &+ UInt32(i))
        out += r.h4
    }
    return out
}

func seeds() throws -> [(String, [UInt8])] {
    let reset: [UInt8] = [0x01, 0x03, 0x0C, 0x00]
    let complete: [UInt8] = [0x04, 0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00]
    let acl: [UInt8] = [0x02, 0x40, 0x20, 0x07, 0x00, 0x03, 0x00, 0x04, 0x00, 0x0A, 0x03, 0x00]
    var out: [(String, [UInt8])] = [
        ("empty-capture", capture([])),
        ("reset-exchange", capture([(2, reset), (3, complete)])),
        ("acl-both-ways", capture([(0, acl), (1, acl), (3, complete)])),
    ]
    // A capture written by the library's own writer.
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("fuzz-btsnoop-seed-\(getpid()).btsnoop").path
    defer { try? FileManager.default.removeItem(atPath: path) }
    let writer = try BTSnoopWriter(path: path)
    writer.write(HCIPacket(type: .command, bytes: Array(reset.dropFirst())), direction: .hostToController)
    writer.write(HCIPacket(type: .event, bytes: Array(complete.dropFirst())), direction: .controllerToHost)
    writer.write(HCIPacket(type: .acl, bytes: Array(acl.dropFirst())), direction: .controllerToHost)
    writer.close()
    if let data = FileManager.default.contents(atPath: path) { out.append(("written-by-BTSnoopWriter", [UInt8](data))) }
    return out
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    fuzzOne(count == 0 ? [] : Array(UnsafeBufferPointer(start: start, count: count)))
    return 0
}

#if FUZZING
@_cdecl("FuzzBTSnoop_main")
public func fuzzEntry(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    FuzzMain.libFuzzer(argc, argv, fuzzerTestOneInput)
}
#else
@main struct Main {
    static func main() { FuzzMain.run(name: "FuzzBTSnoop", test: fuzzOne, seeds: seeds) }
}
#endif
