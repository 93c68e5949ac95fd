// The lock that guards the mutable state of the attribute and peer objects. They are read on the
// delegate queue by the app and written on the host's queue, so every stored `var` goes through one.
import Foundation

package final class CBLock: @unchecked Sendable {
    private let lock = NSLock()

    package init() {}

    @inline(__always)
    package func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }
}

/// A value behind an NSLock (ThreadSanitizer on Linux sees NSLock; it cannot see Synchronization.Mutex).
package final class CBMutex<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    package init(_ value: Value) { self.value = value }

    package func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
