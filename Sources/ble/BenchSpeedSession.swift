// bumble-bench's speed protocol (BenchPeer.swift) as one value, whatever carries its packets: GATT writes and
// notifications (BenchPeer), our host's L2CAP channel (BenchPeerL2CAP) or the kernel's L2CAP socket on bluez
// (BenchPeerBlueZ). It counts what went and came, keeps the measured span and the round trips, and says for each
// packet that arrives what to send back and whether the measurement starts, stops or is over; its owner carries
// the packets, reads its own clocks and meters when told, and signals the end.
//
// Counting. A sender's `size` is what one SEQUENCE packet costs on the wire as bumble-bench counts it: over GATT
// the packet itself (10 octets of header, then size − 10 of payload); over L2CAP the packet and its 2-octet length
// prefix (12 octets of header with the prefix, size − 12 of payload), so that a receiver also adds 2 to each
// packet it counts.
//
// Rules, as bumble-bench's: RESET starts a measurement again (counts to zero); a receiver ACKs the LAST packet
// and stops; a pong ACKs every packet (echoing LAST) and measures from the first; a sender stops at the ACK of
// LAST; a ping sends one packet per ACK, timing each round trip.
import Dispatch

struct SpeedSession: Equatable {
    typealias Packet = SpeedProtocol.Packet
    typealias Scenario = BenchPeer.Scenario

    enum Counting: Equatable {
        /// GATT: a packet counts as itself.
        case packet
        /// L2CAP: a packet counts with its 2-octet length prefix.
        case framed

        /// Octets of a SEQUENCE packet before its payload, as its `size` counts them.
        var header: Int { self == .packet ? 10 : 12 }
        /// Octets counted for a packet of `n` octets that arrived.
        func counted(_ n: Int) -> Int { self == .packet ? n : n + 2 }
    }

    /// What the owner does after an event, in this order: start or stop its meters, send `send`, and end the run
    /// if `finished`.
    struct Step: Equatable {
        var send: [Packet] = []
        var startMeasuring = false
        var stopMeasuring = false
        var finished = false
        /// The packet could not be decoded (it is ignored).
        var invalid = false
        /// A line of progress for the user, if one is due.
        var note: String?
    }

    let scenario: Scenario
    let size: Int, count: Int
    let counting: Counting
    /// A progress line every this many packets.
    let noteEvery: Int

    private(set) var sent = 0, received = 0
    private(set) var sentBytes = 0, receivedBytes = 0
    /// Round trips of the pings, in milliseconds.
    private(set) var rtts: [Double] = []
    /// The measured span (seconds on the owner's clock); `end` is 0 until the measurement stops.
    private(set) var start = 0.0, end = 0.0
    private var lastPing = 0.0

    init(scenario: Scenario, size: Int, count: Int, counting: Counting, noteEvery: Int = 1024) {
        self.scenario = scenario
        self.size = size
        self.count = count
        self.counting = counting
        self.noteEvery = max(1, noteEvery)
    }

    /// A send or a ping: this side starts the transfer.
    var sends: Bool { scenario == .send || scenario == .ping }
    /// The octets the result reports: sent by a sender, received by a receiver.
    var bytes: Int { sends ? sentBytes : receivedBytes }
    var packets: Int { max(sent, received) }
    var seconds: Double { end - start }
    var ended: Bool { end != 0 }

    // MARK: Sending

    /// A sender's start: RESET, and a ping's first packet. (A send's SEQUENCE packets then come from
    /// `nextSequence` as fast as the carrier takes them.)
    mutating func begin(at now: Double) -> Step {
        guard sends else { return Step() }
        start = now
        end = 0
        var step = Step(send: [.reset], startMeasuring: true)
        if scenario == .ping, let p = ping(at: now) { step.send.append(p) }
        return step
    }

    /// The next SEQUENCE packet of a send, nil once all went; it counts as sent only once `didSend()` is called
    /// (a carrier that cannot take it now asks again later).
    func nextSequence(at now: Double) -> Packet? {
        guard sent < count else { return nil }
        return .sequence(
            last: sent == count - 1, sequence: UInt32(sent), timestamp: UInt32(truncatingIfNeeded: Int((now - start) * 1e6)),
            payloadSize: max(0, size - counting.header))
    }

    /// The packet `nextSequence` gave left; a progress line when one is due.
    mutating func didSend() -> String? {
        sent += 1
        sentBytes += size
        return sent % noteEvery == 0 ? "sent \(sent)/\(count)" : nil
    }

    /// `nextSequence` and `didSend` at once, for a carrier that always takes it.
    mutating func takeSequence(at now: Double) -> (packet: Packet, note: String?)? {
        guard let p = nextSequence(at: now) else { return nil }
        return (p, didSend())
    }

    private mutating func ping(at now: Double) -> Packet? {
        guard let p = nextSequence(at: now) else { return nil }
        lastPing = now
        _ = didSend()
        return p
    }

    // MARK: Receiving

    /// One packet arrived (without the L2CAP length prefix): what to do.
    mutating func arrived(_ bytes: [UInt8], at now: Double) -> Step {
        guard let p = Packet.decode(bytes) else { return Step(invalid: true, note: "invalid packet (\(bytes.count) octets)") }
        var step = Step()
        switch (p, scenario) {
        case (.reset, _):
            received = 0
            receivedBytes = 0
            start = now
            end = 0
            step.startMeasuring = true
        case let (.sequence(last, seq, _, _), .receive):
            received += 1
            receivedBytes += counting.counted(bytes.count)
            if received % noteEvery == 0 { step.note = "received \(received)" }
            if last {
                end = now
                step.stopMeasuring = true
                step.send = [.ack(last: true, sequence: seq)]
                step.finished = true
            }
        case let (.sequence(last, seq, _, _), .pong):
            received += 1
            receivedBytes += counting.counted(bytes.count)
            if received == 1 {
                start = now
                step.startMeasuring = true
            }
            step.send = [.ack(last: last, sequence: seq)]
            if last {
                end = now
                step.stopMeasuring = true
                step.finished = true
            }
        case let (.ack(last, _), .send):
            end = now
            step.stopMeasuring = true
            step.finished = last
        case let (.ack(last, _), .ping):
            rtts.append((now - lastPing) * 1000)
            received += 1
            if last || sent >= count {
                end = now
                step.stopMeasuring = true
                step.finished = true
            } else if let next = ping(at: now) {
                step.send = [next]
            }
        default:
            break
        }
        return step
    }
}

/// A bench peer on our own host (GATT or L2CAP): it reads the transport's meters and sends the session's packets
/// itself. `perform` carries out a session's step for either.
protocol MeteredSpeedPeer: AnyObject {
    var meter: BenchMeter { get }
    var startSnapshot: BenchMeter.Snapshot? { get set }
    var endSnapshot: BenchMeter.Snapshot? { get set }
    var done: DispatchSemaphore { get }
    func say(_ s: String)
    func send(_ p: SpeedProtocol.Packet)
}

extension MeteredSpeedPeer {
    /// What the session asked for: the meters at the start and end of the measurement, its packets, the end.
    func perform(_ step: SpeedSession.Step) {
        if let note = step.note { say(note) }
        if step.startMeasuring {
            startSnapshot = meter.snapshot()
            endSnapshot = nil
        }
        if step.stopMeasuring { endSnapshot = meter.snapshot() }
        for p in step.send { send(p) }
        if step.finished { done.signal() }
    }
}
