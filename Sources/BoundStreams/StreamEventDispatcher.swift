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
// `run(mode:before:)`, and the CoreFoundation `CFRunLoopWakeUp` is not public API on Linux. A run loop
// with neither a source nor a timer in a mode also returns from `run()` at once, whereas on Apple's
// systems a scheduled stream keeps it running. One repeating `Timer` per scheduled run loop, added in each
// scheduled mode with its fire date in the distant future, does both jobs: it keeps the run loop alive
// while the stream is scheduled, and setting its `fireDate` to now from any thread
// (`CFRunLoopTimerSetNextFireDate`, thread-safe, re-arms the loop's timerfd) wakes the loop at once. The
// timer's callout first pushes its fire date back to the distant future (CoreFoundation honours a later
// date set during the callout, and a post racing with it sets an even later "now", also honoured) and
// then delivers what is pending. Measured round-trip: see the report in BoundStreamsTests.
import Dispatch
import Foundation
import Synchronization

final class StreamEventDispatcher: Sendable {
    private enum Target: @unchecked Sendable {
        // RunLoop and Timer are thread-safe in swift-corelibs-foundation; the enum only carries them.
        case runLoop(RunLoop, modes: Set<RunLoop.Mode>, timer: WakeTimer)
        case queue(DispatchQueue)
    }

    /// The wake-up timer, in a box that may cross threads (CFRunLoopTimer's calls used here lock).
    private struct WakeTimer: @unchecked Sendable {
        let timer: Timer
    }

    private struct State {
        var targets: [Target] = []
        var pending = Stream.Event()
        var wakeOutstanding = false
        var stopped = false
    }

    private let state = Mutex(State())
    /// Called on the target thread with each event, in the order of `Stream.Event.deliveryOrder`.
    private let handler: @Sendable (Stream.Event) -> Void

    init(handler: @escaping @Sendable (Stream.Event) -> Void) {
        self.handler = handler
    }

    // MARK: Scheduling

    func schedule(in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        let added: (WakeTimer, Bool)? = state.withLock { s in
            guard !s.stopped else { return nil }
            for (i, t) in s.targets.enumerated() {
                if case .runLoop(let rl, var modes, let timer) = t, rl === runLoop {
                    guard modes.insert(mode).inserted else { return nil }
                    s.targets[i] = .runLoop(rl, modes: modes, timer: timer)
                    return (timer, !s.pending.isEmpty)
                }
            }
            let timer = WakeTimer(timer: Timer(fire: .distantFuture, interval: 1_000_000, repeats: true) { [weak self] timer in
                timer.fireDate = .distantFuture
                self?.drain()
            })
            s.targets.append(.runLoop(runLoop, modes: [mode], timer: timer))
            return (timer, !s.pending.isEmpty)
        }
        guard let (timer, hasPending) = added else { return }
        runLoop.add(timer.timer, forMode: mode)
        if hasPending { wakeAll() }
    }

    func remove(from runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        let toInvalidate: WakeTimer? = state.withLock { s in
            for (i, t) in s.targets.enumerated() {
                if case .runLoop(let rl, var modes, let timer) = t, rl === runLoop {
                    guard modes.remove(mode) != nil else { return nil }
                    if modes.isEmpty {
                        s.targets.remove(at: i)
                        return timer
                    }
                    s.targets[i] = .runLoop(rl, modes: modes, timer: timer)
                    return nil
                }
            }
            return nil
        }
        // A timer in several modes cannot leave one mode alone through public API; a removed mode keeps
        // it until the last mode goes, which only delays nothing: delivery checks nothing per mode.
        toInvalidate?.timer.invalidate()
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
        for case .runLoop(_, _, let timer) in targets { timer.timer.invalidate() }
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
            case .runLoop(_, _, let timer):
                timer.timer.fireDate = Date()
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

extension Stream.Event {
    /// The order in which events posted together reach the delegate.
    static let deliveryOrder: [Stream.Event] = [.openCompleted, .hasBytesAvailable, .hasSpaceAvailable, .endEncountered, .errorOccurred]
}
