// Controller-to-host flow control against rootcanal 1.10: it lists Set Controller To Host Flow Control, Host
// Buffer Size and Host Number Of Completed Packets in its supported commands (octet 10, bits 5–7) but does not
// implement flow control. In its default (strict) mode it aborts on Set Controller To Host Flow Control
// ("Unimplemented command"), and with strict off it answers Unknown HCI Command. So our host leaves flow control
// off on rootcanal (`ControllerInfo.listsFlowControlItLacks`, by its company identifier 0x00E0), and works
// there as before. If a later rootcanal implements it, the first test fails and the quirk should go.
import Foundation
import Testing
import BLEWire
import BLEHCI
import BLEGATT
import BLETransport
@testable import BLEHost

/// One delegate for both roles: connections, and the Write Commands the peripheral gets.
final class FloodRecorder: HostCentralDelegate, HostPeripheralDelegate, @unchecked Sendable {
    var connections: [HostConnection] = []
    var writes: [HostWriteRequest] = []
    func host(_ host: LEHost, didReceive report: AdvertisingReport) {}
    func host(_ host: LEHost, didConnect connection: HostConnection) { connections.append(connection) }
    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {}
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {}
    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {}
    func host(_ host: LEHost, didReceiveRead request: HostReadRequest) {}
    func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) {
        writes.append(request)
        if request.needsResponse { host.respondToWrite(id: request.id, error: nil) }
    }
    func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {}
    func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {}
}

@Suite(.serialized) struct RootCanalFlowControlTests {
    /// Raw HCI over TCP to a non-strict rootcanal: what it lists and what it answers.
    @Test func rootcanalListsFlowControlButAnswersUnknownCommand() throws {
        try Interop.requireReady()
        let ports = try (0..<5).map { _ in try Interop.freePort() }
        let rc = Process()
        rc.executableURL = URL(fileURLWithPath: Interop.python)
        rc.arguments = Interop.guarded([
            try Interop.rootcanalBinary(), "--hci_port=\(ports[4])", "--test_port=\(ports[1])", "--link_port=\(ports[2])",
            "--link_ble_port=\(ports[3])", "-configuration", "tcp_server { tcp_port: \(ports[0]) configuration { strict: false } }",
        ])
        let lifeline = Pipe()
        rc.standardInput = lifeline
        rc.standardOutput = FileHandle.nullDevice
        rc.standardError = FileHandle.nullDevice
        try rc.run()
        defer { Interop.terminate(rc) }
        var fd: Int32 = -1
        let deadline = Date().addingTimeInterval(15)
        while fd < 0 {
            if let f = try? Sockets.connectTCP(host: "127.0.0.1", port: ports[0]) { fd = f; break }
            guard Date() < deadline, rc.isRunning else { throw InteropError("rootcanal did not start") }
            usleep(50_000)
        }
        defer { close(fd) }
        var pending: [UInt8] = []
        /// Sends a command and returns the return parameters of its Command Complete.
        func command(_ c: HCICommand) throws -> [UInt8] {
            let p = c.encode()
            let bytes = [p.type.rawValue] + p.bytes
            _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            let until = Date().addingTimeInterval(5)
            while Date() < until {
                while pending.count >= 3, pending[0] == HCIPacketType.event.rawValue, pending.count >= 3 + Int(pending[2]) {
                    let n = 3 + Int(pending[2])
                    let event = try HCIEvent.decode(HCIPacket(type: .event, bytes: Array(pending[1..<n])))
                    pending.removeFirst(n)
                    if case let .commandComplete(_, op, ret) = event, op == c.opcode { return ret }
                }
                var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&pfd, 1, 200) > 0 else { continue }
                var buf = [UInt8](repeating: 0, count: 1024)
                let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                guard n > 0 else { throw InteropError("rootcanal closed the connection (after \(c.opcode))") }
                pending += buf[0..<n]
            }
            throw InteropError("no Command Complete for \(c.opcode)")
        }
        #expect(try command(.reset) == [0])
        let version = try ReadLocalVersionReturn(decoding: try command(.readLocalVersionInformation))
        #expect(version.companyIdentifier == 0x00E0)
        let map = try SupportedCommandsReturn(decoding: try command(.readLocalSupportedCommands)).bits
        var info = ControllerInfo()
        info.supportedCommands = map
        info.version = version
        #expect(info.supportsControllerToHostFlowControl)
        #expect(info.listsFlowControlItLacks)
        #expect(try command(.hostBufferSize(LEHost.hostACLBuffers)) == [0])
        let enable = try command(.setControllerToHostFlowControl(0x01))
        #expect(enable == [HCIStatus.unknownCommand.rawValue], "rootcanal now answers \(enable): see ControllerInfo.listsFlowControlItLacks")
        #expect(rc.isRunning)
    }

    /// Our host on a default (strict) rootcanal: it comes up without asking for flow control (which would
    /// abort rootcanal), and a flood of Write Commands from one of our hosts to another arrives whole, in order.
    @Test func ourHostsOnRootcanalLeaveFlowControlOffAndLoseNothing() throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let capture = NSTemporaryDirectory() + "rootcanal-flow-\(UUID().uuidString.prefix(8)).btsnoop"
        defer { try? FileManager.default.removeItem(atPath: capture) }
        let central = LEHost(
            transport: SnoopingTransport(StreamTransport.tcpClient(host: "127.0.0.1", port: rc.hciPort), writer: try BTSnoopWriter(path: capture)),
            loop: EventLoop(label: "ble.rc.central"), name: "central")
        let peripheral = LEHost(transport: StreamTransport.tcpClient(host: "127.0.0.1", port: rc.hciPort), loop: EventLoop(label: "ble.rc.peripheral"), name: "peripheral")
        let c = FloodRecorder()
        let p = FloodRecorder()
        defer {
            central.loop.sync { central.powerOff() }
            peripheral.loop.sync { peripheral.powerOff() }
        }
        func wait(_ what: String, _ seconds: Double = 15, _ done: () -> Bool) throws {
            let until = Date().addingTimeInterval(seconds)
            while !done() {
                guard Date() < until else { throw InteropError("timed out waiting for \(what)") }
                usleep(20_000)
            }
        }
        central.loop.sync {
            central.centralDelegate = c; central.powerOn()
        }
        peripheral.loop.sync {
            peripheral.peripheralDelegate = p; peripheral.powerOn()
        }
        try wait("power on") { central.loop.sync { central.powerState == .on } && peripheral.loop.sync { peripheral.powerState == .on } }
        #expect(central.controllerInfo?.supportsControllerToHostFlowControl == true)
        #expect(central.controllerInfo?.controllerToHostFlowControl == false)
        #expect(peripheral.loop.sync { !peripheral.controllerToHostFlowControl })
        let handles = try peripheral.loop.sync {
            try peripheral.addService(
                GATTServiceDefinition(
                    uuid: BluetoothUUID(0xFFF0),
                    characteristics: [
                        GATTCharacteristicDefinition(uuid: BluetoothUUID(0xFFF1), properties: [.writeWithoutResponse], permissions: .writeable, value: nil)
                    ]))
        }
        let writable = handles.characteristics[0].value
        peripheral.loop.sync { peripheral.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6])) }
        let address = peripheral.localAddress
        central.loop.sync { central.connect(to: address) }
        try wait("the connection") { central.loop.sync { !c.connections.isEmpty } && peripheral.loop.sync { !p.connections.isEmpty } }
        var sent = 0
        let total = 300
        try wait("the writes to leave", 60) {
            central.loop.sync {
                while sent < total && c.connections[0].canSendWriteWithoutResponse {
                    c.connections[0].writeWithoutResponse(handle: writable, value: [UInt8(sent & 0xFF), UInt8(sent >> 8)])
                    sent += 1
                }
            }
            return sent == total
        }
        func received() -> [Int] {
            peripheral.loop.sync { p.writes.filter { !$0.needsResponse }.flatMap(\.items).map { Int($0.value[0]) | Int($0.value[1]) << 8 } }
        }
        try wait("the writes to arrive", 60) { received().count == total }
        #expect(received() == Array(0..<total))
        #expect(rc.process.isRunning)
        let opcodes = try BTSnoopReader.read(path: capture).filter { $0.packet.type == .command }.compactMap { try? HCICommand.decode($0.packet).opcode }
        #expect(!opcodes.contains { [.hostBufferSize, .setControllerToHostFlowControl, .hostNumberOfCompletedPackets].contains($0) })
    }
}
