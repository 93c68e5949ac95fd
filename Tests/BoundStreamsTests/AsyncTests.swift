import Foundation
import Testing
@testable import BoundStreams

/// The AsyncSequence of chunks on PipeInputStream.
@Suite struct AsyncTests {
    @Test func chunksDeliverEverythingInOrderThenEnd() async throws {
        let input = PipeInputStream()
        let consumed = Counter()
        input.onConsumed = { consumed.add($0) }
        let producer = input.producer
        let total = 200_000
        DispatchQueue.global().async {
            var i = 0
            while i < total {
                let n = min(1_000, total - i)
                producer.deliver((i..<i + n).map(patternByte))
                i += n
            }
            producer.finish()
        }
        var got = 0, bad = 0, largest = 0
        for try await chunk in input.chunks(maxLength: 700) {
            for (j, b) in chunk.enumerated() where b != patternByte(got + j) { bad += 1 }
            got += chunk.count
            largest = max(largest, chunk.count)
        }
        #expect(got == total && bad == 0)
        #expect(largest <= 700)
        #expect(consumed.value == total)
    }

    @Test func chunksThrowTheProducersError() async {
        let input = PipeInputStream()
        input.deliver([1, 2])
        let producer = input.producer
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) { producer.finish(error: TestError(code: 9)) }
        var chunks: [[UInt8]] = []
        await #expect(throws: TestError(code: 9)) {
            for try await chunk in input.chunks() { chunks.append(chunk) }
        }
        #expect(chunks == [[1, 2]])
    }

    @Test func chunksOfABoundPairEndWhenTheWriterCloses() async throws {
        let (input, output) = BoundStreams.makePair(bufferSize: 16)
        output.open()
        let box = Unchecked(output)
        DispatchQueue.global().async {
            var sent = 0
            while sent < 100 {
                let n = [UInt8](repeating: 1, count: 10).withUnsafeBufferPointer { box.value.write($0.baseAddress!, maxLength: min(10, 100 - sent)) }
                if n == 0 { Thread.sleep(forTimeInterval: 0.001) } else { sent += n }
            }
            box.value.close()
        }
        var got = 0
        for try await chunk in input.chunks() { got += chunk.count }
        #expect(got == 100)
        #expect(input.streamStatus == .atEnd)
    }
}
