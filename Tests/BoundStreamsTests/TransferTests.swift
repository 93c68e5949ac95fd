import Foundation
import Testing
@testable import BoundStreams

/// Bytes moved by two threads through a small buffer, driven only by delegate events; wake-up latency.
@Suite(.serialized) struct TransferTests {
    /// Writes `total` pattern bytes in chunks whenever `.hasSpaceAvailable` arrives, then closes.
    final class Writer: NSObject, StreamDelegate, @unchecked Sendable {
        let total: Int
        let chunk: Int
        var sent = 0
        var zeroWrites = 0
        private var scratch: [UInt8]

        init(total: Int, chunk: Int) {
            self.total = total
            self.chunk = chunk
            scratch = [UInt8](repeating: 0, count: chunk)
        }

        func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
            guard eventCode == .hasSpaceAvailable, let out = aStream as? OutputStream else { return }
            while sent < total {
                let n = min(chunk, total - sent)
                for i in 0..<n { scratch[i] = patternByte(sent + i) }
                let written = out.write(scratch, maxLength: n)
                if written == 0 { zeroWrites += 1; return }   // full: wait for the next event
                precondition(written > 0)
                sent += written
            }
            out.close()
        }
    }

    /// Reads whenever `.hasBytesAvailable` arrives, checking order; signals at the end.
    final class Reader: NSObject, StreamDelegate, @unchecked Sendable {
        var received = 0
        var mismatches = 0
        var consumedReported = 0
        let done = DispatchSemaphore(value: 0)
        private var buffer = [UInt8](repeating: 0, count: 3_000)

        func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
            guard let input = aStream as? InputStream else { return }
            switch eventCode {
            case .hasBytesAvailable:
                // Reads one slice per event: the next event comes because bytes remain.
                let n = input.read(&buffer, maxLength: buffer.count)
                for i in 0..<max(0, n) where buffer[i] != patternByte(received + i) { mismatches += 1 }
                received += max(0, n)
            case .endEncountered, .errorOccurred:
                input.close()
                done.signal()
            default:
                break
            }
        }
    }

    func transfer(total: Int, bufferSize: Int, chunk: Int) -> (Writer, Reader, TimeInterval) {
        let writerLoop = RunLoopThread(sliceSeconds: 0.05)
        let readerLoop = RunLoopThread(sliceSeconds: 0.05)
        defer { writerLoop.stop(); readerLoop.stop() }
        let (input, output) = BoundStreams.makePair(bufferSize: bufferSize)
        let writer = Writer(total: total, chunk: chunk)
        let reader = Reader()
        output.delegate = writer
        input.delegate = reader
        let start = Date()
        input.schedule(in: readerLoop.runLoop, forMode: .default)
        output.schedule(in: writerLoop.runLoop, forMode: .default)
        input.open()
        output.open()
        let finished = reader.done.wait(timeout: .now() + 120) == .success
        precondition(finished, "transfer stalled at \(reader.received) of \(total) bytes")
        return (writer, reader, Date().timeIntervalSince(start))
    }

    @Test func tenMegabytesThroughASmallBufferInOrder() {
        let total = 10 * 1_048_576
        let (writer, reader, seconds) = transfer(total: total, bufferSize: 4_096, chunk: 1_500)
        #expect(writer.sent == total)
        #expect(reader.received == total, "nothing lost")
        #expect(reader.mismatches == 0, "in order")
        #expect(writer.zeroWrites > 0, "the writer was throttled by the small buffer")
        print(
            "BoundStreams: 10 MB through a 4 KB bound pair by two run-loop threads: \(String(format: "%.1f", Double(total) / seconds / 1e6)) MB/s, \(writer.zeroWrites) full-buffer waits"
        )
    }

    @Test func throughputWith64KBuffer() {
        let total = 32 * 1_048_576
        let (_, reader, seconds) = transfer(total: total, bufferSize: 65_536, chunk: 16_384)
        #expect(reader.received == total && reader.mismatches == 0)
        print("BoundStreams: 32 MB through a 64 KB bound pair, event-driven: \(String(format: "%.1f", Double(total) / seconds / 1e6)) MB/s")
    }

    @Test func onConsumedSumsToBytesReadUnderConcurrency() {
        let input = PipeInputStream()
        let consumed = Counter()
        input.onConsumed = { consumed.add($0) }
        input.open()
        let producer = input.producer
        let total = 1_000_000
        DispatchQueue.global().async {
            var i = 0
            while i < total {
                let n = min(777, total - i)
                producer.deliver((i..<i + n).map(patternByte))
                i += n
            }
            producer.finish()
        }
        var buffer = [UInt8](repeating: 0, count: 1_000)
        var got = 0, bad = 0
        while true {
            let n = input.read(&buffer, maxLength: buffer.count)   // blocks while empty
            if n <= 0 { break }
            for j in 0..<n where buffer[j] != patternByte(got + j) { bad += 1 }
            got += n
        }
        #expect(got == total && bad == 0)
        #expect(consumed.value == total)
        #expect(input.streamStatus == .atEnd)
    }

    /// A run loop busy handling events is not woken for each new one: events posted while it is awake only
    /// signal its source, and it delivers them before it sleeps. Every byte still arrives, in order.
    @Test func aBusyRunLoopIsNotWokenPerEvent() {
        let loop = RunLoopThread(sliceSeconds: 0.05)
        defer { loop.stop() }
        let input = PipeInputStream()
        let reader = Recorder()
        var got: [UInt8] = []
        let done = DispatchSemaphore(value: 0)
        let total = 2_000
        reader.handler = { stream, event in
            guard event == .hasBytesAvailable, let i = stream as? InputStream else { return }
            var b = [UInt8](repeating: 0, count: 64)
            let n = i.read(&b, maxLength: b.count)
            got += b[0..<max(0, n)]
            Thread.sleep(forTimeInterval: 0.000_5)   // a reader slower than the producer: the loop stays busy
            if got.count == total { done.signal() }
        }
        input.delegate = reader
        input.schedule(in: loop.runLoop, forMode: .default)
        input.open()
        for i in 0..<total { input.producer.deliver([patternByte(i)]) }
        #expect(done.wait(timeout: .now() + 30) == .success)
        #expect(got == (0..<total).map(patternByte))
        let wakeUps = input.dispatcher.wakeUpsSent
        #expect(wakeUps < total / 10, "\(wakeUps) wake-ups for \(total) deliveries")
        print("BoundStreams: \(total) deliveries to a busy run loop woke it \(wakeUps) times")
        input.close()
    }

    /// How long from a `deliver` on another thread to the delegate on a run loop blocked in
    /// `run(mode:before:)`, and whether `run(mode:before:)` returns after the event as on Apple's systems.
    @Test func wakeLatency() {
        measureWakeLatency(how: "CFRunLoopWakeUp")
    }

    /// The same through the fallback wake-up (a timer set to now), used where CFRunLoopWakeUp is not found.
    @Test func wakeLatencyWithTheTimerFallback() {
        StreamEventDispatcher.wakesWithTimerForTesting.withLock { $0 = true }
        let input = PipeInputStream()
        StreamEventDispatcher.wakesWithTimerForTesting.withLock { $0 = false }
        measureWakeLatency(input, how: "timer")
    }

    func measureWakeLatency(_ input: PipeInputStream = PipeInputStream(), how: String) {
        let got = DispatchSemaphore(value: 0)
        let recorder = Recorder()
        recorder.handler = { stream, event in
            if event == .hasBytesAvailable {
                var b = [UInt8](repeating: 0, count: 8)
                _ = (stream as! InputStream).read(&b, maxLength: 8)
                got.signal()
            }
        }
        input.delegate = recorder
        let returns = Counter()
        let ready = DispatchSemaphore(value: 0)
        let stop = Counter()
        let box = Unchecked(input)
        let thread = Thread {
            box.value.schedule(in: .current, forMode: .default)
            box.value.open()
            ready.signal()
            while stop.value == 0 {
                _ = RunLoop.current.run(mode: .default, before: .distantFuture)
                returns.add(1)
            }
        }
        thread.start()
        ready.wait()
        Thread.sleep(forTimeInterval: 0.05)
        var samples: [Double] = []
        for i in 0..<300 {
            if i == 299 { stop.add(1) }
            let t0 = DispatchTime.now().uptimeNanoseconds
            input.producer.deliver([1])
            #expect(got.wait(timeout: .now() + 5) == .success)
            samples.append(Double(DispatchTime.now().uptimeNanoseconds - t0) / 1_000)
            Thread.sleep(forTimeInterval: 0.001)
        }
        Thread.sleep(forTimeInterval: 0.05)
        samples.sort()
        #expect(returns.value >= 1, "run(mode:before: .distantFuture) returned after an event")
        #expect(samples[samples.count / 2] < 5_000, "median wake-up under 5 ms")
        print(
            "BoundStreams: wake-up latency (\(how)) deliver → delegate on a sleeping run loop: median \(Int(samples[samples.count / 2])) µs, p99 \(Int(samples[samples.count * 99 / 100])) µs; run(mode:before:) returned \(returns.value) times for 300 events"
        )
        input.close()
    }
}
