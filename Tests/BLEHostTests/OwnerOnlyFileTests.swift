// The host's state files (bonds, the device cache) are owner-only from their first byte: a reader watching the
// file while it is rewritten never sees it with other permissions, nor half written.
import Foundation
import Testing
import Synchronization
@testable import BLEHost

@Suite struct OwnerOnlyFileTests {
    @Test func aStateFileIsNeverSeenWithOtherPermissionsOrHalfWritten() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ocb-owner-only-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("devices-0CB15A000001.json")
        let contents = (0..<40).map { Data(String(repeating: "\($0 % 10)", count: 4096 + $0).utf8) }
        try OwnerOnlyFile.write(contents[0], to: file)
        // A watcher reads the mode and the contents as fast as it can while the file is rewritten.
        let stop = Atomic<Bool>(false)
        let seen = Mutex<(modes: Set<Int>, torn: Int, reads: Int)>(([], 0, 0))
        let watcher = Thread {
            while !stop.load(ordering: .relaxed) {
                var st = stat()
                guard stat(file.path, &st) == 0 else { continue }
                let data = try? Data(contentsOf: file)
                seen.withLock { s in
                    s.modes.insert(Int(st.st_mode & 0o777))
                    s.reads += 1
                    if let data, !contents.contains(data) { s.torn += 1 }
                }
            }
        }
        watcher.start()
        for round in 0..<400 { try OwnerOnlyFile.write(contents[round % contents.count], to: file) }
        stop.store(true, ordering: .relaxed)
        Thread.sleep(forTimeInterval: 0.05)
        let result = seen.withLock { $0 }
        #expect(result.reads > 0)
        #expect(result.modes == [0o600], "modes seen: \(result.modes.map { String($0, radix: 8) })")
        #expect(result.torn == 0)
        var st = stat()
        #expect(stat(dir.path, &st) == 0 && st.st_mode & 0o777 == 0o700)
        // No temporary file is left beside it.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == [file.lastPathComponent])
    }
}
