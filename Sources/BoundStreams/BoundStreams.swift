// A bound pair: what is written into the output stream comes out of the input stream — the
// `Stream.getBoundStreams` that swift-corelibs-foundation lacks, with Apple's back-pressure: the writer
// gets 0 (and a later `.hasSpaceAvailable`) while `bufferSize` octets wait unread.
import Foundation

public enum BoundStreams {
    /// A connected pair: the output's bytes flow to the input; the reader's pace limits the writer.
    public static func makePair(bufferSize: Int) -> (PipeInputStream, PipeOutputStream) {
        let input = PipeInputStream()
        let output = PipeOutputStream(capacity: bufferSize)
        let link = PairLink(input: input, output: output)
        output.onDataAvailable = { link.move() }
        output.onClose = { link.move(); link.writerClosed() }
        // Room frees as the reader consumes: move more across.
        input.onConsumed = { _ in link.move() }
        return (input, output)
    }
}

/// Moves octets from the output's buffer to the input while the input holds less than one buffer.
private final class PairLink: @unchecked Sendable {
    weak var input: PipeInputStream?
    weak var output: PipeOutputStream?
    private let lock = NSLock()

    init(input: PipeInputStream, output: PipeOutputStream) {
        self.input = input
        self.output = output
    }

    /// The writer closed: once everything moved across, the reader sees the end.
    func writerClosed() {
        lock.withLock { closed = true }
        move()
    }

    private var closed = false

    func move() {
        lock.withLock {
            guard let input, let output else { return }
            let room = output.capacity - input.bufferedByteCount
            if room > 0 { input.deliver(output.take(maxLength: room)) }
            if closed, output.bufferedByteCount == 0 { input.finish(error: nil) }
        }
    }
}

extension Stream {
    /// Apple's `getBoundStreams(withBufferSize:inputStream:outputStream:)`, which swift-corelibs-foundation
    /// does not provide. Linux has no AutoreleasingUnsafeMutablePointer; with plain pointers the usual call
    /// `Stream.getBoundStreams(withBufferSize: n, inputStream: &input, outputStream: &output)` compiles as is.
    public class func getBoundStreams(withBufferSize bufferSize: Int, inputStream: UnsafeMutablePointer<InputStream?>?,
                                      outputStream: UnsafeMutablePointer<OutputStream?>?) {
        let (i, o) = BoundStreams.makePair(bufferSize: bufferSize)
        inputStream?.pointee = i
        outputStream?.pointee = o
    }
}
