// EventLoop: the one serial executor a host (and the virtual radio) runs on, with a clock that is either
// real or virtual.
//
// Threading contract: every protocol state machine of a host is touched only from its loop. Work from other
// threads enters with `execute`. Timers are kept in a heap and fired on the loop.
//
// Virtual time stands still unless a test moves it: `advance(by:)` runs all work and all timers due up to
// the new time, in deadline order, draining the work queue between timers, so a run is deterministic.
// In real mode, a dispatch timer fires at the earliest deadline.
//
// Turns: each time the loop runs work (a drain of the work queue, a timer, `runWaiting`, `sync`), that is
// one turn. Work done during a turn can ask to run something once the turn ends (`LoopTurn.atEnd`): stream
// transports use it to gather everything the host writes during a turn into one system call.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Dispatch
import Synchronization

/// What runs at the end of the loop turn in progress on this thread.
public final class LoopTurn {
    /// The turn's first hook (most turns have at most one: a transport's flush), then the others in order. The
    /// first apart: an array of closures emptied every turn cost more than the write it schedules.
    /// (Unchecked: a turn belongs to the one thread running it, so the runtime's exclusivity check on every
    /// access only cost instructions, several per packet.)
    @exclusivity(unchecked) fileprivate var firstHook: (() -> Void)?
    @exclusivity(unchecked) fileprivate var hooks: [() -> Void] = []

    private static let key: pthread_key_t = {
        var k = pthread_key_t()
        precondition(pthread_key_create(&k, nil) == 0, "pthread_key_create failed")
        return k
    }()

    /// The turn the calling thread is running, if any.
    static var current: LoopTurn? {
        guard let p = pthread_getspecific(key) else { return nil }
        return Unmanaged<LoopTurn>.fromOpaque(p).takeUnretainedValue()
    }

    /// Runs `hook` on this thread once the loop turn in progress here ends, after the work of the turn (and
    /// after hooks added before it). Returns false, without keeping `hook`, when this thread is not running a
    /// loop turn: the caller then does the work at once.
    public static func atEnd(_ hook: @escaping () -> Void) -> Bool {
        guard let turn = current else { return false }
        if turn.firstHook == nil && turn.hooks.isEmpty { turn.firstHook = hook } else { turn.hooks.append(hook) }
        return true
    }

    /// True when the calling thread is running a loop turn.
    public static var inProgress: Bool { pthread_getspecific(key) != nil }

    static func isCurrent(_ turn: LoopTurn) -> Bool {
        pthread_getspecific(key) == UnsafeMutableRawPointer(Unmanaged.passUnretained(turn).toOpaque())
    }

    @exclusivity(unchecked) private var spareHooks: [() -> Void] = []

    /// Runs the hooks in the order they were added, and those they add after them, reusing two arrays (no
    /// allocation per turn). `firstHook` is set only while `hooks` is empty, so it is never younger than a hook
    /// waiting there.
    private func runHooks() {
        while !hooks.isEmpty || firstHook != nil {
            if let first = firstHook {
                firstHook = nil
                first()
                continue
            }
            var batch = spareHooks
            spareHooks = []
            swap(&batch, &hooks)
            for h in batch { h() }
            batch.removeAll(keepingCapacity: true)
            spareHooks = batch
        }
    }

    /// Runs `body` as a turn of this object (nested calls join the turn already in progress), then its hooks.
    fileprivate func run<T>(_ body: () throws -> T) rethrows -> T {
        let outer = pthread_getspecific(Self.key)
        let me = Unmanaged.passUnretained(self).toOpaque()
        if outer == me { return try body() }
        pthread_setspecific(Self.key, me)
        defer {
            if firstHook != nil || !hooks.isEmpty { runHooks() }
            pthread_setspecific(Self.key, outer)
        }
        return try body()
    }
}

/// Nanoseconds of loop time.
public typealias LoopTime = UInt64

public extension LoopTime {
    static func milliseconds(_ ms: Double) -> LoopTime { LoopTime(ms * 1_000_000) }
    static func seconds(_ s: Double) -> LoopTime { LoopTime(s * 1_000_000_000) }
}

/// A cancellable timer handle.
public final class LoopTimer: @unchecked Sendable {
    fileprivate let deadline: LoopTime
    fileprivate let sequence: UInt64
    fileprivate var work: (() -> Void)?
    fileprivate init(deadline: LoopTime, sequence: UInt64, work: @escaping () -> Void) {
        self.deadline = deadline
        self.sequence = sequence
        self.work = work
    }
    /// True until the timer fires or is cancelled.
    public var isPending: Bool { work != nil }
}

public final class EventLoop: @unchecked Sendable {
    public enum Clock: Sendable { case real, virtual }

    public let clock: Clock
    public let queue: DispatchQueue
    private let key = DispatchSpecificKey<ObjectIdentifier>()
    private let origin = DispatchTime.now().uptimeNanoseconds

    // Cross-thread work queue.
    private struct Pending { var work: [() -> Void] = []; var drainScheduled = false }
    private let pending = Locked(Pending())

    // Loop-confined state.
    private var virtualNow: LoopTime = 0
    private var heap: [LoopTimer] = []
    private var sequence: UInt64 = 0
    private var dispatchTimer: DispatchSourceTimer?
    private var armedDeadline: LoopTime = .max
    private var draining = false
    private var idleHooks: [() -> Void] = []
    private var spareBatch: [() -> Void] = []
    /// Only one thread runs the loop at a time, so one turn object serves every turn.
    private let turn = LoopTurn()
    /// Held by whoever runs the loop: the queue's work (drains, timers, `sync`) and `runWaiting`, which runs on the
    /// calling thread without going through the queue. (`DispatchQueue.sync` did the same for `runWaiting`, at
    /// about a thousand instructions a call: 8 % of a sending host's own work on an L2CAP transfer.)
    /// (Its value is unused. Not `Void`: a stored property of size zero has the address of the mutex pointer beside
    /// it, and ThreadSanitizer took the lock's own read of that pointer for a race with the `inout` access.)
    private let owner = Locked(0)
    /// Work items run so far (loop-confined): a test on the virtual clock compares two readings to tell
    /// whether anything ran in between (CoreBluetoothTesting's idle detection).
    public private(set) var executedWorkCount: UInt64 = 0

    public init(label: String = "ble.loop", clock: Clock = .real) {
        self.clock = clock
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: key, value: ObjectIdentifier(self))
    }

    /// Current loop time in nanoseconds since the loop was created.
    public var now: LoopTime {
        switch clock {
        case .real: return DispatchTime.now().uptimeNanoseconds - origin
        case .virtual: return virtualNow
        }
    }

    /// True while this thread runs one of the loop's turns (a thread-local read, no call into libdispatch).
    public var isInTurn: Bool { LoopTurn.isCurrent(turn) }

    /// True on the loop. A turn in progress on this thread answers without asking libdispatch; work that
    /// reached the queue some other way (a dispatch source on `queue`) is still recognised.
    public var isInLoop: Bool {
        LoopTurn.isCurrent(turn) || DispatchQueue.getSpecific(key: key) == ObjectIdentifier(self)
    }

    public func assertInLoop(file: StaticString = #fileID, line: UInt = #line) {
        precondition(isInLoop, "not on the event loop", file: file, line: line)
    }

    /// Runs `work` on the loop, after work already submitted. Never runs it inline.
    public func execute(_ work: @escaping @Sendable () -> Void) {
        let schedule = pending.withLock { p -> Bool in
            p.work.append(work)
            if p.drainScheduled { return false }
            p.drainScheduled = true
            return true
        }
        if schedule { queue.async { self.owner.withLock { _ in self.drain() } } }
    }

    /// Runs `work` on the loop from a thread that may wait for it (a transport's reader): on the calling thread,
    /// once the loop is free (saving two thread switches per packet), as one turn. It may come before work
    /// submitted earlier with `execute` that has not begun. Must not be called from the loop.
    public func runWaiting(_ work: () -> Void) {
        precondition(!LoopTurn.isCurrent(turn), "EventLoop.runWaiting called from the loop itself")
        owner.withLock { _ in turn.run(work) }
    }

    /// Runs `work` on the loop and waits for it, after the work submitted before; must not be called from the loop.
    public func sync<T>(_ work: () throws -> T) rethrows -> T {
        precondition(!isInLoop, "EventLoop.sync called from the loop itself")
        return try queue.sync { try owner.withLock { _ in try turn.run(work) } }
    }

    /// Runs the work submitted so far, and what it submits. The caller holds `owner`.
    private func drain() {
        draining = true
        defer { draining = false }
        while true {
            // Swap the queue with an emptied spare: no allocation per drain.
            var batch = spareBatch
            spareBatch = []
            pending.withLock { p in
                if p.work.isEmpty { p.drainScheduled = false } else { swap(&batch, &p.work) }
            }
            if batch.isEmpty {
                spareBatch = batch
                guard !idleHooks.isEmpty else { return }
                let hooks = idleHooks
                idleHooks.removeAll(keepingCapacity: true)
                turn.run { for h in hooks { h() } }
                continue
            }
            executedWorkCount &+= UInt64(batch.count)
            // One turn per batch: what the batch wrote leaves before work submitted meanwhile runs, so a
            // steady stream of submissions cannot hold writes back.
            turn.run { for w in batch { w() } }
            batch.removeAll(keepingCapacity: true)
            spareBatch = batch
        }
    }

    /// Runs `work` on the loop once the work at hand is done (everything submitted so far, and the timers
    /// due now): a way to hand a whole burst of results to another thread in one hop. Call on the loop.
    public func whenIdle(_ work: @escaping () -> Void) {
        assertInLoop()
        idleHooks.append(work)
        if !draining { execute {} }
    }

    // MARK: Timers (loop only)

    /// Schedules `work` after `delay` nanoseconds of loop time. Call on the loop.
    @discardableResult
    public func schedule(after delay: LoopTime, _ work: @escaping () -> Void) -> LoopTimer {
        assertInLoop()
        sequence &+= 1
        let (deadline, overflow) = now.addingReportingOverflow(delay)
        let t = LoopTimer(deadline: overflow ? .max : deadline, sequence: sequence, work: work)
        push(t)
        if clock == .real { armIfNeeded() }
        return t
    }

    /// Cancels a timer; harmless if it already fired. Call on the loop.
    public func cancel(_ timer: LoopTimer?) {
        timer?.work = nil
    }

    private func push(_ t: LoopTimer) {
        heap.append(t)
        var i = heap.count - 1
        while i > 0 {
            let p = (i - 1) / 2
            if Self.less(heap[i], heap[p]) { heap.swapAt(i, p); i = p } else { break }
        }
    }

    private func popMin() -> LoopTimer {
        let top = heap[0]
        let last = heap.removeLast()
        if !heap.isEmpty {
            heap[0] = last
            var i = 0
            while true {
                let l = 2 * i + 1, r = l + 1
                var m = i
                if l < heap.count, Self.less(heap[l], heap[m]) { m = l }
                if r < heap.count, Self.less(heap[r], heap[m]) { m = r }
                if m == i { break }
                heap.swapAt(i, m); i = m
            }
        }
        return top
    }

    private static func less(_ a: LoopTimer, _ b: LoopTimer) -> Bool {
        a.deadline != b.deadline ? a.deadline < b.deadline : a.sequence < b.sequence
    }

    /// Drops cancelled timers at the top of the heap and returns the next live deadline.
    private func nextDeadline() -> LoopTime? {
        while let top = heap.first, top.work == nil { _ = popMin() }
        return heap.first?.deadline
    }

    /// Fires one due timer, if any; returns whether it did.
    private func fireOne(upTo limit: LoopTime) -> Bool {
        guard let d = nextDeadline(), d <= limit else { return false }
        let t = popMin()
        if clock == .virtual { virtualNow = max(virtualNow, d) }
        let w = t.work
        t.work = nil
        w?()
        return true
    }

    private func armIfNeeded() {
        guard let d = nextDeadline() else { return }
        if d >= armedDeadline, dispatchTimer != nil { return }
        if dispatchTimer == nil {
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.setEventHandler { [unowned self] in self.owner.withLock { _ in self.realTimerFired() } }
            timer.resume()
            dispatchTimer = timer
        }
        armedDeadline = d
        dispatchTimer!.schedule(
            deadline: DispatchTime(uptimeNanoseconds: origin + min(d, LoopTime(Int64.max) - origin)),
            leeway: .microseconds(100))
    }

    private func realTimerFired() {
        armedDeadline = .max
        let limit = now
        while turn.run({ fireOne(upTo: limit) }) { drain() }
        armIfNeeded()
    }

    // MARK: Virtual time (tests)

    /// Moves virtual time forward by `delta`, running every timer due on the way in order, with all work they
    /// cause. Call from outside the loop.
    public func advance(by delta: LoopTime) {
        precondition(clock == .virtual, "advance(by:) needs a virtual clock")
        sync {
            let target = virtualNow &+ delta
            drain()
            while fireOne(upTo: target) { drain() }
            virtualNow = max(virtualNow, target)
        }
    }

    /// Runs queued work without moving time; returns `executedWorkCount` after it.
    @discardableResult
    public func runPending() -> UInt64 {
        sync {
            drain(); return executedWorkCount
        }
    }

    /// The deadline of the earliest live timer, if any (loop-confined: read it inside `sync`). A test that
    /// owns a virtual clock steps from one deadline to the next with it.
    public var nextTimerDeadline: LoopTime? { nextDeadline() }

    /// Number of live timers (for tests that check nothing is left pending).
    public var pendingTimerCount: Int {
        let count = { self.heap.reduce(0) { $0 + ($1.work == nil ? 0 : 1) } }
        return isInLoop ? count() : sync(count)
    }
}
