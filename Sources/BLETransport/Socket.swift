// Minimal POSIX stream sockets for H4-over-TCP/UNIX transports and the radio server.
//
// A `StreamConnection` owns a file descriptor, reads on its own thread, frames H4 packets and hands them to
// a callback; writes are whole-packet and serialised by a lock. TCP connections set TCP_NODELAY and re-arm
// TCP_QUICKACK after every read, so small HCI events are not held back by delayed ACKs.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import BLEHCI
import Synchronization

public final class StreamConnection: @unchecked Sendable {
    public let fd: Int32
    private let isTCP: Bool
    /// A socket (TCP or UNIX) rather than a serial port or pipe: written with MSG_NOSIGNAL, so a peer that
    /// went away gives EPIPE instead of a SIGPIPE that would kill a program that never ignored it.
    private let isSocket: Bool
    /// Guards writes; while the reader thread handles one read's packets, what it writes is gathered in
    /// `pending` and leaves in one system call after the last packet (other threads flush it first).
    private let writeLock = Locked(WriteState())
    struct WriteState {
        var pending: [UInt8] = []
        var gathering = false
        var reader: pthread_t?
        /// Packets written so far (the reader uses it to know whether an answer carried the ACK).
        var writes = 0
    }
    private let state = Locked<(closed: Bool, started: Bool)>((false, false))
    public let label: String
    /// Re-arm TCP_QUICKACK after each read (OCB_TCP_QUICKACK=0 turns it off, for measurements).
    let quickAckEnabled = ProcessInfo.processInfo.environment["OCB_TCP_QUICKACK"] != "0"

    public init(fd: Int32, isTCP: Bool, label: String) {
        self.fd = fd
        self.isTCP = isTCP
        var st = stat()
        isSocket = fstat(fd, &st) == 0 && (st.st_mode & S_IFMT) == S_IFSOCK
        self.label = label
        if isTCP { Self.setNoDelay(fd) }
    }

    static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    static func quickAck(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), 12 /* TCP_QUICKACK */, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Starts the reader thread. `onPacket` gets each framed packet; `onClose` is called once at the end.
    public func start(onPacket: @escaping @Sendable (HCIPacket) -> Void,
                      onClose: @escaping @Sendable ((any Error)?) -> Void) {
        let go = state.withLock { s -> Bool in
            if s.started || s.closed { return false }
            s.started = true
            return true
        }
        guard go else { return }
        let thread = Thread { [self] in
            writeLock.withLock { $0.reader = pthread_self() }
            var framer = H4Framer()
            var buffer = [UInt8](repeating: 0, count: 65_536)
            var closeError: (any Error)?
            readLoop: while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n < 0 {
                    if errno == EINTR { continue }
                    if !isClosed { closeError = TransportError.io(String(cString: strerror(errno))) }
                    break
                }
                if n == 0 { break }
                framer.append(buffer[0..<n])
                let writesBefore = writeLock.withLock { w -> Int in w.gathering = true; return w.writes }
                do {
                    while let p = try framer.nextPacket() { onPacket(p) }
                } catch {
                    closeError = error
                    break readLoop
                }
                let wrote = writeLock.withLock { w -> Bool in
                    w.gathering = false
                    if !w.pending.isEmpty { _ = writeAll(w.pending); w.pending.removeAll(keepingCapacity: true) }
                    return w.writes != writesBefore
                }
                // A delayed ACK would stall the peer's next segment (Nagle) by 40 ms. When handling what we
                // read made us write, that write carried the ACK; otherwise re-arm quick-ACK mode. (The host
                // handles packets in place when its loop is idle, so its answer is known here.)
                if isTCP && quickAckEnabled && !wrote { Self.quickAck(fd) }
            }
            close()
            onClose(closeError)
        }
        thread.name = label
        thread.start()
    }

    private var isClosed: Bool { state.withLock { $0.closed } }

    /// Writes one packet in full. Returns false if the connection is closed or the write failed.
    @discardableResult
    public func write(_ bytes: [UInt8]) -> Bool {
        writeLock.withLock { w in
            w.writes &+= 1
            if w.gathering, let r = w.reader, pthread_equal(r, pthread_self()) != 0 {
                w.pending.append(contentsOf: bytes)
                return true
            }
            if !w.pending.isEmpty {
                guard writeAll(w.pending) else { return false }
                w.pending.removeAll(keepingCapacity: true)
            }
            return writeAll(bytes)
        }
    }

    /// Call with the write lock held.
    private func writeAll(_ bytes: [UInt8]) -> Bool {
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { b in
                isSocket ? Glibc.send(fd, b.baseAddress! + off, b.count - off, Int32(MSG_NOSIGNAL))
                         : Glibc.write(fd, b.baseAddress! + off, b.count - off)
            }
            if n < 0 {
                if errno == EINTR { continue }
                return false
            }
            off += n
        }
        return true
    }

    public func close() {
        let doClose = state.withLock { s -> Bool in
            if s.closed { return false }
            s.closed = true
            return true
        }
        if doClose {
            _ = shutdown(fd, Int32(SHUT_RDWR))
            _ = Glibc.close(fd)
        }
    }
}

public enum Sockets {
    /// Connects a TCP socket to host:port.
    public static func connectTCP(host: String, port: UInt16) throws -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var res: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &res)
        guard rc == 0, let first = res else {
            throw TransportError.connectFailed("\(host):\(port): \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(res) }
        var lastError = "no address"
        var ai: UnsafeMutablePointer<addrinfo>? = first
        while let a = ai {
            let fd = socket(a.pointee.ai_family, a.pointee.ai_socktype, a.pointee.ai_protocol)
            if fd >= 0 {
                if Glibc.connect(fd, a.pointee.ai_addr, a.pointee.ai_addrlen) == 0 { return fd }
                lastError = String(cString: strerror(errno))
                _ = Glibc.close(fd)
            }
            ai = a.pointee.ai_next
        }
        throw TransportError.connectFailed("\(host):\(port): \(lastError)")
    }

    /// Connects a UNIX stream socket.
    public static func connectUNIX(path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TransportError.io(String(cString: strerror(errno))) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else {
            _ = Glibc.close(fd)
            throw TransportError.invalidSpec("UNIX socket path too long: \(path)")
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { p in
            for (i, b) in bytes.enumerated() { p[i] = b }
            p[bytes.count] = 0
        }
        let ok = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard ok == 0 else {
            let e = String(cString: strerror(errno))
            _ = Glibc.close(fd)
            throw TransportError.connectFailed("\(path): \(e)")
        }
        return fd
    }
}

/// A TCP listening socket that accepts connections on its own thread.
public final class TCPListener: @unchecked Sendable {
    public let fd: Int32
    public let port: UInt16
    private let closed = Locked(false)

    /// Binds to `port` (0 picks a free one) on `host` (default: loopback).
    public init(host: String = "127.0.0.1", port: UInt16) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TransportError.io(String(cString: strerror(errno))) }
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &addr.sin_addr) == 1 else {
            _ = Glibc.close(fd)
            throw TransportError.invalidSpec("bad IPv4 address \(host)")
        }
        let b = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard b == 0, listen(fd, 16) == 0 else {
            let e = String(cString: strerror(errno))
            _ = Glibc.close(fd)
            throw TransportError.io("cannot listen on \(host):\(port): \(e)")
        }
        var bound = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        self.fd = fd
        self.port = UInt16(bigEndian: bound.sin_port)
    }

    /// Accepts connections until closed, calling `onAccept` with each connected descriptor.
    public func start(onAccept: @escaping @Sendable (Int32) -> Void) {
        let thread = Thread { [self] in
            while !closed.withLock({ $0 }) {
                let c = accept(fd, nil, nil)
                if c < 0 {
                    if errno == EINTR { continue }
                    break
                }
                StreamConnection.setNoDelay(c)
                onAccept(c)
            }
        }
        thread.name = "ble.listener.\(port)"
        thread.start()
    }

    public func close() {
        let doIt = closed.withLock { c -> Bool in
            if c { return false }
            c = true
            return true
        }
        if doIt {
            _ = shutdown(fd, Int32(SHUT_RDWR))
            _ = Glibc.close(fd)
        }
    }
}
