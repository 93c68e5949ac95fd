// What belongs to the whole test process rather than to one test: `CBManager.authorization` is a class
// property, read from every manager of the process, and the test targets run in one process with their
// suites in parallel. A test that asserts it, or makes a manager that changes it, holds this gate for the
// time it does, so that another suite's refused manager does not answer for it.
import Foundation

public final class ProcessGate: Sendable {
    private let semaphore = DispatchSemaphore(value: 1)

    public init() {}

    /// Runs `body` alone among the gate's holders, on the caller's thread.
    public func run<T>(_ body: () throws -> T) rethrows -> T {
        semaphore.wait()
        defer { semaphore.signal() }
        return try body()
    }

    /// Runs `body` alone among the gate's holders; the wait for the gate blocks no task's thread.
    public func run<T>(_ body: () async throws -> T) async rethrows -> T {
        let semaphore = semaphore
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                semaphore.wait()
                c.resume()
            }
        }
        defer { semaphore.signal() }
        return try await body()
    }

    /// Held by every test that asserts `CBManager.authorization` or refuses a manager its controller.
    public static let authorization = ProcessGate()
}
