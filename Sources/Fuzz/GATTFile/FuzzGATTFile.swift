// libFuzzer target: the GATT database JSON file of `ble serve` (BLEGATT GATTDatabaseFile), parsed and
// turned into a database. Any error thrown is fine; a trap or a hang is a finding.
import BLEGATT
import Foundation
import FuzzSupport

func fuzzOne(_ data: [UInt8]) {
    guard let file = try? GATTDatabaseFile(json: Data(data)) else { return }
    _ = try? file.makeDatabase()
}

func seeds() throws -> [(String, [UInt8])] {
    var out: [(String, [UInt8])] = []
    if let example = FileManager.default.contents(atPath: "examples/heart-rate.json") {
        out.append(("heart-rate-example.json", [UInt8](example)))
    }
    let small = [
        #"{"defaultServices": false, "services": [{"uuid": "180D"}]}"#,
        #"{"services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "properties": ["read", "notify"], "value": "hex:0102"}]}]}"#,
        #"{"services": [{"uuid": "180D", "handle": 20, "endHandle": 40, "characteristics": [{"uuid": "2A37", "handle": 30}]}]}"#,
        #"{"services": [{"uuid": "180F", "primary": false}, {"uuid": "180D", "includes": ["180F"]}]}"#,
        #"{"services": [{"uuid": "6E400001-B5A3-F393-E0A9-E50E24DCCA9E", "characteristics": [{"uuid": "6E400002-B5A3-F393-E0A9-E50E24DCCA9E", "permissions": ["readable", "writeable"]}]}]}"#,
        #"{"services": [{"uuid": "180D", "handle": 10, "endHandle": 11, "characteristics": [{"uuid": "2A37"}]}]}"#,
    ]
    for (i, s) in small.enumerated() { out.append(("small-\(i).json", Array(s.utf8))) }
    return out
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    fuzzOne(count == 0 ? [] : Array(UnsafeBufferPointer(start: start, count: count)))
    return 0
}

#if FUZZING
@_cdecl("FuzzGATTFile_main")
public func fuzzEntry(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    FuzzMain.libFuzzer(argc, argv, fuzzerTestOneInput)
}
#else
@main struct Main {
    static func main() { FuzzMain.run(name: "FuzzGATTFile", test: fuzzOne, seeds: seeds) }
}
#endif
