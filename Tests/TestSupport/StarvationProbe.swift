// A diagnostic for whole test runs, off unless OCB_STARVATION_PROBE names a file. A thread of its own posts a
// block to Dispatch's global queue every 100 ms and notes how long the block waited for a worker (with
// SWIFT_DEBUG_CONCURRENCY_ENABLE_COOPERATIVE_QUEUES=false, as scripts/test sets it, every resumed task waits in
// the same place). A wait longer than OCB_STARVATION_THRESHOLD seconds (default 2) is written to the file, with
// the threads' stacks taken by gdb at that moment (three times at most), so the tests holding the workers can be
// named. It starts with the first `pause`.
import Foundation

#if canImport(Glibc)
import Glibc
#endif

enum StarvationProbe {
    static let started: Bool = {
        guard let path = ProcessInfo.processInfo.environment["OCB_STARVATION_PROBE"], !path.isEmpty else { return false }
        let threshold = Double(ProcessInfo.processInfo.environment["OCB_STARVATION_THRESHOLD"] ?? "") ?? 2
        let thread = Thread { run(path: path, threshold: threshold) }
        thread.name = "starvation-probe"
        thread.start()
        return true
    }()

    private final class Box: @unchecked Sendable {
        let lock = NSLock()
        var ranAt: Double?
    }

    private static func now() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }

    private static func run(path: String, threshold: Double) {
        guard let out = fopen(path, "a") else { return }
        var dumps = 0
        var worst = 0.0
        func log(_ s: String) {
            let stamp = ISO8601DateFormatter.string(from: Date(), timeZone: .gmt, formatOptions: [.withTime, .withFractionalSeconds])
            fputs("\(stamp) \(s)\n", out)
            fflush(out)
        }
        log("probe started, pid \(getpid()), threshold \(threshold) s")
        while true {
            let box = Box()
            let posted = now()
            DispatchQueue.global().async { box.lock.withLock { box.ranAt = now() } }
            var reported = false
            while true {
                usleep(100_000)
                let ran = box.lock.withLock { box.ranAt }
                let waited = (ran ?? now()) - posted
                if waited > threshold, !reported {
                    reported = true
                    let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? -1
                    log("a global-queue block has waited \(String(format: "%.1f", waited)) s; \(threads) threads")
                    if dumps < 3 {
                        dumps += 1
                        let gdb = Process()
                        gdb.executableURL = URL(fileURLWithPath: "/usr/bin/gdb")
                        gdb.arguments = ["-batch", "-nx", "-p", "\(getpid())", "-ex", "thread apply all bt 25"]
                        let pipe = Pipe()
                        gdb.standardOutput = pipe
                        gdb.standardError = FileHandle(forWritingAtPath: "/dev/null")
                        if (try? gdb.run()) != nil {
                            let text = pipe.fileHandleForReading.readDataToEndOfFile()
                            gdb.waitUntilExit()
                            log("stacks:\n" + (String(decoding: text, as: UTF8.self)))
                        }
                    }
                }
                if let ran {
                    let w = ran - posted
                    if w > worst {
                        worst = w
                        log(String(format: "worst wait so far %.3f s", w))
                    }
                    break
                }
            }
        }
    }
}
