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
// is built from three pieces per scheduled run loop, added in each scheduled mode:
// - a `RunLoop._Source` (swift-corelibs-foundation's version-0 source, public though underscored; XCTest
//   uses it): `post` signals it, and its `perform` delivers the pending events, so `run(mode:before:)`
//   returns after them as on Apple's systems;
// - a `RunLoop._Observer` (the same SPI) of the loop's `.beforeWaiting` and `.afterWaiting` activities,
//   which keeps a `sleeping` flag: a loop that is awake runs every signalled source before it sleeps, so it
//   needs no wake-up;
// - the wake-up itself: CoreFoundation's `CFRunLoopWakeUp` (one eventfd write) when it can be found at run
//   time — it is exported by the toolchain's libFoundation but declared in no Swift module, so it is looked
//   up with `dlsym` and called through a C function pointer, with the loop's CFRunLoop taken by
//   `CFRunLoopGetCurrent` in the observer's first callout on the loop's own thread. Otherwise (another
//   Foundation, or before that first callout) a repeating `Timer` whose fire date sits in the distant
//   future: setting it to now (`CFRunLoopTimerSetNextFireDate` is thread-safe) re-arms the loop's timer
//   descriptor, which wakes it; the callout pushes the date back. The timer costs two `timerfd_settime`
//   per wake-up, which in a virtual machine were most of the host loop's time in a CBL2CAPChannel transfer.
// So waking costs a system call only when the loop sleeps; while it is busy (a transfer at full speed)
// posting is a lock and a flag. The race between a post and a loop going to sleep is closed under the
// dispatcher's lock: a post that finds the loop awake has signalled the source before the
// `.beforeWaiting` callout can look, and that callout, finding undelivered events, wakes the loop itself.
// Measured wake-up latency: see `TransferTests.wakeLatency` (printed by the test run).
import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

final class StreamEventDispatcher: Sendable {
    private enum Target: @unchecked Sendable {
        case runLoop(RunLoopTarget)
        case queue(DispatchQueue)
    }

    /// One scheduled run loop: its modes, the delivery source, the wake-up timer and the sleep observers.
    /// `observers`, `cfRunLoop`, `sleeping` and `wakePending` are guarded by the dispatcher's lock; RunLoop,
    /// Timer, the source and the observers are thread-safe (CoreFoundation locks).
    private final class RunLoopTarget: @unchecked Sendable {
        let runLoop: RunLoop
        let timer: Timer
        let source: DeliverySource
        var observers: [RunLoop.Mode: RunLoop._Observer] = [:]
        /// The loop's CFRunLoop, once an observer callout has run on its thread (and CFRunLoopWakeUp exists).
        var cfRunLoop: UnsafeMutableRawPointer?
        /// Between the loop's `.beforeWaiting` and `.afterWaiting`; true until first seen awake.
        var sleeping = true
        /// A wake-up was sent since the loop last woke.
        var wakePending = false

        init(runLoop: RunLoop, timer: Timer, source: DeliverySource) {
            self.runLoop = runLoop
            self.timer = timer
            self.source = source
        }

        /// Wakes the loop; call outside the dispatcher's lock with the `cfRunLoop` read under it.
        func wake(_ cf: UnsafeMutableRawPointer?) {
            if let cf, let wakeUp = CoreFoundationWakeUp.wakeUp {
                wakeUp(cf)
            } else {
                timer.fireDate = Date()
            }
        }
    }

    private struct State {
        var targets: [Target] = []
        var pending = Stream.Event()
        /// The sources were signalled (and the queues sent a drain) for the events pending now.
        var signalled = false
        var stopped = false
        /// Wake-ups `post` sent to sleeping run loops (for tests).
        var wakeUpsSent = 0
    }

    // NSLock (a pthread mutex) rather than Synchronization.Mutex: ThreadSanitizer on Linux does not see
    // Mutex's futex-based locking and reports false races between `post` and `drain`.
    private let state = LockedState(State())
    /// Called on the target thread with each event, in the order of `Stream.Event.deliveryOrder`.
    private let handler: @Sendable (Stream.Event) -> Void

    /// Whether run loops are woken with CFRunLoopWakeUp (else with the timer); fixed at creation.
    private let wakesWithCoreFoundation: Bool

    /// Set by tests to exercise the timer wake-up in the dispatchers created afterwards.
    static let wakesWithTimerForTesting = LockedState(false)

    init(handler: @escaping @Sendable (Stream.Event) -> Void) {
        self.handler = handler
        wakesWithCoreFoundation = CoreFoundationWakeUp.wakeUp != nil && !Self.wakesWithTimerForTesting.withLock { $0 }
    }

    // MARK: Scheduling

    func schedule(in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        let target: RunLoopTarget? = state.withLock { s in
            guard !s.stopped else { return nil }
            for case .runLoop(let t) in s.targets where t.runLoop === runLoop {
                return t.observers[mode] == nil ? t : nil
            }
            let timer = Timer(fire: .distantFuture, interval: 1_000_000, repeats: true) { [weak self] timer in
                timer.fireDate = .distantFuture
                self?.timerFired(timer)
            }
            let t = RunLoopTarget(runLoop: runLoop, timer: timer, source: DeliverySource { [weak self] in self?.drain() })
            s.targets.append(.runLoop(t))
            return t
        }
        guard let target else { return }
        let observer = runLoop._observe([.beforeWaiting, .afterWaiting], in: mode) { [weak self, weak target] activity in
            guard let self, let target else { return }
            loop(target, isSleeping: activity == .beforeWaiting)
        }
        let added = state.withLock { s -> (added: Bool, pending: Bool) in
            // Stopped meanwhile: the target's observers were already invalidated.
            guard !s.stopped else { return (false, false) }
            target.observers[mode] = observer
            // The loop may be asleep in this mode, where the observer has not watched it yet.
            target.sleeping = true
            s.signalled = false
            return (true, !s.pending.isEmpty)
        }
        guard added.added else { return observer.invalidate() }
        let hasPending = added.pending
        runLoop._add(target.source, forMode: mode)
        runLoop.add(target.timer, forMode: mode)
        if hasPending { post([]) }
    }

    func remove(from runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        let removed: (RunLoopTarget, RunLoop._Observer, Bool)? = state.withLock { s in
            for (i, t) in s.targets.enumerated() {
                guard case .runLoop(let target) = t, target.runLoop === runLoop else { continue }
                guard let observer = target.observers.removeValue(forKey: mode) else { return nil }
                let last = target.observers.isEmpty
                if last { s.targets.remove(at: i) }
                return (target, observer, last)
            }
            return nil
        }
        guard let (target, observer, last) = removed else { return }
        observer.invalidate()
        runLoop._remove(target.source, for: mode)
        // A timer cannot leave one mode alone through public API; it only wakes the loop, so it stays
        // until the last mode goes. Events are delivered by the source, which has left this mode.
        if last {
            target.timer.invalidate()
            target.source.invalidate()
        }
    }

    func schedule(on queue: DispatchQueue) {
        let hasPending = state.withLock { s -> Bool in
            guard !s.stopped else { return false }
            s.targets.append(.queue(queue))
            s.signalled = false
            return !s.pending.isEmpty
        }
        if hasPending { post([]) }
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
        let (targets, observers) = state.withLock { s -> ([Target], [RunLoop._Observer]) in
            s.stopped = true
            s.pending = []
            let t = s.targets
            s.targets = []
            var observers: [RunLoop._Observer] = []
            for case .runLoop(let target) in t {
                observers += target.observers.values
                target.observers = [:]
            }
            return (t, observers)
        }
        for observer in observers { observer.invalidate() }
        for case .runLoop(let target) in targets {
            target.timer.invalidate()
            target.source.invalidate()
        }
    }

    // MARK: Posting and delivery

    /// How many times `post` woke a sleeping run loop.
    var wakeUpsSent: Int { state.withLock { $0.wakeUpsSent } }

    /// Adds `events` to the pending set; signals the targets once per delivery, and wakes the run loops
    /// that sleep. An empty set only re-signals what is pending (after scheduling).
    func post(_ events: Stream.Event) {
        var wakes: [(RunLoopTarget, UnsafeMutableRawPointer?)] = []
        var queues: [DispatchQueue] = []
        state.withLock { s in
            guard !s.stopped else { return }
            s.pending.formUnion(events)
            guard !s.pending.isEmpty else { return }
            let signal = !s.signalled
            s.signalled = true
            for target in s.targets {
                switch target {
                case .runLoop(let t):
                    // Under the lock, so a `.beforeWaiting` callout that finds `signalled` finds the
                    // source signalled too (CFRunLoopSourceSignal only takes the source's own lock).
                    if signal { t.source.signal() }
                    if t.sleeping, !t.wakePending {
                        t.wakePending = true
                        wakes.append((t, t.cfRunLoop))
                        s.wakeUpsSent += 1
                    }
                case .queue(let q):
                    if signal { queues.append(q) }
                }
            }
        }
        for (target, cf) in wakes { target.wake(cf) }
        for queue in queues { queue.async { [weak self] in self?.drain() } }
    }

    /// The `.beforeWaiting`/`.afterWaiting` callout, on the loop's thread. A loop about to sleep with
    /// events signalled but undelivered (posted after its sources ran) wakes itself.
    private func loop(_ target: RunLoopTarget, isSleeping: Bool) {
        let wake = state.withLock { s -> (Bool, UnsafeMutableRawPointer?) in
            if wakesWithCoreFoundation, target.cfRunLoop == nil, let current = CoreFoundationWakeUp.currentRunLoop {
                target.cfRunLoop = current()
            }
            target.sleeping = isSleeping
            if !isSleeping { target.wakePending = false }
            guard isSleeping, s.signalled, !target.wakePending, !target.observers.isEmpty else { return (false, nil) }
            target.wakePending = true
            return (true, target.cfRunLoop)
        }
        if wake.0 { target.wake(wake.1) }
    }

    private func timerFired(_ timer: Timer) {
        state.withLock { s in
            for case .runLoop(let t) in s.targets where t.timer === timer { t.wakePending = false }
        }
    }

    private func drain() {
        let events = state.withLock { s -> Stream.Event in
            let e = s.pending
            s.pending = []
            s.signalled = false
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

/// CoreFoundation's `CFRunLoopGetCurrent` and `CFRunLoopWakeUp`, found at run time in the process's
/// Foundation: swift-corelibs-foundation exports them but no Swift module declares them. Nil elsewhere;
/// then the dispatcher wakes run loops with its timer.
enum CoreFoundationWakeUp {
    typealias CurrentRunLoop = @convention(c) () -> UnsafeMutableRawPointer?
    typealias WakeUp = @convention(c) (UnsafeMutableRawPointer) -> Void

    private static let functions: (CurrentRunLoop, WakeUp)? = {
        #if canImport(Glibc) || canImport(Musl)
        guard ProcessInfo.processInfo.environment["BOUNDSTREAMS_WAKE_WITH_TIMER"] == nil,
            let process = dlopen(nil, RTLD_NOW),
            let current = dlsym(process, "CFRunLoopGetCurrent"),
            let wakeUp = dlsym(process, "CFRunLoopWakeUp")
        else { return nil }
        return (unsafeBitCast(current, to: CurrentRunLoop.self), unsafeBitCast(wakeUp, to: WakeUp.self))
        #else
        return nil
        #endif
    }()

    static var currentRunLoop: CurrentRunLoop? { functions?.0 }
    static var wakeUp: WakeUp? { functions?.1 }
}

extension Stream.Event {
    /// The order in which events posted together reach the delegate.
    static let deliveryOrder: [Stream.Event] = [.openCompleted, .hasBytesAvailable, .hasSpaceAvailable, .endEncountered, .errorOccurred]
}
