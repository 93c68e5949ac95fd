// libFuzzer target: the H4 deframer (BLEHCI H4Framer) fed an arbitrary byte stream, in slices whose sizes
// come from the input itself, as a serial or TCP transport would feed it. Properties: every packet returned
// has the length its header announces, and slicing does not change the packets that come out.
import BLEHCI
import FuzzSupport

func packets(_ bytes: [UInt8], slice: Int) -> ([HCIPacket], Bool) {
    var framer = H4Framer()
    var out: [HCIPacket] = []
    var i = 0
    while i < bytes.count {
        let end = min(bytes.count, i + slice)
        framer.append(bytes[i..<end])
        i = end
        do {
            while let p = try framer.nextPacket() { out.append(p) }
        } catch {
            return (out, true)
        }
    }
    return (out, false)
}

func fuzzOne(_ data: [UInt8]) {
    guard let first = data.first else { return }
    let slice = Int(first % 32) + 1
    let whole = packets(Array(data.dropFirst()), slice: Int.max)
    let sliced = packets(Array(data.dropFirst()), slice: slice)
    fuzzCheck(whole.0 == sliced.0 && whole.1 == sliced.1, "slicing changed the packets")
    for p in whole.0 {
        let declared: Int
        switch p.type {
        case .event: declared = 2 + Int(p.bytes[1])
        case .acl: declared = 4 + (Int(p.bytes[2]) | Int(p.bytes[3]) << 8)
        case .command, .sco: declared = 3 + Int(p.bytes[2])
        case .iso: declared = 4 + (Int(p.bytes[2]) | Int(p.bytes[3] & 0x3F) << 8)
        }
        fuzzCheck(p.bytes.count == declared, "packet length differs from its header")
    }
}

func seeds() -> [(String, [UInt8])] {
    let reset: [UInt8] = [0x04, 0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00]
    let acl: [UInt8] = [0x02, 0x40, 0x20, 0x07, 0x00, 0x03, 0x00, 0x04, 0x00, 0x0A, 0x03, 0x00]
    let status: [UInt8] = [0x04, 0x0F, 0x04, 0x00, 0x01, 0x0D, 0x20]
    let command: [UInt8] = [0x01, 0x03, 0x0C, 0x00]
    let iso: [UInt8] = [0x05, 0x01, 0x20, 0x02, 0x00, 0xAA, 0xBB]
    return [
        ("event-command-complete", [0] + reset),
        ("acl-att-read", [3] + acl),
        ("mixed-stream", [5] + reset + acl + status + command + iso),
        ("byte-by-byte", [0] + acl + reset),
    ]
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    fuzzOne(count == 0 ? [] : Array(UnsafeBufferPointer(start: start, count: count)))
    return 0
}

#if FUZZING
@_cdecl("FuzzH4_main")
public func fuzzEntry(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    FuzzMain.libFuzzer(argc, argv, fuzzerTestOneInput)
}
#else
@main struct Main {
    static func main() { FuzzMain.run(name: "FuzzH4", test: fuzzOne, seeds: seeds) }
}
#endif
