// Pipe streams behave like Foundation's on Apple platforms: delegate events on a scheduled run loop (of a
// background thread, or the main one) or queue, back-pressure through write() returning 0 and a later
// .hasSpaceAvailable, end and error semantics, nothing lost or reordered across 10 MB.
import Foundation
import Testing
@testable import BoundStreams

/// A thread that runs its run loop until cancelled.
final class LoopThread: @unchecked Sendable {
    var runLoop: RunLoop!
    var thread: Thread!
    private let stop = NSLock()
    private var stopped = false
    static func start() -> LoopThread {
        let t = LoopThread()
        let ready = DispatchSemaphore(value: 0)
        t.thread = Thread {
            t.runLoop = RunLoop.current
            t.runLoop.add(Timer(timeInterval: 86_400, repeats: true) { _ in }, forMode: .default)
            ready.signal()
            while !t.stop.withLock({ t.stopped }) { _ = t.runLoop.run(mode: .default, before: Date().addingTimeInterval(0.2)) }
        }
        t.thread.start()
        ready.wait()
        return t
    }
    func cancel() { stop.withLock { stopped = true } }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    func add(_ k: Int) { lock.withLock { n += k } }
    var value: Int { lock.withLock { n } }
}

final class Recorder: NSObject, StreamDelegate, @unchecked Sendable {
    let lock = NSLock()
    var events: [(Stream.Event, Bool)] = []   // the event, and whether it arrived on the expected thread
    var expected: Thread?
    var onEvent: ((Stream, Stream.Event) -> Void)?
    func stream(_ s: Stream, handle e: Stream.Event) {
        lock.withLock { events.append((e, expected.map { $0 === Thread.current } ?? true)) }
        onEvent?(s, e)
    }
    var kinds: [Stream.Event] { lock.withLock { events.map(\.0) } }
    var allOnThread: Bool { lock.withLock { events.allSatisfy(\.1) } }
}

func eventually(_ seconds: Double = 5, _ cond: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while !cond() { if Date() > deadline { return false }; usleep(1000) }
    return true
}

@Suite struct PipeStreamTests {
    @Test func writesFillTheBufferAndReturnZeroWhenFull() {
        let out = PipeOutputStream(capacity: 10)
        out.open()
        let data: [UInt8] = Array(0..<16)
        #expect(out.write(data, maxLength: 16) == 10)
        #expect(!out.hasSpaceAvailable)
        #expect(out.write(data, maxLength: 1) == 0)
        #expect(out.take(maxLength: 4) == [0, 1, 2, 3])
        #expect(out.write(Array(data[10...]), maxLength: 6) == 4)
        #expect(out.take(maxLength: 100) == Array(4..<14))
        out.fail(error: CocoaError(.fileWriteUnknown))
        #expect(out.write(data, maxLength: 1) == -1 && out.streamStatus == .error && out.streamError != nil)
    }

    @Test func readsInOrderThenEndAfterFinish() {
        let input = PipeInputStream()
        let consumed = Counter()
        input.onConsumed = { n in consumed.add(n) }
        var buf = [UInt8](repeating: 0, count: 8)
        #expect(input.read(&buf, maxLength: 8) == -1)   // not open
        input.open()
        input.deliver([1, 2, 3])
        input.deliver([4, 5])
        #expect(input.hasBytesAvailable)
        #expect(input.read(&buf, maxLength: 4) == 4 && Array(buf[0..<4]) == [1, 2, 3, 4])
        input.finish(error: nil)
        #expect(input.streamStatus == .open)               // one octet still to read
        #expect(input.read(&buf, maxLength: 8) == 1 && buf[0] == 5)
        #expect(input.streamStatus == .atEnd && input.read(&buf, maxLength: 8) == 0)
        #expect(consumed.value == 5)
        // An error ends it at once.
        let failing = PipeInputStream()
        failing.open()
        failing.deliver([1])
        failing.finish(error: CocoaError(.fileReadUnknown))
        #expect(failing.streamStatus == .error && failing.read(&buf, maxLength: 1) == -1)
    }

    @Test func eventsOnABackgroundRunLoop() {
        let t = LoopThread.start()
        defer { t.cancel() }
        let input = PipeInputStream()
        let r = Recorder()
        r.expected = t.thread
        input.delegate = r
        input.schedule(in: t.runLoop, forMode: .default)
        input.open()
        #expect(eventually { r.kinds == [.openCompleted] })
        input.deliver([7, 7])
        #expect(eventually { r.kinds.last == .hasBytesAvailable })
        var buf = [UInt8](repeating: 0, count: 8)
        #expect(input.read(&buf, maxLength: 8) == 2)
        input.finish(error: nil)
        #expect(eventually { r.kinds.last == .endEncountered })
        #expect(r.allOnThread)
        // Not delivered after removal from the run loop.
        let other = PipeInputStream()
        let r2 = Recorder()
        other.delegate = r2
        other.schedule(in: t.runLoop, forMode: .default)
        other.remove(from: t.runLoop, forMode: .default)
        other.open()
        usleep(50_000)
        #expect(r2.kinds.isEmpty)
    }

    @Test func eventsOnAQueue() {
        let q = DispatchQueue(label: "streams.test")
        let out = PipeOutputStream(capacity: 4)
        let r = Recorder()
        out.delegate = r
        out.schedule(on: q)
        out.open()
        #expect(eventually { r.kinds.contains(.hasSpaceAvailable) })
    }

    @Test func backPressureThroughABoundPairMovesTenMegabytesIntact() {
        // A writer thread pushes 10 MB through a 4 KB pair; a reader on a run loop thread drains slowly at
        // first. Every write that returns 0 is followed by a .hasSpaceAvailable; nothing lost or reordered.
        var inS: InputStream?, outS: OutputStream?
        Stream.getBoundStreams(withBufferSize: 4096, inputStream: &inS, outputStream: &outS)
        let input = inS as! PipeInputStream, output = outS as! PipeOutputStream
        let total = 10 * 1024 * 1024
        let readerThread = LoopThread.start(), writerThread = LoopThread.start()
        defer { readerThread.cancel(); writerThread.cancel() }
        let reader = Recorder(), writer = Recorder()
        let lock = NSLock()
        var received = 0, mismatch = false, zeroWrites = 0, sent = 0, done = false
        reader.onEvent = { s, e in
            guard e == .hasBytesAvailable, let i = s as? InputStream else { return }
            var buf = [UInt8](repeating: 0, count: 1500)
            while i.hasBytesAvailable {
                let n = i.read(&buf, maxLength: buf.count)
                guard n > 0 else { break }
                lock.withLock {
                    for k in 0..<n where buf[k] != UInt8(truncatingIfNeeded: received + k) { mismatch = true }
                    received += n
                    if received == total { done = true }
                }
                if received < 64 * 1024 { usleep(200) }   // slow at first
            }
        }
        writer.onEvent = { s, e in
            guard e == .hasSpaceAvailable, let o = s as? OutputStream else { return }
            while sent < total {
                let chunk = (0..<min(3000, total - sent)).map { UInt8(truncatingIfNeeded: sent + $0) }
                let n = o.write(chunk, maxLength: chunk.count)
                if n <= 0 { lock.withLock { zeroWrites += 1 }; return }
                sent += n
            }
            o.close()
        }
        input.delegate = reader
        output.delegate = writer
        input.schedule(in: readerThread.runLoop, forMode: .default)
        output.schedule(in: writerThread.runLoop, forMode: .default)
        input.open()
        output.open()
        #expect(eventually(30) { lock.withLock { done } })
        #expect(lock.withLock { received == total && !mismatch })
        #expect(lock.withLock { zeroWrites } > 0)   // the writer was throttled
        #expect(eventually { reader.kinds.last == .endEncountered })
        #expect(input.bufferedByteCount == 0 && output.bufferedByteCount == 0)
    }

    @Test func mainRunLoopDeliversToAProgramRunningIt() {
        // The main thread runs RunLoop.main briefly; events raised from another thread reach it.
        guard Thread.isMainThread else { return }   // Swift Testing may run tests off the main thread
        let input = PipeInputStream()
        let r = Recorder()
        input.delegate = r
        input.schedule(in: .main, forMode: .default)
        input.open()
        nonisolated(unsafe) let feed = input
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) { feed.deliver([1]) }
        let deadline = Date().addingTimeInterval(2)
        while !r.kinds.contains(.hasBytesAvailable) && Date() < deadline { _ = RunLoop.main.run(mode: .default, before: Date().addingTimeInterval(0.1)) }
        #expect(r.kinds.contains(.hasBytesAvailable))
    }

    @Test func closingTheInputGivesBackWhatWasNotRead() {
        let input = PipeInputStream()
        let consumed = Counter()
        input.onConsumed = { n in consumed.add(n) }
        input.open()
        input.deliver([UInt8](repeating: 1, count: 100))
        var b = [UInt8](repeating: 0, count: 10)
        _ = input.read(&b, maxLength: 10)
        input.close()
        #expect(consumed.value == 100 && input.isClosedByApp)
        input.deliver([1])
        #expect(input.bufferedByteCount == 0)
    }
}
