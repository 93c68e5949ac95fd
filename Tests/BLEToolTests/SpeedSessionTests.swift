// bumble-bench's speed protocol as one value (SpeedSession, used by `ble bench peer` over GATT, our L2CAP channel
// and the kernel's): two sessions run against each other, with a clock the test sets.
import Testing
@testable import ble

@Suite struct SpeedSessionTests {
    /// What a carrier puts on the wire for a packet: GATT the packet, L2CAP the packet framed by its length.
    func wire(_ p: SpeedProtocol.Packet, _ counting: SpeedSession.Counting) -> [UInt8] {
        counting == .framed ? SpeedL2CAP.frame(p.encode()) : p.encode()
    }

    /// A send and a receive agree on the octets moved: `size` per packet on the wire, the L2CAP length prefix
    /// included (the receiver adds its 2 octets to each packet it counts).
    @Test(arguments: [(SpeedSession.Counting.packet, 244), (.framed, 1024), (.framed, 12)])
    func aSendAndAReceiveCountTheSameOctetsAndEndAtTheAckOfTheLastPacket(counting: SpeedSession.Counting, size: Int) throws {
        var tx = SpeedSession(scenario: .send, size: size, count: 5, counting: counting, noteEvery: 2)
        var rx = SpeedSession(scenario: .receive, size: size, count: 5, counting: counting, noteEvery: 2)
        let begin = tx.begin(at: 10)
        #expect(begin == SpeedSession.Step(send: [.reset], startMeasuring: true))
        #expect(rx.arrived(SpeedProtocol.Packet.reset.encode(), at: 10.5).startMeasuring)
        var notes: [String] = []
        var onWire = 0
        var last: SpeedSession.Step?
        var clock = 11.0
        while let next = tx.takeSequence(at: clock) {
            if let n = next.note { notes.append(n) }
            let bytes = wire(next.packet, counting)
            onWire += bytes.count
            // The receiver sees the packet without the L2CAP length prefix (the deframer takes it off).
            let step = rx.arrived(counting == .framed ? Array(bytes.dropFirst(2)) : bytes, at: clock + 0.5)
            if let n = step.note { notes.append(n) }
            #expect(last == nil, "nothing after the LAST packet")
            if step.finished { last = step }
            clock += 1
        }
        #expect(onWire == 5 * size)
        #expect(tx.sentBytes == 5 * size && rx.receivedBytes == 5 * size)
        #expect(tx.bytes == 5 * size && rx.bytes == 5 * size && tx.packets == 5 && rx.packets == 5)
        #expect(notes == ["sent 2/5", "received 2", "sent 4/5", "received 4"])
        // The receiver ACKs the LAST packet, sequence 4, and stops there.
        let end = try #require(last)
        #expect(end == SpeedSession.Step(send: [.ack(last: true, sequence: 4)], stopMeasuring: true, finished: true))
        #expect(rx.start == 10.5 && rx.end == 15.5 && rx.seconds == 5)
        #expect(!tx.ended)
        let done = tx.arrived(end.send[0].encode(), at: 16)
        #expect(done == SpeedSession.Step(stopMeasuring: true, finished: true))
        #expect(tx.seconds == 6 && tx.ended)
    }

    /// SEQUENCE packets carry the sequence, LAST on the last, the time since the start in µs and a payload that makes
    /// them `size` octets on the wire.
    @Test func sequencePacketsAreWhatBumbleBenchSends() throws {
        var s = SpeedSession(scenario: .send, size: 100, count: 2, counting: .framed)
        _ = s.begin(at: 1)
        let first = try #require(s.nextSequence(at: 1.25))
        #expect(first == .sequence(last: false, sequence: 0, timestamp: 250_000, payloadSize: 88))
        // Not taken by the carrier: the same packet again, nothing counted.
        #expect(s.nextSequence(at: 1.25) == first && s.sent == 0 && s.sentBytes == 0)
        _ = s.didSend()
        #expect(s.nextSequence(at: 2) == .sequence(last: true, sequence: 1, timestamp: 1_000_000, payloadSize: 88))
        _ = s.didSend()
        #expect(s.nextSequence(at: 3) == nil && s.takeSequence(at: 3) == nil && s.sent == 2)
        var g = SpeedSession(scenario: .send, size: 20, count: 1, counting: .packet)
        #expect(g.takeSequence(at: 0)?.packet.encode().count == 20)
        // A size below the header sends the header alone.
        var tiny = SpeedSession(scenario: .send, size: 5, count: 1, counting: .packet)
        #expect(tiny.takeSequence(at: 0)?.packet == .sequence(last: true, sequence: 0, timestamp: 0, payloadSize: 0))
    }

    /// A ping sends one packet per ACK and times each round trip; a pong ACKs each packet, echoing LAST, and
    /// measures from the first.
    @Test(arguments: [SpeedSession.Counting.packet, .framed])
    func pingAndPongTimeEachRoundTrip(counting: SpeedSession.Counting) throws {
        var ping = SpeedSession(scenario: .ping, size: 40, count: 3, counting: counting)
        var pong = SpeedSession(scenario: .pong, size: 40, count: 3, counting: counting)
        var clock = 100.0
        var toPong = ping.begin(at: clock).send
        #expect(toPong.count == 2 && toPong[0] == .reset)
        var finishedPing = false, finishedPong = false
        var acks: [SpeedProtocol.Packet] = []
        var rounds = 0
        while !toPong.isEmpty, rounds < 10 {
            rounds += 1
            var toPing: [SpeedProtocol.Packet] = []
            for p in toPong {
                let step = pong.arrived(p.encode(), at: clock + 0.001)
                toPing += step.send
                finishedPong = finishedPong || step.finished
            }
            acks += toPing
            clock += 0.002 * Double(rounds)   // round trips of 2, 4 and 6 ms
            toPong = []
            for a in toPing {
                let step = ping.arrived(a.encode(), at: clock)
                toPong += step.send
                finishedPing = finishedPing || step.finished
            }
        }
        #expect(finishedPing && finishedPong)
        #expect(acks == [.ack(last: false, sequence: 0), .ack(last: false, sequence: 1), .ack(last: true, sequence: 2)])
        #expect(ping.rtts.count == 3)
        for (rtt, expected) in zip(ping.rtts, [2.0, 4.0, 6.0]) { #expect(abs(rtt - expected) < 1e-6) }
        #expect(ping.sent == 3 && ping.received == 3 && ping.sentBytes == 120)
        #expect(pong.received == 3 && pong.receivedBytes == 120)
        #expect(pong.start == 100.001)
    }

    /// RESET starts the measurement again; a packet that does not decode is reported and changes nothing; a packet
    /// the scenario does not expect is ignored.
    @Test func resetStartsAgainAndBadPacketsChangeNothing() {
        var rx = SpeedSession(scenario: .receive, size: 30, count: 10, counting: .framed)
        _ = rx.arrived(SpeedProtocol.Packet.sequence(last: false, sequence: 0, timestamp: 0, payloadSize: 18).encode(), at: 1)
        #expect(rx.received == 1 && rx.receivedBytes == 30)
        #expect(rx.arrived([0], at: 2) == SpeedSession.Step(startMeasuring: true))
        #expect(rx.received == 0 && rx.receivedBytes == 0 && rx.start == 2)
        let before = rx
        for bad: [UInt8] in [[], [7], [1, 0, 1], [2, 1]] {
            let step = rx.arrived(bad, at: 3)
            #expect(step.invalid && step.send.isEmpty && !step.finished, "\(bad)")
            #expect(step.note == "invalid packet (\(bad.count) octets)")
        }
        #expect(rx == before)
        // An ACK means nothing to a receiver; a receive does not begin anything.
        #expect(rx.arrived(SpeedProtocol.Packet.ack(last: true, sequence: 0).encode(), at: 4) == SpeedSession.Step())
        #expect(rx.begin(at: 5) == SpeedSession.Step() && rx.start == 2)
        #expect(!rx.sends && rx.bytes == 0)
    }
}
