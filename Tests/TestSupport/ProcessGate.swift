// What belongs to the whole test process rather than to one test: `CBManager.authorization` is a class
// property, read from every manager of the process, and the test targets run in one process with their
// suites in parallel. A test that asserts it, or makes a manager that changes it, holds this gate for the
// time it does, so that another suite's refused manager does not answer for it.
//
// Waiting for the gate blocks no thread: a waiter is a suspended task, resumed when the holder lets go. (A first
// version waited on a semaphore, in the test's thread or a Dispatch worker; with the tests' executor on Dispatch's
// global queues, which add a worker at most once a second, two whole runs then had tests stalled for 20 s and more
// at the opening stampede, and two timing tests failed.)
import Synchronization

public final class ProcessGate: Sendable {
    private struct State: ~Copyable {
        var held = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    public init() {}

    /// Runs `body` alone among the gate's holders, the waiters served in the order they came.
    public func run<T>(_ body: () async throws -> T) async rethrows -> T {
        await acquire()
        defer { release() }
        return try await body()
    }

    private func acquire() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.held {
                    s.waiters.append(c)
                    return false
                }
                s.held = true
                return true
            }
            if now { c.resume() }
        }
    }

    /// Hands the gate to the first waiter (it stays held), or opens it.
    private func release() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.waiters.isEmpty {
                s.held = false
                return nil
            }
            return s.waiters.removeFirst()
        }
        next?.resume()
    }

    /// Held by every test that asserts `CBManager.authorization` or refuses a manager its controller.
    public static let authorization = ProcessGate()
}
