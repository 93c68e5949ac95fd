// The L2CAP sockets BlueZPeerNode uses for its channels: the kernel's LE credit-based sockets (BlueZKernelL2CAP),
// or a stand-in in tests.
import Foundation
import CoreBluetooth
#if canImport(Glibc)
import Glibc
#endif

/// The L2CAP sockets the node uses: the kernel's, or a stand-in in tests.
package protocol BlueZPeerSockets: Sendable {
    /// A listener on a PSM of the socket layer's choice; accepted (connected, non-blocking) sockets go to `onAccept`.
    func listen(adapterAddress: String?, onAccept: @escaping @Sendable (Int32) -> Void) throws -> (psm: UInt16, close: @Sendable () -> Void)
    /// Connects to `psm` at `address` ("AA:BB:…").
    func connect(address: String, random: Bool, psm: UInt16, adapterAddress: String?, done: @escaping @Sendable (Result<Int32, any Error>) -> Void)
    /// The SDU sizes of a connected socket.
    func mtus(_ fd: Int32) -> (send: Int, receive: Int)
    /// Who is at the other end of a connected socket ("AA:BB:…" and whether the address is random).
    func peer(_ fd: Int32) -> (address: String, random: Bool)?
    /// A listener whose channels offer the peer SDUs of `receiveMTU` octets.
    func listen(adapterAddress: String?, receiveMTU: UInt16, onAccept: @escaping @Sendable (Int32) -> Void) throws -> (psm: UInt16, close: @Sendable () -> Void)
    /// A connect whose channel offers the peer SDUs of `receiveMTU` octets; the closure returned ends it if it has not
    /// finished (`done` then gets a failure).
    func connect(
        address: String, random: Bool, psm: UInt16, adapterAddress: String?, receiveMTU: UInt16, done: @escaping @Sendable (Result<Int32, any Error>) -> Void
    ) -> @Sendable () -> Void
    /// Octets a connected socket was given and has not yet passed on (nil: it cannot say).
    func unsentOctets(_ fd: Int32) -> Int?
}

extension BlueZPeerSockets {
    package func listen(adapterAddress: String?, receiveMTU: UInt16, onAccept: @escaping @Sendable (Int32) -> Void) throws -> (psm: UInt16, close: @Sendable () -> Void) {
        try listen(adapterAddress: adapterAddress, onAccept: onAccept)
    }
    package func connect(
        address: String, random: Bool, psm: UInt16, adapterAddress: String?, receiveMTU: UInt16, done: @escaping @Sendable (Result<Int32, any Error>) -> Void
    ) -> @Sendable () -> Void {
        connect(address: address, random: random, psm: psm, adapterAddress: adapterAddress, done: done)
        return {}
    }
    package func unsentOctets(_ fd: Int32) -> Int? { nil }
}

/// The kernel's AF_BLUETOOTH sockets.
package struct KernelL2CAPSockets: BlueZPeerSockets {
    package init() {}

    package func listen(adapterAddress: String?, onAccept: @escaping @Sendable (Int32) -> Void) throws -> (psm: UInt16, close: @Sendable () -> Void) {
        try listen(adapterAddress: adapterAddress, receiveMTU: 0, onAccept: onAccept)
    }

    package func listen(adapterAddress: String?, receiveMTU: UInt16, onAccept: @escaping @Sendable (Int32) -> Void) throws -> (psm: UInt16, close: @Sendable () -> Void) {
        let l = try BlueZKernelL2CAP.Listener(adapterAddress: adapterAddress, receiveMTU: receiveMTU == 0 ? BlueZKernelL2CAP.largestReceiveMTU : receiveMTU)
        l.start(onAccept)
        return (l.psm, { l.close() })
    }

    package func connect(
        address: String, random: Bool, psm: UInt16, adapterAddress: String?, receiveMTU: UInt16, done: @escaping @Sendable (Result<Int32, any Error>) -> Void
    ) -> @Sendable () -> Void {
        BlueZKernelL2CAP.connect(address: address, random: random, psm: psm, adapterAddress: adapterAddress, receiveMTU: receiveMTU) { r in
            done(r.mapError { $0 as any Error })
        }
    }

    /// What the kernel still holds of what was sent (not yet handed to the controller): the socket's send buffer
    /// less the room TIOCOUTQ reports (Bluetooth sockets answer TIOCOUTQ with the room left, sk_sndbuf less what
    /// their queued buffers take).
    package func unsentOctets(_ fd: Int32) -> Int? {
        var room: Int32 = 0
        var size: Int32 = 0
        var n = socklen_t(4)
        guard ioctl(fd, UInt(TIOCOUTQ), &room) == 0, getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, &n) == 0 else { return nil }
        return max(0, Int(size) - Int(room))
    }

    package func connect(address: String, random: Bool, psm: UInt16, adapterAddress: String?, done: @escaping @Sendable (Result<Int32, any Error>) -> Void) {
        BlueZKernelL2CAP.connect(address: address, random: random, psm: psm, adapterAddress: adapterAddress) { r in
            done(r.mapError { $0 as any Error })
        }
    }

    package func mtus(_ fd: Int32) -> (send: Int, receive: Int) { BlueZKernelL2CAP.mtus(fd) }
    package func peer(_ fd: Int32) -> (address: String, random: Bool)? { BlueZKernelL2CAP.peer(fd) }
}
