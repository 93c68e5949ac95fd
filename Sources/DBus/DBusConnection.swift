// A connection to a D-Bus message bus over a UNIX socket: authentication, Hello, method calls with replies
// and timeouts, signals, objects of our own that answer calls, and descriptor passing (SCM_RIGHTS).
//
// Threading: one reader thread per connection blocks in recvmsg and decodes; every handler — replies, signals,
// calls to our objects, the disconnect handler — runs on `queue`, a serial queue of the connection's own, in
// the order the messages arrived. Nothing runs on a caller's queue, so no caller's queue is ever blocked by the
// bus. Sends are written under a lock from the calling thread. `close()` ends the reader and fails every call
// still waiting; the reader closes the socket as it leaves (see `BusSocket`).
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Dispatch
import Synchronization

public final class DBusConnection: Sendable {
    /// Our unique name on the bus (":1.42"), from Hello.
    public let uniqueName: String
    /// Whether descriptors may be passed (the bus agreed to NEGOTIATE_UNIX_FD).
    public let unixFDsEnabled: Bool
    /// The queue every handler runs on.
    public let queue: DispatchQueue
    /// Messages longer than this end the connection (the bus is misbehaving); the spec allows 128 MiB.
    public let maxMessageLength: Int

    fileprivate let socket: BusSocket
    private let state: Mutex<State>
    /// Held for the whole of each message written, and by the reader to close the socket.
    private let writeLock = Mutex<Void>(())

    private struct State: ~Copyable {
        var nextSerial: UInt32 = 2   // 1 was Hello
        var pending: [UInt32: @Sendable (Result<DBusMessage, DBusError>) -> Void] = [:]
        var signalHandlers: [Int: @Sendable (DBusMessage) -> Void] = [:]
        var objects: [String: @Sendable (DBusMessage) -> DBusMessage?] = [:]
        var nextToken = 0
        var closed: DBusError?
        var disconnectHandlers: [@Sendable (DBusError) -> Void] = []
    }

    /// The system bus's address: `DBUS_SYSTEM_BUS_ADDRESS`, or the spec's default.
    public static var systemBusAddress: String {
        getenv("DBUS_SYSTEM_BUS_ADDRESS").map { String(cString: $0) } ?? "unix:path=/var/run/dbus/system_bus_socket"
    }

    /// The session bus's address, when the environment names one.
    public static var sessionBusAddress: String? {
        getenv("DBUS_SESSION_BUS_ADDRESS").map { String(cString: $0) }
    }

    /// Connects to the bus at `address` (`unix:path=…` or `unix:abstract=…`; several separated by `;` are tried in
    /// order), authenticates with EXTERNAL and says Hello. Blocks the calling thread until then (a few
    /// milliseconds on a healthy bus; `timeout` seconds at most).
    public init(
        address: String, queue: DispatchQueue? = nil, negotiateUnixFDs: Bool = true,
        maxMessageLength: Int = 16 << 20, timeout: Double = 10
    ) throws(DBusError) {
        self.queue = queue ?? DispatchQueue(label: "opencorebluetooth.dbus")
        self.maxMessageLength = min(maxMessageLength, DBusLimits.maxMessageLength)
        var lastError = DBusError.badAddress(address)
        var connected: Int32 = -1
        for entry in address.split(separator: ";") {
            do {
                connected = try Self.open(String(entry))
                break
            } catch {
                lastError = error
            }
        }
        guard connected >= 0 else { throw lastError }
        let fd = connected
        socket = BusSocket(fd)
        state = Mutex(State())
        var timeoutValue = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - Double(Int(timeout))) * 1e6))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeoutValue, socklen_t(MemoryLayout<timeval>.size))
        var leftover: [UInt8] = []
        let fdsAgreed: Bool
        do {
            fdsAgreed = try Self.authenticate(fd: fd, negotiate: negotiateUnixFDs, leftover: &leftover)
        } catch {
            socket.close()
            throw error
        }
        unixFDsEnabled = fdsAgreed
        // Hello before the reader starts: the bus answers it first (then signals NameAcquired, which the reader
        // passes on like any signal).
        let name: String
        do {
            name = try Self.hello(fd: fd, buffer: &leftover, limit: self.maxMessageLength)
        } catch {
            socket.close()
            throw error
        }
        uniqueName = name
        var none = timeval(tv_sec: 0, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, socklen_t(MemoryLayout<timeval>.size))
        startReader(initial: leftover)
    }

    deinit { close() }

    // MARK: Sending

    /// Sends a message that expects no reply (a signal, a reply of ours, a call with `.noReplyExpected`);
    /// returns its serial.
    @discardableResult
    public func send(_ message: DBusMessage) throws(DBusError) -> UInt32 {
        try send(message, registering: nil)
    }

    /// Calls a method; `reply` runs on `queue` with the return, the error reply as `.remote`, `.timedOut` or
    /// `.disconnected`.
    public func call(
        _ message: DBusMessage, timeout: Double = 25,
        reply: @escaping @Sendable (Result<DBusMessage, DBusError>) -> Void
    ) {
        var m = message
        m.kind = .methodCall
        do {
            let serial = try send(m, registering: reply)
            queue.asyncAfter(deadline: .now() + timeout) { [weak self] in
                guard let self else { return }
                let waiting = self.state.withLock { $0.pending.removeValue(forKey: serial) }
                waiting?(.failure(.timedOut))
            }
        } catch {
            queue.async { reply(.failure(error)) }
        }
    }

    /// Calls a method and waits for its answer.
    public func call(_ message: DBusMessage, timeout: Double = 25) async throws(DBusError) -> DBusMessage {
        let result: Result<DBusMessage, DBusError> = await withCheckedContinuation { continuation in
            call(message, timeout: timeout) { continuation.resume(returning: $0) }
        }
        return try result.get()
    }

    /// Calls a method and blocks the calling thread for the answer. Never call it on `queue`.
    public func callBlocking(_ message: DBusMessage, timeout: Double = 25) throws(DBusError) -> DBusMessage {
        dispatchPrecondition(condition: .notOnQueue(queue))
        let box = Mutex<Result<DBusMessage, DBusError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        call(message, timeout: timeout) { result in
            box.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return try box.withLock { $0! }.get()
    }

    /// Sends `message`, with `reply` waiting for its answer when given. Throws only while `reply` is still the
    /// caller's to fail; once this returns, `reply` runs exactly once (with the answer, the timeout, or the
    /// connection's end).
    private func send(
        _ message: DBusMessage,
        registering reply: (@Sendable (Result<DBusMessage, DBusError>) -> Void)?
    ) throws(DBusError) -> UInt32 {
        if !message.unixFDs.isEmpty && !unixFDsEnabled {
            throw .invalidValue("the bus does not pass descriptors")
        }
        let serial: UInt32 = try state.withLock { (s: inout State) throws(DBusError) -> UInt32 in
            if let closed = s.closed { throw closed }
            let serial = s.nextSerial
            s.nextSerial = s.nextSerial == UInt32.max ? 1 : s.nextSerial + 1
            if let reply { s.pending[serial] = reply }
            return serial
        }
        let octets: [UInt8]
        do {
            octets = try message.encoded(serial: serial)
        } catch {
            return try withdraw(serial, replying: reply != nil, error)
        }
        // Checked again under the write lock: the connection may have closed since, and the reader closes the
        // descriptor (after marking the connection closed) under this lock, whose number may then belong to another
        // socket. The lock is held across every part of the message, so no part can follow a close.
        let failure: DBusError? = writeLock.withLock { _ -> DBusError? in
            if let closed = state.withLock({ $0.closed }) { return closed }
            let written = Self.write(fd: socket.fd, octets, fds: message.unixFDs)
            return written == 0 ? nil : .disconnected("write: \(String(cString: strerror(written)))")
        }
        guard let failure else { return serial }
        defer { shutDown(failure) }
        return try withdraw(serial, replying: reply != nil, failure)
    }

    /// A send failed: takes its reply back and throws `error`, for the caller to fail the reply — unless the
    /// shutDown that closed the connection took the reply first and fails it: then the send returns.
    private func withdraw(_ serial: UInt32, replying: Bool, _ error: DBusError) throws(DBusError) -> UInt32 {
        let taken = state.withLock { $0.pending.removeValue(forKey: serial) } == nil
        if replying && taken { return serial }
        throw error
    }

    // MARK: Receiving

    /// Calls `handler` on `queue` with every signal the bus routes to us (see `addMatch`). Returns a token for
    /// `removeSignalHandler`.
    @discardableResult
    public func onSignal(_ handler: @escaping @Sendable (DBusMessage) -> Void) -> Int {
        state.withLock { s in
            s.nextToken += 1
            s.signalHandlers[s.nextToken] = handler
            return s.nextToken
        }
    }

    public func removeSignalHandler(_ token: Int) {
        _ = state.withLock { $0.signalHandlers.removeValue(forKey: token) }
    }

    /// Calls `handler` on `queue` when the connection ends (at once, with the reason, if it already has).
    public func onDisconnect(_ handler: @escaping @Sendable (DBusError) -> Void) {
        let already: DBusError? = state.withLock { s in
            if s.closed == nil { s.disconnectHandlers.append(handler) }
            return s.closed
        }
        if let already { queue.async { handler(already) } }
    }

    /// Asks the bus to route signals matching `rule` to us (org.freedesktop.DBus.AddMatch).
    public func addMatch(_ rule: String) async throws(DBusError) {
        _ = try await call(Self.addMatchCall(rule))
    }

    /// The same without waiting: `reply` gets the bus's answer on the connection's queue.
    public func addMatch(_ rule: String, reply: @escaping @Sendable (Result<DBusMessage, DBusError>) -> Void) {
        call(Self.addMatchCall(rule), reply: reply)
    }

    private static func addMatchCall(_ rule: String) -> DBusMessage {
        .methodCall(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus", member: "AddMatch", body: [.string(rule)])
    }

    /// Serves method calls to the object at `path`: `handler` runs on `queue` and returns the reply (made with
    /// `call.reply(…)` or `call.errorReply(…)`), or nil to reply later with `send`. Calls to paths nobody
    /// exported get org.freedesktop.DBus.Error.UnknownObject; Peer.Ping is answered for every path.
    public func export(path: String, handler: @escaping @Sendable (DBusMessage) -> DBusMessage?) {
        state.withLock { $0.objects[path] = handler }
    }

    public func unexport(path: String) {
        _ = state.withLock { $0.objects.removeValue(forKey: path) }
    }

    /// Ends the connection: the reader stops, waiting calls fail with `.disconnected`.
    public func close() {
        shutDown(.disconnected("closed by us"))
    }

    private func shutDown(_ reason: DBusError) {
        let (first, pending, handlers): (Bool, [@Sendable (Result<DBusMessage, DBusError>) -> Void], [@Sendable (DBusError) -> Void]) =
            state.withLock { s in
                guard s.closed == nil else { return (false, [], []) }
                s.closed = reason
                let p = Array(s.pending.values)
                s.pending = [:]
                let h = s.disconnectHandlers
                s.disconnectHandlers = []
                return (true, p, h)
            }
        guard first else { return }
        // shutdown wakes the reader (and a write blocked on a full socket); the reader closes the descriptor when
        // it leaves.
        socket.shutDown()
        queue.async {
            for p in pending { p(.failure(reason)) }
            for h in handlers { h(reason) }
        }
    }

    private func startReader(initial: [UInt8]) {
        let thread = ReaderThread(connection: self, initial: initial)
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        var tid = pthread_t()
        let box = Unmanaged.passRetained(thread).toOpaque()
        pthread_create(
            &tid, &attributes,
            { arg in
                let thread = Unmanaged<ReaderThread>.fromOpaque(arg!).takeRetainedValue()
                thread.run()
                return nil
            }, box)
        pthread_attr_destroy(&attributes)
    }

    /// One decoded message from the reader thread.
    fileprivate func deliver(_ message: DBusMessage) {
        switch message.kind {
        case .methodReturn, .error:
            guard let serial = message.replySerial else { return }
            guard let waiting = state.withLock({ $0.pending.removeValue(forKey: serial) }) else {
                closeFDs(message)
                return
            }
            queue.async {
                if message.kind == .error {
                    waiting(.failure(.remote(name: message.errorName ?? "", message: message.errorMessage)))
                } else {
                    waiting(.success(message))
                }
            }
        case .signal:
            let handlers = state.withLock { Array($0.signalHandlers.sorted { $0.key < $1.key }.map(\.value)) }
            queue.async { for h in handlers { h(message) } }
        case .methodCall:
            let handler = state.withLock { $0.objects[message.path ?? ""] }
            queue.async { [weak self] in
                guard let self else { return }
                let answer: DBusMessage?
                if message.interface == "org.freedesktop.DBus.Peer" && message.member == "Ping" {
                    answer = message.reply()
                } else if let handler {
                    answer = handler(message)
                } else {
                    answer = message.errorReply(
                        name: "org.freedesktop.DBus.Error.UnknownObject",
                        message: "no object at \(message.path ?? "?")")
                }
                if let answer, !message.flags.contains(.noReplyExpected) { _ = try? self.send(answer) }
            }
        case .unknown:
            closeFDs(message)
        }
    }

    /// The reader no longer reads: the connection ends, and the descriptor is closed. Under the write lock, so no
    /// send is between its check of `closed` and its write: its number may belong to another socket at once.
    fileprivate func readerEnded(_ reason: DBusError) {
        shutDown(reason)
        writeLock.withLock { _ in socket.close() }
    }

    /// The socket's number (tests look at it).
    var descriptor: Int32 { socket.fd }

    private func closeFDs(_ message: DBusMessage) { for d in message.unixFDs { Glibc.close(d) } }

    // MARK: Socket edge

    private static func open(_ address: String) throws(DBusError) -> Int32 {
        guard address.hasPrefix("unix:") else { throw .badAddress("\(address) (only unix: transports are supported)") }
        var path: String?
        var abstract: String?
        for pair in address.dropFirst(5).split(separator: ",") {
            let kv = pair.split(separator: "=", maxSplits: 1).map(String.init)
            guard kv.count == 2 else { continue }
            switch kv[0] {
            case "path": path = unescape(kv[1])
            case "abstract": abstract = unescape(kv[1])
            default: break
            }
        }
        guard let name = path ?? abstract else { throw .badAddress(address) }
        var sun = sockaddr_un()
        sun.sun_family = sa_family_t(AF_UNIX)
        var octets = Array(name.utf8)
        if abstract != nil && path == nil { octets.insert(0, at: 0) }
        let capacity = MemoryLayout.size(ofValue: sun.sun_path)
        guard octets.count < capacity else { throw .badAddress("\(address) (path too long)") }
        withUnsafeMutableBytes(of: &sun.sun_path) { raw in
            for (i, b) in octets.enumerated() { raw[i] = b }
        }
        let fd = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .system("socket", errno) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + octets.count + (abstract != nil && path == nil ? 0 : 1))
        let rc = withUnsafePointer(to: &sun) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) }
        }
        guard rc == 0 else {
            let e = errno
            Glibc.close(fd)
            throw .disconnected("cannot connect to \(name): \(String(cString: strerror(e)))")
        }
        return fd
    }

    /// Address values escape octets as %XX.
    private static func unescape(_ s: String) -> String {
        var out: [UInt8] = []
        var it = Array(s.utf8)[...]
        while let c = it.popFirst() {
            if c == UInt8(ascii: "%"), it.count >= 2, let v = UInt8(String(decoding: it.prefix(2), as: UTF8.self), radix: 16) {
                out.append(v)
                it = it.dropFirst(2)
            } else {
                out.append(c)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Sends Hello (serial 1) and reads until its reply; what follows stays in `buffer`.
    private static func hello(fd: Int32, buffer: inout [UInt8], limit: Int) throws(DBusError) -> String {
        let hello = DBusMessage.methodCall(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus", member: "Hello")
        guard write(fd: fd, try hello.encoded(serial: 1), fds: []) == 0 else { throw .disconnected("cannot write Hello") }
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            if let length = try DBusMessage.frameLength(buffer[...], limit: limit), buffer.count >= length {
                let message = try DBusMessage.decode(Array(buffer[..<length]))
                guard message.replySerial == 1 else {
                    throw .malformed(0, "the bus sent \(message.kind) before answering Hello")
                }
                buffer.removeSubrange(..<length)
                if message.kind == .error {
                    throw .remote(name: message.errorName ?? "", message: message.errorMessage)
                }
                guard let name = message.body.first?.string else { throw .malformed(0, "Hello answered without a name") }
                return name
            }
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw .disconnected(n == 0 ? "the bus closed the connection" : "no answer to Hello") }
            buffer.append(contentsOf: chunk[..<n])
        }
    }

    private static func authenticate(fd: Int32, negotiate: Bool, leftover: inout [UInt8]) throws(DBusError) -> Bool {
        var auth = DBusAuthClient(uid: getuid(), negotiateUnixFDs: negotiate)
        guard write(fd: fd, auth.opening, fds: []) == 0 else { throw .authenticationFailed("cannot write to the bus") }
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            // One line at a time; the server sends nothing unasked, but keep what follows a line.
            if let cr = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                var lineOctets = Array(buffer[..<cr])
                if lineOctets.last == UInt8(ascii: "\r") { lineOctets.removeLast() }
                buffer.removeSubrange(...cr)
                let step = try auth.receive(line: String(decoding: lineOctets, as: UTF8.self))
                switch step {
                case .send(let octets):
                    guard write(fd: fd, octets, fds: []) == 0 else { throw .authenticationFailed("cannot write to the bus") }
                case .begin(let octets, let fds, _):
                    guard write(fd: fd, octets, fds: []) == 0 else { throw .authenticationFailed("cannot write to the bus") }
                    leftover = buffer
                    return fds
                }
                continue
            }
            guard buffer.count <= DBusAuthClient.maxLineLength else { throw .authenticationFailed("line too long") }
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                throw .authenticationFailed(n == 0 ? "the bus closed the connection" : "no answer from the bus (\(String(cString: strerror(errno))))")
            }
            buffer.append(contentsOf: chunk[..<n])
        }
    }

    /// Writes all of `octets`, the descriptors with the first part; returns 0 or an errno.
    fileprivate static func write(fd: Int32, _ octets: [UInt8], fds: [Int32]) -> Int32 {
        var offset = 0
        var pendingFDs = fds
        while offset < octets.count {
            let n: Int = octets.withUnsafeBytes { raw in
                var iov = iovec(
                    iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress! + offset),
                    iov_len: octets.count - offset)
                var msg = msghdr()
                return withUnsafeMutablePointer(to: &iov) { iovp in
                    msg.msg_iov = iovp
                    msg.msg_iovlen = 1
                    if pendingFDs.isEmpty { return sendmsg(fd, &msg, Int32(MSG_NOSIGNAL)) }
                    var control = ControlMessage.rights(pendingFDs)
                    return control.withUnsafeMutableBytes { cbuf in
                        msg.msg_control = cbuf.baseAddress
                        msg.msg_controllen = cbuf.count
                        return sendmsg(fd, &msg, Int32(MSG_NOSIGNAL))
                    }
                }
            }
            if n < 0 {
                if errno == EINTR { continue }
                return errno
            }
            pendingFDs = []
            offset += n
        }
        return 0
    }
}

/// Building and reading SCM_RIGHTS control messages (the CMSG_* macros are not visible to Swift).
enum ControlMessage {
    static let headerSize = MemoryLayout<cmsghdr>.size
    static func align(_ n: Int) -> Int { (n + MemoryLayout<Int>.size - 1) & ~(MemoryLayout<Int>.size - 1) }
    static func space(fds: Int) -> Int { align(headerSize) + align(fds * 4) }

    static func rights(_ fds: [Int32]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: space(fds: fds.count))
        out.withUnsafeMutableBytes { raw in
            var header = cmsghdr()
            header.cmsg_len = align(headerSize) + fds.count * 4
            header.cmsg_level = SOL_SOCKET
            header.cmsg_type = Int32(SCM_RIGHTS)
            raw.storeBytes(of: header, as: cmsghdr.self)
            for (i, d) in fds.enumerated() { raw.storeBytes(of: d, toByteOffset: align(headerSize) + i * 4, as: Int32.self) }
        }
        return out
    }

    /// Every descriptor in a received control buffer of `length` octets.
    static func descriptors(in raw: UnsafeRawBufferPointer, length: Int) -> [Int32] {
        var fds: [Int32] = []
        var offset = 0
        while offset + headerSize <= length {
            let header = raw.loadUnaligned(fromByteOffset: offset, as: cmsghdr.self)
            let total = Int(header.cmsg_len)
            guard total >= headerSize, offset + total <= length else { break }
            if header.cmsg_level == SOL_SOCKET && header.cmsg_type == Int32(SCM_RIGHTS) {
                let count = (total - align(headerSize)) / 4
                for i in 0..<count {
                    fds.append(raw.loadUnaligned(fromByteOffset: offset + align(headerSize) + i * 4, as: Int32.self))
                }
            }
            offset += align(total)
        }
        return fds
    }
}

/// A connection's socket. Its reader thread alone closes it, once it no longer reads it; shutting it down (which
/// wakes a blocked read or write) and closing it exclude each other here, so a late shutdown cannot reach a socket
/// that has taken the number since.
private final class BusSocket: Sendable {
    let fd: Int32
    private let closed = Mutex(false)

    init(_ fd: Int32) { self.fd = fd }

    func shutDown() {
        closed.withLock { isClosed in
            if !isClosed { _ = Glibc.shutdown(fd, Int32(SHUT_RDWR)) }
        }
    }

    func close() {
        closed.withLock { isClosed in
            if !isClosed {
                isClosed = true
                _ = Glibc.close(fd)
            }
        }
    }
}

/// The reader: recvmsg, frame, decode, hand over. Descriptors that arrive are queued and given to messages in
/// order, as many as each declares (UNIX_FDS).
private final class ReaderThread: @unchecked Sendable {
    weak var connection: DBusConnection?
    /// Held strongly: when the connection has gone, the reader still closes the socket.
    let socket: BusSocket
    let fd: Int32
    let limit: Int
    var buffer: [UInt8]
    var fds: [Int32] = []

    init(connection: DBusConnection, initial: [UInt8]) {
        self.connection = connection
        self.socket = connection.socket
        self.fd = socket.fd
        self.limit = connection.maxMessageLength
        self.buffer = initial
    }

    func run() {
        var chunk = [UInt8](repeating: 0, count: 65536)
        var control = [UInt8](repeating: 0, count: ControlMessage.space(fds: 64))
        var reason = DBusError.disconnected("the bus closed the connection")
        outer: while true {
            do {
                if try drain() == false { break outer }
            } catch {
                reason = error
                break outer
            }
            let n: Int = chunk.withUnsafeMutableBytes { data in
                control.withUnsafeMutableBytes { cbuf in
                    var iov = iovec(iov_base: data.baseAddress, iov_len: data.count)
                    return withUnsafeMutablePointer(to: &iov) { iovp in
                        var msg = msghdr()
                        msg.msg_iov = iovp
                        msg.msg_iovlen = 1
                        msg.msg_control = cbuf.baseAddress
                        msg.msg_controllen = cbuf.count
                        let n = recvmsg(fd, &msg, Int32(MSG_CMSG_CLOEXEC))
                        if n >= 0 && msg.msg_controllen > 0 {
                            fds.append(contentsOf: ControlMessage.descriptors(in: UnsafeRawBufferPointer(cbuf), length: Int(msg.msg_controllen)))
                        }
                        return n
                    }
                }
            }
            if n < 0 {
                if errno == EINTR { continue }
                reason = .disconnected("read: \(String(cString: strerror(errno)))")
                break
            }
            if n == 0 { break }
            buffer.append(contentsOf: chunk[..<n])
        }
        for d in fds { close(d) }
        fds = []
        // Without the connection nobody sends (a send holds it), and its deinit's shutDown is excluded by the socket.
        if let connection { connection.readerEnded(reason) } else { socket.close() }
    }

    /// Decodes every whole message in the buffer; false when the connection is gone.
    func drain() throws(DBusError) -> Bool {
        var start = 0
        defer { if start > 0 { buffer.removeSubrange(..<start) } }
        while let length = try DBusMessage.frameLength(buffer[start...], limit: limit), buffer.count - start >= length {
            var message = try DBusMessage.decode(Array(buffer[start..<start + length]))
            start += length
            let count = message.declaredFDCount
            guard count <= fds.count else { throw .malformed(0, "message declares \(count) descriptors, \(fds.count) arrived") }
            message.unixFDs = Array(fds.prefix(count))
            fds.removeFirst(count)
            guard let connection else { return false }
            connection.deliver(message)
        }
        return true
    }
}
