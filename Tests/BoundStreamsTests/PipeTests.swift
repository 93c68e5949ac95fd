import Foundation
import Testing
@testable import BoundStreams

/// Synchronous behaviour: reads, writes, partial writes, end and error, close, delegate, properties.
@Suite struct PipeTests {
    func write(_ out: OutputStream, _ bytes: [UInt8]) -> Int {
        bytes.withUnsafeBufferPointer { out.write($0.baseAddress!, maxLength: $0.count) }
    }

    func read(_ input: InputStream, max: Int) -> [UInt8]? {
        var buf = [UInt8](repeating: 0, count: max)
        let n = input.read(&buf, maxLength: max)
        return n < 0 ? nil : Array(buf[0..<n])
    }

    @Test func writtenBytesComeOutOfTheOtherSide() {
        let (input, output) = BoundStreams.makePair(bufferSize: 16)
        #expect(input.streamStatus == .notOpen && output.streamStatus == .notOpen)
        #expect(write(output, [1, 2, 3]) == -1, "write before open fails")
        input.open(); output.open()
        #expect(input.streamStatus == .open && output.streamStatus == .open)
        #expect(!input.hasBytesAvailable && output.hasSpaceAvailable)
        #expect(write(output, [1, 2, 3, 4, 5]) == 5)
        #expect(input.hasBytesAvailable)
        #expect(read(input, max: 3) == [1, 2, 3])
        #expect(read(input, max: 10) == [4, 5])
        #expect(!input.hasBytesAvailable)
    }

    @Test func partialWritesWhenFullNothingLostOrReordered() {
        let (input, output) = BoundStreams.makePair(bufferSize: 8)
        input.open(); output.open()
        #expect(write(output, Array(0..<12)) == 8)
        #expect(!output.hasSpaceAvailable)
        #expect(write(output, [99]) == 0, "full: 0, never blocks")
        #expect(read(input, max: 5) == [0, 1, 2, 3, 4])
        #expect(output.hasSpaceAvailable)
        #expect(write(output, Array(8..<12)) == 4)
        #expect(write(output, [12, 13]) == 1)
        #expect(read(input, max: 100) == [5, 6, 7, 8, 9, 10, 11, 12])
    }

    @Test func writerCloseEndsReaderAfterBufferedBytes() {
        let (input, output) = BoundStreams.makePair(bufferSize: 8)
        input.open(); output.open()
        #expect(write(output, [7, 8, 9]) == 3)
        output.close()
        #expect(output.streamStatus == .closed)
        #expect(write(output, [1]) == -1)
        #expect(input.streamStatus == .open, "bytes still to read")
        #expect(read(input, max: 2) == [7, 8])
        #expect(read(input, max: 2) == [9])
        #expect(input.streamStatus == .atEnd)
        #expect(read(input, max: 2) == [], "0 at end")
    }

    @Test func readerCloseEndsWriter() {
        let (input, output) = BoundStreams.makePair(bufferSize: 8)
        input.open(); output.open()
        #expect(write(output, [1, 2]) == 2)
        input.close()
        #expect(input.streamStatus == .closed)
        #expect(read(input, max: 4) == nil)
        #expect(output.streamStatus == .atEnd)
        #expect(!output.hasSpaceAvailable)
        #expect(write(output, [3]) == -1)
    }

    @Test func producerFeedsInputEndAndOnConsumedCounts() {
        let input = PipeInputStream()
        let consumed = Counter()
        input.onConsumed = { consumed.add($0) }
        input.deliver([1, 2, 3])
        input.deliver(Data([4, 5]))
        #expect(input.bufferedByteCount == 5)
        input.open()
        #expect(read(input, max: 2) == [1, 2])
        #expect(read(input, max: 1) == [3])
        #expect(consumed.value == 3)
        input.producer.finish()
        #expect(input.streamStatus == .open)
        #expect(read(input, max: 10) == [4, 5])
        #expect(consumed.value == 5, "onConsumed sums to the bytes read")
        #expect(input.streamStatus == .atEnd)
        #expect(read(input, max: 10) == [])
        input.deliver([9])
        #expect(input.bufferedByteCount == 0, "deliveries after finish are ignored")
    }

    @Test func producerErrorFailsInput() {
        let input = PipeInputStream()
        input.open()
        input.deliver([1, 2, 3])
        input.finish(error: TestError(code: 7))
        #expect(input.streamStatus == .error)
        #expect(input.streamError as? TestError == TestError(code: 7))
        #expect(read(input, max: 10) == nil)
    }

    @Test func inputCloseTellsTransport() {
        let input = PipeInputStream()
        let closed = Counter()
        input.onClose = { closed.add(1) }
        input.open()
        input.close()
        input.close()
        #expect(closed.value == 1)
        #expect(input.streamStatus == .closed)
    }

    @Test func consumerTakesAndIsToldOfCloseAfterTheLastByte() {
        let output = PipeOutputStream(capacity: 4)
        let available = Counter(), closed = Counter()
        output.onDataAvailable = { available.add(1) }
        output.onClose = { closed.add(1) }
        output.open()
        #expect(write(output, [1, 2, 3, 4, 5, 6]) == 4)
        #expect(available.value == 1)
        #expect(write(output, [5]) == 0)
        #expect(available.value == 1, "nothing added, nothing announced")
        #expect(output.take(maxLength: 3) == [1, 2, 3])
        #expect(write(output, [5, 6]) == 2)
        output.close()
        #expect(closed.value == 0, "bytes remain")
        var got: [UInt8] = []
        output.consumer.take(maxLength: 2) {
            got += $0; return $0.count
        }
        #expect(got == [4, 5])
        #expect(closed.value == 0)
        #expect(output.take(maxLength: 10) == [6])
        #expect(closed.value == 1)
        #expect(output.take(maxLength: 10) == [])
        #expect(closed.value == 1)
    }

    @Test func closeWithNothingBufferedTellsAtOnce() {
        let output = PipeOutputStream(capacity: 4)
        let closed = Counter()
        output.onClose = { closed.add(1) }
        output.open()
        output.close()
        #expect(closed.value == 1)
    }

    @Test func consumerFailAndFarSideClose() {
        let output = PipeOutputStream(capacity: 4)
        output.open()
        output.fail(error: TestError(code: 3))
        #expect(output.streamStatus == .error)
        #expect(output.streamError as? TestError == TestError(code: 3))
        #expect(write(output, [1]) == -1)

        let other = PipeOutputStream(capacity: 4)
        other.open()
        #expect(write(other, [1]) == 1)
        other.closeFarSide()
        #expect(other.streamStatus == .atEnd)
        #expect(other.bufferedByteCount == 0)
        #expect(write(other, [1]) == -1)
    }

    @Test func delegateNilMeansSelf() {
        let (input, output) = BoundStreams.makePair(bufferSize: 4)
        #expect(input.delegate === input)
        #expect(output.delegate === output)
        let recorder = Recorder()
        input.delegate = recorder
        #expect(input.delegate === recorder)
        input.delegate = nil
        #expect(input.delegate === input)
        do {
            let temporary = Recorder()
            output.delegate = temporary
        }
        #expect(output.delegate === output, "held weakly")
    }

    @Test func propertiesAndBuffer() {
        let (input, output) = BoundStreams.makePair(bufferSize: 4)
        #expect(input.property(forKey: .fileCurrentOffsetKey) == nil)
        #expect(!output.setProperty(nil, forKey: .fileCurrentOffsetKey))
        var pointer: UnsafeMutablePointer<UInt8>?
        var length = 0
        #expect(!input.getBuffer(&pointer, length: &length))
    }

    @Test func getBoundStreamsWithApplesSignature() {
        var input: InputStream?
        var output: OutputStream?
        Stream.getBoundStreams(withBufferSize: 32, inputStream: &input, outputStream: &output)
        #expect(input is PipeInputStream)
        #expect(output is PipeOutputStream)
        input?.open(); output?.open()
        #expect(write(output!, [42]) == 1)
        #expect(read(input!, max: 4) == [42])
    }

    @Test func readBlocksUntilBytesArrive() {
        let (input, output) = BoundStreams.makePair(bufferSize: 8)
        input.open(); output.open()
        let box = Unchecked(output)
        let start = Date()
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.1) {
            _ = [UInt8(5)].withUnsafeBufferPointer { box.value.write($0.baseAddress!, maxLength: 1) }
        }
        #expect(read(input, max: 4) == [5])
        #expect(Date().timeIntervalSince(start) >= 0.09)
    }

    @Test func blockedReadReturnsAtEnd() {
        let (input, output) = BoundStreams.makePair(bufferSize: 8)
        input.open(); output.open()
        let box = Unchecked(output)
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) { box.value.close() }
        #expect(read(input, max: 4) == [])
        #expect(input.streamStatus == .atEnd)
    }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var _value = 0
    var value: Int { lock.withLock { _value } }
    func add(_ n: Int) { lock.withLock { _value += n } }
}
