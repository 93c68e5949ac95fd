// A thread running its own run loop, on which the tools schedule L2CAP channel streams: the way an iOS app
// schedules them on a run loop, for a command-line program whose main thread is in `dispatchMain()`.
import Foundation

final class StreamThread: @unchecked Sendable {
    private(set) var runLoop: RunLoop!

    static func start(name: String) -> StreamThread {
        let t = StreamThread()
        let started = DispatchSemaphore(value: 0)
        let thread = Thread {
            t.runLoop = RunLoop.current
            // A run loop with no source returns at once; a far-off timer keeps it waiting for stream events.
            t.runLoop.add(Timer(timeInterval: 86_400, repeats: true) { _ in }, forMode: .default)
            started.signal()
            while true { _ = t.runLoop.run(mode: .default, before: .distantFuture) }
        }
        thread.name = name
        thread.start()
        started.wait()
        return t
    }

    /// Schedules both streams of a channel here, with `delegate`, and opens them.
    func attach(_ streams: [Stream], delegate: StreamDelegate) {
        for s in streams {
            s.delegate = delegate
            s.schedule(in: runLoop, forMode: .default)
            s.open()
        }
    }
}
