// Writes without response through GattCharacteristic1.AcquireWrite (doc/org.bluez.GattCharacteristic.rst): BlueZ
// hands us one end of a SOCK_SEQPACKET socket for the characteristic, and each packet we send is one ATT Write
// Command, with no D-Bus round trip per write. The socket's buffer is the flow control: a send that would block
// keeps the value, `canSendWriteWithoutResponse` stays false, and the value goes (and the app hears
// peripheralIsReady) once the socket is writable again. bluetoothd closes its end when the link goes; the backend
// forgets the socket with the device's GATT objects (deinit closes ours).
//
// Threading: on the backend's queue, which is also the writability source's queue.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

final class BlueZAcquiredWrite {
    let fd: Int32
    /// The MTU BlueZ gave with the socket: a packet holds at most mtu − 3 octets.
    let mtu: Int
    private let queue: DispatchQueue
    private var source: DispatchSourceWrite?
    private var waiting: (value: [UInt8], sent: () -> Void)?

    init(fd: Int32, mtu: Int, queue: DispatchQueue) {
        self.fd = fd
        self.mtu = mtu
        self.queue = queue
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
    }

    deinit {
        // With a source, closed once its cancel is handled: libdispatch lets go of a descriptor it watches (and keeps
        // by number) only then, and a socket given the number before that could see its own source never fire.
        if let source {
            source.setCancelHandler { [fd] in close(fd) }
            source.cancel()
        } else {
            close(fd)
        }
    }

    /// sent: gone; queued: waits for room (`sent` runs then); dropped: one already waits (the app wrote while
    /// canSendWriteWithoutResponse was false; as on iOS the write is lost); broken: the socket failed.
    enum Outcome { case sent, queued, dropped, broken(String) }

    /// Sends one Write Command; `sent` runs (on the queue) once a queued value has left.
    func send(_ value: [UInt8], sent: @escaping () -> Void) -> Outcome {
        guard waiting == nil else { return .dropped }
        let n = value.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if n == value.count { return .sent }
        guard n < 0, errno == EAGAIN || errno == EWOULDBLOCK else {
            return .broken(n < 0 ? String(cString: strerror(errno)) : "short send (\(n) of \(value.count))")
        }
        waiting = (value, sent)
        let s = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        s.setEventHandler { [weak self] in self?.writable() }
        source = s
        s.resume()
        return .queued
    }

    private func writable() {
        guard let (value, sent) = waiting else { return }
        let n = value.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if n < 0, errno == EAGAIN || errno == EWOULDBLOCK { return }
        if n != value.count { CBLog.warning("BlueZ backend: a write without response was lost: \(n < 0 ? String(cString: strerror(errno)) : "short send")") }
        waiting = nil
        source?.cancel()
        source = nil
        sent()
    }
}
