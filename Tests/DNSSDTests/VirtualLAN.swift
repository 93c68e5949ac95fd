// A simulated link for mDNS engines: every datagram travels as bytes, with seeded latency (so packets
// reorder), loss and per-machine clocks driven by one virtual clock. Multicast reaches every machine,
// the sender included (IP_MULTICAST_LOOP), as on a real host.
@testable import DNSSD

struct VirtualLAN {
    struct Machine {
        var engine: MDNSEngine
        var address: IPAddress
        var wakeUp: MDNSInstant?
        var online = true
        /// The index of the interface this machine's packets arrive on.
        var interface: UInt32 = 1
    }
    struct Delivery {
        var at: MDNSInstant
        var seq: Int
        var to: Int
        var bytes: [UInt8]
        var from: MDNSPeer
    }
    struct Logged: Equatable {
        var at: MDNSInstant
        var machine: Int
        var event: MDNSEvent
    }

    var machines: [Machine] = []
    var inFlight: [Delivery] = []
    var now = MDNSInstant(milliseconds: 0)
    var rng: SplitMix64
    var lossPercent: Int
    var maxLatency: Int64
    var seq = 0
    var events: [Logged] = []
    var logs: [String] = []
    /// Every datagram sent, with its sender, for inspection.
    var sent: [(at: MDNSInstant, machine: Int, message: DNSMessage, to: MDNSDestination)] = []

    init(machines count: Int, seed: UInt64 = 1, lossPercent: Int = 0, maxLatency: Int64 = 2) {
        rng = SplitMix64(seed: seed)
        self.lossPercent = lossPercent
        self.maxLatency = maxLatency
        for i in 0..<count {
            let host = try! DNSName("host\(i).local")
            let address = IPAddress.v4([10, 0, 0, UInt8(i + 1)])
            machines.append(Machine(engine: MDNSEngine(hostName: host, addresses: [address], seed: seed &+ UInt64(i) &* 7919), address: address))
        }
    }

    mutating func apply(_ actions: [MDNSAction], machine: Int) {
        for action in actions {
            switch action {
            case .send(let bytes, let destination):
                sent.append((now, machine, try! DNSMessage(decoding: bytes), destination))
                for target in machines.indices {
                    let from = MDNSPeer(address: machines[machine].address, interface: machines[target].interface)
                    if case .unicast(let peer) = destination, machines[target].address != peer.address { continue }
                    if Int.random(in: 0..<100, using: &rng) < lossPercent { continue }
                    let latency = Int64.random(in: 0...maxLatency, using: &rng)
                    seq += 1
                    inFlight.append(Delivery(at: now + latency, seq: seq, to: target, bytes: bytes, from: from))
                }
            case .wakeUp(let at):
                machines[machine].wakeUp = at
            case .event(let e):
                events.append(Logged(at: now, machine: machine, event: e))
            case .log(let line):
                logs.append(line)
            }
        }
    }

    /// Runs an API call on a machine at the current time.
    mutating func on<T>(_ machine: Int, _ body: (inout MDNSEngine, MDNSInstant) -> (T, [MDNSAction])) -> T {
        let (value, actions) = body(&machines[machine].engine, now)
        apply(actions, machine: machine)
        return value
    }

    mutating func on(_ machine: Int, _ body: (inout MDNSEngine, MDNSInstant) -> [MDNSAction]) {
        let actions = body(&machines[machine].engine, now)
        apply(actions, machine: machine)
    }

    /// Advances the virtual clock by `ms`, delivering packets and firing timers in time order.
    mutating func run(for ms: Int64) {
        let end = now + ms
        while true {
            let nextDelivery = inFlight.min { ($0.at, $0.seq) < ($1.at, $1.seq) }
            let nextTimer = machines.indices.compactMap { i in machines[i].wakeUp.map { ($0, i) } }.min { $0.0 < $1.0 }
            let tDelivery = nextDelivery?.at
            let tTimer = nextTimer?.0
            guard let t = [tDelivery, tTimer].compactMap({ $0 }).min(), t <= end else { break }
            now = max(now, t)
            if let d = nextDelivery, d.at == t, tTimer.map({ d.at <= $0 }) ?? true {
                inFlight.removeAll { $0.seq == d.seq }
                guard machines[d.to].online else { continue }
                let actions = machines[d.to].engine.receive(d.bytes, from: d.from, now: now)
                apply(actions, machine: d.to)
            } else if let (_, i) = nextTimer {
                machines[i].wakeUp = nil
                guard machines[i].online else { continue }
                let actions = machines[i].engine.timerFired(now: now)
                apply(actions, machine: i)
            }
        }
        now = end
    }

    func events(of machine: Int) -> [MDNSEvent] { events.filter { $0.machine == machine }.map(\.event) }

    func firstEvent(of machine: Int, after: MDNSInstant = MDNSInstant(milliseconds: 0), where match: (MDNSEvent) -> Bool) -> Logged? {
        events.first { $0.machine == machine && $0.at >= after && match($0.event) }
    }
}

extension MDNSEvent {
    var isFound: Bool { if case .found = self { return true }; return false }
    var isLost: Bool { if case .lost = self { return true }; return false }
    var isUpdated: Bool { if case .updated = self { return true }; return false }
    var foundService: ResolvedService? { if case .found(_, let s) = self { return s }; return nil }
}
