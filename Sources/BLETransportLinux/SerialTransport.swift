// `serial:PATH[,BAUD]`: H4 over a UART (dongles running HCI-UART firmware such as Zephyr's hci_uart), set
// raw with termios: 8 data bits, no parity, one stop bit, RTS/CTS flow control when asked.
#if canImport(Glibc)
import Glibc
#endif
import Foundation
import BLEHCI
import BLETransport

public enum SerialPort {
    /// Opens and configures a serial device (or a pseudo-terminal) for raw H4.
    public static func open(path: String, baud: Int, flowControl: Bool = false) throws -> Int32 {
        let fd = Glibc.open(path, O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard fd >= 0 else {
            let e = errno
            let why = "serial \(path): \(String(cString: strerror(e)))"
            // A port the user may not open (not in the dialout group) is a permission failure.
            if e == EACCES || e == EPERM { throw TransportError.permissionDenied(why + " (add yourself to the port's group, e.g. dialout)") }
            throw TransportError.connectFailed(why)
        }
        var t = termios()
        guard tcgetattr(fd, &t) == 0 else {
            let e = String(cString: strerror(errno))
            _ = Glibc.close(fd)
            throw TransportError.connectFailed("serial \(path): not a terminal device (\(e))")
        }
        cfmakeraw(&t)
        t.c_cflag |= tcflag_t(CLOCAL | CREAD)
        t.c_cflag &= ~tcflag_t(CSTOPB | PARENB)
        if flowControl { t.c_cflag |= tcflag_t(CRTSCTS) } else { t.c_cflag &= ~tcflag_t(CRTSCTS) }
        // VMIN 1, VTIME 0: a read returns as soon as one byte is there.
        withUnsafeMutableBytes(of: &t.c_cc) { cc in cc[Int(VMIN)] = 1; cc[Int(VTIME)] = 0 }
        guard let speed = speedConstant(baud) else {
            _ = Glibc.close(fd)
            throw TransportError.invalidSpec("serial \(path): unsupported baud rate \(baud)")
        }
        cfsetispeed(&t, speed)
        cfsetospeed(&t, speed)
        guard tcsetattr(fd, TCSANOW, &t) == 0 else {
            let e = String(cString: strerror(errno))
            _ = Glibc.close(fd)
            throw TransportError.connectFailed("serial \(path): tcsetattr: \(e)")
        }
        _ = tcflush(fd, TCIOFLUSH)
        return fd
    }

    static func speedConstant(_ baud: Int) -> speed_t? {
        let table: [Int: Int32] = [9600: B9600, 19200: B19200, 38400: B38400, 57600: B57600, 115200: B115200,
                                   230400: B230400, 460800: B460800, 500000: B500000, 576000: B576000, 921600: B921600,
                                   1_000_000: B1000000, 1_152_000: B1152000, 1_500_000: B1500000, 2_000_000: B2000000,
                                   3_000_000: B3000000, 4_000_000: B4000000]
        return table[baud].map { speed_t($0) }
    }
}

extension StreamTransport {
    /// H4 over a serial port.
    public static func serial(path: String, baud: Int) -> StreamTransport {
        StreamTransport(name: "serial:\(path),\(baud)") { (try SerialPort.open(path: path, baud: baud), false) }
    }
}
