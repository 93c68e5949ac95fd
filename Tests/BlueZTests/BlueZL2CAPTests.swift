// L2CAP credit-based channels on BLE_TRANSPORT=bluez (BlueZL2CAPSocket, BlueZL2CAPChannel): the sockaddr_l2 the
// kernel reads, errno mapped to the CBError an app sees, the stream bridge over a SEQPACKET socket (a UNIX socket
// pair stands in for the kernel's L2CAP socket: one send one SDU, as there), and opening or publishing on a machine
// whose kernel has no Bluetooth sockets: an error in the delegate call, never a crash. The kernel row
// cb-l2cap-bluez runs the same code against a real kernel and bluetoothd.
import Foundation
import Testing
import TestSupport
import DBus
@testable import CoreBluetooth
#if canImport(Glibc)
import Glibc
#endif

private let heartRate = "0000180d-0000-1000-8000-00805f9b34fb"

/// Whether this kernel refuses AF_BLUETOOTH sockets (no Bluetooth, as on this project's build machines).
private let noBluetoothSockets: Bool = {
    let fd = socket(31, Int32(SOCK_SEQPACKET.rawValue), 0)
    if fd >= 0 { close(fd); return false }
    return errno == EAFNOSUPPORT
}()

final class L2CAPRecorder: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate, CBPeripheralManagerDelegate, EventLog, @unchecked Sendable {
    private let lock = NSLock()
    private var log: [String] = []
    private var found: [CBPeripheral] = []
    private var errors: [String: any Error] = [:]
    var events: [String] { lock.withLock { log } }
    var discovered: [CBPeripheral] { lock.withLock { found } }
    func error(_ key: String) -> (any Error)? { lock.withLock { errors[key] } }
    private func note(_ s: String, _ e: (any Error)? = nil) {
        lock.withLock {
            log.append(s)
            if let e { errors[s] = e }
        }
    }

    func centralManagerDidUpdateState(_ central: CBCentralManager) { note("state \(central.state.rawValue)") }
    func centralManager(_ central: CBCentralManager, didDiscover peripheral: CBPeripheral, advertisementData: [String: Any], rssi RSSI: NSNumber) {
        lock.withLock { found.append(peripheral) }
        note("discover")
    }
    func centralManager(_ central: CBCentralManager, didConnect peripheral: CBPeripheral) { note("connect") }
    func peripheral(_ peripheral: CBPeripheral, didOpen channel: CBL2CAPChannel?, error: (any Error)?) {
        note(channel == nil ? "open error" : "open", error)
    }
    func peripheralManagerDidUpdateState(_ peripheral: CBPeripheralManager) { note("pm state \(peripheral.state.rawValue)") }
    func peripheralManager(_ peripheral: CBPeripheralManager, didPublishL2CAPChannel PSM: CBL2CAPPSM, error: (any Error)?) {
        note(error == nil ? "published \(PSM)" : "publish error", error)
    }
    func peripheralManager(_ peripheral: CBPeripheralManager, didUnpublishL2CAPChannel PSM: CBL2CAPPSM, error: (any Error)?) {
        note(error == nil ? "unpublished \(PSM)" : "unpublish error", error)
    }
}

@Suite(.timeLimit(.minutes(2)))
struct BlueZL2CAPTests {
    @Test func sockaddrL2IsWhatTheKernelReads() throws {
        let a = try #require(BlueZL2CAP.SocketAddress(psm: 0x0080, address: "C0:FF:EE:00:00:01", type: .leRandom))
        // family 31 (LE), psm 0x0080 (LE), bdaddr least significant octet first, cid 0, type 2, one pad octet.
        #expect(a.bytes == [31, 0, 0x80, 0x00, 0x01, 0x00, 0x00, 0xEE, 0xFF, 0xC0, 0, 0, 2, 0])
        #expect(BlueZL2CAP.SocketAddress(bytes: a.bytes) == a)
        #expect(a.addressString == "C0:FF:EE:00:00:01")
        let b = try #require(BlueZL2CAP.SocketAddress(psm: 0x00F1, address: "00:11:22:33:44:55", type: .lePublic))
        #expect(b.bytes == [31, 0, 0xF1, 0x00, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00, 0, 0, 1, 0])
        var decoded = b.bytes
        decoded[10] = 0x40   // a CID as getpeername gives it
        #expect(BlueZL2CAP.SocketAddress(bytes: decoded)?.cid == 0x0040)
        for bad in ["", "C0:FF:EE:00:00", "C0:FF:EE:00:00:01:02", "C0:FF:EE:00:00:0G", "C0:FF:EE:00:00:001", "C0-FF-EE-00-00-01"] {
            #expect(BlueZL2CAP.SocketAddress(psm: 0x80, address: bad, type: .lePublic) == nil, "\(bad)")
        }
        var otherFamily = a.bytes
        otherFamily[0] = 2
        #expect(BlueZL2CAP.SocketAddress(bytes: otherFamily) == nil)
        var bredr = a.bytes
        bredr[12] = 0
        #expect(BlueZL2CAP.SocketAddress(bytes: bredr) == nil)
        #expect(BlueZL2CAP.SocketAddress(bytes: Array(a.bytes.prefix(12))) == nil)
        #expect(BlueZL2CAP.AddressType(bluez: "random") == .leRandom)
        #expect(BlueZL2CAP.AddressType(bluez: "public") == .lePublic)
        #expect(BlueZL2CAP.AddressType(bluez: nil) == .lePublic)
    }

    /// Every socket of ours is bound to an LE address type, the adapter's or any: an unbound one stays in basic mode
    /// and sends its SDUs with no SDU length field (the `bench-bluez` run's "K-frames carry 1025 octets for an SDU of
    /// 256"). Type octet 1 (BDADDR_LE_PUBLIC), never 0 (BR/EDR).
    @Test func aSocketsSourceIsAlwaysAnLEAddress() {
        #expect(BlueZL2CAP.SocketAddress.source(adapter: nil).bytes == [31, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0])
        #expect(BlueZL2CAP.SocketAddress.source(adapter: "not an address", psm: 0x80).bytes == [31, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0])
        #expect(
            BlueZL2CAP.SocketAddress.source(adapter: "00:11:22:33:44:55", psm: 0x81).bytes
                == [31, 0, 0x81, 0, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00, 0, 0, 1, 0])
    }

    @Test func errnoBecomesTheCBErrorAnAppSeesWithTheKernelsText() {
        func check(_ code: Int32, _ expected: CBError.Code, _ text: String) {
            let e = BlueZL2CAP.SocketError(call: "connect", code: code).cbError
            #expect(e.code == expected, "errno \(code)")
            #expect(e.localizedDescription.contains(text), "\(e.localizedDescription)")
            #expect(e.errorUserInfo["errno"] as? Int == Int(code))
        }
        check(ECONNREFUSED, .connectionFailed, "Connection refused")
        check(EAFNOSUPPORT, .operationNotSupported, "no Bluetooth sockets")
        check(ETIMEDOUT, .connectionTimeout, "timed out")
        check(ECONNRESET, .peripheralDisconnected, "reset")
        check(EACCES, .connectionFailed, "Permission denied")
    }

    /// A channel over one end of a SEQPACKET socket pair; the other end plays the kernel's peer.
    private func channel() throws -> (BlueZL2CAPChannel, peer: Int32) {
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &fds) == 0)
        _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)
        let central = CBCentral(identifier: UUID(), maximumUpdateValueLength: 20)
        let ch = BlueZL2CAPChannel(peer: central, psm: 0x0081, fd: fds[0])
        return (ch, fds[1])
    }

    private func readAvailable(_ s: InputStream, until count: Int, into out: inout [UInt8]) async throws {
        var buf = [UInt8](repeating: 0, count: 8192)
        let start = ContinuousClock.now
        while out.count < count {
            if s.hasBytesAvailable {
                let n = s.read(&buf, maxLength: buf.count)
                if n > 0 { out += buf[0..<n] }
            } else {
                guard ContinuousClock.now - start < .seconds(20) else {
                    Issue.record("only \(out.count) of \(count) octets arrived")
                    throw CancellationError()
                }
                try await pause(nanoseconds: 2_000_000)
            }
        }
    }

    @Test func theStreamsCarryTheSocketsSDUsBothWaysAndEndWithIt() async throws {
        let (ch, peer) = try channel()
        defer { close(peer) }
        #expect(ch.psm == 0x0081)
        #expect(ch.peer is CBCentral)
        ch.inputStream.open()
        ch.outputStream.open()
        // Out: 100 000 octets written into the stream leave as SDUs of at most the send MTU (23 when the socket
        // cannot say, as a UNIX socket cannot), in order.
        let payload = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 8) }
        var written = 0
        var received: [UInt8] = []
        var largest = 0
        var sdu = [UInt8](repeating: 0, count: 4096)
        let start = ContinuousClock.now
        while received.count < payload.count {
            if written < payload.count, ch.outputStream.hasSpaceAvailable {
                let n = payload[written...].withUnsafeBufferPointer { ch.outputStream.write($0.baseAddress!, maxLength: min($0.count, 4096)) }
                if n > 0 { written += n }
            }
            let n = recv(peer, &sdu, sdu.count, Int32(MSG_DONTWAIT))
            if n > 0 {
                received += sdu[0..<n]
                largest = max(largest, n)
            } else {
                #expect(ContinuousClock.now - start < .seconds(20), "only \(received.count) octets left")
                if ContinuousClock.now - start > .seconds(20) { return }
                try await pause(nanoseconds: 1_000_000)
            }
        }
        #expect(received == payload)
        #expect(largest == 23)
        // In: SDUs the peer sends arrive in the input stream, in order.
        var expected: [UInt8] = []
        for i in 0..<50 {
            let s = [UInt8](repeating: UInt8(i), count: 100 + i)
            expected += s
            #expect(send(peer, s, s.count, 0) == s.count)
        }
        var got: [UInt8] = []
        try await readAvailable(ch.inputStream, until: expected.count, into: &got)
        #expect(got == expected)
        // The peer closes: the input stream ends, writes fail.
        shutdown(peer, Int32(SHUT_RDWR))
        let end = ContinuousClock.now
        while ch.inputStream.streamStatus != .atEnd, ContinuousClock.now - end < .seconds(20) { try await pause(nanoseconds: 2_000_000) }
        #expect(ch.inputStream.streamStatus == .atEnd)
        let one: [UInt8] = [1]
        let wrote = ch.outputStream.write(one, maxLength: 1)
        #expect(wrote == -1)
        #expect((ch.outputStream.streamError as? CBError)?.code == .peripheralDisconnected)
    }

    @Test func aReaderThatStopsStopsTakingFromTheSocket() async throws {
        let (ch, peer) = try channel()
        defer { close(peer) }
        ch.inputStream.open()
        // The peer sends until its socket is full; the bridge takes only up to its limit while nobody reads.
        let sdu = [UInt8](repeating: 0x5A, count: 1000)
        var sent = 0
        var quiet = 0
        while quiet < 50 {
            let n = send(peer, sdu, sdu.count, Int32(MSG_DONTWAIT))
            if n > 0 { sent += n; quiet = 0 } else { quiet += 1; try await pause(nanoseconds: 5_000_000) }
            #expect(sent < 16 * 1024 * 1024, "the bridge never stopped taking")
            if sent >= 16 * 1024 * 1024 { return }
        }
        let buffered = ch.unreadOctets
        #expect(buffered <= BlueZL2CAPBridge.inputLimit + 65_535)
        #expect(buffered < sent)
        // Reading resumes the flow: everything sent arrives.
        var got: [UInt8] = []
        try await readAvailable(ch.inputStream, until: sent, into: &got)
        #expect(got.count == sent)
        #expect(got.allSatisfy { $0 == 0x5A })
    }

    @Test func releasingTheChannelClosesTheSocket() async throws {
        var (ch, peer): (BlueZL2CAPChannel?, Int32) = try channel()
        defer { close(peer) }
        ch = nil
        _ = ch
        var b = [UInt8](repeating: 0, count: 16)
        let start = ContinuousClock.now
        var n = -1
        while ContinuousClock.now - start < .seconds(20) {
            n = recv(peer, &b, b.count, Int32(MSG_DONTWAIT))
            if n == 0 { break }
            try await pause(nanoseconds: 2_000_000)
        }
        #expect(n == 0, "the peer did not see the channel close")
    }
}

/// Opening and publishing through the façade on the fake bluetoothd (whose devices are not reachable by the kernel).
@Suite(
    .enabled(if: PrivateBus.available, "needs dbus-daemon (Debian package dbus-daemon; scripts/test installs it)"),
    .timeLimit(.minutes(2)))
struct BlueZL2CAPFacadeTests {
    @Test func openingWithoutAReachableKernelSocketIsDidOpenWithAnError() async throws {
        let bus = try await PrivateBus()
        let fake = try await FakeBlueZ(address: bus.address)
        fake.addAdapter()
        fake.database = [FakeService(uuid: heartRate, characteristics: [])]
        let r = L2CAPRecorder()
        let m = CBCentralManager(delegate: r, queue: DispatchQueue(label: "l2cap-test-delegate"), bluez: BlueZOptions(busAddress: bus.address, adapter: nil))
        try await r.wait(for: "state \(CBManagerState.poweredOn.rawValue)")
        m.scanForPeripherals(withServices: nil)
        _ = fake.addDevice(address: "C0:FF:EE:00:00:01", random: true, ["Name": .string("HRM"), "RSSI": .int16(-50)])
        try await r.wait(for: "discover")
        m.stopScan()
        let p = r.discovered[0]
        p.delegate = r
        // A PSM outside the LE range: invalidParameters, as on iOS.
        p.openL2CAPChannel(0x1001)
        try await r.wait(for: "open error")
        #expect((r.error("open error") as? CBError)?.code == .invalidParameters)
        m.connect(p)
        try await r.wait(for: "connect")
        p.openL2CAPChannel(0x0080)
        try await r.wait("a second didOpen") { $0.filter { $0 == "open error" }.count == 2 }
        let e = try #require(r.error("open error") as? CBError)
        if noBluetoothSockets {
            #expect(e.code == .operationNotSupported)
            #expect(e.localizedDescription.contains("no Bluetooth sockets"))
            #expect(e.errorUserInfo["errno"] as? Int == Int(EAFNOSUPPORT))
        } else {
            // A kernel with Bluetooth but without this fake's adapter or device: its own refusal.
            #expect(e.errorUserInfo["errno"] is Int)
        }
        m.cancelPeripheralConnection(p)
        withExtendedLifetime(m) {}
    }

    @Test func publishingWithoutKernelSocketsIsDidPublishWithAnError() async throws {
        let bus = try await PrivateBus()
        let fake = try await FakeBlueZ(address: bus.address)
        fake.addAdapter()
        let r = L2CAPRecorder()
        let pm = CBPeripheralManager(delegate: r, queue: DispatchQueue(label: "l2cap-test-pm"), bluez: BlueZOptions(busAddress: bus.address, adapter: nil))
        try await r.wait(for: "pm state \(CBManagerState.poweredOn.rawValue)")
        pm.publishL2CAPChannel(withEncryption: false)
        try await r.wait("didPublish") { $0.contains { $0.hasPrefix("publish") } }
        if noBluetoothSockets {
            let e = try #require(r.error("publish error") as? CBError)
            #expect(e.code == .operationNotSupported)
            #expect(e.errorUserInfo["errno"] as? Int == Int(EAFNOSUPPORT))
        }
        // Unpublishing a PSM never published: invalidParameters.
        pm.unpublishL2CAPChannel(0x00F3)
        try await r.wait(for: "unpublish error")
        #expect((r.error("unpublish error") as? CBError)?.code == .invalidParameters)
        withExtendedLifetime(pm) {}
    }
}
