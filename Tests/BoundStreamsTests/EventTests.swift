import Foundation
import Testing
@testable import BoundStreams

/// Delegate events: on which thread, when, and how often.
@Suite(.serialized) struct EventTests {
    func write(_ out: OutputStream, _ bytes: [UInt8]) -> Int {
        bytes.withUnsafeBufferPointer { out.write($0.baseAddress!, maxLength: $0.count) }
    }

    func drain(_ input: InputStream) -> [UInt8] {
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 256)
        while input.hasBytesAvailable {
            let n = input.read(&buf, maxLength: buf.count)
            if n <= 0 { break }
            out += buf[0..<n]
        }
        return out
    }

    @Test func eventsArriveOnABackgroundRunLoopThread() {
        let loop = RunLoopThread(sliceSeconds: 0.05)
        defer { loop.stop() }
        let (input, output) = BoundStreams.makePair(bufferSize: 8)
        let recorder = Recorder()
        input.delegate = recorder
        output.delegate = recorder
        input.schedule(in: loop.runLoop, forMode: .default)
        output.schedule(in: loop.runLoop, forMode: .default)
        input.open(); output.open()
        #expect(recorder.wait(for: .openCompleted, on: input))
        #expect(recorder.wait(for: .hasSpaceAvailable, on: output))
        #expect(recorder.events(of: output) == [.openCompleted, .hasSpaceAvailable])
        #expect(recorder.events(of: input) == [.openCompleted], "nothing to read yet")
        #expect(recorder.records.allSatisfy { $0.thread === loop.thread })

        // A write that fills the buffer: a read event for the reader, no space event for the writer.
        #expect(write(output, Array(0..<10)) == 8)
        #expect(recorder.wait(for: .hasBytesAvailable, on: input))
        Thread.sleep(forTimeInterval: 0.1)
        #expect(recorder.events(of: input) == [.openCompleted, .hasBytesAvailable])
        #expect(recorder.events(of: output) == [.openCompleted, .hasSpaceAvailable])

        // A reader who does not read gets no second event, even when more arrives (edge-triggered).
        #expect(write(output, [1]) == 0)
        Thread.sleep(forTimeInterval: 0.1)
        #expect(recorder.events(of: input).filter { $0 == .hasBytesAvailable }.count == 1)

        // A partial read frees space (writer's event) and leaves bytes (reader's second event).
        var buf = [UInt8](repeating: 0, count: 3)
        #expect(input.read(&buf, maxLength: 3) == 3)
        #expect(recorder.wait(for: .hasSpaceAvailable, on: output, count: 2))
        #expect(recorder.wait(for: .hasBytesAvailable, on: input, count: 2))
        #expect(drain(input) == [3, 4, 5, 6, 7])

        // Closing the writer: the reader hears the end once the bytes are read.
        #expect(write(output, [9]) == 1)
        output.close()
        #expect(recorder.wait(for: .hasBytesAvailable, on: input, count: 3))
        Thread.sleep(forTimeInterval: 0.05)
        #expect(!recorder.events(of: input).contains(.endEncountered))
        #expect(drain(input) == [9])
        #expect(recorder.wait(for: .endEncountered, on: input))
        #expect(recorder.records.allSatisfy { $0.thread === loop.thread })
        // The write of [9] left space, so a third .hasSpaceAvailable may have come before close(); none after it.
        let writerEvents = recorder.events(of: output)
        #expect(writerEvents.first == .openCompleted && writerEvents.dropFirst().allSatisfy { $0 == .hasSpaceAvailable })
        #expect((3...4).contains(writerEvents.count))
        Thread.sleep(forTimeInterval: 0.05)
        #expect(recorder.events(of: output).count == writerEvents.count, "none after close")
    }

    @Test func readerCloseRaisesEndOnWriterAndErrorsArrive() {
        let loop = RunLoopThread(sliceSeconds: 0.05)
        defer { loop.stop() }
        let (input, output) = BoundStreams.makePair(bufferSize: 8)
        let recorder = Recorder()
        output.delegate = recorder
        output.schedule(in: loop.runLoop, forMode: .default)
        input.open(); output.open()
        input.close()
        #expect(recorder.wait(for: .endEncountered, on: output))

        let transportFed = PipeInputStream()
        transportFed.delegate = recorder
        transportFed.schedule(in: loop.runLoop, forMode: .default)
        transportFed.open()
        transportFed.producer.finish(error: TestError(code: 1))
        #expect(recorder.wait(for: .errorOccurred, on: transportFed))

        let drained = PipeOutputStream(capacity: 4)
        drained.delegate = recorder
        drained.schedule(in: loop.runLoop, forMode: .default)
        drained.open()
        drained.consumer.fail(error: TestError(code: 2))
        #expect(recorder.wait(for: .errorOccurred, on: drained))
        #expect(recorder.records.allSatisfy { $0.thread === loop.thread })
    }

    @Test func unscheduledStreamsHoldEventsUntilScheduled() {
        let loop = RunLoopThread(sliceSeconds: 0.05)
        defer { loop.stop() }
        let input = PipeInputStream()
        let recorder = Recorder()
        input.delegate = recorder
        input.open()
        input.deliver([1])
        Thread.sleep(forTimeInterval: 0.05)
        #expect(recorder.records.isEmpty)
        input.schedule(in: loop.runLoop, forMode: .default)
        #expect(recorder.wait(for: .hasBytesAvailable, on: input))
        #expect(recorder.events(of: input) == [.openCompleted, .hasBytesAvailable])
        // Removed from the run loop: nothing more arrives.
        input.remove(from: loop.runLoop, forMode: .default)
        #expect(drain(input) == [1])
        input.deliver([2])
        Thread.sleep(forTimeInterval: 0.1)
        #expect(recorder.events(of: input).count == 2)
    }

    /// A transport's batch of SDUs is one append and one event.
    @Test func aBatchOfChunksIsOneEvent() {
        let queue = DispatchQueue(label: "batch")
        let input = PipeInputStream()
        let recorder = Recorder()
        input.delegate = recorder
        input.open()
        input.producer.deliver(contentsOf: [[1, 2], [], [3], [4, 5, 6]])
        input.schedule(on: queue)
        #expect(recorder.wait(for: .hasBytesAvailable, on: input))
        queue.sync {}
        #expect(recorder.events(of: input) == [.openCompleted, .hasBytesAvailable])
        #expect(drain(input) == [1, 2, 3, 4, 5, 6])
        input.producer.finish()
        input.producer.deliver(contentsOf: [[7]])
        #expect(recorder.wait(for: .endEncountered, on: input))
        #expect(drain(input).isEmpty, "nothing after finish")
    }

    @Test func eventsOnADispatchQueue() {
        let queue = DispatchQueue(label: "events")
        let key = DispatchSpecificKey<Int>()
        queue.setSpecific(key: key, value: 42)
        let input = PipeInputStream()
        let recorder = Recorder()
        let onQueue = Counter()
        recorder.handler = { _, _ in if DispatchQueue.getSpecific(key: key) == 42 { onQueue.add(1) } }
        input.delegate = recorder
        input.schedule(on: queue)
        input.open()
        input.producer.deliver([1, 2])
        input.producer.finish()
        #expect(recorder.wait(for: .hasBytesAvailable, on: input))
        #expect(drain(input) == [1, 2])
        #expect(recorder.wait(for: .endEncountered, on: input))
        // The recorder notes an event before its handler runs: let the queue finish the last one.
        queue.sync {}
        #expect(onQueue.value == recorder.records.count)
    }

    @Test func eventsInANonDefaultModeOnlyWhileRunningInIt() {
        let mode = RunLoop.Mode("BoundStreamsTestMode")
        let loop = RunLoopThread(sliceSeconds: 0.05)
        defer { loop.stop() }
        let input = PipeInputStream()
        let recorder = Recorder()
        input.delegate = recorder
        input.schedule(in: loop.runLoop, forMode: mode)
        input.open()
        input.deliver([1])
        Thread.sleep(forTimeInterval: 0.15)
        #expect(recorder.records.isEmpty, "the loop runs in .default only")
        input.schedule(in: loop.runLoop, forMode: .default)
        #expect(recorder.wait(for: .hasBytesAvailable, on: input))
    }
}
