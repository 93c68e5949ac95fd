// Controller-to-host ACL flow control (Vol 4 Part E §4.2, §7.3.38–§7.3.40) between our host and the virtual
// controller, on a virtual clock: a peripheral host that stops reading is sent no more than its announced
// buffers, the controller holds the rest and slows the central down without losing anything, and everything
// arrives in order once the host reads again; the commands on the wire are counted (and decoded by tshark);
// a controller without the commands gets none of them; a disconnect with packets outstanding; and a host
// that acknowledges what it never got.
import Foundation
import Testing
import BLEWire
import BLEHCI
import BLEGATT
import BLETransport
import BLEVirtualRadio
@testable import BLEHost

/// Sits between a host and its controller: records the host's commands and, while closed, keeps everything
/// the controller sends (a host that stopped reading: its socket queue fills, it finishes nothing).
final class ReadGate: HCITransport, HCITransportSink, @unchecked Sendable {
    let inner: any HCITransport
    weak var sink: (any HCITransportSink)?
    var closed = false
    var held: [HCIPacket] = []
    var commands: [HCICommand] = []
    /// Command Complete events for Host Number Of Completed Packets (an error answer), as their status.
    var completionErrors: [UInt8] = []
    var aclToHost = 0
    var longestACL = 0
    var mostACLHeld = 0
    init(_ inner: any HCITransport) { self.inner = inner }
    var name: String { inner.name }
    func open(sink: any HCITransportSink) throws {
        self.sink = sink
        try inner.open(sink: self)
    }
    func close() { inner.close() }
    func send(_ packet: HCIPacket) {
        if packet.type == .command, let c = try? HCICommand.decode(packet) { commands.append(c) }
        inner.send(packet)
    }
    func transport(didReceive packet: HCIPacket) {
        if packet.type == .acl {
            aclToHost += 1
            longestACL = max(longestACL, packet.bytes.count - 4)
        }
        if packet.type == .event, case let .commandComplete(_, op, ret)? = try? HCIEvent.decode(packet), op == .hostNumberOfCompletedPackets {
            completionErrors.append(ret.first ?? 0xFF)
        }
        guard closed else { return sink?.transport(didReceive: packet) ?? () }
        held.append(packet)
        mostACLHeld = max(mostACLHeld, held.filter { $0.type == .acl }.count)
    }
    func transportDidClose(error: (any Error)?) { sink?.transportDidClose(error: error) }
    /// Reads again: what was kept goes to the host first.
    func reopen() {
        closed = false
        let kept = held
        held = []
        for p in kept { sink?.transport(didReceive: p) }
    }
    var completions: [CompletedPackets] {
        commands.flatMap { c -> [CompletedPackets] in
            if case let .hostNumberOfCompletedPackets(l) = c { return l }
            return []
        }
    }
}

/// A central and a peripheral host on a virtual-clock air; the peripheral reads through a `ReadGate`,
/// and a btsnoop capture of its side when asked.
final class GatedPair: @unchecked Sendable {
    let air = VirtualAir(loop: EventLoop(label: "flow.test", clock: .virtual))
    let central: LEHost
    let peripheral: LEHost
    let gate: ReadGate
    let peripheralController: VirtualController
    let c = CentralRecorder()
    let p = PeripheralRecorder()
    var writable: UInt16 = 0

    init(
        capture: String? = nil, peripheralSupportsFlowControl: Bool = true, peripheralWantsFlowControl: Bool = true,
        peripheralBuffers: HostBufferSize? = nil
    ) throws {
        central = try HostFactory.makeHost(on: air, name: "central", position: VirtualPosition(x: 0, y: 0))
        let controller = air.addController(position: VirtualPosition(x: 2, y: 0))
        controller.supportsHostFlowControl = peripheralSupportsFlowControl
        peripheralController = controller
        let inner: any HCITransport = try capture.map { SnoopingTransport(controller, writer: try BTSnoopWriter(path: $0)) } ?? controller
        gate = ReadGate(inner)
        peripheral = LEHost(transport: gate, loop: air.loop, name: "peripheral")
        peripheral.wantsControllerToHostFlowControl = peripheralWantsFlowControl
        if let peripheralBuffers { peripheral.announcedHostBuffers = peripheralBuffers }
        p.host = peripheral
        air.loop.sync {
            central.centralDelegate = c
            peripheral.peripheralDelegate = p
            central.powerOn()
            peripheral.powerOn()
        }
        air.loop.advance(by: .milliseconds(10))
        let handles = try air.loop.sync {
            try peripheral.addService(
                GATTServiceDefinition(
                    uuid: BluetoothUUID(0xFFF0),
                    characteristics: [
                        GATTCharacteristicDefinition(uuid: BluetoothUUID(0xFFF1), properties: [.writeWithoutResponse], permissions: .writeable, value: nil)
                    ]))
        }
        writable = handles.characteristics[0].value
        air.loop.sync { peripheral.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6])) }
        air.loop.sync { central.connect(to: BluetoothAddress(bytes: peripheralController.address.bytes)) }
        air.loop.advance(by: .milliseconds(300))
        #expect(c.connections.count == 1 && p.connections.count == 1)
    }

    var link: HostConnection { c.connections[0] }
    var peripheralHandle: UInt16 { p.connections[0].handle }

    /// Write Commands numbered from `next` while the central has room, letting virtual time pass between
    /// bursts, until `total` are sent or nothing moves for `idleRounds` rounds. Returns the next number.
    func flood(from next: Int, to total: Int, idleRounds: Int = 5) -> Int {
        var n = next
        var idle = 0
        while n < total && idle < idleRounds {
            let before = n
            air.loop.sync {
                while n < total && link.canSendWriteWithoutResponse {
                    link.writeWithoutResponse(handle: writable, value: [UInt8(n & 0xFF), UInt8(n >> 8), 0xAA, 0x55])
                    n += 1
                }
            }
            air.loop.advance(by: .milliseconds(5))
            idle = n == before ? idle + 1 : 0
        }
        return n
    }

    /// The sequence numbers of the Write Commands the peripheral's app got, in order.
    var received: [Int] {
        p.writes.filter { !$0.needsResponse }.flatMap(\.items).map { Int($0.value[0]) | Int($0.value[1]) << 8 }
    }
}

@Suite struct ControllerToHostFlowTests {
    static let buffers = Int(LEHost.hostACLBuffers.totalNumACLDataPackets)

    @Test func startUpAnnouncesTheHostsBuffersAndTurnsFlowControlOn() throws {
        let t = try GatedPair()
        let sent = t.gate.commands
        let hbs = try #require(sent.firstIndex(of: .hostBufferSize(HostBufferSize(aclDataPacketLength: 1021, totalNumACLDataPackets: 64))))
        let on = try #require(sent.firstIndex(of: .setControllerToHostFlowControl(0x01)))
        #expect(hbs < on)
        #expect(t.air.loop.sync { t.peripheral.controllerToHostFlowControl && t.peripheral.controllerInfo?.controllerToHostFlowControl == true })
        #expect(t.air.loop.sync { t.peripheralController.hostFlowStatus.enabled && t.peripheralController.hostFlowStatus.hostBuffers == 64 })
        // Each ACL packet is reported back: a transport must hand them over as the controller sent them.
        #expect(!t.peripheral.acceptsMergedACLContinuations)
    }

    /// The motivating case (issue 27, run 2): a peer floods a peripheral whose host has fallen behind.
    @Test func aHostThatStopsReadingGetsNoMoreThanItsBuffersAndLosesNothing() throws {
        let t = try GatedPair()
        t.gate.closed = true
        let stalled = t.flood(from: 0, to: 1000)
        let status = t.air.loop.sync { t.peripheralController.hostFlowStatus }
        // Exactly the announced buffers went to the host; the controller holds its own buffers' worth and the
        // central's controller keeps at most its host's 8 credits; the central's app was told to wait.
        #expect(t.gate.mostACLHeld == Self.buffers)
        #expect(status.outstanding[t.peripheralHandle] == Self.buffers)
        #expect(status.held == t.air.loop.sync { t.peripheralController.heldACLLimit })
        #expect(status.waitingAtPeers > 0 && status.waitingAtPeers <= 8)
        #expect(stalled < 1000)
        #expect(!t.air.loop.sync { t.link.canSendWriteWithoutResponse })
        // Stuck for a long while: nothing grows, the link stays up.
        t.air.loop.advance(by: .seconds(30))
        #expect(t.air.loop.sync { t.peripheralController.hostFlowStatus } == status)
        #expect(t.gate.mostACLHeld == Self.buffers)
        #expect(t.c.disconnects.isEmpty && t.p.disconnects.isEmpty)
        // Reading again: the rest flows, and every write arrives once, in order.
        t.air.loop.sync { t.gate.reopen() }
        let sent = t.flood(from: stalled, to: 1000)
        #expect(sent == 1000)
        t.air.loop.advance(by: .milliseconds(100))
        #expect(t.received == Array(0..<1000))
        let after = t.air.loop.sync { t.peripheralController.hostFlowStatus }
        #expect(after.held == 0 && after.waitingAtPeers == 0 && (after.outstanding[t.peripheralHandle] ?? 0) == 0)
        // Every ACL packet the controller sent was reported finished, for the link's handle only, and never
        // more than the buffers in one report.
        let reported = t.gate.completions
        #expect(reported.allSatisfy { $0.handle == t.peripheralHandle && $0.count >= 1 && Int($0.count) <= Self.buffers })
        #expect(reported.reduce(0) { $0 + Int($1.count) } == t.gate.aclToHost)
    }

    /// The capture of the peripheral's side, decoded by Wireshark's dissector: Host Buffer Size and the enable
    /// as sent, and the Host Number Of Completed Packets counts adding up to the ACL packets received.
    @Test func theCountsOnTheWireAddUpAndTsharkReadsThem() throws {
        let path = NSTemporaryDirectory() + "ocb-flow-\(UUID().uuidString.prefix(8)).btsnoop"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let t = try GatedPair(capture: path)
        t.gate.closed = true
        let stalled = t.flood(from: 0, to: 300)
        t.air.loop.sync { t.gate.reopen() }
        #expect(t.flood(from: stalled, to: 300) == 300)
        t.air.loop.advance(by: .milliseconds(100))
        #expect(t.received == Array(0..<300))
        t.air.loop.sync { t.link.disconnect() }
        t.air.loop.advance(by: .milliseconds(50))
        // Our own reading of the capture.
        let records = try BTSnoopReader.read(path: path)
        let acl = records.filter { $0.direction == .controllerToHost && $0.packet.type == .acl }
        let commands = records.filter { $0.direction == .hostToController && $0.packet.type == .command }.compactMap { try? HCICommand.decode($0.packet) }
        var reported = 0
        for case let .hostNumberOfCompletedPackets(list) in commands { reported += list.reduce(0) { $0 + Int($1.count) } }
        #expect(acl.count >= 300)
        #expect(reported == acl.count)
        guard let tshark = ["/usr/bin/tshark", "/usr/local/bin/tshark"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            Issue.record("tshark is missing: scripts/test installs it (apt-get install tshark)")
            return
        }
        func fields(_ filter: String, _ names: [String]) throws -> [[String]] {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: tshark)
            p.arguments = ["-r", path, "-Y", filter, "-T", "fields"] + names.flatMap { ["-e", $0] }
            let out = Pipe()
            p.standardOutput = out
            p.standardError = FileHandle.nullDevice
            try p.run()
            let data = out.fileHandleForReading.readDataToEndOfFile()
            p.waitUntilExit()
            return String(decoding: data, as: UTF8.self).split(separator: "\n").map { $0.split(separator: "\t", omittingEmptySubsequences: false).map(String.init) }
        }
        /// tshark prints some fields in hex ("0x01"), others in decimal.
        func number(_ s: String) -> Int? { s.hasPrefix("0x") ? Int(s.dropFirst(2), radix: 16) : Int(s) }
        let sizes = try fields("bthci_cmd.opcode == 0x0c33", ["bthci_cmd.max_data_length_acl", "bthci_cmd.max_data_num_acl"])
        #expect(sizes.map { $0.map(number) } == [[1021, 64]], "\(sizes)")
        let enables = try fields("bthci_cmd.opcode == 0x0c31", ["bthci_cmd.flow_contr_enable"])
        #expect(enables.map { $0.first.flatMap(number) } == [1], "\(enables)")
        let hnocp = try fields("bthci_cmd.opcode == 0x0c35", ["bthci_cmd.num_handles", "bthci_cmd.connection_handle", "bthci_cmd.num_compl_packets"])
        #expect(!hnocp.isEmpty)
        var decoded = 0
        for row in hnocp {
            #expect(row.count == 3 && number(row[0]) == 1, "\(row)")
            #expect(row.count == 3 && number(row[1]) == Int(t.peripheralHandle), "\(row)")
            decoded += row.count == 3 ? number(row[2]) ?? 0 : 0
        }
        #expect(decoded == acl.count)
        let bad = try fields("_ws.malformed || _ws.expert.severity >= error", ["frame.number"])
        #expect(bad.isEmpty, "tshark flagged frames \(bad.prefix(5))")
    }

    @Test func aControllerWithoutTheCommandsGetsNoneAndWorksAsBefore() throws {
        let t = try GatedPair(peripheralSupportsFlowControl: false)
        #expect(!t.gate.commands.contains { [.hostBufferSize, .setControllerToHostFlowControl, .hostNumberOfCompletedPackets].contains($0.opcode) })
        #expect(t.air.loop.sync { !t.peripheral.controllerToHostFlowControl })
        // Without flow control the host only recombines: continuations may come in the packet before them.
        #expect(t.peripheral.acceptsMergedACLContinuations)
        #expect(t.flood(from: 0, to: 500) == 500)
        t.air.loop.advance(by: .milliseconds(100))
        #expect(t.received == Array(0..<500))
        #expect(t.gate.completions.isEmpty)
    }

    @Test func turnedOffByTheHostsOptionNothingIsSent() throws {
        let t = try GatedPair(peripheralWantsFlowControl: false)
        #expect(!t.gate.commands.contains { [.hostBufferSize, .setControllerToHostFlowControl, .hostNumberOfCompletedPackets].contains($0.opcode) })
        #expect(t.air.loop.sync { !t.peripheral.controllerToHostFlowControl && !t.peripheralController.hostFlowStatus.enabled })
        #expect(t.flood(from: 0, to: 200) == 200)
        t.air.loop.advance(by: .milliseconds(100))
        #expect(t.received == Array(0..<200))
    }

    /// The link drops while the host has packets outstanding and the controller holds more: the controller
    /// forgets the handle's count and held data, and the host reports nothing for that handle afterwards.
    @Test func aDisconnectWithPacketsOutstandingForgetsThem() throws {
        let t = try GatedPair()
        let handle = t.peripheralHandle
        t.gate.closed = true
        _ = t.flood(from: 0, to: 400)
        #expect(t.air.loop.sync { t.peripheralController.hostFlowStatus.outstanding[handle] } == Self.buffers)
        // The central ends the link; the peripheral's controller frees the handle at Disconnection Complete.
        t.air.loop.sync { t.link.disconnect() }
        t.air.loop.advance(by: .milliseconds(50))
        let status = t.air.loop.sync { t.peripheralController.hostFlowStatus }
        #expect(status.outstanding.isEmpty && status.held == 0 && status.waitingAtPeers == 0)
        let reportsBefore = t.gate.completions.count
        // The host reads what it kept (packets, then the Disconnection Complete): no report for the dead handle.
        t.air.loop.sync { t.gate.reopen() }
        t.air.loop.advance(by: .milliseconds(50))
        #expect(t.p.disconnects.count == 1)
        #expect(t.gate.completions.count == reportsBefore)
        // A new link flows normally: its packets are counted afresh.
        t.air.loop.sync { t.peripheral.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6])) }
        t.air.loop.sync { t.central.connect(to: BluetoothAddress(bytes: t.peripheralController.address.bytes)) }
        t.air.loop.advance(by: .milliseconds(300))
        #expect(t.c.connections.count == 2)
        let before = t.received.count
        t.c.connections.removeFirst()
        #expect(t.flood(from: 0, to: 100) == 100)
        t.air.loop.advance(by: .milliseconds(100))
        #expect(Array(t.received[before...]) == Array(0..<100))
        #expect(t.air.loop.sync { t.peripheralController.hostFlowStatus.outstanding.values.reduce(0, +) } == 0)
    }

    /// A host that reports what it never got, for handles that are not links, in a command of the wrong
    /// length: the controller answers Invalid HCI Command Parameters as §7.3.40 says, applies only what is
    /// right, never believes the host has more buffers than it announced, and nothing crashes or stops.
    @Test func aHostileHostsReportsAreRefusedAndChangeNothingWrong() throws {
        let t = try GatedPair()
        let handle = t.peripheralHandle
        func inject(_ bytes: [UInt8]) {
            t.air.loop.sync { t.peripheralController.send(HCIPacket(type: .command, bytes: [0x35, 0x0C, UInt8(bytes.count)] + bytes)) }
            t.air.loop.advance(by: .milliseconds(1))
        }
        t.gate.closed = true
        let stalled = t.flood(from: 0, to: 200)
        #expect(t.air.loop.sync { t.peripheralController.hostFlowStatus }.outstanding[handle] == Self.buffers)
        let h0 = UInt8(handle & 0xFF), h1 = UInt8(handle >> 8)
        // Two handles announced, one given (a bad length): refused whole.
        inject([2, h0, h1, 1, 0])
        // A handle that is no link: refused, nothing counted.
        inject([1, 0x99, 0x0E, 5, 0])
        #expect(t.gate.completionErrors == [0x12, 0x12])
        #expect(t.air.loop.sync { t.peripheralController.hostFlowStatus }.outstanding[handle] == Self.buffers)
        #expect(t.gate.held.filter { $0.type == .acl }.count == Self.buffers)
        // More than outstanding: refused, and clamped to what was outstanding. The host lied about the 64 it
        // still holds, so the controller sends again, but never more than the announced 64 outstanding.
        inject([1, h0, h1, 0xFF, 0xFF])
        t.air.loop.advance(by: .milliseconds(20))
        #expect(t.gate.completionErrors == [0x12, 0x12, 0x12])
        let after = t.air.loop.sync { t.peripheralController.hostFlowStatus }
        let outstanding = after.outstanding[handle] ?? 0
        #expect(outstanding > 0 && outstanding <= Self.buffers)
        #expect(t.gate.held.filter { $0.type == .acl }.count == Self.buffers + outstanding)
        // The host reads again: it and the link go on, and everything arrives once, in order.
        t.air.loop.sync { t.gate.reopen() }
        #expect(t.flood(from: stalled, to: 200) == 200)
        t.air.loop.advance(by: .milliseconds(100))
        #expect(t.received == Array(0..<200))
        #expect(t.c.disconnects.isEmpty && t.p.disconnects.isEmpty)
    }

    /// A controller that answers Host Number Of Completed Packets with an error while a real command waits:
    /// the error is not taken for the waiting command's answer.
    @Test func anErrorAnswerToAReportDoesNotAnswerTheCommandInFlight() throws {
        let t = try GatedPair()
        var rssi: Result<Int8, HostError>?
        t.air.loop.sync {
            t.c.connections[0].readRSSI { rssi = $0 }
            let bogus = HCIEvent.commandComplete(numHCICommandPackets: 1, opcode: .hostNumberOfCompletedPackets, returnParameters: [0x12]).encode()
            t.gate.transport(didReceive: bogus)
        }
        t.air.loop.advance(by: .milliseconds(10))
        guard case .success = rssi else { Issue.record("Read RSSI: \(String(describing: rssi))"); return }
        #expect(t.flood(from: 0, to: 100) == 100)
        t.air.loop.advance(by: .milliseconds(50))
        #expect(t.received == Array(0..<100))
    }

    /// Start-up against scripted controllers: the commands go only where all three are listed, not to
    /// rootcanal (which lists them and aborts), and a refusal at either step leaves flow control off.
    @Test func startUpSendsTheCommandsOnlyWhereTheyWork() {
        func start(_ configure: (ScriptedController) -> Void) -> (LEHost, [HCIOpcode]) {
            let loop = EventLoop(label: "flow.startup", clock: .virtual)
            let c = ScriptedController(label: "f", loop: loop)
            c.commands = [.readBufferSize, .leReadLocalSupportedFeatures, .leSetRandomAddress]
            configure(c)
            let host = LEHost(transport: c, loop: loop, name: "f")
            loop.sync { host.powerOn() }
            loop.advance(by: .seconds(1))
            #expect(loop.sync { host.powerState } == .on)
            return (host, c.sent.map(\.opcode))
        }
        let all: Set<SupportedCommand> = [.setControllerToHostFlowControl, .hostBufferSize, .hostNumberOfCompletedPackets]
        let flowOps: [HCIOpcode] = [.hostBufferSize, .setControllerToHostFlowControl]
        // Listed: both sent, in order, and flow control is on.
        let (on, onSent) = start { $0.commands.formUnion(all) }
        #expect(onSent.filter(flowOps.contains) == flowOps)
        #expect(on.loop.sync { on.controllerToHostFlowControl })
        // Two of three listed, or none: nothing sent.
        for partial in [all.subtracting([.hostNumberOfCompletedPackets]), []] {
            let (h, sent) = start { $0.commands.formUnion(partial) }
            #expect(sent.filter(flowOps.contains).isEmpty)
            #expect(h.loop.sync { !h.controllerToHostFlowControl })
        }
        // rootcanal (Google, 0x00E0) lists all three: nothing sent.
        let (rc, rcSent) = start {
            $0.commands.formUnion(all); $0.company = 0x00E0
        }
        #expect(rcSent.filter(flowOps.contains).isEmpty)
        #expect(rc.loop.sync { !rc.controllerToHostFlowControl })
        // Refused at either step: off, and start-up goes on.
        let (r1, r1Sent) = start {
            $0.commands.formUnion(all); $0.refuses = [.setControllerToHostFlowControl]
        }
        #expect(r1Sent.filter(flowOps.contains) == flowOps)
        #expect(r1.loop.sync { !r1.controllerToHostFlowControl && r1.controllerInfo?.controllerToHostFlowControl == false })
        let (r2, r2Sent) = start {
            $0.commands.formUnion(all); $0.refuses = [.hostBufferSize]
        }
        #expect(r2Sent.filter(flowOps.contains) == [.hostBufferSize])
        #expect(r2.loop.sync { !r2.controllerToHostFlowControl })
    }

    /// A host with buffers smaller than the packets its peer sends: the controller fragments to the announced
    /// length (the rest as continuing fragments), counts every fragment, and never has more than the announced
    /// number outstanding; the host recombines and reports each fragment.
    @Test func theControllerFragmentsToTheHostsBufferLength() throws {
        let t = try GatedPair(peripheralBuffers: HostBufferSize(aclDataPacketLength: 10, totalNumACLDataPackets: 4))
        #expect(t.air.loop.sync { t.peripheralController.hostFlowStatus.hostBuffers } == 4)
        t.gate.closed = true
        let stalled = t.flood(from: 0, to: 300)
        #expect(t.gate.mostACLHeld == 4)
        t.air.loop.sync { t.gate.reopen() }
        #expect(t.flood(from: stalled, to: 300) == 300)
        t.air.loop.advance(by: .milliseconds(100))
        #expect(t.received == Array(0..<300))
        // 4-octet values: ATT 7 + L2CAP 4 = 11 octets per Write Command, so two fragments each (10 + 1).
        #expect(t.gate.aclToHost == 600)
        #expect(t.gate.longestACL == 10)
        #expect(t.gate.completions.reduce(0) { $0 + Int($1.count) } == 600)
        #expect(t.gate.completions.allSatisfy { $0.count <= 4 })
    }
}

/// The host dispatches each ACL packet to its connection without retaining it (`handleACL`): a connection the
/// dispatch itself closes must live until the dispatch is done with it, then go.
@Suite struct ACLDispatchLifetimeTests {
    @Test func aConnectionClosedWhileItsPacketIsDispatchedLivesUntilTheDispatchEnds() throws {
        // Controller-to-host flow control on: after the dispatch the host still reports the packet finished on
        // the connection it went to.
        let pair = try GatedPair()
        let handle = pair.peripheralHandle
        pair.p.connections.removeAll()   // nothing of the test's holds the connection
        weak var closed: HostConnection?
        var aliveAfterClose = false
        var retiredDuringDispatch = 0
        pair.p.onWrite = { host, request in
            closed = host.connections[request.connectionHandle]
            // The link goes down while its packet is being dispatched: the controller's Disconnection Complete
            // is handled at once, as one that arrived in the same read would be.
            host.transport(didReceivePackets: [HCIEvent.disconnectionComplete(status: .success, handle: request.connectionHandle, reason: .remoteUserTerminated).encode()])
            aliveAfterClose = closed != nil && host.connections[request.connectionHandle] == nil
            retiredDuringDispatch = host.retiredACLConnections.count
        }
        _ = pair.flood(from: 0, to: 1)
        #expect(pair.p.writes.count == 1)
        #expect(pair.p.disconnects == [.remoteUserTerminated])
        #expect(aliveAfterClose, "the closed connection was kept for the rest of the dispatch")
        #expect(retiredDuringDispatch == 1)
        let (retired, last) = pair.air.loop.sync { (pair.peripheral.retiredACLConnections.count, pair.peripheral.lastACLConnection) }
        #expect(retired == 0 && last == nil)
        #expect(closed == nil, "the connection was let go once the dispatch ended (handle \(handle))")
    }
}
