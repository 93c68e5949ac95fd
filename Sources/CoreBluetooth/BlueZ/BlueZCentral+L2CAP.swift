// CBPeripheral.openL2CAPChannel on BLE_TRANSPORT=bluez: a connect of an L2CAP socket (BlueZL2CAPSocket) to the
// peripheral's address and type as Device1 gives them, on the link bluetoothd already holds, bound to the adapter's
// address. The connect runs non-blocking on a queue of its own; the result reaches peripheral(_:didOpen:error:) on
// the app's queue: a channel, or the kernel's refusal as a CBError with errno and its text in the description.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension BlueZCentral {
    func openL2CAPChannel(_ p: CBPeripheral, psm: CBL2CAPPSM) {
        queue.async { [self] in
            guard let ends = l2capEndpoints(p) else { return }
            guard let remote = BlueZL2CAP.SocketAddress(psm: psm, address: ends.peer, type: .init(bluez: ends.type)) else {
                return Self.opened(p, nil, CBError(.unknownDevice, userInfo: [NSLocalizedDescriptionKey: "BlueZ gives no usable address for \(p)"]))
            }
            // Never unbound, even when the adapter's address is not known (SocketAddress.source).
            let local = BlueZL2CAP.SocketAddress.source(adapter: ends.adapter)
            BlueZL2CAPConnect.start(remote: remote, local: local) { result in
                switch result {
                case let .success(fd): Self.opened(p, BlueZL2CAPChannel(peer: p, psm: psm, fd: fd), nil)
                case let .failure(e): Self.opened(p, nil, e.cbError)
                }
            }
        }
    }

    static func opened(_ p: CBPeripheral, _ channel: CBL2CAPChannel?, _ error: (any Error)?) {
        p.deliver { $0.peripheral(p, didOpen: channel, error: error) }
    }
}

/// One non-blocking connect of an L2CAP socket, on a queue of its own.
final class BlueZL2CAPConnect: @unchecked Sendable {
    static let queue = DispatchQueue(label: "opencorebluetooth.bluez.l2cap-connect")

    private let fd: Int32
    private var source: DispatchSourceWrite?
    private var done: ((Result<Int32, BlueZL2CAP.SocketError>) -> Void)?

    /// Ends a connect that has not finished: its socket is closed (the kernel drops the attempt) and `done` runs with
    /// ECANCELED. Nothing when it has finished.
    final class Cancellation: @unchecked Sendable {
        fileprivate var cancelled = false
        fileprivate var connect: BlueZL2CAPConnect?
        func cancel() {
            BlueZL2CAPConnect.queue.async { [self] in
                cancelled = true
                connect?.cancel()
                connect = nil
            }
        }
    }

    private init(fd: Int32, done: @escaping (Result<Int32, BlueZL2CAP.SocketError>) -> Void) {
        self.fd = fd
        self.done = done
    }

    /// `done` runs once, on `queue`, with the connected socket (now the caller's) or why it failed.
    @discardableResult
    static func start(
        remote: BlueZL2CAP.SocketAddress, local: BlueZL2CAP.SocketAddress, security: UInt8 = BlueZL2CAP.securityLow,
        receiveMTU: UInt16 = BlueZL2CAP.receiveMTU, done: @escaping @Sendable (Result<Int32, BlueZL2CAP.SocketError>) -> Void
    ) -> Cancellation {
        let cancellation = Cancellation()
        queue.async {
            if cancellation.cancelled { return done(.failure(BlueZL2CAP.SocketError(call: "connect", code: ECANCELED))) }
            let fd: Int32
            do {
                fd = try BlueZL2CAP.makeSocket(local: local, security: security, receiveMTU: receiveMTU)
                if try BlueZL2CAP.connect(fd, remote) { return done(.success(fd)) }
            } catch let e as BlueZL2CAP.SocketError {
                return done(.failure(e))
            } catch {
                return done(.failure(BlueZL2CAP.SocketError(call: "socket", code: EIO)))
            }
            watch(fd, cancellation, done: done)
        }
        return cancellation
    }

    /// Waits for the connect under way on `fd` to end (the socket becomes writable). On `queue`; tests give it any
    /// socket.
    static func watch(_ fd: Int32, _ cancellation: Cancellation, done: @escaping (Result<Int32, BlueZL2CAP.SocketError>) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        let c = BlueZL2CAPConnect(fd: fd, done: done)
        let s = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        // The source keeps the connect alive until it fires.
        s.setEventHandler { c.connected() }
        c.source = s
        cancellation.connect = c
        s.resume()
    }

    private func cancel() {
        guard let done else { return }
        self.done = nil
        let s = source
        source = nil
        let fd = self.fd
        s?.setCancelHandler { close(fd) }
        s?.cancel()
        done(.failure(BlueZL2CAP.SocketError(call: "connect", code: ECANCELED)))
    }

    private func connected() {
        guard let done else { return }
        self.done = nil
        let code = BlueZL2CAP.pendingError(fd)
        let s = source
        source = nil
        let fd = self.fd
        let result: Result<Int32, BlueZL2CAP.SocketError> = code == 0 ? .success(fd) : .failure(BlueZL2CAP.SocketError(call: "connect", code: code))
        // `done` runs once libdispatch has let go of the descriptor (the cancel handler, on this queue): a caller
        // that closes the socket at once would otherwise leave the number watched, and a socket given it next
        // could see its own write source never fire.
        guard let s else { return done(result) }
        s.setCancelHandler {
            if code != 0 { close(fd) }
            done(result)
        }
        s.cancel()
    }
}
