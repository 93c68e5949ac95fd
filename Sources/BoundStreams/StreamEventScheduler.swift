// Where a pipe stream's delegate events are delivered: the run loops (and modes) it is scheduled on, as
// Foundation's streams do on Apple platforms, or a dispatch queue for programs that live in `dispatchMain()`.
//
// swift-corelibs-foundation's own streams deliver no delegate events on Linux, and a block queued with
// RunLoop.perform does not wake a run loop blocked waiting for input. A timer does: adding one re-arms the
// run loop's timer source from any thread. So each delivery is a one-shot timer, firing now, in every
// scheduled mode; events raised while one is pending are coalesced into it.
import Foundation

final class StreamEventScheduler: @unchecked Sendable {
    private let lock = NSLock()
    private var runLoops: [(RunLoop, RunLoop.Mode)] = []
    private var queue: DispatchQueue?
    private var pending: Stream.Event = []
    private var scheduled = false
    /// Runs on the delivering thread with the events to hand to the delegate, in Foundation's order.
    private let deliver: (Stream.Event) -> Void

    init(deliver: @escaping (Stream.Event) -> Void) {
        self.deliver = deliver
    }

    func add(_ runLoop: RunLoop, mode: RunLoop.Mode) {
        lock.withLock {
            guard !runLoops.contains(where: { $0.0 === runLoop && $0.1 == mode }) else { return }
            runLoops.append((runLoop, mode))
        }
        flushIfPending()
    }

    func remove(_ runLoop: RunLoop, mode: RunLoop.Mode) {
        lock.withLock { runLoops.removeAll { $0.0 === runLoop && $0.1 == mode } }
    }

    func set(queue: DispatchQueue?) {
        lock.withLock { self.queue = queue }
        flushIfPending()
    }

    var isScheduled: Bool { lock.withLock { !runLoops.isEmpty || queue != nil } }

    /// Raises `event`; it is delivered once, with whatever else is raised before the delivery runs.
    func raise(_ event: Stream.Event) {
        let target = lock.withLock { () -> Target? in
            pending.insert(event)
            return armLocked()
        }
        target?.fire(self)
    }

    private func flushIfPending() {
        let target = lock.withLock { pending.isEmpty ? nil : armLocked() }
        target?.fire(self)
    }

    private enum Target {
        case runLoops([(RunLoop, RunLoop.Mode)])
        case queue(DispatchQueue)

        func fire(_ s: StreamEventScheduler) {
            switch self {
            case let .queue(q):
                q.async { s.drain() }
            case let .runLoops(list):
                // One timer in each mode; the first to fire delivers, the others find nothing pending.
                for (rl, mode) in list {
                    let t = Timer(timeInterval: 0, repeats: false) { _ in s.drain() }
                    rl.add(t, forMode: mode)
                }
            }
        }
    }

    private func armLocked() -> Target? {
        guard !scheduled else { return nil }
        if let queue {
            scheduled = true
            return .queue(queue)
        }
        guard !runLoops.isEmpty else { return nil }
        scheduled = true
        return .runLoops(runLoops)
    }

    private func drain() {
        let events = lock.withLock { () -> Stream.Event in
            scheduled = false
            defer { pending = [] }
            return pending
        }
        guard !events.isEmpty else { return }
        // Foundation's order: open, then data or space, then end or error.
        for e in [Stream.Event.openCompleted, .hasBytesAvailable, .hasSpaceAvailable, .endEncountered, .errorOccurred] where events.contains(e) {
            deliver(e)
        }
    }
}
