// An InputStream fed by a producer (a transport thread): what it `deliver`s the app reads, in order. The
// producer learns through `onConsumed` how much the app has read, so it can let its peer send more (L2CAP
// credits, a session's stream window): memory stays bounded by what the producer allows in flight.
//
// Events as on Apple platforms: `.openCompleted` after `open()`; `.hasBytesAvailable` when data arrives and
// again after a read that left data behind; `.endEncountered` once the producer finished and everything was
// read; `.errorOccurred` when the producer failed. Delivered on the run loops (or the queue) the stream is
// scheduled on; an unscheduled stream is polled (`hasBytesAvailable`, `read`).
//
// Threading contract: `deliver`, `finish` and the status are safe from any thread; the app reads from one
// thread at a time, as with any Foundation stream.
import Foundation

public final class PipeInputStream: InputStream {
    private let lock = NSLock()
    private var buffer = ByteQueue()
    private var status: Stream.Status = .notOpen
    private var error: (any Error)?
    private var producerFinished = false
    private var closedByApp = false
    private weak var storedDelegate: (any StreamDelegate)?
    private var events: StreamEventScheduler!

    /// Called (off the stream's lock) with the number of octets each read took.
    public var onConsumed: (@Sendable (Int) -> Void)?

    public init() {
        super.init(data: Data())
        events = StreamEventScheduler { [weak self] e in self?.dispatch(e) }
    }

    // MARK: Producer side

    /// Appends bytes for the app to read. Ignored after `finish` or once the app closed the stream.
    public func deliver(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        let raise = lock.withLock { () -> Bool in
            guard !producerFinished, !closedByApp, status != .error else { return false }
            buffer.append(bytes)
            return status == .open || status == .reading
        }
        if raise { events.raise(.hasBytesAvailable) }
    }

    /// Ends the stream: with nil, `.endEncountered` follows once the app has read everything buffered; with
    /// an error, `.errorOccurred` at once and `streamError` holds it.
    public func finish(error e: (any Error)?) {
        let event = lock.withLock { () -> Stream.Event? in
            guard !producerFinished, !closedByApp else { return nil }
            producerFinished = true
            if let e {
                error = e
                status = .error
                buffer.removeAll()
                return .errorOccurred
            }
            guard buffer.isEmpty, status == .open || status == .reading else { return nil }
            status = .atEnd
            return .endEncountered
        }
        if let event { events.raise(event) }
    }

    /// Octets delivered and not yet read.
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
        let event = lock.withLock { () -> Stream.Event? in
            guard status == .notOpen else { return nil }
            if error != nil { status = .error; return .errorOccurred }
            status = producerFinished && buffer.isEmpty ? .atEnd : .open
            return .openCompleted
        }
        guard let event else { return }
        events.raise(event)
        let (more, ended) = lock.withLock { (!buffer.isEmpty, status == .atEnd) }
        if more { events.raise(.hasBytesAvailable) }
        if ended { events.raise(.endEncountered) }
    }

    public override func close() {
        let dropped = lock.withLock { () -> Int in
            guard status != .closed else { return 0 }
            status = .closed
            closedByApp = true
            let n = buffer.count
            buffer.removeAll()
            return n
        }
        // What the app never read is given back, so the producer's accounting stays whole.
        if dropped > 0 { onConsumed?(dropped) }
    }

    public override var hasBytesAvailable: Bool {
        lock.withLock { (status == .open || status == .reading) && !buffer.isEmpty }
    }

    public override func read(_ dst: UnsafeMutablePointer<UInt8>, maxLength len: Int) -> Int {
        guard len > 0 else { return 0 }
        var after: Stream.Event?
        let n = lock.withLock { () -> Int in
            switch status {
            case .notOpen, .opening, .closed: return -1
            case .error: return -1
            case .atEnd: return 0
            default: break
            }
            let n = buffer.pop(into: dst, maxLength: len)
            if buffer.isEmpty {
                if producerFinished { status = .atEnd; after = .endEncountered }
            } else {
                after = .hasBytesAvailable
            }
            return n
        }
        if n > 0 { onConsumed?(n) }
        if let after { events.raise(after) }
        return n
    }

    public override func getBuffer(_ buffer: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>, length len: UnsafeMutablePointer<Int>) -> Bool {
        false
    }

    public override func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) { events.add(aRunLoop, mode: mode) }
    public override func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) { events.remove(aRunLoop, mode: mode) }

    /// Delivers events on `queue` instead of a run loop (nil stops it).
    public func schedule(on queue: DispatchQueue?) { events.set(queue: queue) }

    private func dispatch(_ e: Stream.Event) {
        // An event that no longer holds (the app read everything meanwhile) is not delivered.
        let (d, stillTrue) = lock.withLock { () -> ((any StreamDelegate)?, Bool) in
            let valid: Bool
            switch e {
            case .hasBytesAvailable: valid = (status == .open || status == .reading) && !buffer.isEmpty
            case .endEncountered: valid = status == .atEnd
            case .errorOccurred: valid = status == .error
            default: valid = status != .closed
            }
            return (storedDelegate, valid)
        }
        guard stillTrue else { return }
        d?.stream(self, handle: e)
    }
}
