// The controller-diversity suite: our stack on controllers unlike the ideal ones, each one Bumble's software
// controller made to look like a real chip (peers/bumble_controllers.py): a 4.0 one, a 4.2 one with Data
// Length Extension, a 5.x one with extended advertising, LE buffer size 0, a single buffer freed late, no
// public address (plain, and a Zephyr one with its factory address), a reset that takes 3 s, garbage before
// the first packet on a pseudo-terminal, and a controller that vanishes mid-transfer and comes back. The Core
// Bluetooth flows run on each (our central reads, writes and subscribes on a Bumble peripheral; a Bumble
// central reads our peripheral), and the controller reports any buffer overrun, unsupported command or mix of
// legacy and extended commands, which fail the test.
import Foundation
import Testing
import TestSupport
import CoreBluetooth
import BLEWire
import BLEHCI
import BLEHost
import BLETransport
import BLETransportLinux

/// One diversity controller with its Bumble peer; the host connects to it over TCP (or opens its pty).
final class DiversityController {
    let peer: PeerProcess
    let port: UInt16
    let ptyPath: String?

    init(_ profile: String, _ extra: [String] = []) async throws {
        try Interop.requireReady()
        peer = try PeerProcess(script: "bumble_controllers.py", arguments: ["--profile", profile] + extra)
        if extra.contains("--pty") {
            let e = try await peer.waitFor("pty")
            ptyPath = e.first?["path"] as? String
            port = 0
        } else {
            let e = try await peer.waitFor("listening")
            port = UInt16(e.first?["port"] as? Int ?? 0)
            ptyPath = nil
        }
        if !extra.contains("central") && !extra.contains("external") { try await peer.waitFor("advertising") }
    }

    func host(name: String = "ours") throws -> LEHost {
        if let ptyPath { return LEHost(transport: SerialTransport(path: ptyPath, baud: 1_000_000), loop: EventLoop(label: "diversity.serial"), name: name) }
        let h = try HostFactory.makeHost(spec: .tcpClient(host: "127.0.0.1", port: port), name: name)
        return h
    }

    /// What the controller objected to: buffers overrun, unsupported commands, legacy and extended mixed.
    func complaints() -> [String] {
        (peer.events("overflow") + peer.events("unsupported_command") + peer.events("error")).map { "\($0)" }
    }

    func stop() { peer.stop() }
}

/// Our central on a diversity controller: reads the Bumble peer's database, writes (short, long and without
/// response) and subscribes; returns the reader for more checks.
@discardableResult
func centralFlow(on host: LEHost, peer: DiversityController, name: String = "Diversity Peer") async throws -> DatabaseReader {
    let central = DatabaseReader(name: name)
    let notify = CBUUID(string: "6E400004-B5A3-F393-E0A9-E50E24DCCA9E")
    let writable = CBUUID(string: "6E400003-B5A3-F393-E0A9-E50E24DCCA9E")
    let long = Data((0..<300).map { UInt8($0 % 7) })
    central.subscribeTo = [notify]
    central.writes = [(writable, Data([1, 2, 3, 4]), .withResponse), (writable, long, .withResponse), (writable, Data([9, 9]), .withoutResponse)]
    central.manager = CBCentralManager(delegate: central, queue: central.queue, options: nil, host: host)
    try await waitFor("database read", seconds: 40) { central.log.has("database read") }
    let values = central.queue.sync { central.values }
    #expect(values["6E400002-B5A3-F393-E0A9-E50E24DCCA9E"] == Data((0..<300).map { UInt8($0 % 251) }))
    try await peer.peer.waitFor("write", seconds: 20) { $0["value"] as? String == "01020304" }
    try await peer.peer.waitFor("write", seconds: 20) { $0["value"] as? String == long.map { String(format: "%02x", $0) }.joined() }
    try await peer.peer.waitFor("write", seconds: 20) { $0["value"] as? String == "0909" }
    try await waitFor("subscribed") { central.log.has("notifying:\(notify.uuidString):true") }
    let p = try #require(central.queue.sync { central.target })
    central.queue.sync { central.manager.cancelPeripheralConnection(p) }
    try await waitFor("disconnect") { central.log.has("disconnected:nil") }
    return central
}

/// A Bumble central on the diversity controller's air reads our peripheral.
func peripheralFlow(on host: LEHost, peer: DiversityController) async throws {
    let per = InteropPeripheral(name: "OCB Diversity")
    per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: host)
    try await waitFor("advertising", seconds: 40) { per.log.has("advertising:true") }
    try await peer.peer.waitFor("central_done", seconds: 40)
    #expect(peer.peer.events("read").contains { $0["uuid"] as? String == "2A00" })
    per.queue.sync { per.manager.stopAdvertising() }
}

@Suite(.serialized, .timeLimit(.minutes(3))) struct ControllerDiversityTests {
    @Test func bluetooth40WithoutDataLengthOr2M() async throws {
        let c = try await DiversityController("v40")
        defer { c.stop() }
        let host = try c.host()
        let central = try await centralFlow(on: host, peer: c)
        defer { withExtendedLifetime(central) {} }   // the host stays up while its manager lives
        let info = try #require(host.controllerInfo)
        #expect(info.version?.hciVersion == 6)
        #expect(!info.supportsDataLengthExtension && !info.supportsLE2M && !info.supportsExtendedAdvertising)
        #expect(c.peer.events("gap_commands").compactMap { $0["kind"] as? String } == ["legacy"])
        // No optional command was sent that this controller does not list.
        #expect(c.complaints().isEmpty, "\(c.complaints())")
    }

    @Test func bluetooth40Peripheral() async throws {
        let c = try await DiversityController("v40", ["--peer", "central"])
        defer { c.stop() }
        try await peripheralFlow(on: try c.host(), peer: c)
        #expect(c.complaints().isEmpty, "\(c.complaints())")
    }

    @Test func bluetooth42WithDataLengthExtension() async throws {
        let c = try await DiversityController("v42")
        defer { c.stop() }
        let host = try c.host()
        let central = try await centralFlow(on: host, peer: c)
        defer { withExtendedLifetime(central) {} }
        let info = try #require(host.controllerInfo)
        #expect(info.supportsDataLengthExtension && !info.supportsLE2M)
        #expect(info.maxTxOctets == 251)
        #expect(c.complaints().isEmpty, "\(c.complaints())")
    }

    @Test func bluetooth5UsesExtendedCommandsOnly() async throws {
        let c = try await DiversityController("v5")
        defer { c.stop() }
        let host = try c.host()
        let central = try await centralFlow(on: host, peer: c)
        defer { withExtendedLifetime(central) {} }
        #expect(host.usesExtendedAdvertising)
        #expect(c.peer.events("gap_commands").compactMap { $0["kind"] as? String } == ["extended"])
        #expect(c.complaints().isEmpty, "\(c.complaints())")
    }

    @Test func bluetooth5PeripheralAdvertisesThroughExtendedCommands() async throws {
        let c = try await DiversityController("v5", ["--peer", "central"])
        defer { c.stop() }
        try await peripheralFlow(on: try c.host(), peer: c)
        #expect(c.peer.events("gap_commands").compactMap { $0["kind"] as? String } == ["extended"])
        #expect(c.complaints().isEmpty, "\(c.complaints())")
    }

    /// A peripheral that advertises with extended PDUs only (more data than a legacy advertisement holds):
    /// found and connected through extended scanning and LE Extended Create Connection on a 5.x controller.
    @Test func extendedOnlyPeripheralIsFoundAndConnected() async throws {
        let c = try await DiversityController("v5", ["--peer-extended"])
        defer { c.stop() }
        let central = try await centralFlow(on: try c.host(), peer: c)
        let adv = central.queue.sync { central.advertisement }
        let serviceData = try #require(adv[CBAdvertisementDataServiceDataKey] as? [CBUUID: Data])
        #expect(serviceData[CBUUID(string: "180D")] == Data(0..<40))
        #expect(c.complaints().isEmpty, "\(c.complaints())")
    }

    /// The documented failure: a 4.x controller cannot receive extended advertising, so the peripheral is never
    /// discovered (and `supports(.extendedScanAndConnect)` said so).
    @Test func extendedOnlyPeripheralIsInvisibleToA42Controller() async throws {
        let c = try await DiversityController("v42", ["--peer-extended"])
        defer { c.stop() }
        let central = DatabaseReader(name: "Diversity Peer")
        central.manager = CBCentralManager(delegate: central, queue: central.queue, options: nil, host: try c.host())
        try await waitFor("powered on") { central.log.has("state:5") }
        #expect(central.manager.leHost?.usesExtendedAdvertising == false)
        try await pause(nanoseconds: 3_000_000_000)
        #expect(central.queue.sync { central.target } == nil)
    }

    @Test func leBufferSizeZeroUsesTheSharedBuffers() async throws {
        let c = try await DiversityController("le-buffer-0")
        defer { c.stop() }
        let host = try c.host()
        let central = try await centralFlow(on: host, peer: c)
        defer { withExtendedLifetime(central) {} }
        let info = try #require(host.controllerInfo)
        #expect(info.sharedACLBuffers)
        #expect(host.loop.sync { (host.aclBufferSize, host.aclBufferCount) } == (310, 4))
        #expect(c.complaints().isEmpty, "\(c.complaints())")
    }

    /// One 27-octet buffer, freed 30 ms after each packet: a 300-octet long write and discovery never put a
    /// second packet in the controller.
    @Test func oneBufferWithLateCompletionsIsNeverOverrun() async throws {
        let c = try await DiversityController("one-buffer")
        defer { c.stop() }
        let host = try c.host()
        try await centralFlow(on: host, peer: c)
        #expect(host.loop.sync { host.aclBufferCount } == 1)
        #expect(c.peer.events("overflow").isEmpty)
        #expect(c.complaints().isEmpty, "\(c.complaints())")
    }

    @Test func zephyrControllerWithoutPublicAddressUsesItsFactoryStaticAddress() async throws {
        let c = try await DiversityController("no-address", ["--zephyr"])
        defer { c.stop() }
        let host = try c.host()
        let central = try await centralFlow(on: host, peer: c)
        defer { withExtendedLifetime(central) {} }
        #expect(host.localAddress == BluetoothAddress(string: "C6:55:44:33:22:11", type: .random))
        #expect(host.controllerInfo?.addressKind == .zephyrStatic)
        #expect(c.peer.events("peer_connected").first?["address"] as? String == "C6:55:44:33:22:11")
        #expect(c.complaints().isEmpty, "\(c.complaints())")
    }

    /// No public address and no vendor command: a static address made once and kept, so that the second run
    /// (a new host, as after a restart) has the same identity and bond file.
    @Test func controllerWithoutAddressKeepsAGeneratedStaticAddressAcrossRestarts() async throws {
        let c = try await DiversityController("no-address", ["--peer", "central"])
        defer { c.stop() }
        let first = try c.host(name: "first")
        try await peripheralFlow(on: first, peer: c)
        let a = first.localAddress
        #expect(a.randomKind == .staticAddress)
        first.loop.sync { first.powerOff() }
        let second = try c.host(name: "second")
        second.loop.sync { second.powerOn() }
        try await waitFor("second host on") { second.loop.sync { second.powerState == .on } }
        #expect(second.localAddress == a)
        #expect(second.loop.sync { second.bondStore.fileURL?.lastPathComponent } == "bonds-\(a.string.replacingOccurrences(of: ":", with: "")).json")
        second.loop.sync { second.powerOff() }
        #expect(c.complaints().isEmpty, "\(c.complaints())")
    }

    @Test func aResetThatTakesThreeSecondsIsWaitedFor() async throws {
        let c = try await DiversityController("slow-reset")
        defer { c.stop() }
        let host = try c.host()
        let started = Date()
        try await centralFlow(on: host, peer: c)
        #expect(Date().timeIntervalSince(started) >= 3)
        #expect(c.peer.events("reset").count == 1)
        #expect(c.complaints().isEmpty, "\(c.complaints())")
    }

    /// A UART opened while the controller is mid-packet: the bytes before the Reset answer are discarded.
    @Test func garbageBeforeTheFirstPacketOnAPty() async throws {
        let c = try await DiversityController("v42", ["--pty", "--garbage"])
        defer { c.stop() }
        let transport = SerialTransport(path: try #require(c.ptyPath), baud: 1_000_000)
        #expect(!transport.flowControl)   // a pseudo-terminal: no RTS/CTS by default
        let host = LEHost(transport: transport, loop: EventLoop(label: "diversity.pty"), name: "ours")
        try await centralFlow(on: host, peer: c)
        #expect(transport.discardedBytes == 10)
        #expect(c.complaints().isEmpty, "\(c.complaints())")
    }

    /// The controller vanishes in the middle of a long write (as a USB dongle pulled out): the link fails, the
    /// manager goes to poweredOff, then poweredOn when the controller is back, and the flow works again.
    @Test func aControllerThatVanishesMidTransferComesBack() async throws {
        let c = try await DiversityController("v42", ["--drop-after-acl", "20"])
        defer { c.stop() }
        let host = try c.host()
        let central = DatabaseReader(name: "Diversity Peer")
        let writable = CBUUID(string: "6E400003-B5A3-F393-E0A9-E50E24DCCA9E")
        central.writes = [(writable, Data(repeating: 0x5A, count: 500), .withResponse)]
        central.manager = CBCentralManager(delegate: central, queue: central.queue, options: nil, host: host)
        try await c.peer.waitFor("vanished", seconds: 40)
        try await waitFor("powered off") { central.log.has("state:4") }
        #expect(central.log.all.contains { $0.hasPrefix("disconnected:") && $0 != "disconnected:nil" } || !central.log.has("connected"))
        try await waitFor("powered on again", seconds: 20) { central.log.count(prefix: "state:5") >= 2 }
        // Back: scan, connect and read again on the new controller.
        let again = DatabaseReader(name: "Diversity Peer")
        again.manager = CBCentralManager(delegate: again, queue: again.queue, options: nil, host: host)
        try await waitFor("database read after the controller came back", seconds: 40) { again.log.has("database read") }
        #expect(c.peer.events("overflow").isEmpty)
    }

    /// L2CAP credit-based channels on each kind of controller: our central sends 50 kB (20 kB through the
    /// single late buffer) through a Bumble echo
    /// server (bumble_l2cap.py on a controller of the same air) and gets it back, without ever overrunning the
    /// controller's buffers (one late buffer, shared BR/EDR buffers, 4.0 and 5.x).
    @Test(arguments: ["v40", "one-buffer", "le-buffer-0", "v5"])
    func l2capEchoOnEachKindOfController(_ profile: String) async throws {
        let c = try await DiversityController(profile, ["--peer", "external"])
        defer { c.stop() }
        let peerPort = try #require(try await c.peer.waitFor("peer_listening").first?["port"] as? Int)
        let bumble = try PeerProcess(
            script: "bumble_l2cap.py",
            arguments: [
                "--transport", "tcp-client:127.0.0.1:\(peerPort)", "--role", "server",
                "--psm", "0x0081", "--mtu", "1024", "--mps", "200",
            ])
        defer { bumble.stop() }
        try await bumble.waitFor("advertising")
        let ours = try ChannelPeer(port: c.port, name: "ours")
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
        ours.host.loop.sync { ours.attach(ch, echo: false) }
        // One 27-octet buffer freed 30 ms after each packet carries about 900 octets a second: 20 kB there.
        let data = (0..<(profile == "one-buffer" ? 20_000 : 50_000)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 7) }
        let sender = ChannelSender(channel: ch, data: data)
        ours.host.loop.sync { sender.start() }
        try await waitFor("data echoed", seconds: 90) { ours.host.loop.sync { ours.received(ch.localCID).count >= data.count } }
        #expect(ours.host.loop.sync { ours.received(ch.localCID) } == data)
        ours.host.loop.sync { ch.close() }
        let closed = try await bumble.waitFor("closed", seconds: 10)
        #expect(closed[0]["sha256"] as? String == sha256Hex(data))
        ours.host.loop.sync { ours.host.powerOff() }
        #expect(c.peer.events("overflow").isEmpty)
        #expect(c.complaints().isEmpty, "\(c.complaints())")
    }

    /// Pairing (LE Secure Connections, Just Works) with encryption on each kind of controller: our central
    /// reads an encrypted characteristic of bumble_pairing.py, pairs, reconnects and encrypts with the bond.
    @Test(arguments: ["v40", "v5", "no-address"])
    func pairingOnEachKindOfController(_ profile: String) async throws {
        let c = try await DiversityController(profile, ["--peer", "external"])
        defer { c.stop() }
        let peerPort = try #require(try await c.peer.waitFor("peer_listening").first?["port"] as? Int)
        let bumble = try PeerProcess(
            script: "bumble_pairing.py",
            arguments: [
                "--transport", "tcp-client:127.0.0.1:\(peerPort)", "--io", "none", "--sc", "true", "--keystore", tempPath("bumble-keys.json").path,
            ])
        defer { bumble.stop() }
        let advertised = try await bumble.waitFor("advertising")
        let bumbleAddress = try #require((advertised[0]["address"] as? String).flatMap { BluetoothAddress(string: String($0.prefix(17))) })
        let host = try c.host()
        let rec = SecurityRecorder()
        host.loop.sync {
            host.centralDelegate = rec
            host.peripheralDelegate = rec
            host.pairingAgent = RelayAgent(.noInputNoOutput, passkeyFile: tempPath("passkey"), bumble: { nil })
            host.bondStore = BondStore(fileURL: tempPath("bonds.json"))
            host.addSecurityObserver { _, e in rec.lock.withLock { rec.events.append(e) } }
            host.powerOn()
        }
        try await waitFor("power", seconds: 20) { host.loop.sync { host.powerState == .on } }
        host.loop.sync { host.connect(to: bumbleAddress) }
        try await waitFor("connection", seconds: 30) { rec.lastConnection != nil }
        let link = try #require(rec.lastConnection)
        #expect(readValue(try await readByUUID(host, link, encryptedUUID)) == [0x5E], "\(rec.failures)")
        #expect(rec.paired.first?.secureConnections == true)
        // A 5.x controller is asked for LE 2M on each link and answers (Command Status, then PHY Update Complete);
        // an older one is not asked.
        if profile == "v5" {
            try await waitFor("LE 2M", seconds: 10) { host.loop.sync { link.txPHY == 2 && link.rxPHY == 2 } }
        } else {
            #expect(host.loop.sync { link.txPHY } == 1)
        }
        try await bumble.waitFor("paired")
        host.loop.sync { link.disconnect() }
        try await waitFor("disconnect") { rec.lock.withLock { rec.disconnects } == 1 }
        host.loop.sync { host.connect(to: bumbleAddress) }
        try await waitFor("reconnection", seconds: 30) { rec.lock.withLock { rec.connections.count } == 2 }
        let again = try #require(rec.lastConnection)
        #expect(readValue(try await readByUUID(host, again, encryptedUUID)) == [0x5E])
        #expect(rec.paired.count == 1 && host.loop.sync { again.security.encrypted })
        host.loop.sync { host.powerOff() }
        #expect(c.complaints().isEmpty, "\(c.complaints())")
    }
}
