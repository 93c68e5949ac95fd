// A descriptor number is given to the next file the process opens as soon as it is closed: a thread that still
// writes or sends on a number another thread closed reaches that file. The serial and HCI-socket transports close
// their descriptor only once no write or send is under way on it, and a later one sees it gone.
import Foundation
import Testing
import TestSupport
import BLEHCI
@testable import BLETransport
@testable import BLETransportLinux

private final class Sink: HCITransportSink, @unchecked Sendable {
    private let lock = NSLock()
    private var readerThread: Int?
    /// The thread that delivered the last packet (the transport's reader).
    var thread: Int? { lock.withLock { readerThread } }
    func transport(didReceive packet: HCIPacket) {
        let id = currentThread()
        lock.withLock { readerThread = id }
    }
    func transportDidClose(error: (any Error)?) {}
}

/// The calling thread's id, from /proc/thread-self ("PID/task/TID").
private func currentThread() -> Int? {
    (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")).flatMap { Int($0.split(separator: "/").last ?? "") }
}

/// The system call a thread of this process is blocked in, nil when it runs or is gone.
private func systemCall(of thread: Int) -> Int? {
    guard let text = try? String(contentsOfFile: "/proc/self/task/\(thread)/syscall", encoding: .utf8) else { return nil }
    return text.split(separator: " ").first.flatMap { Int($0) }
}

/// `fd` under the lowest free number from `least` on (itself if it has one): the number `least` when it is free.
private func numbered(_ fd: Int32, atLeast least: Int32) -> Int32 {
    if fd >= least { return fd }
    defer { close(fd) }
    return fcntl(fd, F_DUPFD_CLOEXEC, least)
}

/// A new pseudo-terminal: the master's descriptor and the terminal's path. (Swift's Glibc module declares neither
/// unlockpt nor ptsname_r: they are looked up in the C library.)
func pseudoTerminal() throws -> (Int32, String) {
    typealias Unlock = @convention(c) (Int32) -> Int32
    typealias Name = @convention(c) (Int32, UnsafeMutablePointer<CChar>, Int) -> Int32
    let unlock = unsafeBitCast(try #require(dlsym(nil, "unlockpt")), to: Unlock.self)
    let name = unsafeBitCast(try #require(dlsym(nil, "ptsname_r")), to: Name.self)
    let master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC)
    try #require(master >= 0)
    var path = [CChar](repeating: 0, count: 128)
    guard unlock(master) == 0, name(master, &path, path.count) == 0 else {
        close(master)
        throw TransportError.io("pseudo-terminal: \(String(cString: strerror(errno)))")
    }
    return (master, path.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
}

/// sendmsg (which the HCI-socket transport sends with) and futex (a lock waited for).
#if arch(x86_64)
private let callNumbers: (sendmsg: Int, futex: Int)? = (46, 202)
#elseif arch(arm64)
private let callNumbers: (sendmsg: Int, futex: Int)? = (211, 98)
#else
private let callNumbers: (sendmsg: Int, futex: Int)? = nil
#endif

@Suite(.timeLimit(.minutes(2)))
struct DescriptorReuseTests {
    /// A write the terminal holds back (nobody reads the other end of the pseudo-terminal, so its buffer stays full)
    /// gives up when the port is closed, and never writes into the file that the descriptor's number goes to next.
    @Test func aSerialWriteWaitingForRoomNeverReachesTheFileThatGetsItsNumber() throws {
        let (master, terminal) = try pseudoTerminal()
        defer { close(master) }
        let transport = SerialTransport(path: terminal, baud: 115200, flowControl: false)
        try transport.open(sink: Sink())
        defer { transport.close() }
        let fd = transport.descriptor
        let port = try #require(FileIdentity(fd))
        // A megabyte into a terminal that holds a few kilobytes: the write waits for room until the port closes.
        let written = DispatchSemaphore(value: 0)
        Thread {
            transport.send(HCIPacket(type: .acl, bytes: [UInt8](repeating: 0x5A, count: 1 << 20)))
            written.signal()
        }.start()
        // It has begun: more than the resynchronisation padding waits in the terminal.
        try waitSync("the write") {
            var queued: Int32 = 0
            return ioctl(master, UInt(FIONREAD), &queued) == 0 && Int(queued) > SerialTransport.resynchronizationPadding
        }
        transport.close()
        try waitSync("the port closed") { FileIdentity(fd) != port }
        // A file opened now is given the number (unless another test took it in between: then it gets another).
        let path = NSTemporaryDirectory() + "ocb-serial-reuse-\(UUID().uuidString.prefix(8))"
        let file = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        try #require(file >= 0)
        unlink(path)
        let reused = numbered(file, atLeast: fd)
        try #require(reused >= 0)
        defer { close(reused) }
        #expect(written.wait(timeout: .now() + 10) == .success, "the write never ended")
        var st = stat()
        #expect(fstat(reused, &st) == 0)
        #expect(st.st_size == 0, "the write went on into the file given descriptor \(reused) (the port's was \(fd))")
    }

    /// A send the kernel holds back (the socket's buffer is full) keeps the socket open: the reader closes it only
    /// once the send is over. Closed under the send, its number could go to another file before the next send.
    @Test(.enabled(if: callNumbers != nil, "needs the sendmsg and futex numbers of this architecture"))
    func aSendUnderWayKeepsTheHCISocketOpenUntilItEnds() throws {
        let calls = try #require(callNumbers)
        var pair: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        let (ours, kernel) = (pair[0], pair[1])
        defer { close(kernel) }
        let socket = try #require(FileIdentity(ours))
        // Fill our socket, which nobody reads until the end: the transport's next send blocks.
        let filler = [UInt8](repeating: 0, count: 1024)
        while send(ours, filler, filler.count, Int32(MSG_DONTWAIT)) > 0 {}
        let sink = Sink()
        let transport = HCISocketTransport(index: 0) { ours }
        try transport.open(sink: sink)
        defer { transport.close() }
        // An event from the "controller" tells which thread is the reader.
        let event: [UInt8] = [HCIPacketType.event.rawValue, 0x0E, 0x00]
        #expect(send(kernel, event, event.count, 0) == event.count)
        try waitSync("the reader") { sink.thread != nil }
        let reader = try #require(sink.thread)
        let sender = Locked<Int?>(nil)
        let sent = DispatchSemaphore(value: 0)
        Thread {
            sender.withLock { $0 = currentThread() }
            transport.send(HCIPacket(type: .command, bytes: [0x03, 0x0C, 0x00]))
            sent.signal()
        }.start()
        try waitSync("the send to block") { sender.withLock { $0 }.flatMap(systemCall) == calls.sendmsg }
        transport.close()
        // The reader, woken, waits for the send before it closes the socket (or, as it once did, closes it at once).
        try waitSync("the reader to close the socket or wait") { FileIdentity(ours) != socket || systemCall(of: reader) == calls.futex }
        #expect(FileIdentity(ours) == socket, "the socket was closed while a send on it was under way")
        // The "kernel" takes the packets: the send ends, and the reader closes the socket.
        var buffer = [UInt8](repeating: 0, count: 2048)
        let deadline = Date().addingTimeInterval(10)
        while sent.wait(timeout: .now() + .milliseconds(10)) == .timedOut {
            while recv(kernel, &buffer, buffer.count, Int32(MSG_DONTWAIT)) > 0 {}
            try #require(Date() < deadline, "the send never ended")
        }
        try waitSync("the socket closed") { FileIdentity(ours) != socket }
    }
}
