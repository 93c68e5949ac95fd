// BoundStreams: a pair of streams joined by one bounded buffer — what is written to the output stream is
// read from the input stream — as Apple's `Stream.getBoundStreams(withBufferSize:inputStream:outputStream:)`
// makes them, which swift-corelibs-foundation lacks.
//
// Threading contract: the two streams may be used from different threads (typically a producer thread
// writing and a run loop reading); see PipeInputStream and PipeOutputStream. Writes beyond the buffer size
// return 0 (never block); the writer's `.hasSpaceAvailable` comes back once the reader has read.
import Foundation

public enum BoundStreams {
    /// A bound pair sharing a buffer of `bufferSize` bytes.
    public static func makePair(bufferSize: Int) -> (PipeInputStream, PipeOutputStream) {
        let core = PipeCore(capacity: bufferSize)
        return (PipeInputStream(core: core), PipeOutputStream(core: core))
    }
}

#if !_runtime(_ObjC)
/// On Linux the standard library has no `AutoreleasingUnsafeMutablePointer` (it exists only with the
/// Objective-C runtime). This alias lets Apple's signature below be spelled exactly, and callers passing
/// `&someOptionalStream` compile unchanged.
public typealias AutoreleasingUnsafeMutablePointer<Pointee> = UnsafeMutablePointer<Pointee>

extension Stream {
    /// Apple's bound-pair factory: `inputStream` reads what is written to `outputStream`, through a buffer
    /// of `bufferSize` bytes. The streams are a PipeInputStream and a PipeOutputStream.
    public class func getBoundStreams(
        withBufferSize bufferSize: Int,
        inputStream: AutoreleasingUnsafeMutablePointer<InputStream?>?,
        outputStream: AutoreleasingUnsafeMutablePointer<OutputStream?>?
    ) {
        let (input, output) = BoundStreams.makePair(bufferSize: bufferSize)
        inputStream?.pointee = input
        outputStream?.pointee = output
    }
}
#endif
