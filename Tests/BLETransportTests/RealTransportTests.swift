// The transports for real controllers, each carrying a full GATT round trip: hci-socket over a fake
// packet socket pair, serial over a pseudo-terminal bridged by socat to `ble radio`, and tcp-server.
import Foundation
import Testing
import TestSupport
import BLEWire
import BLEHCI
import BLEGATT
import BLEVirtualRadio
import BLEHost
@testable import BLETransport
@testable import BLETransportLinux

/// A peripheral host on `air` with one readable characteristic, advertising.
func startPeripheral(on air: VirtualAir, value: [UInt8]) throws -> (LEHost, BluetoothAddress, UInt16) {
    let host = try HostFactory.makeHost(on: air, name: "peripheral")
    let address = BluetoothAddress(bytes: (host.transport as! VirtualController).address.bytes)
    let handles = try air.loop.sync { () throws -> GATTServiceHandles in
        host.powerOn()
        return try host.addService(
            GATTServiceDefinition(
                uuid: BluetoothUUID(0x180D),
                characteristics: [
                    GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A38), properties: [.read], permissions: .readable, value: value)
                ]))
    }
    try waitSync("peripheral on") { air.loop.sync { host.powerState == .on } }
    air.loop.sync { host.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6], interval: 0x20)) }
    return (host, address, handles.characteristics[0].value)
}

final class RoundTripCentral: HostCentralDelegate, @unchecked Sendable {
    var connection: HostConnection?
    var value: [UInt8]?
    var disconnected = false
    func host(_ host: LEHost, didReceive report: AdvertisingReport) {}
    func host(_ host: LEHost, didConnect connection: HostConnection) { self.connection = connection }
    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {}
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) { disconnected = true }
    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {}
}

func waitSync(_ what: String, seconds: Double = 10, _ cond: () -> Bool) throws {
    let deadline = Date().addingTimeInterval(seconds)
    while !cond() {
        if Date() > deadline { throw TransportError.io("timed out waiting for \(what)") }
        usleep(2_000)
    }
}

/// Our central on `transport` connects to `address`, reads `handle` and disconnects.
func roundTrip(over transport: any HCITransport, to address: BluetoothAddress, read handle: UInt16) throws -> [UInt8]? {
    let loop = EventLoop(label: "central.\(transport.name)")
    let host = LEHost(transport: transport, loop: loop, name: "central")
    let d = RoundTripCentral()
    loop.sync {
        host.centralDelegate = d; host.powerOn()
    }
    try waitSync("central on") { loop.sync { host.powerState == .on } }
    loop.sync { host.connect(to: address) }
    try waitSync("connection") { loop.sync { d.connection != nil } }
    loop.sync { d.connection!.gatt(.read(handle: handle)) { if case let .success(.value(v)) = $0 { d.value = v } } }
    try waitSync("read") { loop.sync { d.value != nil } }
    loop.sync { d.connection!.disconnect() }
    try waitSync("disconnect") { loop.sync { d.disconnected } }
    loop.sync { host.powerOff() }
    return loop.sync { d.value }
}

@Suite(.serialized) struct RealTransportTests {
    @Test func hciSocketOverAFakePacketSocketPair() throws {
        let air = VirtualAir(loop: EventLoop(label: "hci-socket.air", clock: .real))
        let (_, address, handle) = try startPeripheral(on: air, value: [0x42, 0x43])
        // The "kernel" side: a SOCK_SEQPACKET pair, one H4 packet per message, bridged to a controller.
        let kernel = try PacketSocketController(air.addController())
        let transport = HCISocketTransport(index: 0) { kernel.ours }
        #expect(try roundTrip(over: transport, to: address, read: handle) == [0x42, 0x43])
    }

    /// A user channel's receive queue is widened past the system's default, so that a host that falls behind
    /// does not lose what the controller sends meanwhile (the kernel drops it once the queue is full).
    @Test func theUserChannelsReceiveQueueHoldsMegabytes() throws {
        var pair: [Int32] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &pair) == 0)
        defer { pair.forEach { _ = close($0) } }
        func size() -> Int32 {
            var v: Int32 = 0
            var n = socklen_t(MemoryLayout<Int32>.size)
            _ = getsockopt(pair[0], SOL_SOCKET, SO_RCVBUF, &v, &n)
            return v
        }
        let before = size()
        HCISocketTransport.widenReceiveQueue(pair[0])
        // With CAP_NET_ADMIN (which the user channel needs) the kernel grants it whole, doubled for its
        // bookkeeping; without it, up to net.core.rmem_max.
        if geteuid() == 0 { #expect(size() >= 8 << 20, "\(before) → \(size())") } else { #expect(size() >= before) }
    }

    @Test func userChannelErrorsExplainWhatToDo() {
        #expect(HCISocketTransport.explainBindFailure(index: 0, errno: EBUSY).contains("systemctl stop bluetooth"))
        #expect(HCISocketTransport.explainBindFailure(index: 1, errno: EPERM).contains("CAP_NET_ADMIN"))
        #expect(HCISocketTransport.explainBindFailure(index: 7, errno: ENODEV).contains("no such adapter"))
    }

    @Test func serialThroughAPseudoTerminalBridgedToBleRadio() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/socat") else {
            Issue.record("socat is missing: scripts/test installs it (apt-get install socat)")
            return
        }
        let air = VirtualAir(loop: EventLoop(label: "serial.air", clock: .real))
        let server = try RadioServer(air: air, port: 0)
        server.start()
        defer { server.stop() }
        let (_, address, handle) = try startPeripheral(on: air, value: [0x01, 0x02, 0x03])
        let link = NSTemporaryDirectory() + "ocb-pty-\(UUID().uuidString.prefix(8))"
        let socat = Process()
        socat.executableURL = URL(fileURLWithPath: "/usr/bin/socat")
        socat.arguments = ["PTY,link=\(link),raw,echo=0", "TCP:127.0.0.1:\(server.port)"]
        try socat.run()
        defer { socat.terminate(); try? FileManager.default.removeItem(atPath: link) }
        try waitSync("pty") { FileManager.default.fileExists(atPath: link) }
        #expect(try roundTrip(over: StreamTransport.serial(path: link, baud: 1_000_000), to: address, read: handle) == [0x01, 0x02, 0x03])
    }

    /// A serial port hands over everything one read held in one batch, with a run of completion events merged for a
    /// sink that asks (a host) and kept apart for one that does not (a capture), as a stream socket does.
    @Test func serialDeliversAReadAsOneBatchAndMergesCompletionsOnlyWhenAsked() throws {
        let reset = HCIEvent.commandComplete(numHCICommandPackets: 1, opcode: .reset, returnParameters: [0]).encode()
        let done = HCIEvent.numberOfCompletedPackets([CompletedPackets(handle: 0x40, count: 1)]).encode()
        let data = ACLPacket(handle: 0x40, boundary: .firstNonFlushable, data: [1, 2, 3]).encode()
        let sent = [reset] + Array(repeating: done, count: 20) + [data]
        for accepts in [true, false] {
            let (master, path) = try pseudoTerminal()
            defer { close(master) }
            let sink = StreamCoalescingTests.CompletionSink(accepts: accepts)
            let serial = StreamTransport.serial(path: path, baud: 115_200)
            try serial.open(sink: sink)
            defer { serial.close() }
            let bytes = sent.flatMap(\.h4Bytes)
            #expect(bytes.withUnsafeBytes { write(master, $0.baseAddress, $0.count) } == bytes.count)
            try waitSync("packets", seconds: 60) { sink.got.all.last == data }
            let got = sink.got.all
            let batches = sink.got.lock.withLock { sink.got.batches.count }
            // A pseudo-terminal passes the write on in one piece or a few: a batch per read, not per packet.
            #expect(batches < sent.count, "accepts: \(accepts)")
            if accepts {
                // Every completion counted once, in as many events as reads carried them (one, most often).
                let counts = got.compactMap { p -> Int? in
                    guard case let .numberOfCompletedPackets(entries)? = try? HCIEvent.decode(p) else { return nil }
                    return entries.reduce(0) { $0 + Int($1.count) }
                }
                #expect(counts.reduce(0, +) == 20 && counts.count <= batches)
                #expect(got.first == reset && got.count == counts.count + 2)
            } else {
                #expect(got == sent)
            }
        }
    }

    @Test func serialRejectsWhatIsNotATerminal() {
        #expect(throws: TransportError.self) { try SerialPort.open(path: "/dev/null", baud: 115200) }
        #expect(throws: TransportError.self) { try SerialPort.open(path: "/nonexistent/tty", baud: 115200) }
        #expect(SerialPort.speedConstant(12345) == nil)
    }

    @Test func tcpServerAcceptsAControllerThatConnectsLater() throws {
        let air = VirtualAir(loop: EventLoop(label: "tcp-server.air", clock: .real))
        let (_, address, handle) = try startPeripheral(on: air, value: [0x0A])
        let port = reservedPort()   // not one a listener of another test may be given meanwhile
        let transport = TCPServerTransport(port: port)
        // A controller dials in: bridge a virtual controller to a TCP client socket.
        let controller = air.addController()
        final class Out: HCITransportSink, @unchecked Sendable {
            var conn: StreamConnection?
            func transport(didReceive packet: HCIPacket) { conn?.write(packet.h4Bytes) }
            func transportDidClose(error: (any Error)?) {}
        }
        let out = Out()
        try controller.open(sink: out)
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) {
            guard let fd = try? Sockets.connectTCP(host: "127.0.0.1", port: port) else { return }
            let c = StreamConnection(fd: fd, isTCP: true, label: "dial-in")
            out.conn = c
            c.start(onPacket: { controller.send($0) }, onClose: { _ in })
        }
        #expect(try roundTrip(over: transport, to: address, read: handle) == [0x0A])
        transport.close()
    }
}
