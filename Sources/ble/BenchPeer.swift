// `ble bench --role central|peripheral --scenario send|receive|ping|pong`: one side of a benchmark over any
// BLE_TRANSPORT, speaking bumble-bench's GATT protocol, so that the other side can be `bumble-bench` (or
// another `ble bench`). The service 50DB505C-8AC4-4738-8448-3B1D9CC09CC5 has a TX characteristic
// (E789C754-41A1-45F4-A948-A0A1A90DBA53) the client writes and an RX characteristic
// (016A2CC7-E14B-4819-935F-1F56EAE4098D) the server notifies. Packets: RESET [0]; SEQUENCE [1, flags,
// sequence u32, timestamp µs u32, payload]; ACK [2, flags, sequence u32]; flag LAST = 1. A receiver answers
// the LAST packet with an ACK; a pong answers every packet.
import Foundation
import BLEWire
import BLEHCI
import BLEGATT
import BLEHost
import BLETransport

enum SpeedProtocol {
    static let service = BluetoothUUID(string: "50DB505C-8AC4-4738-8448-3B1D9CC09CC5")!
    static let tx = BluetoothUUID(string: "E789C754-41A1-45F4-A948-A0A1A90DBA53")!
    static let rx = BluetoothUUID(string: "016A2CC7-E14B-4819-935F-1F56EAE4098D")!
    /// bumble-bench's default addresses (static random).
    static let peripheralAddress = BluetoothAddress(string: "F1:F1:F1:F1:F1:F1", type: .random)!

    enum Packet: Equatable {
        case reset
        case sequence(last: Bool, sequence: UInt32, timestamp: UInt32, payloadSize: Int)
        case ack(last: Bool, sequence: UInt32)

        func encode() -> [UInt8] {
            var b: [UInt8] = []
            encode(into: &b)
            return b
        }

        /// Octets of the encoded packet.
        var encodedCount: Int {
            switch self {
            case .reset: return 1
            case let .sequence(_, _, _, size): return 10 + size
            case .ack: return 6
            }
        }

        /// Appends the packet to `b`: a sender builds its stream in place (no array per packet).
        func encode(into b: inout [UInt8]) {
            func put(_ v: UInt32) { b.append(UInt8(v & 0xFF)); b.append(UInt8(v >> 8 & 0xFF)); b.append(UInt8(v >> 16 & 0xFF)); b.append(UInt8(v >> 24)) }
            switch self {
            case .reset: b.append(0)
            case let .sequence(last, seq, ts, size):
                b.append(1); b.append(last ? 1 : 0); put(seq); put(ts)
                b.append(contentsOf: repeatElement(0, count: size))
            case let .ack(last, seq):
                b.append(2); b.append(last ? 1 : 0); put(seq)
            }
        }

        static func decode(_ b: [UInt8]) -> Packet? {
            guard let t = b.first else { return nil }
            var r = ByteReader(b)
            _ = try? r.readUInt8()
            switch t {
            case 0: return .reset
            case 1:
                guard let f = try? r.readUInt8(), let s = try? r.readUInt32(), let ts = try? r.readUInt32() else { return nil }
                return .sequence(last: f & 1 == 1, sequence: s, timestamp: ts, payloadSize: r.remaining)
            case 2:
                guard let f = try? r.readUInt8(), let s = try? r.readUInt32() else { return nil }
                return .ack(last: f & 1 == 1, sequence: s)
            default: return nil
            }
        }
    }
}

final class BenchPeer: HostCentralDelegate, HostPeripheralDelegate, MeteredSpeedPeer, @unchecked Sendable {
    enum Role: String { case central, peripheral }
    enum Scenario: String { case send, receive, ping, pong }

    let role: Role, scenario: Scenario
    let size: Int, count: Int
    let peer: BluetoothAddress
    /// Connection interval the central asks for once connected (ms).
    var intervalMilliseconds = 7.5
    let host: LEHost
    let done = DispatchSemaphore(value: 0)
    var link: HostConnection?
    var txHandle: UInt16 = 0, rxHandle: UInt16 = 0
    /// The protocol's state (BenchSpeedSession.swift), on the loop.
    var session: SpeedSession
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
        session = SpeedSession(scenario: scenario, size: size, count: count, counting: .packet, noteEvery: 512)
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
        let progress = BenchProgress(label: scenario.rawValue, total: count, loop: host.loop) { [unowned self] in session.packets }
        defer { progress.finish() }
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
            mode: "\(scenario.rawValue) as \(role.rawValue) (bumble-bench protocol)", bytes: s.bytes,
            packets: s.packets, seconds: s.seconds, cpuSeconds: cost?.cpu ?? 0, rtts: s.rtts, cost: cost)
    }

    // MARK: Peripheral (GATT server)

    func servePeripheral() {
        do {
            let h = try host.addService(
                GATTServiceDefinition(
                    uuid: SpeedProtocol.service,
                    characteristics: [
                        GATTCharacteristicDefinition(uuid: SpeedProtocol.tx, properties: [.write, .writeWithoutResponse], permissions: [.writeable], value: nil),
                        GATTCharacteristicDefinition(uuid: SpeedProtocol.rx, properties: [.notify], permissions: [], value: nil),
                    ]))
            txHandle = h.characteristics[0].value
            rxHandle = h.characteristics[1].value
        } catch {
            failure = "cannot add the speed service: \(error)"
            done.signal()
            return
        }
        // bumble-bench's central connects to F1:F1:F1:F1:F1:F1 (static random) unless told otherwise.
        host.setStaticRandomAddress(peer) { [self] _ in
            var name: [UInt8] = Array("Speed Peripheral".utf8)
            name = [UInt8(name.count + 1), 0x09] + name
            host.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6] + name, interval: 0x30)) { [self] e in
                say(e.map { "advertising failed: \($0)" } ?? "advertising as \(peer) on \(host.transport.name)")
            }
        }
    }

    func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) {
        if request.needsResponse { host.respondToWrite(id: request.id, error: nil) }
        for item in request.items where item.attributeHandle == txHandle { packetArrived(item.value) }
    }

    func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {
        guard valueHandle == rxHandle, notify else { return }
        say("subscribed")
        if scenario == .send || scenario == .ping { startSending() }
    }

    func hostIsReadyToUpdateSubscribers(_ host: LEHost) { if scenario == .send { pump() } }

    // MARK: Central (GATT client)

    func host(_ host: LEHost, didConnect connection: HostConnection) {
        say("connected: \(connection)")
        guard role == .central else { link = connection; return }
        link = connection
        host.updateConnection(handle: connection.handle, interval: UInt16((intervalMilliseconds / 1.25).rounded()), timeout: 400) { [self] e in
            if let e { say("connection update refused: \(e)") }
        }
        connection.exchangeMTU(247) { [self] mtu in
            say("ATT_MTU \(mtu)")
            connection.gatt(.discoverPrimaryServices(uuid: SpeedProtocol.service)) { [self] r in
                guard case let .success(.services(list)) = r, let s = list.first else { return fail("no speed service on \(peer)") }
                connection.gatt(.discoverCharacteristics(start: s.handle, end: s.endHandle, uuid: nil)) { [self] r in
                    guard case let .success(.characteristics(cs)) = r,
                        let tx = cs.first(where: { $0.uuid == SpeedProtocol.tx }), let rx = cs.first(where: { $0.uuid == SpeedProtocol.rx })
                    else {
                        return fail("speed characteristics missing")
                    }
                    txHandle = tx.valueHandle
                    rxHandle = rx.valueHandle
                    let next = cs.first(where: { $0.declarationHandle > rx.declarationHandle })?.declarationHandle ?? s.endHandle + 1
                    connection.gatt(.discoverDescriptors(start: rx.valueHandle + 1, end: next - 1)) { [self] r in
                        guard case let .success(.descriptors(ds)) = r, let cccd = ds.first(where: { $0.uuid == .clientCharacteristicConfiguration }) else {
                            return fail("no CCCD on the RX characteristic")
                        }
                        connection.gatt(.write(handle: cccd.handle, value: [1, 0])) { [self] _ in
                            say("subscribed to RX")
                            if scenario == .send || scenario == .ping { startSending() }
                        }
                    }
                }
            }
        }
    }

    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {
        if handle == rxHandle { packetArrived(value) }
    }

    func host(_ host: LEHost, connectionIsReadyToSendWriteWithoutResponse connection: HostConnection) { if scenario == .send { pump() } }

    // MARK: The protocol

    func transmit(_ p: SpeedProtocol.Packet) -> Bool {
        let bytes = p.encode()
        switch role {
        case .central:
            guard let link else { return false }
            return link.writeWithoutResponse(handle: txHandle, value: bytes)
        case .peripheral:
            return host.updateValue(bytes, forHandle: rxHandle)
        }
    }

    func startSending() {
        perform(session.begin(at: now()))
        if scenario == .send { pump() }
    }

    /// SEQUENCE packets while the link takes them.
    func pump() {
        while let p = session.nextSequence(at: now()), transmit(p) {
            if let note = session.didSend() { say(note) }
        }
    }

    func packetArrived(_ bytes: [UInt8]) { perform(session.arrived(bytes, at: now())) }

    /// A packet the session asked for; one the link refuses now goes when `pump` next finds room.
    func send(_ p: SpeedProtocol.Packet) { _ = transmit(p) }

    func fail(_ why: String) {
        failure = why
        done.signal()
    }

    /// Lets the controller go once the bench's link is gone. The peer ends it first when it has what it waited for
    /// (the last ACK must still leave from here): up to `peerGrace` seconds for that, then this side disconnects and
    /// waits up to `disconnectWait` for Disconnection Complete. Closing the HCI user channel with the link up (as it
    /// did after 200 ms) left it in the controller with no host behind it: the next run's kernel central on bluez
    /// was then refused its connect to the same address (bench-bluez, "Connection refused" after a run that passed).
    static func release(_ host: LEHost, peerGrace: Double = 2, disconnectWait: Double = 3) {
        func linked() -> Bool { host.loop.sync { !host.connections.isEmpty } }
        func wait(_ seconds: Double) {
            let end = DispatchTime.now() + seconds
            while linked(), DispatchTime.now() < end { usleep(50_000) }
        }
        host.loop.sync { host.stopAdvertising() }
        wait(peerGrace)
        if linked() {
            host.loop.sync { for c in host.connections.values { c.disconnect(reason: .remotePowerOff) } }
            wait(disconnectWait)
        }
        Controller.close(host)
    }

    func host(_ host: LEHost, didReceive report: AdvertisingReport) {}
    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) { fail("connection failed: \(status)") }
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {
        if !session.ended { fail("disconnected: \(reason)") }
    }
    func host(_ host: LEHost, didReceiveRead request: HostReadRequest) { host.respondToRead(id: request.id, result: .failure(.readNotPermitted)) }
    func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {}
}
