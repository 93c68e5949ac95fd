// CBPeripheralManager.publishL2CAPChannel on BLE_TRANSPORT=bluez: a listening L2CAP socket bound to the adapter's
// address with PSM 0, so that the kernel picks a free dynamic LE PSM (read back with getsockname), as iOS picks
// one; `withEncryption` asks BT_SECURITY medium, so the kernel makes the link encrypted (pairing through bluetoothd
// and our agent) before it accepts. Each accepted socket becomes a CBL2CAPChannel delivered in
// peripheralManager(_:didOpen:error:). unpublishL2CAPChannel closes the listener and the channels opened on it.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension BlueZPeripheral {
    func publishL2CAPChannel(encryption: Bool) {
        session.queue.async { [self] in
            let adapter = session.adapterPath.flatMap { session.tree[$0, BlueZObjectTree.adapterInterface]?["Address"]?.string }
            let local = BlueZL2CAP.SocketAddress.source(adapter: adapter)
            let security = encryption ? BlueZL2CAP.securityMedium : BlueZL2CAP.securityLow
            let result = Result { () throws(BlueZL2CAP.SocketError) -> BlueZL2CAPListener in
                try BlueZL2CAPListener(local: local, security: security)
            }
            switch result {
            case let .success(listener):
                l2capListeners[listener.psm] = listener
                let psm = listener.psm
                listener.start { [weak self] fd in
                    guard let self else { return _ = Glibc.close(fd) }
                    session.queue.async { self.accepted(fd, psm: psm) }
                }
                announcePublish(listener.psm, nil)
            case let .failure(e):
                announcePublish(0, e.cbError)
            }
        }
    }

    func unpublishL2CAPChannel(_ psm: CBL2CAPPSM) {
        session.queue.async { [self] in
            let listener = l2capListeners.removeValue(forKey: psm)
            listener?.close()
            guard let m = manager else { return }
            m.queue.async {
                m.delegate?.peripheralManager(m, didUnpublishL2CAPChannel: psm, error: listener == nil ? CBError(.invalidParameters) : nil)
            }
        }
    }

    private func announcePublish(_ psm: CBL2CAPPSM, _ error: (any Error)?) {
        guard let m = manager else { return }
        m.queue.async { m.delegate?.peripheralManager(m, didPublishL2CAPChannel: psm, error: error) }
    }

    private func accepted(_ fd: Int32, psm: CBL2CAPPSM) {
        guard let m = manager, l2capListeners[psm] != nil else { return _ = Glibc.close(fd) }
        let channel = BlueZL2CAPChannel(peer: central, psm: psm, fd: fd)
        l2capListeners[psm]?.track(channel)
        m.queue.async { m.delegate?.peripheralManager(m, didOpen: channel, error: nil) }
    }
}

/// A listening L2CAP socket; accepted sockets go to `onAccept` on the session's queue.
final class BlueZL2CAPListener: @unchecked Sendable {
    let psm: CBL2CAPPSM
    private let fd: Int32
    /// The source's queue, on which `start`, `close` and `track` run too.
    let queue = DispatchQueue(label: "opencorebluetooth.bluez.l2cap-listen")
    private var source: DispatchSourceRead?
    /// Closed: the descriptor is closed, or will be by the source's cancel handler. On the queue.
    private var closed = false
    /// The channels opened on this PSM, closed with it (weak: the app's reference keeps them).
    private var channels: [WeakChannel] = []
    private struct WeakChannel { weak var channel: BlueZL2CAPChannel? }

    convenience init(local: BlueZL2CAP.SocketAddress, security: UInt8, receiveMTU: UInt16 = BlueZL2CAP.receiveMTU) throws(BlueZL2CAP.SocketError) {
        // (Accepted sockets inherit the listener's receive MTU.)
        let fd = try BlueZL2CAP.makeSocket(local: local, security: security, receiveMTU: receiveMTU)
        guard listen(fd, 8) == 0, let bound = BlueZL2CAP.localAddress(fd), bound.psm != 0 else {
            let e = BlueZL2CAP.SocketError(call: "listen", code: errno)
            Glibc.close(fd)
            throw e
        }
        self.init(listening: fd, psm: bound.psm)
    }

    /// A listener on a socket that listens already, now its own (tests give any listening socket).
    init(listening fd: Int32, psm: CBL2CAPPSM) {
        self.fd = fd
        self.psm = psm
    }

    /// Call once; `onAccept` runs on the listener's queue.
    func start(_ onAccept: @escaping @Sendable (Int32) -> Void) {
        queue.sync {
            guard !closed, source == nil else { return }
            let s = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
            let fd = self.fd
            s.setEventHandler {
                while true {
                    let c = accept(fd, nil, nil)
                    guard c >= 0 else { return }
                    _ = fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK)
                    _ = fcntl(c, F_SETFD, FD_CLOEXEC)
                    onAccept(c)
                }
            }
            s.setCancelHandler { Glibc.close(fd) }
            source = s
            s.resume()
        }
    }

    func track(_ channel: BlueZL2CAPChannel) {
        queue.sync {
            channels.removeAll { $0.channel == nil }
            channels.append(WeakChannel(channel: channel))
        }
    }

    /// A listener let go without `close()` stops listening: its socket would otherwise stay open, and a started
    /// source would go on accepting, for the life of the process. (No `close()` block is pending: it holds `self`.)
    /// The channels opened on it are the app's and stay open.
    deinit {
        guard !closed else { return }
        if let source { source.cancel() } else { Glibc.close(fd) }
    }

    /// Stops accepting and closes the channels opened on this PSM. Once: a second call must not close the number
    /// again (by then it may be another file's).
    func close() {
        queue.async { [self] in
            guard !closed else { return }
            closed = true
            if let source { source.cancel() } else { Glibc.close(fd) }
            source = nil
            for c in channels { c.channel?.closeFromStack() }
            channels.removeAll()
        }
    }
}
