// An OutputStream drained by a consumer (a transport thread): the app writes into a buffer of `capacity`
// octets — `write` copies what fits and returns that count, 0 when full; it never blocks and never drops —
// and the consumer `take`s from it after `onDataAvailable`. When space frees after a write that found the
// buffer full, `.hasSpaceAvailable` is raised again, as on Apple platforms; it is also raised after open and
// after each write that left room. `fail` ends it with `.errorOccurred` (writes then return -1).
//
// Threading contract: `take`, `fail`, `bufferedByteCount` and the status are safe from any thread; the app
// writes from one thread at a time.
import Foundation

public final class PipeOutputStream: OutputStream {
    public let capacity: Int
    private let lock = NSLock()
    private var buffer = ByteQueue()
    private var status: Stream.Status = .notOpen
    private var error: (any Error)?
    private var closedByApp = false
    private weak var storedDelegate: (any StreamDelegate)?
    private var events: StreamEventScheduler!

    /// Called (off the lock) after a write added data the consumer may take.
    public var onDataAvailable: (@Sendable () -> Void)?
    /// Called (off the lock) when the app closes the stream; what it wrote before stays to be taken.
    public var onClose: (@Sendable () -> Void)?

    public init(capacity: Int) {
        precondition(capacity > 0, "a pipe needs room for at least one octet")
        self.capacity = capacity
        super.init(toMemory: ())
        events = StreamEventScheduler { [weak self] e in self?.dispatch(e) }
    }

    /// A pipe of 64 KB (OutputStream's required initialiser; the memory it names is not used).
    public required convenience init(toMemory: ()) {
        self.init(capacity: 64 * 1024)
    }

    // MARK: Consumer side

    /// Takes up to `maxLength` written octets (empty when none).
    public func take(maxLength: Int) -> [UInt8] {
        let (bytes, raise) = lock.withLock { () -> ([UInt8], Bool) in
            let wasFull = buffer.count >= capacity
            let out = buffer.pop(maxLength: maxLength)
            return (out, wasFull && !out.isEmpty && (status == .open || status == .writing))
        }
        if raise { events.raise(.hasSpaceAvailable) }
        return bytes
    }

    /// Ends the stream with an error: `.errorOccurred`, `streamError` set, writes return -1.
    public func fail(error e: any Error) {
        let raise = lock.withLock { () -> Bool in
            guard status != .closed, status != .error else { return false }
            error = e
            status = .error
            buffer.removeAll()
            return true
        }
        if raise { events.raise(.errorOccurred) }
    }

    /// Octets written and not yet taken.
    public var bufferedByteCount: Int { lock.withLock { buffer.count } }
    /// True once the app called `close()`.
    public var isClosedByApp: Bool { lock.withLock { closedByApp } }

    // MARK: Stream

    public override var streamStatus: Stream.Status { lock.withLock { status } }
    public override var streamError: (any Error)? { lock.withLock { error } }

    public override var delegate: (any StreamDelegate)? {
        get { lock.withLock { storedDelegate } }
        set { lock.withLock { storedDelegate = newValue } }
    }

    public override func open() {
        let opened = lock.withLock { () -> Bool in
            guard status == .notOpen else { return false }
            status = .open
            return true
        }
        guard opened else { return }
        events.raise(.openCompleted)
        events.raise(.hasSpaceAvailable)
    }

    public override func close() {
        let first = lock.withLock { () -> Bool in
            guard !closedByApp else { return false }
            closedByApp = true
            if status != .error { status = .closed }
            return true
        }
        if first { onClose?() }
    }

    public override var hasSpaceAvailable: Bool {
        lock.withLock { (status == .open || status == .writing) && buffer.count < capacity }
    }

    public override func write(_ src: UnsafePointer<UInt8>, maxLength len: Int) -> Int {
        guard len > 0 else { return 0 }
        let (n, roomLeft) = lock.withLock { () -> (Int, Bool) in
            guard status == .open || status == .writing else { return (-1, false) }
            let n = min(len, capacity - buffer.count)
            if n > 0 { buffer.append(UnsafeRawBufferPointer(start: src, count: n)) }
            return (n, buffer.count < capacity)
        }
        if n > 0 { onDataAvailable?() }
        if n > 0 && roomLeft { events.raise(.hasSpaceAvailable) }
        return n
    }

    public override func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) { events.add(aRunLoop, mode: mode) }
    public override func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) { events.remove(aRunLoop, mode: mode) }

    /// Delivers events on `queue` instead of a run loop (nil stops it).
    public func schedule(on queue: DispatchQueue?) { events.set(queue: queue) }

    private func dispatch(_ e: Stream.Event) {
        let (d, valid) = lock.withLock { () -> ((any StreamDelegate)?, Bool) in
            switch e {
            case .hasSpaceAvailable: return (storedDelegate, (status == .open || status == .writing) && buffer.count < capacity)
            case .errorOccurred: return (storedDelegate, status == .error)
            default: return (storedDelegate, status != .closed)
            }
        }
        guard valid else { return }
        d?.stream(self, handle: e)
    }
}
