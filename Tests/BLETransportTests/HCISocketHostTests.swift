// Two hosts, each on the HCI-socket transport, moving data over an L2CAP credit-based channel: each "kernel" is a
// SOCK_SEQPACKET pair bridged to a controller of one virtual air (real clock). What arrives must be what was sent,
// byte for byte: the transport batches packets both ways and the host handles them on its reader thread.
import Foundation
import Testing
import TestSupport
import BLEWire
import BLEHCI
import BLEL2CAP
import BLEVirtualRadio
import BLEHost
@testable import BLETransport
@testable import BLETransportLinux

/// The far end of an HCI-socket transport: a SOCK_SEQPACKET pair whose other end carries a virtual controller, one
/// H4 packet per message each way, as the kernel's user channel does.
final class PacketSocketController: HCITransportSink, @unchecked Sendable {
    let ours: Int32
    private let kernel: Int32
    private let controller: VirtualController
    /// The kernel's end is closed (once ours was): nothing more is written to its number, which may be reused.
    private let closed = Locked(false)

    init(_ controller: VirtualController) throws {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            throw TransportError.io("socketpair")
        }
        (ours, kernel) = (fds[0], fds[1])
        self.controller = controller
        try controller.open(sink: self)
        Thread { [self] in
            var buf = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = buf.withUnsafeMutableBytes { read(kernel, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                if let t = HCIPacketType(rawValue: buf[0]) { controller.send(HCIPacket(type: t, bytes: Array(buf[1..<n]))) }
            }
            controller.close()
            closed.withLock {
                $0 = true
                _ = close(kernel)
            }
        }.start()
    }

    func transport(didReceive packet: HCIPacket) {
        let b = packet.h4Bytes
        closed.withLock { isClosed in
            guard !isClosed else { return }
            _ = b.withUnsafeBytes { send(kernel, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
    }
    func transportDidClose(error: (any Error)?) {}
}

private final class Central: HostCentralDelegate, @unchecked Sendable {
    var connection: HostConnection?
    func host(_ host: LEHost, didReceive report: AdvertisingReport) {}
    func host(_ host: LEHost, didConnect connection: HostConnection) { self.connection = connection }
    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {}
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {}
    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {}
}

@Suite(.timeLimit(.minutes(2)))
struct HCISocketHostTests {
    @Test func aChannelBetweenTwoHostsOnHCISocketsCarriesEveryOctetInOrder() throws {
        let air = VirtualAir(loop: EventLoop(label: "hci-socket.pair.air", clock: .real))
        let (pc, cc) = (air.addController(), air.addController())
        // Large LE buffers, as the kernel scenarios' controllers have: a K-frame of 1024 octets takes two packets.
        for c in [pc, cc] { c.aclBufferSize = 1021; c.aclBufferCount = 16 }
        let peripheralAddress = BluetoothAddress(bytes: pc.address.bytes)
        let (pSocket, cSocket) = (try PacketSocketController(pc), try PacketSocketController(cc))
        let (pLoop, cLoop) = (EventLoop(label: "hci-socket.peripheral"), EventLoop(label: "hci-socket.central"))
        let peripheral = LEHost(transport: HCISocketTransport(index: 0) { pSocket.ours }, loop: pLoop, name: "peripheral")
        let central = LEHost(transport: HCISocketTransport(index: 1) { cSocket.ours }, loop: cLoop, name: "central")
        defer {
            pLoop.sync { peripheral.powerOff() }
            cLoop.sync { central.powerOff() }
        }
        let delegate = Central()
        pLoop.sync { peripheral.powerOn() }
        cLoop.sync {
            central.centralDelegate = delegate; central.powerOn()
        }
        try waitSync("both hosts on") { pLoop.sync { peripheral.powerState == .on } && cLoop.sync { central.powerState == .on } }

        // bumble-bench's channel (`ble bench peer --l2cap`): 1024-octet SDUs and K-frames, two packets each.
        let parameters = L2CAPChannelParameters(mtu: 1024, mps: 1024, window: 128 * 1024)
        let received = Locked<[UInt8]>([])
        let accepted = Locked<HostL2CAPChannel?>(nil)
        let psm = try #require(
            pLoop.sync {
                peripheral.publishL2CAP(parameters: parameters) { ch in
                    accepted.withLock { $0 = ch }
                    ch.onReceive = { [unowned ch] sdu in
                        received.withLock { $0 += sdu }
                        ch.consumed(sdu.count)
                    }
                }
            })
        pLoop.sync { peripheral.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6], interval: 0x20)) }
        cLoop.sync { central.connect(to: peripheralAddress) }
        try waitSync("the connection") { cLoop.sync { delegate.connection != nil } }
        let opened = Locked<Result<[HostL2CAPChannel], L2CAPOpenError>?>(nil)
        cLoop.sync { delegate.connection!.openL2CAPChannel(psm: psm, parameters: parameters) { r in opened.withLock { $0 = r } } }
        try waitSync("the channel") { opened.withLock { $0 } != nil && accepted.withLock { $0 } != nil }
        let channel = try #require(try opened.withLock { $0 }?.get().first)

        // 300 KB in SDUs of 1024 octets, queued as an app would (again when the queue has room).
        let data = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) }
        var sent = 0
        let deadline = Date().addingTimeInterval(60)
        while received.withLock({ $0.count }) < data.count && Date() < deadline {
            cLoop.sync {
                while sent < data.count, channel.send(Array(data[sent..<min(data.count, sent + 1024)])) {
                    sent = min(data.count, sent + 1024)
                }
            }
            usleep(1_000)
        }
        let got = received.withLock { $0 }
        #expect(got.count == data.count)
        #expect(got == data, "first difference at \(zip(got, data).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(got.count, data.count))")
    }
}
