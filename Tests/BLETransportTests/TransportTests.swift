// Transport names, the event loop's virtual time, TCP H4 streams, and btsnoop captures.
import Foundation
import Glibc
import Testing
import TestSupport
import BLEHCI
@testable import BLETransport

@Suite struct TransportSpecTests {
    @Test func parsesBumbleStyleNames() throws {
        #expect(try TransportSpec(parsing: "virtual") == .virtual)
        #expect(try TransportSpec(parsing: "") == .virtual)
        #expect(try TransportSpec(parsing: "tcp-client:127.0.0.1:6402") == .tcpClient(host: "127.0.0.1", port: 6402))
        #expect(try TransportSpec(parsing: "tcp-client:[::1]:7000") == .tcpClient(host: "::1", port: 7000))
        #expect(try TransportSpec(parsing: "tcp-server:_:6402") == .tcpServer(port: 6402))
        #expect(try TransportSpec(parsing: "serial:/dev/ttyACM0,115200") == .serial(path: "/dev/ttyACM0", baud: 115200))
        #expect(try TransportSpec(parsing: "serial:/dev/ttyUSB0") == .serial(path: "/dev/ttyUSB0", baud: 1_000_000))
        #expect(try TransportSpec(parsing: "hci-socket:0") == .hciSocket(index: 0))
        #expect(try TransportSpec(parsing: "unix:/tmp/hci.sock") == .unix(path: "/tmp/hci.sock"))
    }

    @Test func rejectsBadNamesWithAReason() {
        for bad in ["tcp-client:host", "tcp-client:h:0", "tcp-client:h:70000", "serial:", "serial:/dev/x,fast", "hci-socket:-1", "usb:0", "bogus"] {
            #expect(throws: TransportError.self, "\(bad)") { try TransportSpec(parsing: bad) }
        }
        #expect((try? TransportSpec(parsing: "usb:0")) == nil)
    }
}

@Suite struct EventLoopTests {
    @Test func virtualTimeRunsTimersInOrderAndOnlyWhenAdvanced() {
        let loop = EventLoop(label: "t", clock: .virtual)
        final class Log: @unchecked Sendable { var items: [String] = [] }
        let log = Log()
        loop.sync {
            loop.schedule(after: .milliseconds(30)) { log.items.append("30@\(loop.now / 1_000_000)") }
            loop.schedule(after: .milliseconds(10)) {
                log.items.append("10@\(loop.now / 1_000_000)")
                loop.execute { log.items.append("work@\(loop.now / 1_000_000)") }
                loop.schedule(after: .milliseconds(5)) { log.items.append("15@\(loop.now / 1_000_000)") }
            }
            let cancelled = loop.schedule(after: .milliseconds(20)) { log.items.append("never") }
            loop.cancel(cancelled)
        }
        loop.advance(by: .milliseconds(9))
        #expect(log.items.isEmpty)
        loop.advance(by: .milliseconds(100))
        #expect(log.items == ["10@10", "work@10", "15@15", "30@30"])
        #expect(loop.now == .milliseconds(109))
        #expect(loop.pendingTimerCount == 0)
    }

    @Test func realTimersFire() async throws {
        let loop = EventLoop(label: "r", clock: .real)
        final class Flag: @unchecked Sendable { var fired = false }
        let f = Flag()
        loop.execute { loop.schedule(after: .milliseconds(20)) { f.fired = true } }
        try await pause(nanoseconds: 200_000_000)
        #expect(loop.sync { f.fired })
    }
}

@Suite struct StreamAndSnoopTests {
    final class Sink: HCITransportSink, @unchecked Sendable {
        let lock = NSLock()
        var packets: [HCIPacket] = []
        var closed = false
        func transport(didReceive packet: HCIPacket) { lock.withLock { packets.append(packet) } }
        func transportDidClose(error: (any Error)?) { lock.withLock { closed = true } }
    }

    @Test func tcpClientFramesH4BothWays() async throws {
        let listener = try TCPListener(port: 0)
        defer { listener.close() }
        final class Accepted: @unchecked Sendable { var fd: Int32 = -1 }
        let accepted = Accepted()
        listener.start { fd in accepted.fd = fd }
        let t = StreamTransport.tcpClient(host: "127.0.0.1", port: listener.port)
        let sink = Sink()
        try t.open(sink: sink)
        defer { t.close() }
        let deadline = Date().addingTimeInterval(10)
        while accepted.fd < 0 && Date() < deadline { try await pause(nanoseconds: 5_000_000) }
        let server = StreamConnection(fd: accepted.fd, isTCP: true, label: "peer")
        let got = Sink()
        server.start(onPacket: { p in got.transport(didReceive: p) }, onClose: { _ in })
        // Host → controller.
        t.send(HCICommand.reset.encode())
        // Controller → host, split across writes at awkward places.
        let event = HCIEvent.commandComplete(numHCICommandPackets: 1, opcode: .reset, returnParameters: [0]).encode().h4Bytes
        let acl = ACLPacket(handle: 0x40, boundary: .firstNonFlushable, data: Array(0..<100)).encode().h4Bytes
        let stream = event + acl
        server.write(Array(stream[0..<3]))
        try await pause(nanoseconds: 10_000_000)
        server.write(Array(stream[3...]))
        let delivered = Date().addingTimeInterval(10)
        while (sink.lock.withLock { sink.packets.count } < 2 || got.lock.withLock { got.packets.count } < 1) && Date() < delivered {
            try await pause(nanoseconds: 5_000_000)
        }
        #expect(got.lock.withLock { got.packets } == [HCICommand.reset.encode()])
        #expect(sink.lock.withLock { sink.packets.map(\.h4Bytes) } == [event, acl])
        server.close()
        // Its own deadline: on a loaded machine the steps above may have used the first one up.
        let closeDeadline = Date().addingTimeInterval(10)
        while !(sink.lock.withLock { sink.closed }) && Date() < closeDeadline { try await pause(nanoseconds: 5_000_000) }
        #expect(sink.lock.withLock { sink.closed })
    }

    @Test func writingToAPeerThatLeftFailsWithoutSIGPIPE() throws {
        // The default action of SIGPIPE ends the process: this test would take the whole run down with it.
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        let ours = StreamConnection(fd: fds[0], isTCP: false, label: "left")
        defer { ours.close() }
        Glibc.close(fds[1])
        #expect(ours.write([0x01, 0x03, 0x0C, 0x00]) == false)
        #expect(ours.write([0x01, 0x03, 0x0C, 0x00]) == false)
    }

    @Test func btsnoopFileLayout() throws {
        let path = NSTemporaryDirectory() + "ocb-\(UUID().uuidString).btsnoop"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let w = try BTSnoopWriter(path: path)
        w.write(HCICommand.reset.encode(), direction: .hostToController)
        w.write(HCIEvent.commandComplete(numHCICommandPackets: 1, opcode: .reset, returnParameters: [0]).encode(), direction: .controllerToHost)
        w.close()
        let d = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        #expect(Array(d[0..<8]) == Array("btsnoop\0".utf8))
        #expect(Array(d[8..<16]) == [0, 0, 0, 1, 0, 0, 0x03, 0xEA])   // version 1, datalink 1002 (H4)
        // First record: lengths 4, flags 2 (command, sent), then the H4 bytes.
        #expect(Array(d[16..<28]) == [0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 2])
        #expect(Array(d[40..<44]) == [0x01, 0x03, 0x0C, 0x00])
        // Second record: flags 3 (event, received).
        #expect(Array(d[44 + 8..<44 + 12]) == [0, 0, 0, 3])
    }
}
