// Swift Testing runs every test body on Swift's cooperative thread pool, which has one thread per core (two
// here). A synchronous test that blocks — waiting for a child process, a socket, a lock or a sleep — holds
// one of those threads for as long as it waits, and two such tests at once stop every other test in the
// process: async tests then overrun deadlines they would meet on an idle machine. `.ownThread` runs each
// test of a suite (or one test) on a thread of its own, so blocking in it costs that thread only.
import Foundation
import Testing

/// Runs each test case on a dedicated thread (a task executor preference for the test's task).
public struct OwnThreadTrait: TestTrait, SuiteTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(for test: Test, testCase: Test.Case?,
                             performing function: @Sendable () async throws -> Void) async throws {
        // Suites pass through; each test case gets a thread that ends with it.
        guard testCase != nil else { return try await function() }
        let executor = ThreadExecutor(name: test.name)
        defer { executor.finish() }
        try await withTaskExecutorPreference(executor) { try await function() }
    }
}

extension Trait where Self == OwnThreadTrait {
    /// Each test runs on a thread of its own instead of the cooperative pool.
    public static var ownThread: Self { Self() }
}

/// One thread that runs the jobs given to it in order. After `finish()`, a job that still arrives (a task
/// that outlived the test but kept its preference) runs on a global queue, so nothing waits forever.
public final class ThreadExecutor: TaskExecutor, @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var finished = false

    public init(name: String) {
        let thread = Thread { [self] in drain() }
        thread.name = "test: \(name)"
        thread.stackSize = 8 << 20
        thread.start()
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        if finished {
            condition.unlock()
            let executor = asUnownedTaskExecutor()
            DispatchQueue.global().async { job.runSynchronously(on: executor) }
            return
        }
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Lets the thread end once the jobs queued so far have run.
    public func finish() {
        condition.lock()
        finished = true
        condition.signal()
        condition.unlock()
    }

    private func drain() {
        let executor = asUnownedTaskExecutor()
        while true {
            condition.lock()
            while jobs.isEmpty && !finished { condition.wait() }
            if jobs.isEmpty {
                condition.unlock()
                return
            }
            let batch = jobs
            jobs.removeAll(keepingCapacity: true)
            condition.unlock()
            for job in batch { job.runSynchronously(on: executor) }
        }
    }
}
