// PipeOutputStream: an OutputStream the app writes into a bounded buffer, drained by a transport thread
// (or read through the PipeInputStream of a bound pair), with StreamDelegate events delivered on the run
// loop or dispatch queue it is scheduled on.
//
// Threading contract
// - The app side (`open`, `write`, `close`, `delegate`, `schedule`…) is meant for one thread at a time, as
//   with Apple's streams, but every call is thread-safe.
// - The consumer side (`take`, `fail`, `closeFarSide`, or the Sendable `consumer` handle for use inside
//   @Sendable closures) may be called from any thread.
// - `write` never blocks and never drops: it copies what fits and returns that count, 0 when full.
//   `.hasSpaceAvailable` follows once after open and after every write as soon as there is space (so a
//   write that filled the buffer gets its event when the consumer takes bytes).
// - `onDataAvailable` runs on the writing thread after each write that added bytes; `onClose` runs once,
//   after the app closed the stream and the consumer took the last byte, on the thread that did the last
//   of the two. Both outside any lock; neither may call back into `write` expecting to block.
// - After `fail(error:)` writes return -1 and the stream is in `.error`; after `closeFarSide()` (the
//   reader is gone) writes return -1, the status is `.atEnd` and `.endEncountered` is delivered.
import Dispatch
import Foundation

public final class PipeOutputStream: OutputStream, StreamDelegate {
    let core: PipeCore
    private let dispatcher: StreamEventDispatcher
    private let delegateBox = WeakDelegateBox()

    /// A stream whose writes fill a buffer of `capacity` bytes that a transport drains with `take`.
    public convenience init(capacity: Int) {
        self.init(core: PipeCore(capacity: capacity))
    }

    /// Foundation's required initialiser; makes a 64 KB pipe.
    public required convenience init(toMemory: ()) {
        self.init(capacity: 65_536)
    }

    init(core: PipeCore) {
        self.core = core
        let streamRef = WeakRef<PipeOutputStream>()
        self.dispatcher = StreamEventDispatcher { event in streamRef.value?.dispatch(event) }
        super.init(toMemory: ())
        streamRef.value = self
        core.writerDispatcher = dispatcher
    }

    deinit {
        dispatcher.stop()
    }

    // MARK: Consumer (transport) side

    /// A Sendable handle on the consumer side, for transport code running in @Sendable closures.
    public var consumer: Consumer { Consumer(core: core) }

    /// Called after each write that added bytes, so the transport comes to `take` them.
    public var onDataAvailable: (@Sendable () -> Void)? {
        get { core.withHooks { $0.onDataAvailable } }
        set { core.updateHooks { $0.onDataAvailable = newValue } }
    }

    /// Called once when the app has closed the stream and every byte written has been taken.
    public var onClose: (@Sendable () -> Void)? {
        get { core.withHooks { $0.onWriterClose } }
        set { core.updateHooks { $0.onWriterClose = newValue } }
    }

    public func take(maxLength: Int) -> [UInt8] { consumer.take(maxLength: maxLength) }
    public func fail(error: any Error) { consumer.fail(error: error) }
    public func closeFarSide() { consumer.closeFarSide() }
    public var bufferedByteCount: Int { consumer.bufferedByteCount }
    public var capacity: Int { core.withState { $0.capacity } }

    public struct Consumer: Sendable {
        let core: PipeCore

        /// Removes and returns up to `maxLength` buffered bytes (fewer, or none, if fewer are buffered).
        public func take(maxLength: Int) -> [UInt8] {
            core.mutate { s, _ in s.bytes.pop(max: maxLength) }
        }

        /// Zero-copy take: lends up to `maxLength` buffered bytes to `body`, which returns how many it
        /// used (0…count); those are removed. `body` runs under the pipe's lock: it must not touch the streams.
        @discardableResult
        public func take(maxLength: Int, _ body: (UnsafeRawBufferPointer) -> Int) -> Int {
            core.mutate { s, _ in s.bytes.withFront(max: maxLength, body) }
        }

        /// The transport failed: writes return -1 and the app gets `.errorOccurred` with this error.
        public func fail(error: any Error) {
            core.mutate { s, _ in
                guard s.writerFailure == nil else { return }
                s.writerFailure = error
                s.bytes.removeAll()
            }
        }

        /// The far side went away: unread bytes are dropped, writes return -1, the app gets `.endEncountered`.
        public func closeFarSide() {
            core.mutate { s, _ in
                s.readerClosed = true
                s.bytes.removeAll()
            }
        }

        public var bufferedByteCount: Int { core.withState { $0.bytes.count } }
    }

    // MARK: OutputStream

    public override func open() {
        core.mutate { s, e in
            guard !s.writerOpened else { return }
            s.writerOpened = true
            e.writerEvents.insert(.openCompleted)
        }
    }

    /// Closes the app's side. Bytes already written stay buffered until taken (or read); then the reader
    /// sees the end and the transport's `onClose` is called.
    public override func close() {
        let wasOpen = core.mutate { s, _ -> Bool in
            guard !s.writerClosed else { return false }
            s.writerClosed = true
            if case .open = s.writerEnd { s.writerEnd = .finished }
            return true
        }
        if wasOpen { dispatcher.stop() }
    }

    public override func write(_ buffer: UnsafePointer<UInt8>, maxLength len: Int) -> Int {
        core.mutate { s, e in
            guard s.writerOpened, !s.writerClosed, s.writerFailure == nil, !s.readerGone else { return -1 }
            s.writerArmed = true
            let n = min(len, s.space)
            guard n > 0 else { return 0 }
            s.bytes.append(UnsafeRawBufferPointer(start: buffer, count: n))
            e.dataAvailable = true
            return n
        }
    }

    public override var hasSpaceAvailable: Bool {
        core.withState { s in
            s.writerOpened && !s.writerClosed && s.writerFailure == nil && !s.readerGone && s.space > 0
        }
    }

    public override var streamStatus: Stream.Status {
        core.withState { s in
            if !s.writerOpened { return s.writerClosed ? .closed : .notOpen }
            if s.writerClosed { return .closed }
            if s.writerFailure != nil { return .error }
            if s.readerGone { return .atEnd }
            return .open
        }
    }

    public override var streamError: (any Error)? {
        core.withState { $0.writerFailure }
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
