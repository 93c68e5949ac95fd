// A progress bar for bench runs that last more than a second: drawn on standard error, only when it is a
// terminal (so piped output, and the JSON line on standard output, stay as they are), and erased at the end.
import Foundation
import BLETransport

final class BenchProgress: @unchecked Sendable {
    /// Made only on a terminal: a dispatch source released before it was ever resumed crashes libdispatch.
    private var timer: DispatchSourceTimer?
    private let lock = NSLock()
    private var drawn = false
    private var finished = false

    /// Polls `done` (run on `loop`, where the bench counts) against `total` every 0.2 s once a second passed.
    init(label: String, total: Int, loop: EventLoop, done: @escaping @Sendable () -> Int) {
        guard isatty(STDERR_FILENO) == 1, total > 0 else { return }
        let started = Date()
        let timer = DispatchSource.makeTimerSource(queue: .global())
        self.timer = timer
        timer.schedule(deadline: .now() + 1, repeating: 0.2)
        timer.setEventHandler { [weak self] in
            guard let self else { return }
            loop.execute { [self] in self.draw(label: label, n: done(), total: total, seconds: Date().timeIntervalSince(started)) }
        }
        timer.resume()
    }

    private func draw(label: String, n: Int, total: Int, seconds: Double) {
        let width = 30
        let filled = max(0, min(width, Int(Double(width) * Double(n) / Double(total))))
        let line = String(
            format: "\r%@ [%@%@] %5.1f %% %.0f s\u{1B}[K", label, String(repeating: "#", count: filled),
            String(repeating: "-", count: width - filled), Double(n) * 100 / Double(total), seconds)
        lock.withLock {
            guard !finished else { return }
            drawn = true
            FileHandle.standardError.write(Data(line.utf8))
        }
    }

    /// Stops and erases the bar.
    func finish() {
        timer?.cancel()
        lock.withLock {
            if drawn { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
            drawn = false
            finished = true
        }
    }
}
