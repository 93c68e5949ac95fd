// How a connection ends when its bus goes: a call whose write fails is answered once, and once the reader has
// closed the socket no send reaches its number, which a socket opened afterwards may have taken. The bus here is
// a stand-in on an abstract socket (no file, no process), so these run anywhere.
import Dispatch
import Foundation
import Synchronization
import TestSupport
import Testing
@testable import DBus

/// Answers one client's authentication and Hello as dbus-daemon does, then leaves its end of the connection to
/// the test.
private final class FakeBus: @unchecked Sendable {
    let address: String
    private let listener: Int32

    init() throws {
        let name = "ocb-fake-bus-\(UUID().uuidString)"
        address = "unix:abstract=\(name)"
        listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard listener >= 0 else { throw DBusError.system("socket", errno) }
        var sun = sockaddr_un()
        sun.sun_family = sa_family_t(AF_UNIX)
        let octets = [0] + Array(name.utf8)
        withUnsafeMutableBytes(of: &sun.sun_path) { raw in
            for (i, b) in octets.enumerated() { raw[i] = b }
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + octets.count)
        let bound = withUnsafePointer(to: &sun) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        guard bound == 0, listen(listener, 1) == 0 else {
            let e = errno
            close(listener)
            throw DBusError.system("bind", e)
        }
    }

    deinit { close(listener) }

    /// A connection to this bus, and the bus's end of it.
    func connect() throws -> (DBusConnection, Int32) {
        let answered = DispatchSemaphore(value: 0)
        let end = Mutex<Int32>(-1)
        Thread.detachNewThread { [self] in
            let fd = serve()
            end.withLock { $0 = fd }
            answered.signal()
        }
        let connection: DBusConnection
        do {
            connection = try DBusConnection(address: address, timeout: 10)
        } catch {
            _ = answered.wait(timeout: .now() + 15)
            let fd = end.withLock { $0 }
            if fd >= 0 { close(fd) }
            throw error
        }
        _ = answered.wait(timeout: .now() + 15)
        let fd = end.withLock { $0 }
        guard fd >= 0 else {
            connection.close()
            throw DBusError.disconnected("the fake bus did not answer")
        }
        return (connection, fd)
    }

    /// Accepts one client, authenticates it and answers its Hello; returns the connection (-1 on failure).
    private func serve() -> Int32 {
        var ready = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        guard poll(&ready, 1, 10_000) == 1 else { return -1 }
        let fd = accept(listener, nil, nil)
        guard fd >= 0 else { return -1 }
        var limit = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        var buffer: [UInt8] = []
        func readMore() -> Bool {
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = read(fd, &chunk, 4096)
            guard n > 0 else { return false }
            buffer += chunk[..<n]
            return true
        }
        func say(_ octets: [UInt8]) { _ = octets.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }
        // The credentials NUL, then lines until BEGIN.
        while buffer.isEmpty { guard readMore() else { close(fd); return -1 } }
        buffer.removeFirst()
        while true {
            guard let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) else {
                guard readMore() else { close(fd); return -1 }
                continue
            }
            let line = String(decoding: buffer[..<newline], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            buffer.removeSubrange(...newline)
            if line == "BEGIN" { break }
            if line.hasPrefix("AUTH ") {
                say(Array("OK 0123456789abcdef0123456789abcdef\r\n".utf8))
            } else if line == "NEGOTIATE_UNIX_FD" {
                say(Array("AGREE_UNIX_FD\r\n".utf8))
            } else {
                say(Array("ERROR\r\n".utf8))
            }
        }
        while true {
            if let length = try? DBusMessage.frameLength(buffer[...]), buffer.count >= length,
                let hello = try? DBusMessage.decode(Array(buffer[..<length])),
                let answer = try? hello.reply([.string(":1.7")]).encoded(serial: 1)
            {
                say(answer)
                return fd
            }
            guard readMore() else { close(fd); return -1 }
        }
    }
}

/// The device and inode of what `fd` names, nil when it names nothing.
private func identity(of fd: Int32) -> [UInt64]? {
    var s = stat()
    guard fstat(fd, &s) == 0 else { return nil }
    return [UInt64(s.st_dev), UInt64(s.st_ino)]
}

/// A connected socket pair one end of which is descriptor `number`, when it is free: every free number below it
/// is taken first (and given back after). Nil when something else holds it.
private func socketPair(numbered number: Int32) -> (Int32, Int32)? {
    var held: [Int32] = []
    defer { for d in held { close(d) } }
    for _ in 0..<4096 {
        var ends: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else { return nil }
        if ends[0] == number { return (ends[0], ends[1]) }
        if ends[1] == number { return (ends[1], ends[0]) }
        held += ends
        if ends[0] > number && ends[1] > number { return nil }
    }
    return nil
}

private struct TimedOut: Error, CustomStringConvertible {
    let description: String
}

private func waitUntil(_ what: String, _ condition: () -> Bool) async throws {
    let deadline = Date().addingTimeInterval(10)
    while !condition() {
        guard Date() < deadline else { throw TimedOut(description: "timed out waiting for \(what)") }
        try await pause(nanoseconds: 2_000_000)
    }
}

private let lost = DBusMessage.methodCall(destination: "org.example.Nobody", path: "/", interface: nil, member: "Lost")
private let signal = DBusMessage.signal(path: "/", interface: "org.example.Test", member: "Late")

@Suite(.timeLimit(.minutes(1)))
struct DBusConnectionEndTests {
    @Test func aCallWhoseWriteFailsIsAnsweredOnce() throws {
        let bus = try FakeBus()
        let (connection, end) = try bus.connect()
        defer {
            connection.close()
            close(end)
        }
        // The bus stops reading: writes fail (EPIPE) while the connection still reads.
        shutdown(end, Int32(SHUT_RD))
        let answers = Mutex<[Result<DBusMessage, DBusError>]>([])
        connection.call(lost, timeout: 60) { r in answers.withLock { $0.append(r) } }
        // Whatever `call` queued has run after this.
        connection.queue.sync {}
        let got = answers.withLock { $0 }
        #expect(got.count == 1, "answered \(got.count) times")
        guard case .some(.failure(.disconnected)) = got.first else {
            Issue.record("answered \(String(describing: got.first))")
            return
        }
        #expect(throws: DBusError.self) { try connection.send(signal) }
    }

    @Test func aSendAfterTheBusHangsUpThrowsAndReachesNoSocketOpenedSince() async throws {
        let bus = try FakeBus()
        let (connection, end) = try bus.connect()
        defer { connection.close() }
        let number = connection.descriptor
        let original = try #require(identity(of: number))
        let ended = Mutex<DBusError?>(nil)
        connection.onDisconnect { e in ended.withLock { $0 = e } }
        close(end)
        // The reader closes the socket as it leaves. A socket opened then gets the number, unless another file of
        // the process took it first: watched for without pausing, so that it is seldom so.
        let deadline = Date().addingTimeInterval(10)
        while identity(of: number) == original {
            guard Date() < deadline else { throw TimedOut(description: "the socket was not closed") }
            sched_yield()
        }
        let pair = socketPair(numbered: number)
        defer { if let pair { close(pair.0); close(pair.1) } }
        try await waitUntil("the disconnect") { ended.withLock { $0 } != nil }
        let reason = try #require(ended.withLock { $0 })
        #expect(throws: reason) { try connection.send(signal) }
        let answers = Mutex<[Result<DBusMessage, DBusError>]>([])
        connection.call(lost) { r in answers.withLock { $0.append(r) } }
        connection.queue.sync {}
        #expect(answers.withLock { $0.count } == 1)
        if let pair {
            var octet: UInt8 = 0
            #expect(recv(pair.1, &octet, 1, Int32(MSG_DONTWAIT)) == -1 && errno == EAGAIN, "a message reached the socket that took the number")
        }
    }
}
