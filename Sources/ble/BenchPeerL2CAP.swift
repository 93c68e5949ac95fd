// `ble bench --mode l2cap --role central|peripheral --scenario send|receive|ping|pong`: one side of a
// benchmark over any BLE_TRANSPORT, speaking bumble-bench's L2CAP protocol, so that the other side can be
// `bumble-bench --mode l2cap-server` (our central opens the channel) or `--mode l2cap-client` (our
// peripheral publishes it).
//
// bumble-bench's L2CAP protocol: an LE credit-based channel on SPSM 128, MTU 1024, MPS 1024, 128 credits
// (a receive window of 128 K-frames). The channel is a byte stream: each packet is framed by its length
// (2 octets, big-endian), SDU boundaries mean nothing. Packets are those of the GATT protocol (BenchPeer.swift):
// RESET [0]; SEQUENCE [1, flags, sequence u32 LE, timestamp µs u32 LE, payload]; ACK [2, flags, sequence].
// A sender's `--size` counts the framing: a SEQUENCE packet is size − 2 octets (payload size − 12), as
// bumble-bench's `-s`. A receiver ACKs the LAST packet; a pong ACKs every packet, echoing its flags.
//
// Threading: everything runs on the host's loop, except `run`, which waits on `done`.
import Foundation
import BLEWire
import BLEHCI
import BLEL2CAP
import BLEHost
import BLETransport

enum SpeedL2CAP {
    static let psm: UInt16 = 128
    static let parameters = L2CAPChannelParameters(mtu: 1024, mps: 1024, window: 128 * 1024)

    /// Splits a byte stream into bumble-bench packets (2-octet big-endian length, then the packet).
    struct Deframer {
        private var buffer: [UInt8] = []
        private var head = 0

        /// Appends `bytes`; returns the packets completed by them.
        mutating func feed(_ bytes: [UInt8]) -> [[UInt8]] {
            buffer += bytes
            var packets: [[UInt8]] = []
            while buffer.count - head >= 2 {
                let length = Int(buffer[head]) << 8 | Int(buffer[head + 1])
                guard buffer.count - head - 2 >= length else { break }
                packets.append(Array(buffer[(head + 2)..<(head + 2 + length)]))
                head += 2 + length
            }
            if head > 0, head == buffer.count || head > 64 * 1024 {
                buffer.removeFirst(head)
                head = 0
            }
            return packets
        }
    }

    static func frame(_ packet: [UInt8]) -> [UInt8] {
        [UInt8(packet.count >> 8), UInt8(packet.count & 0xFF)] + packet
    }

    /// Appends `packet`, framed, to a stream.
    static func append(_ packet: SpeedProtocol.Packet, to stream: inout [UInt8]) {
        let n = packet.encodedCount
        stream.append(UInt8(n >> 8)); stream.append(UInt8(n & 0xFF))
        packet.encode(into: &stream)
    }
}

final class BenchPeerL2CAP: HostCentralDelegate, HostPeripheralDelegate, MeteredSpeedPeer, @unchecked Sendable {
    typealias Role = BenchPeer.Role
    typealias Scenario = BenchPeer.Scenario

    let role: Role, scenario: Scenario
    let size: Int, count: Int
    let peer: BluetoothAddress
    var intervalMilliseconds = 7.5
    let host: LEHost
    let done = DispatchSemaphore(value: 0)
    // The state `flush` and the receive path touch for every SDU: loop-confined, so not checked at run time.
    @exclusivity(unchecked) var channel: HostL2CAPChannel?
    @exclusivity(unchecked) var deframer = SpeedL2CAP.Deframer()
    /// Framed packets not yet handed to the channel: from `outgoingHead` on.
    @exclusivity(unchecked) var outgoing: [UInt8] = []
    @exclusivity(unchecked) var outgoingHead = 0
    /// The protocol's state (BenchSpeedSession.swift), on the loop.
    @exclusivity(unchecked) var session: SpeedSession
    var failure: String?
    /// Cost of the transfer: from the first packet (RESET) to the last (or its ACK), on the loop.
    lazy var meter = BenchMeter(transport: { [host] in host.transport.statistics })
    var startSnapshot: BenchMeter.Snapshot?, endSnapshot: BenchMeter.Snapshot?

    init(role: Role, scenario: Scenario, size: Int, count: Int, peer: BluetoothAddress) throws {
        self.role = role
        self.scenario = scenario
        self.size = size
        self.count = count
        self.peer = peer
        session = SpeedSession(scenario: scenario, size: size, count: count, counting: .framed)
        host = try Controller.open(name: "bench")
    }

    func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    func say(_ s: String) { FileHandle.standardError.write(Data((s + "\n").utf8)) }

    func run(timeout: Double) throws -> BenchResult {
        _ = host.loop.sync { meter }   // perf counters opened before the transfer
        host.loop.execute { [self] in
            host.centralDelegate = self
            host.peripheralDelegate = self
            // The controller is already on (Controller.open); a controller that comes back starts again.
            let begin = { [self] in
                switch role {
                case .central:
                    say("connecting to \(peer) on \(host.transport.name)")
                    host.connect(to: peer)
                case .peripheral:
                    servePeripheral()
                }
            }
            host.addPowerObserver { s in if s == .on { begin() } }
            begin()
        }
        guard done.wait(timeout: .now() + timeout) == .success else {
            let s = host.loop.sync { session }
            throw BenchError("timed out (\(s.received) packets received, \(s.sent) sent)")
        }
        if let failure { throw BenchError(failure) }
        let s = host.loop.sync { session }
        let cost = host.loop.sync { () -> BenchMeter.Cost? in
            guard let a = startSnapshot, let b = endSnapshot else { return nil }
            return BenchMeter.cost(from: a, to: b)
        }
        BenchPeer.release(host)
        return BenchResult(
            mode: "l2cap \(scenario.rawValue) as \(role.rawValue) (bumble-bench protocol)", bytes: s.bytes,
            packets: s.packets, seconds: s.seconds, cpuSeconds: cost?.cpu ?? 0, rtts: s.rtts, cost: cost)
    }

    // MARK: Peripheral: the L2CAP server on SPSM 128.

    func servePeripheral() {
        let psm = host.publishL2CAP(psm: SpeedL2CAP.psm, parameters: SpeedL2CAP.parameters) { [self] ch in
            guard channel == nil else { return ch.close() }
            say("channel open: \(ch)")
            attach(ch)
        }
        guard psm != nil else { return fail("SPSM \(SpeedL2CAP.psm) is taken") }
        host.setStaticRandomAddress(peer) { [self] _ in
            var name: [UInt8] = Array("Speed Peripheral".utf8)
            name = [UInt8(name.count + 1), 0x09] + name
            host.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6] + name, interval: 0x30)) { [self] e in
                say(e.map { "advertising failed: \($0)" } ?? "advertising as \(peer) on \(host.transport.name), SPSM \(SpeedL2CAP.psm)")
            }
        }
    }

    // MARK: Central: the L2CAP client.

    func host(_ host: LEHost, didConnect connection: HostConnection) {
        say("connected: \(connection)")
        guard role == .central else { return }
        host.updateConnection(handle: connection.handle, interval: UInt16((intervalMilliseconds / 1.25).rounded()), timeout: 400) { [self] e in
            if let e { say("connection update refused: \(e)") }
        }
        connection.openL2CAPChannel(psm: SpeedL2CAP.psm, parameters: SpeedL2CAP.parameters) { [self] r in
            switch r {
            case let .success(chs):
                say("channel open: \(chs[0])")
                attach(chs[0])
            case let .failure(e):
                fail("cannot open SPSM \(SpeedL2CAP.psm) on \(peer): \(e)")
            }
        }
    }

    // MARK: The channel

    func attach(_ ch: HostL2CAPChannel) {
        channel = ch
        ch.onReceive = { [unowned ch, self] sdu in
            ch.consumed(sdu.count)
            for p in deframer.feed(sdu) { packetArrived(p) }
        }
        ch.onWritable = { [self] in flush() }
        ch.onClose = { [self] reason in
            if !session.ended { fail("the channel closed: \(reason)") }
        }
        if session.sends { perform(session.begin(at: now())) }
    }

    /// Queues a packet; it leaves as the channel takes it.
    func send(_ p: SpeedProtocol.Packet) {
        SpeedL2CAP.append(p, to: &outgoing)
        flush()
    }

    /// Hands queued bytes to the channel in SDUs of the peer's MTU, and generates the next packets of a
    /// send while it takes them.
    func flush() {
        guard let ch = channel else { return }
        let mtu = max(1, ch.peerMTU)
        while true {
            if scenario == .send {
                while outgoing.count - outgoingHead < mtu, let next = session.takeSequence(at: now()) {
                    SpeedL2CAP.append(next.packet, to: &outgoing)
                    if let note = next.note { say(note) }
                }
            }
            if outgoingHead == outgoing.count {
                outgoing.removeAll(keepingCapacity: true)
                outgoingHead = 0
                return
            }
            let n = min(mtu, outgoing.count - outgoingHead)
            guard ch.send(Array(outgoing[outgoingHead..<outgoingHead + n])) else { return }
            outgoingHead += n
            // What was sent goes once it is most of the buffer (not a move of the rest for every SDU).
            if outgoingHead >= 4096, outgoingHead * 2 >= outgoing.count {
                outgoing.removeFirst(outgoingHead)
                outgoingHead = 0
            }
        }
    }

    func packetArrived(_ bytes: [UInt8]) { perform(session.arrived(bytes, at: now())) }

    func fail(_ why: String) {
        guard failure == nil else { return }
        failure = why
        done.signal()
    }

    func host(_ host: LEHost, didReceive report: AdvertisingReport) {}
    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) { fail("connection failed: \(status)") }
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {
        if !session.ended { fail("disconnected: \(reason)") }
    }
    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {}
    func host(_ host: LEHost, didReceiveRead request: HostReadRequest) { host.respondToRead(id: request.id, result: .failure(.readNotPermitted)) }
    func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) {
        if request.needsResponse { host.respondToWrite(id: request.id, error: .writeNotPermitted) }
    }
    func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {}
    func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {}
}
