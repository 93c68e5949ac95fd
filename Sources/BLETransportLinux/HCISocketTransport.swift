// `hci-socket:N`: the Linux HCI user channel (AF_BLUETOOTH, BTPROTO_HCI, HCI_CHANNEL_USER) for USB and
// UART dongles the kernel knows as hciN. The user channel gives this process exclusive access to the
// controller: the kernel's own Bluetooth stack (and bluetoothd) must not be using it. Each read returns one
// packet with its H4 indicator; each write sends one.
#if canImport(Glibc)
import Glibc
#endif
import Foundation
import BLEHCI
import BLETransport
import Synchronization

public final class HCISocketTransport: HCITransport, @unchecked Sendable {
    public let index: Int
    public var name: String { "hci-socket:\(index)" }
    private let openSocket: () throws -> Int32
    private let state = Mutex<(fd: Int32, closed: Bool)>((-1, false))

    static let AF_BLUETOOTH: Int32 = 31
    static let BTPROTO_HCI: Int32 = 1
    static let HCI_CHANNEL_USER: UInt16 = 1

    /// A transport for adapter `index` (hci0 is 0).
    public convenience init(index: Int) {
        self.init(index: index) { try HCISocketTransport.openUserChannel(index: index) }
    }

    /// A transport over any packet socket (tests pass one end of a socketpair).
    public init(index: Int, socketFactory: @escaping () throws -> Int32) {
        self.index = index
        self.openSocket = socketFactory
    }

    /// sockaddr_hci { sa_family_t hci_family; unsigned short hci_dev; unsigned short hci_channel; }
    static func openUserChannel(index: Int) throws -> Int32 {
        let fd = socket(AF_BLUETOOTH, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), BTPROTO_HCI)
        guard fd >= 0 else {
            let e = errno
            if e == EAFNOSUPPORT {
                throw TransportError.connectFailed("hci-socket:\(index): this kernel has no Bluetooth support (AF_BLUETOOTH unavailable)")
            }
            if e == EPERM || e == EACCES {
                throw TransportError.permissionDenied("hci-socket:\(index): socket(): \(String(cString: strerror(e))); the HCI user channel needs CAP_NET_ADMIN")
            }
            throw TransportError.connectFailed("hci-socket:\(index): socket(): \(String(cString: strerror(e)))")
        }
        var addr: (UInt16, UInt16, UInt16) = (UInt16(AF_BLUETOOTH), UInt16(index), HCI_CHANNEL_USER)
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(6)) }
        }
        if rc != 0 {
            let e = errno
            _ = Glibc.close(fd)
            if e == EPERM || e == EACCES { throw TransportError.permissionDenied(Self.explainBindFailure(index: index, errno: e)) }
            throw TransportError.connectFailed(Self.explainBindFailure(index: index, errno: e))
        }
        return fd
    }

    /// A message that says what to do, for the usual reasons binding the user channel fails.
    public static func explainBindFailure(index: Int, errno e: Int32) -> String {
        switch e {
        case EBUSY:
            return "hci\(index) is in use by the kernel's Bluetooth stack (bluetoothd). Release it with "
                + "`sudo systemctl stop bluetooth` and `sudo hciconfig hci\(index) down` (or `btmgmt --index \(index) power off`), then try again. "
                + "bluetoothd powers every adapter again as soon as it is let go: to keep it running but away from this one, "
                + "set `AutoEnable=false` under [Policy] in /etc/bluetooth/main.conf."
        case EPERM, EACCES:
            return "hci\(index): permission denied. The HCI user channel needs CAP_NET_ADMIN: run as root or "
                + "`sudo setcap cap_net_admin+ep <your binary>`."
        case ENODEV:
            return "hci\(index): no such adapter (see `ls /sys/class/bluetooth`)."
        case ERFKILL:
            return "hci\(index) is blocked by rfkill (its radio is switched off in software). Unblock it with "
                + "`rfkill unblock bluetooth` (`sudo` if you are not root; `rfkill list` shows every block), then try again."
        case EUSERS:
            return "hci\(index) is already open on the HCI user channel by another program (another `ble`, Bumble, "
                + "a btstack or Zephyr host): only one program at a time can have it."
        case EALREADY:
            return "hci\(index) is still being set up by the kernel: try again in a moment."
        default:
            return "hci\(index): bind(HCI_CHANNEL_USER): \(String(cString: strerror(e)))"
        }
    }

    public func open(sink: any HCITransportSink) throws {
        let fd = try openSocket()
        state.withLock { $0 = (fd, false) }
        let thread = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            var closeError: (any Error)?
            while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n < 0 {
                    if errno == EINTR { continue }
                    if !isClosed { closeError = TransportError.io(String(cString: strerror(errno))) }
                    break
                }
                if n == 0 { break }
                // One packet per read, H4 indicator first.
                guard let type = HCIPacketType(rawValue: buffer[0]) else { continue }
                sink.transport(didReceive: HCIPacket(type: type, bytes: Array(buffer[1..<n])))
            }
            close()
            sink.transportDidClose(error: closeError)
        }
        thread.name = name
        thread.start()
    }

    private var isClosed: Bool { state.withLock { $0.closed } }

    public func send(_ packet: HCIPacket) {
        let fd = state.withLock { $0.closed ? -1 : $0.fd }
        guard fd >= 0 else { return }
        let bytes = packet.h4Bytes
        // MSG_NOSIGNAL: a controller that went away (unplugged) is an error, never a SIGPIPE.
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    public func close() {
        let fd = state.withLock { s -> Int32 in
            if s.closed { return -1 }
            s.closed = true
            return s.fd
        }
        if fd >= 0 {
            _ = shutdown(fd, Int32(SHUT_RDWR))
            _ = Glibc.close(fd)
        }
    }
}
