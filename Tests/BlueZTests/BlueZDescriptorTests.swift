// Descriptors of the BlueZ backend closed at the right time, without a kernel (UNIX and TCP sockets stand in for
// the kernel's): libdispatch keeps a watched descriptor by number until a source's cancel is handled on its queue,
// so a socket closed before then, whose number goes to a new socket, can leave that socket's write source never
// firing; and a number closed twice may be another file's the second time.
import Foundation
import Testing
import TestSupport
@testable import CoreBluetooth
#if canImport(Glibc)
import Glibc
#endif

/// `fd` under the lowest free number from `least` on (itself if it has one): the number `least` when it is free.
private func numbered(_ fd: Int32, atLeast least: Int32) -> Int32 {
    if fd >= least || fd < 0 { return fd }
    defer { close(fd) }
    return fcntl(fd, F_DUPFD_CLOEXEC, least)
}

private struct Failure: Error, CustomStringConvertible {
    let description: String
}

/// Waits (polling every 2 ms, at most 10 s) until `condition` holds.
private func waitUntil(_ what: String, _ condition: () -> Bool) throws {
    let deadline = Date().addingTimeInterval(10)
    while !condition() {
        if Date() > deadline { throw Failure(description: "timed out waiting for \(what)") }
        usleep(2_000)
    }
}

private func socketPair() throws -> (Int32, Int32) {
    var pair: [Int32] = [-1, -1]
    guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
        throw Failure(description: "socketpair: \(String(cString: strerror(errno)))")
    }
    return (pair[0], pair[1])
}

/// A write source on another queue, for a socket that should be writable.
private final class WritableWatch: @unchecked Sendable {
    let queue = DispatchQueue(label: "descriptor-test.watch")
    let fired = DispatchSemaphore(value: 0)
    let closed = DispatchSemaphore(value: 0)
    private var source: DispatchSourceWrite?

    /// Watches `fd` (now the watch's: closed when the source is cancelled); returns once the source is installed.
    func start(_ fd: Int32) {
        let installed = DispatchSemaphore(value: 0)
        queue.async { [self] in
            let s = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
            s.setEventHandler { [self] in
                fired.signal()
                s.cancel()
            }
            s.setCancelHandler { [self] in
                Glibc.close(fd)
                closed.signal()
            }
            source = s
            s.resume()
            queue.async { installed.signal() }
        }
        installed.wait()
    }

    /// Ends the watch and waits until its socket is closed.
    func stop() {
        queue.sync { source?.cancel() }
        closed.wait()
    }
}

@Suite(.timeLimit(.minutes(2)))
struct BlueZDescriptorTests {
    /// Dropped while a value waits for room, an acquired write socket is closed once its write source's cancel is
    /// handled on the queue, not before.
    @Test func anAcquiredWriteSocketIsClosedOnceItsSourceIsGone() throws {
        let (fd, peer) = try socketPair()
        defer { close(peer) }
        let socket = try #require(FileIdentity(fd))
        let queue = DispatchQueue(label: "descriptor-test.acquired-write")
        let (queued, openAfterRelease) = queue.sync { () -> (Bool, Bool) in
            var write: BlueZAcquiredWrite? = BlueZAcquiredWrite(fd: fd, mtu: 23, queue: queue)
            // The peer reads nothing: sends fill the socket, then one waits for room (a write source watches it).
            var outcome = BlueZAcquiredWrite.Outcome.sent
            var sends = 0
            while case .sent = outcome, sends < 100_000 {
                outcome = write!.send([0x12, 0x00, 0x01, 0x02]) {}
                sends += 1
            }
            guard case .queued = outcome else { return (false, false) }
            write = nil
            _ = write
            return (true, FileIdentity(fd) == socket)
        }
        try #require(queued, "no send waited for room")
        #expect(openAfterRelease, "closed before its source's cancel was handled")
        try waitUntil("the socket closed") { FileIdentity(fd) != socket }
    }

    /// A connect's caller gets its socket once libdispatch has let go of it: a caller that closes it at once, and
    /// whose next socket is given the number, sees that socket's write source fire.
    @Test func aConnectedSocketIsHandedOverOnceItsSourceIsGone() throws {
        let (fd, peer) = try socketPair()
        defer { close(peer) }
        let watch = WritableWatch()
        let next = DispatchSemaphore(value: 0)
        let sockets = LockedPair()
        BlueZL2CAPConnect.queue.async {
            BlueZL2CAPConnect.watch(fd, BlueZL2CAPConnect.Cancellation()) { result in
                guard case let .success(connected) = result else {
                    next.signal()
                    return
                }
                close(connected)
                // Opened now, the next socket is given the number (unless another test took it in between).
                if let pair = try? socketPair() {
                    let ends = pair.1 == connected ? (pair.1, pair.0) : (numbered(pair.0, atLeast: connected), pair.1)
                    sockets.set(ends)
                    watch.start(ends.0)
                }
                next.signal()
            }
        }
        next.wait()
        let pair = try #require(sockets.get(), "the connect failed, or no socket could be opened after it")
        defer { close(pair.1) }
        #expect(watch.fired.wait(timeout: .now() + 5) == .success, "the write source of descriptor \(pair.0) never fired (the connected socket's was \(fd))")
        watch.stop()
    }

    /// Closing a listener twice closes its socket once: a file given the number in between stays open.
    @Test func closingAListenerTwiceClosesItsSocketOnce() throws {
        guard let fd = try listeningSocket() else { return }
        let listening = try #require(FileIdentity(fd))
        let listener = BlueZL2CAPListener(listening: fd, psm: 0x0080)
        listener.start { close($0) }
        listener.close()
        try waitUntil("the listener's socket closed") { FileIdentity(fd) != listening }
        // A file opened now is given the number (unless another test took it in between: then it gets another).
        let other = numbered(open("/dev/null", O_RDONLY | O_CLOEXEC), atLeast: fd)
        try #require(other >= 0)
        let file = try #require(FileIdentity(other))
        defer { if FileIdentity(other) == file { close(other) } }
        listener.close()
        listener.queue.sync {}
        #expect(FileIdentity(other) == file, "the second close closed descriptor \(other), another file's")
    }
}

/// A TCP socket listening on 127.0.0.1 (nil, with the reason recorded, when there is none).
private func listeningSocket() throws -> Int32? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    try #require(fd >= 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0, listen(fd, 1) == 0 else {
        close(fd)
        Issue.record("no listening socket on 127.0.0.1: \(String(cString: strerror(errno)))")
        return nil
    }
    return fd
}

extension BlueZDescriptorTests {
    /// A listener let go without `close()` closes its socket, started or not: before, it stayed open (and a started
    /// one went on accepting) for the life of the process.
    @Test(arguments: [false, true]) func aListenerLetGoClosesItsSocket(started: Bool) throws {
        guard let fd = try listeningSocket() else { return }
        let listening = try #require(FileIdentity(fd))
        do {
            let listener = BlueZL2CAPListener(listening: fd, psm: 0x0080)
            if started { listener.start { close($0) } }
            listener.queue.sync {}
        }
        try waitUntil("the socket of the listener let go closed") { FileIdentity(fd) != listening }
    }
}

private final class LockedPair: @unchecked Sendable {
    private let lock = NSLock()
    private var pair: (Int32, Int32)?
    func set(_ p: (Int32, Int32)) { lock.withLock { pair = p } }
    func get() -> (Int32, Int32)? { lock.withLock { pair } }
}
