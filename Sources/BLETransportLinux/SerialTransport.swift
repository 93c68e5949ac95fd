// `serial:PATH[,BAUD]`: H4 over a UART (dongles running HCI-UART firmware such as Zephyr's hci_uart, a
// Raspberry Pi's on-board controller on ttyAMA0), set raw with termios: 8 data bits, no parity, one stop bit.
//
// What a real UART needs, and where it is met here:
// - Reads of any size, EINTR and EAGAIN: the reader thread reads whatever is there (VMIN 1, VTIME 0), retries
//   on EINTR, waits with poll on EAGAIN, and frames H4 packets across reads (H4Framer).
// - A port opened mid-stream (the controller was sending, or the line carried power-up noise): the framer
//   discards bytes until the controller's answer to the host's first command, HCI_Reset, then frames exactly
//   (H4Framer `synchronizesOnReset`). A framing error later closes the port; the host opens it again and
//   resynchronises the same way. The other direction too: a controller whose own parser is mid-packet (a host
//   died halfway through a command) would swallow our Reset, so 258 zero octets go first, enough to complete
//   the longest command (3 + 255 octets); a controller in step reads them as invalid indicators and drops them
//   (btstack's and Zephyr's H4 parsers do, byte by byte), as Bumble's serial transport does with its `resync` option.
// - Hardware flow control: RTS/CTS is on by default for on-board UARTs and USB-serial bridges (ttyAMA*, ttyS*,
//   ttyTHS*, ttymxc*, ttyUSB*: HCI UART modules wire RTS/CTS, and Zephyr's hci_uart and the Pi's Broadcom
//   chip run with it), off for USB CDC ACM ports (ttyACM*: USB does the flow control) and pseudo-terminals.
//   `BLE_SERIAL_FLOW=rtscts|none` overrides it.
// - Permissions: a port outside the user's groups fails with `TransportError.permissionDenied`, which the
//   host reports as `.unauthorized`.
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
        withUnsafeMutableBytes(of: &t.c_cc) { cc in
            cc[Int(VMIN)] = 1; cc[Int(VTIME)] = 0
        }
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
        let table: [Int: Int32] = [
            9600: B9600, 19200: B19200, 38400: B38400, 57600: B57600, 115200: B115200,
            230400: B230400, 460800: B460800, 500000: B500000, 576000: B576000, 921600: B921600,
            1_000_000: B1000000, 1_152_000: B1152000, 1_500_000: B1500000, 2_000_000: B2000000,
            3_000_000: B3000000, 4_000_000: B4000000,
        ]
        return table[baud].map { speed_t($0) }
    }

    /// Whether RTS/CTS is used on `path` unless `BLE_SERIAL_FLOW` says otherwise (see the file header).
    public static func defaultFlowControl(path: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        switch environment["BLE_SERIAL_FLOW"]?.lowercased() {
        case "rtscts"?, "on"?, "1"?: return true
        case "none"?, "off"?, "0"?: return false
        default: break
        }
        // /dev/serial0 and /dev/serial/by-id/… are links: decide on the device they name.
        let resolved =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: path)).map {
                $0.hasPrefix("/") ? $0 : (path as NSString).deletingLastPathComponent + "/" + $0
            } ?? path
        let name = (resolved as NSString).lastPathComponent
        return ["ttyAMA", "ttyS", "ttyTHS", "ttymxc", "ttyUSB", "ttySAC", "ttyO"].contains { name.hasPrefix($0) }
    }
}

/// H4 over a serial port, with the reader and resynchronisation described at the top of this file.
public final class SerialTransport: HCITransport, @unchecked Sendable {
    public let path: String
    public let baud: Int
    public let flowControl: Bool
    public var name: String { "serial:\(path),\(baud)" }
    private let state = Locked<(fd: Int32, generation: Int)>((-1, 0))
    /// Bytes discarded before the Reset answer on the last open (diagnostics and tests).
    public var discardedBytes: Int { discarded.withLock { $0 } }
    private let discarded = Locked(0)

    public init(path: String, baud: Int, flowControl: Bool? = nil) {
        self.path = path
        self.baud = baud
        self.flowControl = flowControl ?? SerialPort.defaultFlowControl(path: path)
    }

    public var deliversOnReaderThread: Bool { true }
    /// Written (from an array of its own) before `send` returns.
    public var keepsSentPackets: Bool { false }

    /// Zero octets written on open before anything else: 3 + 255, the longest HCI command.
    public static let resynchronizationPadding = 258

    public func open(sink: any HCITransportSink) throws {
        close()
        let fd = try SerialPort.open(path: path, baud: baud, flowControl: flowControl)
        // Non-blocking, so that the reader can wake every 100 ms to see whether it was closed (closing a tty
        // from another thread does not wake a blocked read).
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        let generation = state.withLock { s -> Int in
            s.fd = fd; s.generation += 1; return s.generation
        }
        discarded.withLock { $0 = 0 }
        write([UInt8](repeating: 0, count: Self.resynchronizationPadding))
        let thread = Thread { [self] in readLoop(fd: fd, generation: generation, sink: sink) }
        thread.name = name
        thread.start()
    }

    private func readLoop(fd: Int32, generation: Int, sink: any HCITransportSink) {
        var framer = H4Framer(synchronizesOnReset: true)
        framer.mergesCompletedPackets = sink.acceptsMergedCompletions
        var buffer = [UInt8](repeating: 0, count: 4096)
        // The packets of one read, handed over together (a host handles them in one hop onto its loop).
        var packets: [HCIPacket] = []
        var closeError: (any Error)?
        func current() -> Bool { state.withLock { $0.generation == generation && $0.fd == fd } }
        loop: while current() {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&p, 1, 100)
            guard current() else { break }
            if ready == 0 || (ready < 0 && errno == EINTR) { continue }
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                let e = errno
                if e == EINTR { continue }
                if e == EAGAIN || e == EWOULDBLOCK { continue }
                if current() { closeError = TransportError.io("serial \(path): \(String(cString: strerror(e)))") }
                break
            }
            if n == 0 {
                // A USB-serial adapter that was unplugged reads end of file.
                if current() { closeError = TransportError.io("serial \(path): device went away") }
                break
            }
            framer.append(buffer[0..<n])
            framer.mergesACLContinuations = sink.acceptsMergedACLContinuations
            packets.removeAll(keepingCapacity: true)
            var framingError: (any Error)?
            do {
                while let p = try framer.nextPacket() { packets.append(p) }
            } catch {
                framingError = error
            }
            // What came before a framing error is delivered first, as it arrived.
            if !packets.isEmpty {
                guard current() else { break loop }
                sink.transport(didReceivePackets: packets)
                framer.recycle(packets)
                packets.removeAll(keepingCapacity: true)
            }
            if let framingError {
                closeError = TransportError.io("serial \(path): \(framingError); the port is opened again to resynchronise")
                break
            }
            if !framer.awaitingSynchronization || framer.discardedCount > 0 {
                let d = framer.discardedCount
                discarded.withLock { $0 = d }
            }
        }
        // The reader owns the descriptor and closes it, under the write lock: a write under way (one the controller
        // holds back with CTS can last) ends first, and a later one sees the port gone (see `write`). A loss is
        // reported only if nobody closed the port.
        let wasCurrent = writeLock.withLock {
            let wasCurrent = state.withLock { s -> Bool in
                guard s.generation == generation, s.fd == fd else { return false }
                s.fd = -1
                return true
            }
            _ = Glibc.close(fd)
            return wasCurrent
        }
        if wasCurrent { sink.transportDidClose(error: closeError) }
    }

    public func send(_ packet: HCIPacket) { write(packet.h4Bytes) }

    public func send(batch packets: [HCIPacket]) {
        var bytes: [UInt8] = []
        for p in packets { bytes.append(p.type.rawValue); bytes.append(contentsOf: p.bytes) }
        write(bytes)
    }

    /// Held by a write and by the reader while it closes the descriptor.
    private let writeLock = NSLock()

    /// The port's descriptor now, -1 when closed (tests).
    var descriptor: Int32 { state.withLock { $0.fd } }

    /// Writes to the port opened when it began, and gives up once that port was closed or opened again: each write,
    /// and each after a wait for room, first checks under the write lock that the port is still the one it began
    /// on. Without the check, a writer waiting on a full UART went on writing after the reader had closed the
    /// descriptor, into whatever file the process opened next with the same number.
    private func write(_ bytes: [UInt8]) {
        let (fd, generation) = state.withLock { ($0.fd, $0.generation) }
        guard fd >= 0 else { return }
        writeLock.lock()
        defer { writeLock.unlock() }
        func current() -> Bool { state.withLock { $0.generation == generation && $0.fd == fd } }
        var off = 0
        while off < bytes.count {
            guard current() else { return }
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + off, $0.count - off) }
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN {
                    // The UART's buffer is full (CTS held by the controller): wait until it drains, 100 ms at a
                    // time, as long as the reader waits for this write before it closes the port.
                    var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&p, 1, 100)
                    continue
                }
                return
            }
            off += n
        }
    }

    /// Closes the port: the reader sees it within 100 ms (and a write waiting for room gives up as soon), closes
    /// the descriptor and reports no loss.
    public func close() {
        state.withLock { s in
            s.fd = -1
            s.generation += 1
        }
    }
}

extension StreamTransport {
    /// H4 over a serial port (see SerialTransport).
    public static func serial(path: String, baud: Int) -> SerialTransport {
        SerialTransport(path: path, baud: baud)
    }
}
