// The kernel's LE credit-based L2CAP sockets (BlueZL2CAPSocket) for other modules of the package: Multipeer's
// Bluetooth transport on BLE_TRANSPORT=bluez (PeerBluetooth's BlueZPeerNode) listens and connects with the same
// sockets as CBL2CAPChannel does here, and bridges them into its own sessions. A thin surface over the internal
// helpers (BlueZL2CAP, BlueZL2CAPListener, BlueZL2CAPConnect), in the types other modules can name.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

package enum BlueZKernelL2CAP {
    /// A socket call the kernel refused, with errno and its text.
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
        package var errno: Int32
    }

    /// The largest SDU a socket can be given to receive (BT_RCVMTU is 16 bits): the kernel then grants the peer
    /// 65535 / MPS + 1 credits (65 on 1021-octet LE buffers, 2850 on 27-octet ones).
    package static let largestReceiveMTU: UInt16 = 65535

    /// A listening socket on a PSM the kernel picks (LE public address type at `adapterAddress`, "AA:BB:…"; nil:
    /// any adapter), no encryption asked, offering SDUs of `receiveMTU`. Accepted sockets are non-blocking;
    /// `onAccept` runs on the listener's queue.
    package final class Listener: @unchecked Sendable {
        private let inner: BlueZL2CAPListener
        package var psm: UInt16 { inner.psm }

        package init(adapterAddress: String?, psm: UInt16 = 0, receiveMTU: UInt16 = BlueZL2CAP.receiveMTU) throws(Failure) {
            let local = BlueZL2CAP.SocketAddress.source(adapter: adapterAddress, psm: psm)
            do {
                inner = try BlueZL2CAPListener(local: local, security: BlueZL2CAP.securityLow, receiveMTU: receiveMTU)
            } catch {
                throw Failure(description: error.description, errno: error.code)
            }
        }

        package func start(_ onAccept: @escaping @Sendable (Int32) -> Void) { inner.start(onAccept) }
        package func close() { inner.close() }
    }

    /// Connects to `psm` at `address` ("AA:BB:…", `random` for an LE random address), from `adapterAddress`,
    /// offering SDUs of `receiveMTU`; `done` runs once with the connected non-blocking socket (now the caller's)
    /// or the kernel's refusal. The closure returned ends the attempt if it has not finished (`done` then gets
    /// ECANCELED).
    @discardableResult
    package static func connect(
        address: String, random: Bool, psm: UInt16, adapterAddress: String?, receiveMTU: UInt16 = BlueZL2CAP.receiveMTU,
        done: @escaping @Sendable (Result<Int32, Failure>) -> Void
    ) -> @Sendable () -> Void {
        guard let remote = BlueZL2CAP.SocketAddress(psm: psm, address: address, type: random ? .leRandom : .lePublic) else {
            done(.failure(Failure(description: "\(address): not a Bluetooth address", errno: EINVAL)))
            return {}
        }
        // Bound to an LE address type even when any adapter will do (SocketAddress.source): unbound, the kernel's
        // channel stays in basic mode, refuses BT_RCVMTU (it offered 672) and sends SDUs without their length field.
        let local = BlueZL2CAP.SocketAddress.source(adapter: adapterAddress)
        let attempt = BlueZL2CAPConnect.start(remote: remote, local: local, receiveMTU: receiveMTU) { r in
            done(r.mapError { Failure(description: $0.description, errno: $0.code) })
        }
        return { attempt.cancel() }
    }

    /// The address of a connected socket's peer ("AA:BB:…", and whether it is an LE random address).
    package static func peer(_ fd: Int32) -> (address: String, random: Bool)? {
        BlueZL2CAP.peerAddress(fd).map { ($0.addressString, $0.type == .leRandom) }
    }

    /// The SDU sizes the kernel settled for a connected socket (send: the peer's MTU).
    package static func mtus(_ fd: Int32) -> (send: Int, receive: Int) { BlueZL2CAP.mtus(fd) }
}
