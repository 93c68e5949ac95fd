// PipeInputStream: an InputStream the app reads, fed by a transport thread (or by the PipeOutputStream of
// a bound pair), with StreamDelegate events delivered on the run loop or dispatch queue it is scheduled on.
//
// Threading contract
// - The app side (`open`, `read`, `close`, `delegate`, `schedule`…) is meant for one thread at a time, as
//   with Apple's streams, but every call is thread-safe.
// - The producer side (`deliver`, `finish`, `bufferedByteCount`, or the Sendable `producer` handle for
//   use inside @Sendable closures) may be called from any thread.
// - Delegate events arrive on the scheduled run loop's thread (in the scheduled modes) or on the
//   scheduled queue; `onConsumed` and `onClose` run on the thread that read or closed, outside any lock.
// - `read` blocks while the stream is open, empty and not ended, as Apple's does; read after
//   `.hasBytesAvailable` (or while `hasBytesAvailable` is true) to never block.
// - Back-pressure: `deliver` never refuses bytes; the transport grants its peer credits from `onConsumed`
//   so a slow reader throttles the sender instead of growing memory.
import Dispatch
import Foundation

public final class PipeInputStream: InputStream, StreamDelegate {
    let core: PipeCore
    let dispatcher: StreamEventDispatcher
    private let delegateBox = WeakDelegateBox()

    /// A stream fed by a transport through `deliver`/`finish`; its buffer grows as the transport delivers.
    public convenience init() {
        self.init(core: PipeCore(capacity: Int.max))
    }

    init(core: PipeCore) {
        self.core = core
        let streamRef = WeakRef<PipeInputStream>()
        self.dispatcher = StreamEventDispatcher { event in streamRef.value?.dispatch(event) }
        super.init(data: Data())
        streamRef.value = self
        core.readerDispatcher = dispatcher
    }

    deinit {
        dispatcher.stop()
    }

    // MARK: Producer (transport) side

    /// A Sendable handle on the producer side, for transport code running in @Sendable closures.
    public var producer: Producer { Producer(core: core) }

    /// Called (off the lock, on the reading thread) with the number of bytes the app has just read.
    public var onConsumed: (@Sendable (Int) -> Void)? {
        get { core.withHooks { $0.onConsumed } }
        set { core.updateHooks { $0.onConsumed = newValue } }
    }

    /// Called once when the app closes the stream, so the transport can tear the channel down.
    public var onClose: (@Sendable () -> Void)? {
        get { core.withHooks { $0.onReaderClose } }
        set { core.updateHooks { $0.onReaderClose = newValue } }
    }

    public func deliver(_ bytes: [UInt8]) { producer.deliver(bytes) }
    public func deliver(_ data: Data) { producer.deliver(data) }
    public func deliver(_ bytes: UnsafeRawBufferPointer) { producer.deliver(bytes) }
    public func finish(error: (any Error)? = nil) { producer.finish(error: error) }
    public var bufferedByteCount: Int { producer.bufferedByteCount }
    /// True once the app called `close()`.
    public var isClosedByApp: Bool { core.withState { $0.readerClosed } }

    public struct Producer: Sendable {
        let core: PipeCore

        public func deliver(_ bytes: [UInt8]) {
            bytes.withUnsafeBytes { deliver($0) }
        }

        public func deliver(_ data: Data) {
            data.withUnsafeBytes { deliver($0) }
        }

        /// Appends bytes for the app to read. Ignored after `finish`, or once the app has closed the stream.
        public func deliver(_ bytes: UnsafeRawBufferPointer) {
            guard !bytes.isEmpty else { return }
            core.mutate { s, _ in
                guard case .open = s.writerEnd, !s.readerClosed else { return }
                s.bytes.append(bytes)
            }
        }

        /// Appends several chunks under one lock, with one event: what a transport received in one turn
        /// of its loop. Ignored after `finish`, or once the app has closed the stream.
        public func deliver(contentsOf chunks: [[UInt8]]) {
            guard chunks.contains(where: { !$0.isEmpty }) else { return }
            core.mutate { s, _ in
                guard case .open = s.writerEnd, !s.readerClosed else { return }
                for chunk in chunks { chunk.withUnsafeBytes { s.bytes.append($0) } }
            }
        }

        /// Ends the stream: nil → `.endEncountered` once the buffered bytes are read; an error →
        /// `.errorOccurred` at once, `streamError` set, buffered bytes dropped.
        public func finish(error: (any Error)? = nil) {
            core.mutate { s, _ in
                guard case .open = s.writerEnd else { return }
                if let error {
                    s.writerEnd = .failed(error)
                    s.bytes.removeAll()
                } else {
                    s.writerEnd = .finished
                }
            }
        }

        public var bufferedByteCount: Int { core.withState { $0.bytes.count } }
    }

    // MARK: InputStream

    public override func open() {
        core.mutate { s, e in
            guard !s.readerOpened else { return }
            s.readerOpened = true
            e.readerEvents.insert(.openCompleted)
        }
    }

    public override func close() {
        let wasOpen = core.mutate { s, e -> Bool in
            guard !s.readerClosed else { return false }
            s.readerClosed = true
            s.bytes.removeAll()
            e.readerClosed = true
            return true
        }
        if wasOpen { dispatcher.stop() }
    }

    public override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength len: Int) -> Int {
        guard len > 0 else { return 0 }
        while true {
            switch core.read(into: buffer, max: len) {
            case .read(let n): return n
            case .end: return 0
            case .failed: return -1
            case .mustWait: core.waitReadable()
            }
        }
    }

    public override func getBuffer(_ buffer: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>, length len: UnsafeMutablePointer<Int>) -> Bool {
        false
    }

    public override var hasBytesAvailable: Bool {
        core.withState { s in s.readerOpened && !s.readerClosed && !s.bytes.isEmpty }
    }

    public override var streamStatus: Stream.Status {
        core.withState { s in
            if !s.readerOpened { return s.readerClosed ? .closed : .notOpen }
            if s.readerClosed { return .closed }
            switch s.writerEnd {
            case .failed: return .error
            case .finished where s.bytes.isEmpty: return .atEnd
            case .open, .finished: return .open
            }
        }
    }

    public override var streamError: (any Error)? {
        core.withState { s in
            if case .failed(let error) = s.writerEnd { return error }
            return nil
        }
    }

    public override var delegate: (any StreamDelegate)? {
        get { delegateBox.value ?? self }
        set { delegateBox.value = newValue }
    }

    public override func property(forKey key: Stream.PropertyKey) -> AnyObject? { nil }

    public override func setProperty(_ property: AnyObject?, forKey key: Stream.PropertyKey) -> Bool { false }

    public override func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        dispatcher.schedule(in: aRunLoop, forMode: mode)
    }

    public override func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        dispatcher.remove(from: aRunLoop, forMode: mode)
    }

    /// Delivers delegate events on `queue` instead of (or besides) a run loop, for programs in `dispatchMain()`.
    public func schedule(on queue: DispatchQueue) { dispatcher.schedule(on: queue) }

    public func remove(from queue: DispatchQueue) { dispatcher.remove(from: queue) }

    /// The stream's own delegate method, used while `delegate` is nil (as in Foundation); does nothing.
    public func stream(_ aStream: Stream, handle eventCode: Stream.Event) {}

    private func dispatch(_ event: Stream.Event) {
        guard streamStatus != .closed else { return }
        delegate?.stream(self, handle: event)
    }
}

/// A weak reference to a stream that a @Sendable closure may carry. The streams cannot be Sendable
/// (Foundation marks InputStream/OutputStream's conformance unavailable), but all their state is locked.
final class WeakRef<Object: AnyObject>: @unchecked Sendable {
    weak var value: Object?
}

/// The delegate, held weakly as Foundation does, behind a lock since events read it on another thread.
final class WeakDelegateBox: @unchecked Sendable {
    private let lock = NSLock()
    private weak var _value: (any StreamDelegate)?
    var value: (any StreamDelegate)? {
        get { lock.withLock { _value } }
        set { lock.withLock { _value = newValue } }
    }
}
