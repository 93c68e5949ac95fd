// PipeCore: the shared state of one byte pipe — a buffer with a writer end and a reader end — and the
// edge-triggered rules that turn its changes into stream events and transport callbacks.
//
// Each end is either an app-facing stream (PipeOutputStream writes, PipeInputStream reads) or the
// transport (a producer that delivers bytes, a consumer that takes them). A bound pair has streams at
// both ends; a PipeInputStream on its own has a producer at the writer end; a PipeOutputStream on its own
// has a consumer at the reader end.
//
// Threading contract
// - Every field lives behind one NSCondition; every method may be called from any thread.
// - Events are computed under the lock and posted to the ends' dispatchers after it is released;
//   transport callbacks (onConsumed, onDataAvailable, onClose…) are also called after it is released, on the
//   thread whose call caused them.
// - `read` blocks while the pipe is open, empty and not finished, as Apple's streams do; `write` never
//   blocks.
//
// Event rules (the "armed" flags are the edge triggers)
// - Reader: `.hasBytesAvailable` when bytes are buffered and the reader is armed; posting disarms, every
//   `read` re-arms. So a read that leaves bytes gets another event on the next run-loop turn, and a reader
//   who never reads gets one event, not a storm. `.endEncountered` once the writer finished and the
//   buffer is empty; `.errorOccurred` once the writer failed (buffered bytes are dropped).
// - Writer: `.hasSpaceAvailable` when there is space and the writer is armed; posting disarms, every
//   `write` re-arms. So a write that leaves space gets another event, and a write that filled the
//   buffer gets one when the reader frees space. `.endEncountered` once the reader end is gone,
//   `.errorOccurred` once the transport failed the stream.
import Foundation

enum WriterEnd {
    case open
    case finished
    case failed(any Error)
}

struct PipeState {
    var bytes = ByteQueue()
    let capacity: Int

    // Reader end
    var readerOpened = false
    var readerClosed = false
    var readerArmed = true
    var readerEndPosted = false
    var readerErrorPosted = false

    // Writer end
    var writerOpened = false
    var writerClosed = false
    var writerArmed = true
    var writerEndPosted = false
    var writerErrorPosted = false
    var writerEnd = WriterEnd.open   // what the reader sees
    var writerFailure: (any Error)? = nil   // the transport failed the writing stream
    var writerCloseNotified = false

    var space: Int { capacity == Int.max ? Int.max : max(0, capacity - bytes.count) }
    var readerGone: Bool { readerClosed }
}

/// What one change asks to be done outside the lock.
struct PipeEffects {
    var readerEvents = Stream.Event()
    var writerEvents = Stream.Event()
    var consumed = 0
    var dataAvailable = false
    var writerClosedAndDrained = false
    var readerClosed = false
}

/// The transport's hooks on a pipe; set before the streams are handed to the app.
struct PipeHooks: Sendable {
    var onConsumed: (@Sendable (Int) -> Void)?
    var onDataAvailable: (@Sendable () -> Void)?
    var onWriterClose: (@Sendable () -> Void)?
    var onReaderClose: (@Sendable () -> Void)?
}

final class PipeCore: @unchecked Sendable {
    // @unchecked: every stored var below is read and written only while `condition` is locked.
    private let condition = NSCondition()
    private var state: PipeState
    private var hooks = PipeHooks()
    private var asyncReaders: [CheckedContinuation<Void, Never>] = []
    // Set once by the streams' initialisers, before the core is shared with another thread.
    var readerDispatcher: StreamEventDispatcher?
    var writerDispatcher: StreamEventDispatcher?

    init(capacity: Int) {
        precondition(capacity > 0, "a pipe needs room for at least one byte")
        state = PipeState(capacity: capacity)
    }

    func withState<R>(_ body: (inout PipeState) -> R) -> R {
        condition.lock()
        defer { condition.unlock() }
        return body(&state)
    }

    func withHooks<R>(_ body: (PipeHooks) -> R) -> R {
        condition.lock()
        defer { condition.unlock() }
        return body(hooks)
    }

    func updateHooks(_ body: (inout PipeHooks) -> Void) {
        condition.lock()
        body(&hooks)
        condition.unlock()
    }

    /// Runs a mutation, evaluates the event rules, wakes blocked readers, then acts outside the lock.
    @discardableResult
    func mutate<R>(_ body: (inout PipeState, inout PipeEffects) -> R) -> R {
        condition.lock()
        var effects = PipeEffects()
        let result = body(&state, &effects)
        Self.evaluate(&state, &effects)
        let hooks = self.hooks
        let waiters = asyncReaders
        asyncReaders.removeAll()
        condition.broadcast()
        condition.unlock()
        for w in waiters { w.resume() }
        perform(effects, hooks)
        return result
    }

    private var readerMustWait: Bool {
        guard state.readerOpened, !state.readerClosed, state.bytes.isEmpty, case .open = state.writerEnd else { return false }
        return true
    }

    /// Blocks until the reader can make progress (bytes, end, error or close). Returns with the lock released.
    func waitReadable() {
        condition.lock()
        while readerMustWait { condition.wait() }
        condition.unlock()
    }

    /// Suspends until the next change of the pipe if the reader cannot make progress now.
    func waitReadableAsync() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            condition.lock()
            if readerMustWait {
                asyncReaders.append(c)
                condition.unlock()
            } else {
                condition.unlock()
                c.resume()
            }
        }
    }

    enum ReadOutcome {
        case read(Int)
        case end
        case failed
        case mustWait
    }

    /// The non-blocking core of a read: copies up to `max` bytes out and re-arms `.hasBytesAvailable`.
    func read(into buffer: UnsafeMutableRawPointer, max: Int) -> ReadOutcome {
        mutate { s, e in
            guard s.readerOpened, !s.readerClosed else { return .failed }
            if case .failed = s.writerEnd { return .failed }
            let n = s.bytes.pop(into: buffer, max: max)
            if n > 0 {
                s.readerArmed = true
                e.consumed = n
                return .read(n)
            }
            if case .finished = s.writerEnd { return .end }
            return .mustWait
        }
    }

    private static func evaluate(_ s: inout PipeState, _ e: inout PipeEffects) {
        if s.readerOpened, !s.readerClosed {
            switch s.writerEnd {
            case .failed:
                if !s.readerErrorPosted { s.readerErrorPosted = true; e.readerEvents.insert(.errorOccurred) }
            case .finished where s.bytes.isEmpty:
                if !s.readerEndPosted { s.readerEndPosted = true; e.readerEvents.insert(.endEncountered) }
            case .open, .finished:
                if !s.bytes.isEmpty, s.readerArmed { s.readerArmed = false; e.readerEvents.insert(.hasBytesAvailable) }
            }
        }
        if s.writerOpened, !s.writerClosed {
            if s.writerFailure != nil {
                if !s.writerErrorPosted { s.writerErrorPosted = true; e.writerEvents.insert(.errorOccurred) }
            } else if s.readerGone {
                if !s.writerEndPosted { s.writerEndPosted = true; e.writerEvents.insert(.endEncountered) }
            } else if s.space > 0, s.writerArmed {
                s.writerArmed = false
                e.writerEvents.insert(.hasSpaceAvailable)
            }
        }
        if s.writerClosed, s.bytes.isEmpty, !s.writerCloseNotified {
            s.writerCloseNotified = true
            e.writerClosedAndDrained = true
        }
    }

    private func perform(_ e: PipeEffects, _ hooks: PipeHooks) {
        readerDispatcher?.post(e.readerEvents)
        writerDispatcher?.post(e.writerEvents)
        if e.consumed > 0 { hooks.onConsumed?(e.consumed) }
        if e.dataAvailable { hooks.onDataAvailable?() }
        if e.readerClosed { hooks.onReaderClose?() }
        if e.writerClosedAndDrained { hooks.onWriterClose?() }
    }
}

/// A FIFO of bytes: appends at the tail, reads from a moving head, compacts when the head passes half.
struct ByteQueue {
    private var storage: [UInt8] = []
    private var head = 0

    var count: Int { storage.count - head }
    var isEmpty: Bool { head == storage.count }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        storage.append(contentsOf: bytes)
    }

    /// Copies up to `max` bytes out into `destination` and drops them; returns how many.
    mutating func pop(into destination: UnsafeMutableRawPointer, max: Int) -> Int {
        let n = Swift.min(max, count)
        guard n > 0 else { return 0 }
        storage.withUnsafeBytes { src in
            destination.copyMemory(from: src.baseAddress! + head, byteCount: n)
        }
        drop(n)
        return n
    }

    mutating func pop(max: Int) -> [UInt8] {
        let n = Swift.min(max, count)
        guard n > 0 else { return [] }
        let out = Array(storage[head..<head + n])
        drop(n)
        return out
    }

    /// Lends the first `max` bytes to `body` without copying, then drops as many as `body` returns.
    mutating func withFront(max: Int, _ body: (UnsafeRawBufferPointer) -> Int) -> Int {
        let n = Swift.min(max, count)
        let used = storage.withUnsafeBytes { src in
            body(UnsafeRawBufferPointer(rebasing: src[head..<head + n]))
        }
        precondition(used >= 0 && used <= n, "took more bytes than were lent")
        drop(used)
        return used
    }

    mutating func removeAll() {
        storage = []
        head = 0
    }

    private mutating func drop(_ n: Int) {
        head += n
        if head == storage.count {
            storage.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 4096, head * 2 >= storage.count {
            storage.removeSubrange(0..<head)
            head = 0
        }
    }
}
