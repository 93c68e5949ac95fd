// The kernel's L2CAP sockets for LE credit-based channels (BLE_TRANSPORT=bluez): bluetoothd keeps the adapter, and
// the kernel's L2CAP layer runs the channels (credits, segmentation), so a channel is a SOCK_SEQPACKET socket of
// family AF_BLUETOOTH where one send is one SDU and one recv one SDU.
//
// Constants as the kernel's include/net/bluetooth/bluetooth.h and l2cap.h define them (Glibc has none of them):
// AF_BLUETOOTH 31, BTPROTO_L2CAP 0, SOL_BLUETOOTH 274, BT_SECURITY 4 (struct bt_security { u8 level; u8 key_size }),
// BT_SNDMTU 12, BT_RCVMTU 13, BT_MODE 15 with BT_MODE_LE_FLOWCTL 0x03; address types BDADDR_LE_PUBLIC 1 and
// BDADDR_LE_RANDOM 2 (an LE address type makes a SEQPACKET socket's channel an LE credit-based one).
//
//   struct sockaddr_l2 { sa_family_t l2_family; __le16 l2_psm; bdaddr_t l2_bdaddr; __le16 l2_cid; u8 l2_bdaddr_type; }
//
// 2 + 2 + 6 + 2 + 1 octets, padded to 14; bdaddr_t is the address least significant octet first.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

enum BlueZL2CAP {
    static let afBluetooth: Int32 = 31
    static let btprotoL2CAP: Int32 = 0
    static let solBluetooth: Int32 = 274
    static let btSecurity: Int32 = 4
    static let btSndMTU: Int32 = 12
    static let btRcvMTU: Int32 = 13
    static let btMode: Int32 = 15
    static let btModeLEFlowControl: UInt8 = 0x03
    /// BT_SECURITY levels: LOW (no encryption), MEDIUM (encrypted, unauthenticated key allowed).
    static let securityLow: UInt8 = 1
    static let securityMedium: UInt8 = 2
    /// What we offer to receive per SDU. (The kernel grants the peer receiveMTU / MPS + 1 credits, its MPS being
    /// the controller's LE buffer size less 4: 3 credits at 2048 on 1021-octet buffers.)
    static let receiveMTU: UInt16 = 2048

    enum AddressType: UInt8, Sendable {
        case lePublic = 1
        case leRandom = 2

        /// Device1.AddressType ("public" or "random").
        init(bluez: String?) { self = bluez == "random" ? .leRandom : .lePublic }
    }

    /// A sockaddr_l2, as octets.
    struct SocketAddress: Equatable, Sendable {
        static let size = 14
        var psm: UInt16
        /// The address as written, most significant octet first ("AA:BB:…" → [0xAA, 0xBB, …]).
        var address: [UInt8]
        var type: AddressType
        var cid: UInt16 = 0

        init(psm: UInt16, address: [UInt8], type: AddressType, cid: UInt16 = 0) {
            self.psm = psm
            self.address = address
            self.type = type
            self.cid = cid
        }

        /// From "AA:BB:CC:DD:EE:FF"; nil for anything else.
        init?(psm: UInt16, address text: String, type: AddressType) {
            let parts = text.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 6 else { return nil }
            var octets: [UInt8] = []
            for p in parts {
                guard p.count == 2, let o = UInt8(p, radix: 16) else { return nil }
                octets.append(o)
            }
            self.init(psm: psm, address: octets, type: type)
        }

        /// Decodes what getsockname/getpeername/accept give; nil if too short, of another family or type.
        init?(bytes: [UInt8]) {
            guard bytes.count >= 13, UInt16(bytes[0]) | UInt16(bytes[1]) << 8 == UInt16(BlueZL2CAP.afBluetooth),
                let type = AddressType(rawValue: bytes[12])
            else { return nil }
            psm = UInt16(bytes[2]) | UInt16(bytes[3]) << 8
            address = bytes[4..<10].reversed()
            cid = UInt16(bytes[10]) | UInt16(bytes[11]) << 8
            self.type = type
        }

        var bytes: [UInt8] {
            var b = [UInt8](repeating: 0, count: Self.size)
            b[0] = UInt8(BlueZL2CAP.afBluetooth & 0xFF)
            b[1] = UInt8(BlueZL2CAP.afBluetooth >> 8)
            b[2] = UInt8(psm & 0xFF)
            b[3] = UInt8(psm >> 8)
            for (i, o) in address.prefix(6).reversed().enumerated() { b[4 + i] = o }
            b[10] = UInt8(cid & 0xFF)
            b[11] = UInt8(cid >> 8)
            b[12] = type.rawValue
            return b
        }

        var addressString: String { address.map { String(format: "%02X", $0) }.joined(separator: ":") }

        /// What a socket of ours is bound to: the adapter's address ("AA:BB:…") or, with none usable, any adapter,
        /// always with an LE address type. The kernel gives a channel LE credit-based flow control only when its
        /// socket's source is LE (l2cap_sock_bind/connect); an unbound socket stays in basic mode, yet still asks
        /// the peer for an LE credit-based channel, then sends its SDUs with no SDU length field (the peer sees
        /// malformed K-frames: "K-frames carry 1025 octets for an SDU of 256" in `bench-bluez`) and offers 672.
        static func source(adapter: String?, psm: UInt16 = 0) -> SocketAddress {
            adapter.flatMap { SocketAddress(psm: psm, address: $0, type: .lePublic) }
                ?? SocketAddress(psm: psm, address: [0, 0, 0, 0, 0, 0], type: .lePublic)
        }
    }

    /// A failed socket call, with errno kept.
    struct SocketError: Error, CustomStringConvertible {
        var call: String
        var code: Int32
        var description: String { "\(call): \(String(cString: strerror(code))) (errno \(code))" }

        /// The CBError an app sees: the kernel's reason kept in the description.
        var cbError: CBError {
            let kind: CBError.Code
            switch code {
            case EAFNOSUPPORT, EPROTONOSUPPORT, ESOCKTNOSUPPORT: kind = .operationNotSupported
            case ETIMEDOUT: kind = .connectionTimeout
            case ECONNRESET, ENOTCONN, EPIPE, ESHUTDOWN: kind = .peripheralDisconnected
            case EINVAL: kind = .invalidParameters
            default: kind = .connectionFailed
            }
            let why =
                code == EAFNOSUPPORT
                ? "this kernel has no Bluetooth sockets (AF_BLUETOOTH): \(description)"
                : "L2CAP socket \(description)"
            return CBError(
                kind,
                userInfo: [
                    NSLocalizedDescriptionKey: CBError(kind).localizedDescription + " (\(why))",
                    NSLocalizedFailureReasonErrorKey: why,
                    "errno": Int(code),
                ])
        }
    }

    /// A non-blocking L2CAP SEQPACKET socket bound to `local` (psm 0 for a client: any; see `source`: never unbound).
    static func makeSocket(local: SocketAddress, security: UInt8, receiveMTU: UInt16 = receiveMTU) throws(SocketError) -> Int32 {
        let fd = socket(afBluetooth, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), btprotoL2CAP)
        guard fd >= 0 else { throw SocketError(call: "socket", code: errno) }
        do throws(SocketError) {
            try bind(fd, local)
            var mode = btModeLEFlowControl
            // BT_MODE needs a kernel with it (5.10+); the LE address type picks the same mode anyway.
            _ = setsockopt(fd, solBluetooth, btMode, &mode, socklen_t(1))
            var mtu = receiveMTU
            _ = setsockopt(fd, solBluetooth, btRcvMTU, &mtu, socklen_t(2))
            var sec: (UInt8, UInt8) = (security, 0)
            if setsockopt(fd, solBluetooth, btSecurity, &sec, socklen_t(2)) != 0 { throw SocketError(call: "setsockopt(BT_SECURITY)", code: errno) }
            return fd
        } catch {
            close(fd)
            throw error
        }
    }

    static func bind(_ fd: Int32, _ a: SocketAddress) throws(SocketError) {
        let b = a.bytes
        let r = b.withUnsafeBytes { Glibc.bind(fd, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(b.count)) }
        if r != 0 { throw SocketError(call: "bind", code: errno) }
    }

    /// Starts a connect: true when already connected, false when in progress (writable once done).
    static func connect(_ fd: Int32, _ a: SocketAddress) throws(SocketError) -> Bool {
        let b = a.bytes
        let r = b.withUnsafeBytes { Glibc.connect(fd, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(b.count)) }
        if r == 0 { return true }
        if errno == EINPROGRESS || errno == EAGAIN { return false }
        throw SocketError(call: "connect", code: errno)
    }

    /// SO_ERROR once a connect in progress is done (0: connected).
    static func pendingError(_ fd: Int32) -> Int32 {
        var e: Int32 = 0
        var n = socklen_t(4)
        return getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &n) == 0 ? e : errno
    }

    static func localAddress(_ fd: Int32) -> SocketAddress? { name(fd, getsockname) }
    static func peerAddress(_ fd: Int32) -> SocketAddress? { name(fd, getpeername) }

    private static func name(_ fd: Int32, _ call: (Int32, UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32) -> SocketAddress? {
        var b = [UInt8](repeating: 0, count: 32)
        var n = socklen_t(b.count)
        let r = b.withUnsafeMutableBytes { call(fd, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), &n) }
        guard r == 0 else { return nil }
        return SocketAddress(bytes: Array(b.prefix(Int(n))))
    }

    /// The SDU sizes the kernel settled for a connected socket (BT_SNDMTU, BT_RCVMTU).
    static func mtus(_ fd: Int32) -> (send: Int, receive: Int) {
        func get(_ opt: Int32) -> Int? {
            var v: UInt16 = 0
            var n = socklen_t(2)
            return getsockopt(fd, solBluetooth, opt, &v, &n) == 0 && v > 0 ? Int(v) : nil
        }
        return (get(btSndMTU) ?? 23, get(btRcvMTU) ?? Int(receiveMTU))
    }
}
