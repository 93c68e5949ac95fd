// Delegate calls of a session, in order on its private serial queue — many per trip to the queue when they
// come fast (a burst of messages), rather than one dispatch and one wake-up each.
//
// Threading contract: `async` from any thread; the work runs on `queue`, in the order `async` was called.
import Foundation

final class DelegateCalls: @unchecked Sendable {
    let queue: DispatchQueue
    private let lock = NSLock()
    private var pending: [() -> Void] = []

    init(queue: DispatchQueue) { self.queue = queue }

    func async(_ work: @escaping () -> Void) {
        let first = lock.withLock { () -> Bool in
            pending.append(work)
            return pending.count == 1
        }
        if first { queue.async { [self] in run() } }
    }

    /// Runs what waits now; work queued meanwhile goes in the next trip (scheduled by its `async`).
    private func run() {
        let batch = lock.withLock { () -> [() -> Void] in
            defer { pending = [] }
            return pending
        }
        for work in batch { work() }
    }
}
