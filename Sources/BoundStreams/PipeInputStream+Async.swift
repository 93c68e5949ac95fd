// Chunks of a PipeInputStream as an AsyncSequence, beside the delegate events (Swift concurrency offered
// beside Foundation's API, never instead of it).
//
// Threading contract: iterate from one task at a time. Bytes leave the pipe only when the iterator asks
// for the next chunk, so `onConsumed` (and the transport's credits) follow the consumer's pace. Mixing
// `read` calls and iteration on the same stream interleaves their bytes, as two readers would.
import Foundation

extension PipeInputStream {
    /// The stream's bytes in chunks of at most `maxLength`; ends at `.endEncountered`, throws the
    /// producer's error (`streamError`), and ends when the stream is closed. Opens the stream if needed.
    public func chunks(maxLength: Int = 16_384) -> Chunks {
        precondition(maxLength > 0, "chunks need room for at least one byte")
        if streamStatus == .notOpen { open() }
        return Chunks(core: core, maxLength: maxLength)
    }

    public struct Chunks: AsyncSequence, Sendable {
        public typealias Element = [UInt8]
        let core: PipeCore
        let maxLength: Int

        public func makeAsyncIterator() -> Iterator { Iterator(chunks: self) }

        public struct Iterator: AsyncIteratorProtocol {
            let chunks: Chunks

            public mutating func next() async throws -> [UInt8]? {
                var buffer = [UInt8](repeating: 0, count: chunks.maxLength)
                while true {
                    let outcome = buffer.withUnsafeMutableBytes { chunks.core.read(into: $0.baseAddress!, max: $0.count) }
                    switch outcome {
                    case .read(let n):
                        buffer.removeSubrange(n...)
                        return buffer
                    case .end:
                        return nil
                    case .failed:
                        if let error = chunks.core.withState({ s -> (any Error)? in
                            if case .failed(let e) = s.writerEnd { return e }
                            return nil
                        }) {
                            throw error
                        }
                        return nil   // closed
                    case .mustWait:
                        await chunks.core.waitReadableAsync()
                    }
                }
            }
        }
    }
}
