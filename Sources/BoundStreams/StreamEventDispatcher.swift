// StreamEventDispatcher: carries Stream.Event values from any thread to the run loops (or dispatch queues)
// a stream is scheduled on, the way CFStream does on Apple's systems.
//
// Threading contract
// - `post(_:)` may be called from any thread; it only ORs the events into a pending set under a lock and
//   wakes each target once (coalescing: many posts before a delivery cost one wake-up).
// - Events are delivered on the thread of a scheduled run loop, while it runs in one of the scheduled
//   modes, or on a scheduled dispatch queue. With no target, events wait until the stream is scheduled.
// - `schedule`/`remove` may be called from any thread (usually the run loop's own).
//
// How a swift-corelibs-foundation run loop is woken from another thread
// `RunLoop.perform(inModes:block:)` enqueues a block but does not wake a run loop blocked in
// `run(mode:before:)`, and CoreFoundation's `CFRunLoopWakeUp` is not public API on Linux. On Apple's
// systems a scheduled stream is a version-0 run-loop source: it keeps `run()` from returning at once, its
// events make `run(mode:before:)` return after they are handled, and CFStream wakes the loop. Here the same
// is built from two pieces per scheduled run loop, added in each scheduled mode:
// - a `RunLoop._Source` (swift-corelibs-foundation's version-0 source, public though underscored; XCTest
//   uses it): `post` signals it, and its `perform` delivers the pending events, so `run(mode:before:)`
//   returns after them as on Apple's systems;
// - a repeating `Timer` whose fire date sits in the distant future; `post` sets it to now
//   (`CFRunLoopTimerSetNextFireDate` is thread-safe and re-arms the loop's timer descriptor), which wakes a
//   sleeping loop; the loop then runs the signalled source. The callout pushes the date back (a later date
//   set during a callout is honoured; a racing post sets an even later "now", also honoured).
// Measured wake-up latency: see `WakeLatencyTests` (printed by the test run).
import Dispatch
import Foundation

final class StreamEventDispatcher: Sendable {
    private enum Target: @unchecked Sendable {
        // RunLoop and Timer are thread-safe in swift-corelibs-foundation; the enum only carries them.
        case runLoop(RunLoop, modes: Set<RunLoop.Mode>, wake: Wake)
        case queue(DispatchQueue)
    }

    /// The wake-up timer and the delivery source of one run loop, in a box that may cross threads (the
    /// CoreFoundation calls used on them take the run loop's locks).
    private struct Wake: @unchecked Sendable {
        let timer: Timer
        let source: DeliverySource
    }

    private struct State {
        var targets: [Target] = []
        var pending = Stream.Event()
        var wakeOutstanding = false
        var stopped = false
    }

    // NSLock (a pthread mutex) rather than Synchronization.Mutex: ThreadSanitizer on Linux does not see
    // Mutex's futex-based locking and reports false races between `post` and `drain`.
    private let state = LockedState(State())
    /// Called on the target thread with each event, in the order of `Stream.Event.deliveryOrder`.
    private let handler: @Sendable (Stream.Event) -> Void

    init(handler: @escaping @Sendable (Stream.Event) -> Void) {
        self.handler = handler
    }

    // MARK: Scheduling

    func schedule(in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        let added: (Wake, Bool)? = state.withLock { s in
            guard !s.stopped else { return nil }
            for (i, t) in s.targets.enumerated() {
                if case .runLoop(let rl, var modes, let wake) = t, rl === runLoop {
                    guard modes.insert(mode).inserted else { return nil }
                    s.targets[i] = .runLoop(rl, modes: modes, wake: wake)
                    return (wake, !s.pending.isEmpty)
                }
            }
            let timer = Timer(fire: .distantFuture, interval: 1_000_000, repeats: true) { timer in
                timer.fireDate = .distantFuture
            }
            let wake = Wake(timer: timer, source: DeliverySource { [weak self] in self?.drain() })
            s.targets.append(.runLoop(runLoop, modes: [mode], wake: wake))
            return (wake, !s.pending.isEmpty)
        }
        guard let (wake, hasPending) = added else { return }
        runLoop._add(wake.source, forMode: mode)
        runLoop.add(wake.timer, forMode: mode)
        if hasPending { wakeAll() }
    }

    func remove(from runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        let removed: (Wake, Bool)? = state.withLock { s in
            for (i, t) in s.targets.enumerated() {
                if case .runLoop(let rl, var modes, let wake) = t, rl === runLoop {
                    guard modes.remove(mode) != nil else { return nil }
                    if modes.isEmpty {
                        s.targets.remove(at: i)
                        return (wake, true)
                    }
                    s.targets[i] = .runLoop(rl, modes: modes, wake: wake)
                    return (wake, false)
                }
            }
            return nil
        }
        guard let (wake, last) = removed else { return }
        runLoop._remove(wake.source, for: mode)
        // A timer cannot leave one mode alone through public API; it only wakes the loop, so it stays
        // until the last mode goes. Events are delivered by the source, which has left this mode.
        if last {
            wake.timer.invalidate()
            wake.source.invalidate()
        }
    }

    func schedule(on queue: DispatchQueue) {
        let hasPending = state.withLock { s -> Bool in
            guard !s.stopped else { return false }
            s.targets.append(.queue(queue))
            return !s.pending.isEmpty
        }
        if hasPending { wakeAll() }
    }

    func remove(from queue: DispatchQueue) {
        state.withLock { s in
            s.targets.removeAll { t in
                if case .queue(let q) = t { return q === queue }
                return false
            }
        }
    }

    /// Unschedules from everything and drops pending events; later posts are ignored.
    func stop() {
        let targets = state.withLock { s -> [Target] in
            s.stopped = true
            s.pending = []
            let t = s.targets
            s.targets = []
            return t
        }
        for case .runLoop(_, _, let wake) in targets {
            wake.timer.invalidate()
            wake.source.invalidate()
        }
    }

    // MARK: Posting and delivery

    func post(_ events: Stream.Event) {
        guard !events.isEmpty else { return }
        let wake = state.withLock { s -> Bool in
            guard !s.stopped else { return false }
            s.pending.formUnion(events)
            guard !s.wakeOutstanding, !s.targets.isEmpty else { return false }
            s.wakeOutstanding = true
            return true
        }
        if wake { wakeAll() }
    }

    private func wakeAll() {
        let targets = state.withLock { s -> [Target] in
            s.wakeOutstanding = true
            return s.targets
        }
        for target in targets {
            switch target {
            case .runLoop(_, _, let wake):
                wake.source.signal()
                wake.timer.fireDate = Date()
            case .queue(let queue):
                queue.async { [weak self] in self?.drain() }
            }
        }
    }

    private func drain() {
        let events = state.withLock { s -> Stream.Event in
            let e = s.pending
            s.pending = []
            s.wakeOutstanding = false
            return e
        }
        for event in Stream.Event.deliveryOrder where events.contains(event) {
            handler(event)
        }
    }
}

/// The version-0 run-loop source that delivers a dispatcher's events on the run loop's thread.
final class DeliverySource: RunLoop._Source {
    private let action: @Sendable () -> Void

    init(action: @escaping @Sendable () -> Void) {
        self.action = action
        super.init(order: 0)
    }

    override func perform() {
        action()
    }
}

/// A value behind an NSLock.
final class LockedState<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<R>(_ body: (inout Value) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}

extension Stream.Event {
    /// The order in which events posted together reach the delegate.
    static let deliveryOrder: [Stream.Event] = [.openCompleted, .hasBytesAvailable, .hasSpaceAvailable, .endEncountered, .errorOccurred]
}
