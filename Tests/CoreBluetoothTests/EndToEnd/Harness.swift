// Shared test harness: a private virtual air per test (real clock), managers on their own hosts, a
// thread-safe event log, and waiting for conditions with a deadline.
import Foundation
import Testing
import TestSupport
import CoreBluetooth
import BLEHost
import BLEVirtualRadio
import BLETransport

/// A thread-safe list of what delegates saw, in order.
final class EventLog: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [String] = []

    func add(_ s: String) { lock.lock(); items.append(s); lock.unlock() }
    var all: [String] { lock.lock(); defer { lock.unlock() }; return items }
    func count(_ prefix: String) -> Int { all.filter { $0.hasPrefix(prefix) }.count }
    func contains(_ prefix: String) -> Bool { count(prefix) > 0 }
}

struct TimedOut: Error, CustomStringConvertible {
    let what: String
    var description: String { "timed out waiting for \(what)" }
}

/// Polls `condition` until it holds or `seconds` pass.
/// The default bound is generous: every suite of the package runs in this process at once, and on two cores
/// a step that takes milliseconds alone can wait seconds for a thread.
func waitUntil(_ what: String, seconds: Double = 30, _ condition: () -> Bool) async throws {
    let deadline = Date().addingTimeInterval(seconds)
    while !condition() {
        if Date() > deadline { throw TimedOut(what: what) }
        try await pause(nanoseconds: 2_000_000)
    }
}

/// Runs `body`, failing with TimedOut(`what`) if it has not finished after `seconds` (it is then cancelled):
/// for awaits that have no bound of their own (streams, connections), so a lost event fails the test by name.
/// The timeout does not wait for `body` to end: an await that ignores cancellation (a GATT call's continuation)
/// is left behind instead of holding the test, as a task group would, since it waits for all its children.
func within<T: Sendable>(_ what: String, seconds: Double = 30, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    let outcome = FirstOutcome<T>()
    let start = DispatchTime.now()
    defer {
        // A step that takes this long on a loaded machine is worth seeing in the log even when it passes.
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
        if elapsed > 10 { print("SLOW: \(what) took \(Int(elapsed)) s") }
    }
    return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        outcome.set(continuation)
        let task = Task {
            do { outcome.finish(.success(try await body())) } catch { outcome.finish(.failure(error)) }
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(seconds * 1_000_000_000))) {
            if outcome.finish(.failure(TimedOut(what: what))) { task.cancel() }
        }
    }
}

/// The first of several outcomes resumes a continuation; the others are dropped.
private final class FirstOutcome<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<T, any Error>?
    private var early: Result<T, any Error>?
    private var done = false

    func set(_ c: CheckedContinuation<T, any Error>) {
        let result: Result<T, any Error>? = lock.withLock {
            if let early { return early }
            continuation = c
            return nil
        }
        if let result { c.resume(with: result) }
    }

    /// Returns true when this outcome was the first.
    @discardableResult
    func finish(_ r: Result<T, any Error>) -> Bool {
        let c: CheckedContinuation<T, any Error>?? = lock.withLock {
            if done { return .none }
            done = true
            if let continuation { self.continuation = nil; return .some(continuation) }
            early = r
            return .some(nil)
        }
        guard case let .some(target) = c else { return false }
        target?.resume(with: r)
        return true
    }
}

/// One simulated air for a test; devices on it are placed a few metres apart.
final class TestAir: @unchecked Sendable {
    let air = VirtualAir(loop: EventLoop(label: "test.air", clock: .real))
    private var nextX = 0.0

    func host(_ name: String) throws -> LEHost {
        nextX += 2
        // OCB_TEST_CAPTURE=DIR records each host's packets to DIR/NAME.btsnoop, for debugging a test.
        let capture = ProcessInfo.processInfo.environment["OCB_TEST_CAPTURE"].map { "\($0)/\(name).btsnoop" }
        return try HostFactory.makeHost(on: air, name: name, position: VirtualPosition(x: nextX, y: 0, z: 0), capture: capture)
    }
}

/// The process's state directory (TestSupport's `processStateDirectory`, which the interop tests use too).
let testStateDirectory: String = processStateDirectory
