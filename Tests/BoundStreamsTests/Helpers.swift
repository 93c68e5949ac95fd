import Foundation
@testable import BoundStreams

/// Lets a test hand a non-Sendable stream to another thread; the streams' API is thread-safe.
struct Unchecked<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// A delegate that records each event with the thread it arrived on, and runs an optional handler.
final class Recorder: NSObject, StreamDelegate, @unchecked Sendable {
    struct Record {
        let stream: ObjectIdentifier
        let event: Stream.Event
        let thread: Thread
    }

    private let condition = NSCondition()
    private var _records: [Record] = []
    var handler: ((Stream, Stream.Event) -> Void)?

    var records: [Record] { condition.withLock { _records } }

    func events(of stream: Stream) -> [Stream.Event] {
        records.filter { $0.stream == ObjectIdentifier(stream) }.map(\.event)
    }

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        condition.withLock {
            _records.append(Record(stream: ObjectIdentifier(aStream), event: eventCode, thread: Thread.current))
            condition.broadcast()
        }
        handler?(aStream, eventCode)
    }

    /// Waits (blocking, without running a run loop) until `predicate` holds for the records.
    @discardableResult
    func wait(timeout: TimeInterval = 5, until predicate: ([Record]) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while !predicate(_records) {
            if !condition.wait(until: deadline) { return predicate(_records) }
        }
        return true
    }

    func wait(for event: Stream.Event, on stream: Stream, count: Int = 1, timeout: TimeInterval = 5) -> Bool {
        let id = ObjectIdentifier(stream)
        return wait(timeout: timeout) { $0.filter { $0.stream == id && $0.event == event }.count >= count }
    }
}

/// A thread that runs its run loop in the default mode, in short slices, until stopped.
final class RunLoopThread: @unchecked Sendable {
    private let ready = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var stopped = false
    private var _runLoop: RunLoop?
    private var _thread: Thread?
    private let done = DispatchSemaphore(value: 0)

    var runLoop: RunLoop { lock.withLock { _runLoop! } }
    var thread: Thread { lock.withLock { _thread! } }

    init(sliceSeconds: TimeInterval = 0.5) {
        let thread = Thread { [self] in
            lock.withLock {
                _runLoop = RunLoop.current
                _thread = Thread.current
            }
            // Keep the loop alive before any stream is scheduled.
            let keepAlive = Timer(fire: .distantFuture, interval: 1_000, repeats: true) { _ in }
            RunLoop.current.add(keepAlive, forMode: .default)
            ready.signal()
            while !lock.withLock({ stopped }) {
                _ = RunLoop.current.run(mode: .default, before: Date().addingTimeInterval(sliceSeconds))
            }
            keepAlive.invalidate()
            done.signal()
        }
        thread.start()
        ready.wait()
    }

    func stop() {
        lock.withLock { stopped = true }
        // Wake it: a timer firing now.
        runLoop.add(Timer(fire: Date(), interval: 0, repeats: false) { _ in }, forMode: .default)
        done.wait()
    }
}

struct TestError: Error, Equatable {
    let code: Int
}

/// A deterministic byte pattern, so order and loss can be checked.
func patternByte(_ i: Int) -> UInt8 { UInt8(truncatingIfNeeded: i &* 31 &+ (i >> 8)) }
