// Waiting in tests without Task.sleep. On Linux, Task.sleep waits on Dispatch's CLOCK_BOOTTIME timer, and with
// this toolchain that timer was seen to stop for good in full test runs: its timerfd fired, but its epoll
// registration had been left without events, so nothing read it, and every Task.sleep in the process then
// waited forever (/proc/PID/fdinfo showed the expired, unread timerfd; the CLOCK_MONOTONIC one kept working).
// `pause` waits on a Dispatch uptime (CLOCK_MONOTONIC) deadline instead, and ends early on cancellation.
import Foundation

private final class Resumer: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<Void, Never>?
    private var done = false
    func set(_ c: CheckedContinuation<Void, Never>) {
        lock.lock()
        if done { lock.unlock(); c.resume(); return }
        continuation = c
        lock.unlock()
    }
    func resume() {
        lock.lock()
        done = true
        let c = continuation
        continuation = nil
        lock.unlock()
        c?.resume()
    }
}

/// Suspends for `nanoseconds` (at least), like `pause(nanoseconds:)`, throwing CancellationError if the
/// task is cancelled (at once, without waiting out the delay).
public func pause(nanoseconds: UInt64) async throws {
    _ = StarvationProbe.started
    let resumer = Resumer()
    await withTaskCancellationHandler {
        await withCheckedContinuation { c in
            resumer.set(c)
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(min(nanoseconds, UInt64(Int.max))))) { resumer.resume() }
        }
    } onCancel: {
        resumer.resume()
    }
    try Task.checkCancellation()
}
