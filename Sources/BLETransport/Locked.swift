// A value behind a pthread mutex. Synchronization.Mutex waits on a futex that ThreadSanitizer on Linux does
// not see, so every value it guards reads as a data race under `--sanitize=thread`; a pthread mutex is
// intercepted, so the state shared across threads here (the loop's work queue, socket writes) is checked
// for real races instead of drowning them in false ones.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

public final class Locked<Value>: @unchecked Sendable {
    // Usable from inlinable code, so that `withLock` is specialised and inlined in the modules that call it
    // on the packet path (a cross-module call to the generic body costs more than the lock itself).
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    // Unchecked: the mutex already gives one thread at a time (and a thread that came back in would deadlock on
    // it first), so the dynamic exclusivity check cost a runtime call on every lock for nothing (callgrind: about
    // 7 % of a sender's instructions over rootcanal, with the two locks of each packet sent).
    @exclusivity(unchecked) @usableFromInline var value: Value

    public init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    @inlinable @inline(__always)
    public func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
