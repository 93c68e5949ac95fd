// Controller start-up against a scripted controller on virtual time: the steps follow what the controller
// reports (supported commands, features, buffers, address), a slow reset is waited for, a reset that never
// comes fails start-up with the reason, and the optional commands are sent only where they are listed.
import Foundation
import Testing
import BLEWire
import BLEHCI
import BLEHost
import BLETransport

/// A controller that answers the host's commands from a profile, on the host's loop (virtual clock).
final class ScriptedController: HCITransport, @unchecked Sendable {
    var name: String { "scripted:\(label)" }
    let label: String
    let loop: EventLoop
    weak var sink: (any HCITransportSink)?
    var sent: [HCICommand] = []
    var resetDelay: LoopTime = 0
    var hciVersion: UInt8 = 8
    var company: UInt16 = 0xFFFF
    var address: [UInt8] = [1, 2, 3, 4, 5, 6]
    var leBuffer: (UInt16, UInt8) = (27, 4)
    var sharedBuffer: (UInt16, UInt16) = (310, 6)
    var leFeatures: LEFeatures = [.encryption]
    var commands: Set<SupportedCommand> = []
    var zephyr = false
    var ignoresVendor = false
    /// Commands answered Unknown HCI Command although the map may list them (rootcanal's flow control).
    var refuses: Set<HCIOpcode> = []

    init(label: String, loop: EventLoop) { self.label = label; self.loop = loop }

    func open(sink: any HCITransportSink) throws { self.sink = sink }
    func close() {}

    /// Whether the host may hand ACL fragments over as H4 bytes (`HCITransport.takesH4Bytes`; the default framing
    /// of `send(h4:packets:)` turns them back into packets here).
    var takesH4Bytes = false
    /// The ACL packets the host has sent, when `keepsACL` (in order).
    var keepsACL = false
    var acl: [HCIPacket] = []
    /// ACL packets the host has sent.
    var aclSent = 0
    /// Calls to `send` and `send(batch:)` that carried ACL packets (a stream transport writes each call's packets
    /// together).
    var aclSends = 0

    func send(batch packets: [HCIPacket]) {
        if packets.contains(where: { $0.type == .acl }) { aclSends += 1 }
        for p in packets { deliver(p) }
    }

    func send(_ packet: HCIPacket) {
        if packet.type == .acl { aclSends += 1 }
        deliver(packet)
    }

    private func deliver(_ packet: HCIPacket) {
        if packet.type == .acl { aclSent += 1 }
        if packet.type == .acl && keepsACL { acl.append(packet) }
        guard packet.type == .command, let c = try? HCICommand.decode(packet) else { return }
        sent.append(c)
        let op = c.opcode
        func complete(_ p: [UInt8], after delay: LoopTime = 0) {
            let e = HCIEvent.commandComplete(numHCICommandPackets: 1, opcode: op, returnParameters: p).encode()
            _ = loop.schedule(after: delay) { [weak self] in self?.sink?.transport(didReceive: e) }
        }
        var map = [UInt8](repeating: 0, count: 64)
        for s in commands { map[s.octet] |= 1 << s.bit }
        if refuses.contains(op) { return complete([0x01]) }
        switch c {
        case .reset: complete([0], after: resetDelay)
        case .readLocalVersionInformation:
            complete(
                ReadLocalVersionReturn(
                    status: .success, hciVersion: hciVersion, hciSubversion: 1, lmpVersion: hciVersion,
                    companyIdentifier: company, lmpSubversion: 1
                ).encode())
        case .readLocalSupportedCommands: complete([0] + map)
        case .readBDADDR: complete([0] + address)
        case .leReadBufferSize: complete(LEReadBufferSizeReturn(status: .success, aclDataPacketLength: leBuffer.0, totalNumACLDataPackets: leBuffer.1).encode())
        case .readBufferSize:
            complete(
                ReadBufferSizeReturn(
                    status: .success, aclDataPacketLength: sharedBuffer.0, syncDataPacketLength: 0,
                    totalNumACLDataPackets: sharedBuffer.1, totalNumSyncDataPackets: 0
                ).encode())
        case .leReadLocalSupportedFeatures: complete(ReadLocalSupportedFeaturesReturn(status: .success, features: leFeatures.rawValue).encode())
        case .leReadMaximumDataLength:
            complete(
                LEReadMaximumDataLengthReturn(status: .success, supportedMaxTxOctets: 200, supportedMaxTxTime: 2120, supportedMaxRxOctets: 251, supportedMaxRxTime: 2120).encode())
        case .leReadMaximumAdvertisingDataLength: complete(LEReadMaximumAdvertisingDataLengthReturn(status: .success, maxLength: 1650).encode())
        case .leReadNumberOfSupportedAdvertisingSets: complete([0, 4])
        case let .unknown(op, _) where op.ogf == 0x3F:
            if ignoresVendor { return }
            guard zephyr else { return complete([0x01]) }
            if op == .zephyrReadVersionInformation {
                complete(
                    ZephyrReadVersionReturn(
                        status: .success, hardwarePlatform: 2, hardwareVariant: 2, firmwareVariant: 1, firmwareVersion: 3, firmwareRevision: 0, firmwareBuild: 0
                    ).encode())
            } else if op == .zephyrReadSupportedCommands {
                var m = [UInt8](repeating: 0, count: 64); m[0] = 7; m[1] = 1; complete([0] + m)
            } else if op == .zephyrReadStaticAddresses {
                complete([0, 1, 0x11, 0x22, 0x33, 0x44, 0x55, 0xC6] + [UInt8](repeating: 9, count: 16))
            } else {
                complete([0x01])
            }
        default: complete([0])
        }
    }

    /// A connection as central completes (for the fast-link requests that follow it).
    func connect(handle: UInt16) {
        let e = HCIEvent.le(
            .connectionComplete(
                LEConnectionComplete(
                    status: .success, connectionHandle: handle, role: 0, peerAddressType: 0,
                    peerAddress: BluetoothAddress(bytes: [9, 9, 9, 9, 9, 9]), connectionInterval: 24,
                    peripheralLatency: 0, supervisionTimeout: 500, centralClockAccuracy: 0))
        ).encode()
        loop.execute { [weak self] in self?.sink?.transport(didReceive: e) }
    }
}

@Suite struct ControllerStartupTests {
    func start(_ configure: (ScriptedController) -> Void, directory: URL? = nil, advance: LoopTime = .seconds(1)) -> (LEHost, ScriptedController) {
        let loop = EventLoop(label: "startup", clock: .virtual)
        let c = ScriptedController(label: "t", loop: loop)
        configure(c)
        let host = LEHost(transport: c, loop: loop, name: "t")
        loop.sync {
            host.bondStoreDirectory = directory; host.powerOn()
        }
        loop.advance(by: advance)
        return (host, c)
    }

    static let v40: Set<SupportedCommand> = [.readBufferSize, .leReadLocalSupportedFeatures, .leSetRandomAddress]
    static let v5: Set<SupportedCommand> = v40.union([
        .leSetDataLength, .leReadMaximumDataLength, .leSetPHY, .leSetAdvertisingSetRandomAddress,
        .leSetExtendedAdvertisingParameters, .leSetExtendedAdvertisingData, .leSetExtendedScanResponseData, .leSetExtendedAdvertisingEnable,
        .leReadMaximumAdvertisingDataLength, .leReadNumberOfSupportedAdvertisingSets, .leClearAdvertisingSets,
        .leSetExtendedScanParameters, .leSetExtendedScanEnable, .leExtendedCreateConnection,
    ])

    @Test func aBluetooth40ControllerGetsNoOptionalCommands() {
        let (host, c) = start {
            $0.commands = Self.v40; $0.hciVersion = 6
        }
        #expect(host.loop.sync { host.powerState } == .on)
        c.connect(handle: 0x40)
        host.loop.advance(by: .seconds(1))
        let ops = c.sent.map(\.opcode)
        #expect(!ops.contains(.leSetDataLength) && !ops.contains(.leSetPHY) && !ops.contains(.leReadMaximumDataLength))
        #expect(!ops.contains { $0.ogf == 0x3F })   // a public address: no vendor commands
        // Scanning and advertising use the legacy commands.
        host.loop.sync {
            host.startScanning(); host.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6]))
        }
        host.loop.advance(by: .seconds(1))
        #expect(c.sent.contains { $0.opcode == .leSetScanEnable } && c.sent.contains { $0.opcode == .leSetAdvertisingEnable })
        #expect(!c.sent.contains { $0.opcode == .leSetExtendedScanEnable || $0.opcode == .leSetExtendedAdvertisingEnable })
    }

    @Test func aBluetooth5ControllerGetsTheExtendedCommandsOnly() {
        let (host, c) = start {
            $0.commands = Self.v5; $0.hciVersion = 11; $0.leFeatures = [.encryption, .dataPacketLengthExtension, .le2MPHY, .extendedAdvertising]
        }
        #expect(host.loop.sync { host.usesExtendedAdvertising })
        #expect(host.controllerInfo?.maxAdvertisingDataLength == 1650 && host.controllerInfo?.advertisingSets == 4)
        c.connect(handle: 0x40)
        host.loop.advance(by: .seconds(1))
        // DLE up to what the controller can send (200), and LE 2M.
        #expect(
            c.sent.contains {
                if case let .leSetDataLength(_, o, _) = $0 { return o == 200 }; return false
            })
        #expect(c.sent.contains { $0.opcode == .leSetPHY })
        c.sent.removeAll()
        var failure: HostError?? = .none
        host.loop.sync {
            host.startScanning()
            host.startAdvertising(AdvertisingConfiguration(data: Array(repeating: 0xAA, count: 300), connectable: true)) { failure = .some($0) }
            host.connect(to: BluetoothAddress(bytes: [1, 1, 1, 1, 1, 1]))
        }
        host.loop.advance(by: .seconds(1))
        #expect(failure == .some(nil))
        let ops = c.sent.map(\.opcode)
        #expect(ops.contains(.leSetExtendedScanParameters) && ops.contains(.leSetExtendedScanEnable) && ops.contains(.leExtendedCreateConnection))
        // 300 bytes of data: extended PDUs, in two fragments.
        let data = c.sent.compactMap {
            if case let .leSetExtendedAdvertisingData(d) = $0 { return d }; return nil
        }
        #expect(data.map(\.operation) == [.first, .last] && data.map(\.data.count) == [251, 49])
        let legacy: [HCIOpcode] = [
            .leSetScanParameters, .leSetScanEnable, .leSetAdvertisingParameters, .leSetAdvertisingData,
            .leSetAdvertisingEnable, .leCreateConnection,
        ]
        #expect(!ops.contains { legacy.contains($0) })
    }

    @Test func extendedReportsInPiecesArePutBackTogether() {
        let (host, c) = start {
            $0.commands = Self.v5; $0.leFeatures = [.extendedAdvertising]
        }
        final class Reports: HostCentralDelegate {
            var all: [AdvertisingReport] = []
            func host(_ host: LEHost, didReceive report: AdvertisingReport) { all.append(report) }
            func host(_ host: LEHost, didConnect connection: HostConnection) {}
            func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {}
            func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {}
            func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {}
        }
        let r = Reports()
        host.loop.sync {
            host.centralDelegate = r; host.startScanning()
        }
        host.loop.advance(by: .milliseconds(100))
        let a = BluetoothAddress(bytes: [1, 2, 3, 4, 5, 0xC0], type: .random)
        func report(_ status: UInt16, _ data: [UInt8]) {
            let e = HCIEvent.le(
                .extendedAdvertisingReport([
                    LEExtendedAdvertisingReport(
                        eventType: LEExtendedAdvertisingEventType(rawValue: 0x01 | status << 5), addressType: 1, address: a, secondaryPHY: 2,
                        advertisingSID: 1, rssi: -50, data: data)
                ])
            ).encode()
            host.loop.sync { host.transport(didReceive: e) }
        }
        report(1, Array(0..<200))
        report(1, Array(200..<250))
        report(0, [7, 7])
        #expect(r.all.count == 1)
        #expect(r.all.first?.data == Array(0..<250) + [7, 7] && r.all.first?.kind == .connectableUndirected)
        _ = c
    }

    @Test func leBufferSizeZeroFallsBackToReadBufferSize() {
        let (host, _) = start {
            $0.commands = Self.v40; $0.leBuffer = (0, 0); $0.sharedBuffer = (310, 6)
        }
        #expect(host.loop.sync { (host.aclBufferSize, host.aclBufferCount) } == (310, 6))
        #expect(host.controllerInfo?.sharedACLBuffers == true)
    }

    @Test func aSlowResetIsWaitedForAndANeverEndingOneFails() {
        let (slow, _) = start(
            {
                $0.commands = Self.v40; $0.resetDelay = .seconds(3)
            }, advance: .seconds(4))
        #expect(slow.loop.sync { slow.powerState } == .on)
        let (stuck, c) = start(
            {
                $0.commands = Self.v40; $0.resetDelay = .seconds(60)
            }, advance: .milliseconds(10_500))
        let state = stuck.loop.sync { stuck.powerState }
        guard case let .unsupported(why) = state else { Issue.record("state \(state)"); return }
        #expect(why.contains("Reset"))
        #expect(c.sent.first == .reset)
    }

    @Test func noPublicAddressOnAZephyrControllerUsesItsFactoryAddress() {
        let (host, c) = start {
            $0.commands = Self.v40; $0.hciVersion = 9; $0.company = 0x05F1; $0.address = [0, 0, 0, 0, 0, 0]; $0.zephyr = true
        }
        let expected = BluetoothAddress(bytes: [0x11, 0x22, 0x33, 0x44, 0x55, 0xC6], type: .random)
        #expect(host.localAddress == expected)
        #expect(c.sent.contains(.leSetRandomAddress(expected)))
        #expect(host.loop.sync { host.currentPrivateAddress } == expected)
        #expect(host.controllerInfo?.addressKind == .zephyrStatic)
    }

    @Test func noPublicAddressAndNoVendorCommandsKeepsAGeneratedAddressPerController() throws {
        let dir = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("ocb-startup-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        // A 5.0 controller that never answers vendor commands: the probe times out after 1 s and start-up goes on.
        let (first, c) = start(
            {
                $0.commands = Self.v40; $0.hciVersion = 9; $0.address = [0, 0, 0, 0, 0, 0]; $0.ignoresVendor = true
            },
            directory: dir, advance: .seconds(3))
        #expect(first.loop.sync { first.powerState } == .on)
        let a = first.localAddress
        #expect(a.type == .random && a.randomKind == .staticAddress)
        #expect(c.sent.contains(.unknown(opcode: .zephyrReadVersionInformation, parameters: [])))
        #expect(first.loop.sync { first.bondStore.fileURL?.lastPathComponent } == "bonds-\(a.string.replacingOccurrences(of: ":", with: "")).json")
        let (second, _) = start(
            {
                $0.commands = Self.v40; $0.address = [0, 0, 0, 0, 0, 0]
            }, directory: dir)
        #expect(second.localAddress == a)
        // Privacy off again returns to the static address, not to 00:00:00:00:00:00.
        second.loop.sync {
            second.enablePrivacy(); second.disablePrivacy()
        }
        second.loop.advance(by: .milliseconds(100))
        #expect(second.loop.sync { second.currentPrivateAddress } == a)
    }
}
