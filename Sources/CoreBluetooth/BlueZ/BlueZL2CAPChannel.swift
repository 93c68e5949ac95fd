// CBL2CAPChannel on BLE_TRANSPORT=bluez: the same pair of streams as on our own stack (PipeInputStream,
// PipeOutputStream), fed by a connected L2CAP socket of the kernel (BlueZL2CAPSocket) instead of the host's channel.
//
// Flow control is the kernel's: it grants the peer credits as we take SDUs out of the socket, so the socket is read
// only while the input stream holds less than `inputLimit` unread octets (a reader that stops stops the sender, as
// on our stack); what the app writes leaves in SDUs of the peer's MTU while the socket takes them, a full socket
// waits for writability. The app must keep the channel: releasing it closes the socket, as on iOS.
//
// Threading: everything on the bridge's own serial queue (never a delegate queue); the streams are only touched
// through their thread-safe producer/consumer calls.
import Foundation
import BoundStreams
#if canImport(Glibc)
import Glibc
#endif

final class BlueZL2CAPChannel: CBL2CAPChannel, @unchecked Sendable {
    private let storedPeer: CBPeer
    private let input: PipeInputStream
    private let output: PipeOutputStream
    private let socketBridge: BlueZL2CAPBridge
    private let channelPSM: CBL2CAPPSM

    override var peer: CBPeer! { storedPeer }
    override var inputStream: InputStream! { input }
    override var outputStream: OutputStream! { output }
    override var psm: CBL2CAPPSM { channelPSM }

    /// Takes `fd`, a connected socket.
    init(peer: CBPeer, psm: CBL2CAPPSM, fd: Int32) {
        storedPeer = peer
        channelPSM = psm
        let mtus = BlueZL2CAP.mtus(fd)
        input = PipeInputStream()
        output = PipeOutputStream(capacity: max(64 * 1024, 2 * mtus.send))
        socketBridge = BlueZL2CAPBridge(fd: fd, sendMTU: mtus.send, receiveMTU: mtus.receive, input: input, output: output)
        super.init()
        socketBridge.start()
    }

    deinit {
        socketBridge.release()
    }

    /// Received octets the app has not read yet.
    var unreadOctets: Int { input.bufferedByteCount }

    /// The stack ends the channel (unpublished): the streams end, the socket closes.
    func closeFromStack() { socketBridge.release() }

    override var description: String {
        "<CBL2CAPChannel: \(address(of: self)), peer = \(storedPeer.identifier.uuidString), psm = \(channelPSM)>"
    }
}

final class BlueZL2CAPBridge: @unchecked Sendable {
    let queue = DispatchQueue(label: "opencorebluetooth.bluez.l2cap")
    let sendMTU: Int
    let receiveMTU: Int
    let input: PipeInputStream
    let output: PipeOutputStream
    /// Unread octets beyond which the socket is no longer read (the kernel then stops granting credits).
    static let inputLimit = 256 * 1024

    // Queue-confined.
    private var fd: Int32
    private var readSource: DispatchSourceRead?
    private var writeSource: DispatchSourceWrite?
    private var reading = false
    private var writeArmed = false
    private var buffer: [UInt8]

    init(fd: Int32, sendMTU: Int, receiveMTU: Int, input: PipeInputStream, output: PipeOutputStream) {
        self.fd = fd
        self.sendMTU = max(1, sendMTU)
        self.receiveMTU = max(1, receiveMTU)
        self.input = input
        self.output = output
        buffer = [UInt8](repeating: 0, count: max(receiveMTU, 65_535))
    }

    func start() {
        queue.async { [self] in
            guard fd >= 0 else { return }
            let r = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
            r.setEventHandler { [weak self] in self?.readable() }
            readSource = r
            reading = true
            r.resume()
            let w = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
            w.setEventHandler { [weak self] in self?.writable() }
            writeSource = w
            input.onConsumed = { [weak self] _ in
                guard let self else { return }
                queue.async { self.resumeReading() }
            }
            output.onDataAvailable = { [weak self] in self?.schedulePump() }
            output.onClose = { [weak self] in self?.schedulePump() }
            pump()
        }
    }

    private func schedulePump() {
        queue.async { [self] in pump() }
    }

    private func readable() {
        guard fd >= 0 else { return }
        var batch: [[UInt8]] = []
        while input.bufferedByteCount + batch.reduce(0, { $0 + $1.count }) < Self.inputLimit {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if n > 0 {
                batch.append(Array(buffer[0..<n]))
                continue
            }
            let code = errno
            if !batch.isEmpty { input.producer.deliver(contentsOf: batch) }
            batch = []
            if n < 0, code == EAGAIN || code == EWOULDBLOCK || code == EINTR { return }
            // 0: the peer closed the channel (or the link went); otherwise the socket failed.
            return finish(n == 0 || code == ECONNRESET || code == ENOTCONN ? nil : BlueZL2CAP.SocketError(call: "recv", code: code))
        }
        if !batch.isEmpty { input.producer.deliver(contentsOf: batch) }
        // Full: stop reading until the app has read (the kernel holds the rest and withholds credits).
        if reading, let readSource {
            readSource.suspend()
            reading = false
        }
    }

    private func resumeReading() {
        guard fd >= 0, !reading, let readSource, input.bufferedByteCount < Self.inputLimit / 2 else { return }
        reading = true
        readSource.resume()
    }

    private func writable() {
        if writeArmed, let writeSource {
            writeSource.suspend()
            writeArmed = false
        }
        pump()
    }

    /// Sends what the app wrote, one SDU of at most the peer's MTU per send, while the socket takes them; closes the
    /// channel once the app closed both streams and everything written has left.
    private func pump() {
        guard fd >= 0 else { return }
        while output.bufferedByteCount > 0 {
            var failure: Int32 = 0
            let sent = output.consumer.take(maxLength: sendMTU) { bytes in
                let n = send(fd, bytes.baseAddress, bytes.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
                if n < 0 { failure = errno; return 0 }
                return n
            }
            if sent > 0 { continue }
            if failure == EAGAIN || failure == EWOULDBLOCK || failure == ENOBUFS || failure == EINTR {
                if !writeArmed, let writeSource {
                    writeArmed = true
                    writeSource.resume()
                }
                return
            }
            return finish(failure == EPIPE || failure == ECONNRESET || failure == ENOTCONN ? nil : BlueZL2CAP.SocketError(call: "send", code: failure))
        }
        if output.isClosedByApp, input.isClosedByApp { finish(nil, closedByApp: true) }
    }

    /// The channel ended: the streams end (with the kernel's error, if any) and the socket closes.
    private func finish(_ error: BlueZL2CAP.SocketError?, closedByApp: Bool = false) {
        guard fd >= 0 else { return }
        let e: any Error = error?.cbError ?? CBError(.peripheralDisconnected)
        input.finish(error: error?.cbError)
        if !closedByApp { output.fail(error: e) }
        closeSocket()
    }

    private func closeSocket() {
        input.onConsumed = nil
        output.onDataAvailable = nil
        output.onClose = nil
        // A suspended source must be resumed before it is cancelled; the descriptor closes once both are cancelled.
        let group = DispatchGroup()
        let descriptor = fd
        for s in [readSource as DispatchSourceProtocol?, writeSource] {
            guard let s else { continue }
            group.enter()
            s.setCancelHandler { group.leave() }
            s.cancel()
        }
        if !reading { readSource?.resume() }
        if !writeArmed { writeSource?.resume() }
        readSource = nil
        writeSource = nil
        fd = -1
        group.notify(queue: queue) { close(descriptor) }
    }

    /// The app let go of the channel: what it wrote and the socket still takes leaves, then the socket closes.
    func release() {
        queue.async { [self] in
            pump()
            guard fd >= 0 else { return }
            input.finish(error: nil)
            output.fail(error: CBError(.peripheralDisconnected))
            closeSocket()
        }
    }
}
