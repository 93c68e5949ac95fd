// Notifications through GattCharacteristic1.AcquireNotify (doc/org.bluez.GattCharacteristic.rst, BlueZ 5.46+):
// bluetoothd enables notifications on the peer and hands us one end of a SOCK_SEQPACKET socket; each packet it
// writes there is one notified value, with no D-Bus signal (and no decoding of one) per value. Closing our end
// disables them again. bluetoothd closes its end when the link goes; the backend drops the socket with the device's
// GATT objects (deinit closes ours).
//
// Threading: on the backend's queue, which is also the read source's queue.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

final class BlueZAcquiredNotify {
    let fd: Int32
    /// The MTU BlueZ gave with the socket: a value holds at most mtu − 3 octets.
    let mtu: Int
    private var source: DispatchSourceRead?

    /// `value` runs for each packet read, `ended` once when bluetoothd closed its end or the socket failed.
    init(fd: Int32, mtu: Int, queue: DispatchQueue, value: @escaping ([UInt8]) -> Void, ended: @escaping (String) -> Void) {
        self.fd = fd
        self.mtu = mtu
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        let s = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        // A packet longer than the MTU is cut by the kernel (MSG_TRUNC says so); 517 covers every ATT value.
        let capacity = max(mtu, 517)
        s.setEventHandler { [weak self] in
            guard let self, self.source != nil else { return }
            var buffer = [UInt8](repeating: 0, count: capacity)
            var empty = 0
            while true {
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, capacity, Int32(MSG_DONTWAIT)) }
                if n > 0 {
                    value(Array(buffer[0..<n]))
                    continue
                }
                if n == 0 {
                    // An empty value (a notification may carry none) or the end: the end also hangs up.
                    var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                    if poll(&p, 1, 0) >= 0, p.revents & Int16(POLLHUP) == 0 {
                        value([])
                        empty += 1
                        // Bounded per wake-up: the source fires again while more is there.
                        if empty < 64 { continue }
                        return
                    }
                }
                if n < 0, errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { return }
                let why = n == 0 ? "bluetoothd closed the notification socket" : String(cString: strerror(errno))
                self.stop()
                return ended(why)
            }
        }
        s.setCancelHandler { close(fd) }
        source = s
        s.resume()
    }

    /// Stops reading and closes the socket (bluetoothd then disables the notifications).
    func stop() {
        source?.cancel()
        source = nil
    }

    deinit { stop() }
}
