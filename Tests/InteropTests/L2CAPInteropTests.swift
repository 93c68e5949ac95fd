// L2CAP credit-based channels against Bumble over rootcanal, both ways: our central opens a channel to a
// Bumble server and 1 MB comes back intact; a Bumble client opens our published SPSM (LE and enhanced
// procedures) and gets its data echoed.
import Foundation
import Testing
import TestSupport
import Crypto
import BLEWire
import BLEHCI
import BLEL2CAP
import BLETransport
import BLEHost

/// Our side of the channel tests, driven through the host API on its loop.
final class ChannelPeer: HostCentralDelegate, HostPeripheralDelegate, @unchecked Sendable {
    let host: LEHost
    private let lock = NSLock()
    private var _reports: [AdvertisingReport] = []
    private var _links: [HostConnection] = []
    private var _received: [UInt16: [UInt8]] = [:]
    private var _closed: [L2CAPCreditChannels.CloseReason] = []
    var reports: [AdvertisingReport] { lock.withLock { _reports } }
    var links: [HostConnection] { lock.withLock { _links } }
    func received(_ cid: UInt16) -> [UInt8] { lock.withLock { _received[cid] ?? [] } }
    var closed: [L2CAPCreditChannels.CloseReason] { lock.withLock { _closed } }

    init(port: UInt16, name: String) throws {
        host = try HostFactory.makeHost(spec: .tcpClient(host: "127.0.0.1", port: port), name: name)
        host.loop.sync {
            host.centralDelegate = self; host.peripheralDelegate = self; host.powerOn()
        }
    }

    /// Delivers what a channel receives into `received[localCID]`; with `echo`, sends it back, consuming
    /// (returning credits for) only what the channel took, so a full channel throttles the peer.
    func attach(_ ch: HostL2CAPChannel, echo: Bool) {
        var pending: [[UInt8]] = []
        func pump() {
            while let first = pending.first, ch.send(first) {
                pending.removeFirst()
                ch.consumed(first.count)
            }
        }
        ch.onReceive = { [unowned self] sdu in
            lock.withLock { _received[ch.localCID, default: []] += sdu }
            if echo { pending.append(sdu); pump() } else { ch.consumed(sdu.count) }
        }
        ch.onWritable = { pump() }
        ch.onClose = { [unowned self] r in
            lock.withLock { _closed.append(r) }; ch.onWritable = nil; ch.onReceive = nil
        }
    }

    func host(_ host: LEHost, didReceive report: AdvertisingReport) { lock.withLock { _reports.append(report) } }
    func host(_ host: LEHost, didConnect connection: HostConnection) { lock.withLock { _links.append(connection) } }
    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {}
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {}
    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {}
    func host(_ host: LEHost, didReceiveRead request: HostReadRequest) {}
    func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) {}
    func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {}
    func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {}
}

func sha256Hex(_ bytes: [UInt8]) -> String { SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined() }

@Suite(.serialized, .timeLimit(.minutes(3))) struct L2CAPInteropTests {
    @Test func ourCentralEchoesOneMegabyteThroughABumbleServer() async throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let bumble = try PeerProcess(
            script: "bumble_l2cap.py",
            arguments: [
                "--transport", rc.transport, "--role", "server", "--psm", "0x0081",
                "--mtu", "1024", "--mps", "200",
            ])
        defer { bumble.stop() }
        try await bumble.waitFor("advertising")
        let ours = try ChannelPeer(port: rc.hciPort, name: "ours")
        try await waitFor("powered on", seconds: 20) { ours.host.loop.sync { ours.host.powerState == .on } }
        ours.host.loop.sync { ours.host.startScanning(active: true) }
        try await waitFor("Bumble advertising", seconds: 20) { ours.reports.contains { $0.data.containsName("Bumble L2CAP") } }
        let target = try #require(ours.reports.first { $0.data.containsName("Bumble L2CAP") }).address
        ours.host.loop.sync {
            ours.host.stopScanning(); ours.host.connect(to: target)
        }
        try await waitFor("connection", seconds: 20) { !ours.links.isEmpty }
        let link = ours.links[0]
        var opened: Result<[HostL2CAPChannel], L2CAPOpenError>?
        ours.host.loop.sync { link.openL2CAPChannel(psm: 0x81) { opened = $0 } }
        try await waitFor("channel", seconds: 10) { ours.host.loop.sync { opened != nil } }
        let ch = try #require(try ours.host.loop.sync { opened }?.get().first)
        #expect(ours.host.loop.sync { ch.peerMTU == 1024 && ch.peerMPS == 200 })
        ours.host.loop.sync { ours.attach(ch, echo: false) }
        let data = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 7) }
        // Send as the app would: as much as the channel takes, the rest when it says it has room.
        let sender = ChannelSender(channel: ch, data: data)
        ours.host.loop.sync { sender.start() }
        try await waitFor("1 MB echoed", seconds: 90) { ours.host.loop.sync { ours.received(ch.localCID).count >= data.count } }
        #expect(ours.host.loop.sync { ours.received(ch.localCID) } == data)
        // A refused SPSM reads as such.
        var refused: Result<[HostL2CAPChannel], L2CAPOpenError>?
        ours.host.loop.sync { link.openL2CAPChannel(psm: 0x99) { refused = $0 } }
        try await waitFor("refusal", seconds: 10) { ours.host.loop.sync { refused != nil } }
        #expect(ours.host.loop.sync { refused.map { if case .failure(.failed(.refused(.spsmNotSupported))) = $0 { true } else { false } } } == true)
        ours.host.loop.sync { ch.close() }
        let closed = try await bumble.waitFor("closed", seconds: 10)
        #expect(closed[0]["bytes"] as? Int == data.count)
        #expect(closed[0]["sha256"] as? String == sha256Hex(data))
        try await waitFor("our side closed") { ours.closed == [.localDisconnect] }
        ours.host.loop.sync { ours.host.powerOff() }
    }

    @Test(arguments: [false, true])
    func bumbleClientOpensOurPublishedSPSM(enhanced: Bool) async throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let ours = try ChannelPeer(port: rc.hciPort, name: "ours")
        try await waitFor("powered on", seconds: 20) { ours.host.loop.sync { ours.host.powerState == .on } }
        let psm = ours.host.loop.sync { () -> UInt16? in
            let psm = ours.host.publishL2CAP { [ours] ch in ours.attach(ch, echo: true) }
            ours.host.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6, 4, 9, 0x4F, 0x43, 0x42]))
            return psm
        }
        let address = ours.host.loop.sync { ours.host.localAddress }
        let count = enhanced ? 3 : 1
        let bumble = try PeerProcess(
            script: "bumble_l2cap.py",
            arguments: [
                "--transport", rc.transport, "--role", "client", "--peer", "\(address)", "--psm", String(psm!),
                "--bytes", "200000", "--count", String(count),
            ] + (enhanced ? ["--enhanced"] : []))
        defer { bumble.stop() }
        let opened = try await bumble.waitFor("opened", seconds: 30)
        #expect(opened[0]["count"] as? Int == count)
        let echoed = try await bumble.waitFor("echoed", count: count, seconds: 60)
        #expect(echoed.allSatisfy { $0["intact"] as? Bool == true && $0["bytes"] as? Int == 200_000 })
        try await bumble.waitFor("done", seconds: 20)
        try await waitFor("channels closed", seconds: 10) { ours.closed.count == count }
        #expect(ours.closed.allSatisfy { $0 == .peerDisconnected })
        ours.host.loop.sync { ours.host.powerOff() }
    }
}

/// Feeds `data` into a channel in SDUs of the peer's MTU, resuming when the channel has room (on the loop).
final class ChannelSender: @unchecked Sendable {
    let channel: HostL2CAPChannel
    let data: [UInt8]
    var offset = 0
    init(channel: HostL2CAPChannel, data: [UInt8]) { self.channel = channel; self.data = data }
    func start() {
        channel.onWritable = { [unowned self] in pump() }
        pump()
    }
    func pump() {
        while offset < data.count {
            let end = min(data.count, offset + channel.peerMTU)
            guard channel.send(Array(data[offset..<end])) else { return }
            offset = end
        }
    }
}

extension Array where Element == UInt8 {
    /// Whether advertising data carries this complete or shortened local name.
    func containsName(_ name: String) -> Bool {
        var i = 0
        while i + 1 < count {
            let len = Int(self[i])
            guard len > 0, i + len < count else { return false }
            if self[i + 1] == 0x09 || self[i + 1] == 0x08, String(decoding: self[(i + 2)...(i + len)], as: UTF8.self) == name { return true }
            i += len + 1
        }
        return false
    }
}

/// `ble bench --mode l2cap` against `bumble-bench`'s L2CAP modes over rootcanal: our central opens SPSM 128
/// on a `--mode l2cap-server` peripheral and sends; a `--mode l2cap-client` central opens ours and sends.
/// Figures are for benchmarks (scripts/bench-vs-bumble.sh); here only what moved is checked.
@Suite(.serialized, .timeLimit(.minutes(3))) struct BenchL2CAPInteropTests {
    func ble(_ args: [String], transport: String) throws -> (Process, Pipe) {
        let p = Process()
        p.executableURL = Interop.root.appendingPathComponent(".build/debug/ble")
        p.arguments = args
        p.environment = Interop.environment(["BLE_TRANSPORT": transport])
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        return (p, out)
    }

    func lastJSON(_ data: Data) throws -> [String: Any] {
        let last = try #require(String(decoding: data, as: UTF8.self).split(separator: "\n").last)
        return try #require(try JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any])
    }

    func bumbleBench(_ args: [String]) throws -> PeerProcess {
        try PeerProcess(script: "../../../scripts/bumble_bench.py", arguments: args)
    }

    @Test func ourCentralSendsToBumbleBenchL2CAPServer() async throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let bumble = try bumbleBench(["--mode", "l2cap-server", "--scenario", "receive", "peripheral", rc.transport])
        defer { bumble.stop() }
        try await bumble.waitFor("log", seconds: 30) { ($0["text"] as? String)?.contains("Waiting for connection") ?? false }
        let (p, out) = try ble(
            ["bench", "--mode", "l2cap", "--role", "central", "--scenario", "send", "--size", "1024", "--count", "200"],
            transport: rc.transport)
        defer { if p.isRunning { p.terminate() } }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
        let json = try lastJSON(data)
        #expect(json["bytes"] as? Int == 200 * 1024 && json["packets"] as? Int == 200)
        // Bumble took every packet in order (it logs each one, and the last one's flag) and acknowledged the last.
        try await bumble.waitFor("log") { ($0["text"] as? String)?.contains("Received last packet") ?? false }
        #expect(!bumble.events("log").contains { ($0["text"] as? String)?.contains("Unexpected packet") ?? false })
    }

    @Test func bumbleBenchL2CAPClientSendsToOurPeripheral() async throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let (p, out) = try ble(["bench", "--mode", "l2cap", "--role", "peripheral", "--scenario", "receive"], transport: rc.transport)
        defer { if p.isRunning { p.terminate() } }
        try await pause(nanoseconds: 2_000_000_000)
        let bumble = try bumbleBench(["--mode", "l2cap-client", "--scenario", "send", "-s", "1024", "-c", "200", "central", rc.transport])
        defer { bumble.stop() }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
        let json = try lastJSON(data)
        #expect(json["packets"] as? Int == 200 && json["bytes"] as? Int == 200 * 1024)
        // Bumble got our ACK for its last packet.
        try await bumble.waitFor("log") { ($0["text"] as? String)?.contains("Received ACK") ?? false }
    }
}
