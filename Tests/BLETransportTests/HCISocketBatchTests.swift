// The HCI-socket transport takes many packets per system call (issue 23): the reader takes every message the socket
// holds with one recvmmsg and hands them to the host at once, on its own thread. Going out, each packet is a sendmsg
// of its own, gathered from its array: the kernel's HCI socket refuses the MSG_BATCH flag that sendmmsg gives all
// but the last message of a batch (a SOCK_SEQPACKET pair takes it, so only the kernel scenarios can show that). A SOCK_SEQPACKET pair stands in for the kernel's user channel: it keeps
// message boundaries as the HCI socket does.
import Foundation
import Testing
import TestSupport
import BLEHCI
@testable import BLETransport
@testable import BLETransportLinux

private final class BatchSink: HCITransportSink, @unchecked Sendable {
    private let lock = NSLock()
    private var received: [[HCIPacket]] = []
    private var threads: Set<UInt> = []
    var batches: [[HCIPacket]] { lock.withLock { received } }
    var packets: [HCIPacket] { lock.withLock { received.flatMap { $0 } } }
    var deliveringThreads: Set<UInt> { lock.withLock { threads } }
    func transport(didReceive packet: HCIPacket) { transport(didReceivePackets: [packet]) }
    func transport(didReceivePackets packets: [HCIPacket]) {
        let thread = UInt(pthread_self())
        // Copies: the transport builds later packets in these packets' arrays once the sink returns.
        let copies = packets.map { HCIPacket(type: $0.type, bytes: Array($0.bytes)) }
        lock.withLock {
            received.append(copies)
            threads.insert(thread)
        }
    }
    func transportDidClose(error: (any Error)?) {}
}

private func seqpacketPair() throws -> (ours: Int32, kernel: Int32) {
    var pair: [Int32] = [-1, -1]
    try #require(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
    // A message that never comes fails the test after 10 s instead of blocking its thread for ever.
    var limit = timeval(tv_sec: 10, tv_usec: 0)
    _ = setsockopt(pair[1], SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
    return (pair[0], pair[1])
}

/// Packets of the sizes a controller sends: small events, short and full ACL fragments.
private func controllerPackets(_ count: Int) -> [HCIPacket] {
    (0..<count).map { i in
        switch i % 3 {
        case 0: HCIPacket(type: .event, bytes: [0x13, 0x05, 0x01, 0x40, 0x00, 0x01, UInt8(i & 0xFF)])
        case 1: HCIPacket(type: .acl, bytes: [0x40, 0x20, 0x1B, 0x00] + (0..<27).map { UInt8(($0 + i) & 0xFF) })
        default: HCIPacket(type: .acl, bytes: [0x40, 0x10, 0xFB, 0x00] + (0..<251).map { UInt8(($0 * 7 + i) & 0xFF) })
        }
    }
}

/// Reads the messages waiting at the kernel's end: one per packet, each that packet's H4 octets, and no more.
private func expectMessages(_ packets: [HCIPacket], on kernel: Int32) throws {
    var buffer = [UInt8](repeating: 0, count: 4096)
    for expected in packets {
        let n = recv(kernel, &buffer, buffer.count, 0)
        try #require(n > 0)
        #expect(Array(buffer[0..<n]) == expected.h4Bytes)
    }
    #expect(recv(kernel, &buffer, buffer.count, Int32(MSG_DONTWAIT)) == -1, "a message too many")
}

/// An open transport on one end of a fresh pair, and the "kernel's" end; both closed after `body`.
private func withOpenTransport(_ body: (HCISocketTransport, Int32) throws -> Void) throws {
    let (ours, kernel) = try seqpacketPair()
    defer { close(kernel) }
    let transport = HCISocketTransport(index: 0) { ours }
    try transport.open(sink: BatchSink())
    defer { transport.close() }
    try body(transport, kernel)
}

@Suite(.timeLimit(.minutes(2)))
struct HCISocketBatchTests {
    /// 40 packets waiting in the socket reach the host in order, whole, in at most 3 reads of up to 16 and all on
    /// the reader thread (the host runs them there); before, each cost a poll, a read and a hop onto the host's loop.
    @Test func whatTheSocketHoldsArrivesInBatchesInOrder() throws {
        let (ours, kernel) = try seqpacketPair()
        defer { close(kernel) }
        let sent = controllerPackets(40)
        for p in sent {
            let b = p.h4Bytes
            #expect(send(kernel, b, b.count, 0) == b.count)
        }
        let sink = BatchSink()
        let transport = HCISocketTransport(index: 0) { ours }
        #expect(transport.deliversOnReaderThread)
        try transport.open(sink: sink)
        defer { transport.close() }
        try waitSync("40 packets") { sink.packets.count == 40 }
        #expect(sink.packets == sent)
        #expect(sink.batches.map(\.count) == [16, 16, 8])
        #expect(sink.deliveringThreads.count == 1)
        #expect(!sink.deliveringThreads.contains(UInt(pthread_self())))
        let stats = try #require(transport.statistics)
        #expect(stats.reads == 3)
        #expect(stats.packetsIn == 40)
        #expect(stats.bytesIn == sent.reduce(0) { $0 + $1.bytes.count + 1 })
        // One poll: a full read is followed by another read at once, without sleeping first.
        #expect(stats.other == 1)
    }

    /// Completion events for one handle, one to a message, reach a host (a sink that asks) as one event per run
    /// within a read, counts added up; any other packet, or another handle, ends the run. The statistics count the
    /// controller's packets. A sink that does not ask gets every event as it came (`whatTheSocketHoldsArrivesInBatchesInOrder`).
    @Test func aRunOfCompletionsReachesAHostAsOneEvent() throws {
        let (ours, kernel) = try seqpacketPair()
        defer { close(kernel) }
        func done(_ handle: UInt8, _ count: UInt8) -> HCIPacket { HCIPacket(type: .event, bytes: [0x13, 0x05, 0x01, handle, 0x00, count, 0x00]) }
        let data = HCIPacket(type: .acl, bytes: [0x40, 0x20, 0x02, 0x00, 0x01, 0x02])
        let sent = [done(0x40, 1), done(0x40, 2), done(0x40, 1), data, done(0x40, 1), done(0x41, 1), done(0x41, 3)]
        for p in sent {
            let b = p.h4Bytes
            #expect(send(kernel, b, b.count, 0) == b.count)
        }
        let sink = StreamCoalescingTests.CompletionSink(accepts: true)
        let transport = HCISocketTransport(index: 0) { ours }
        try transport.open(sink: sink)
        defer { transport.close() }
        try waitSync("the packets") { sink.got.all.last == done(0x41, 4) }
        #expect(sink.got.all == [done(0x40, 4), data, done(0x40, 1), done(0x41, 4)])
        #expect(transport.statistics?.packetsIn == sent.count)
    }

    /// A batch leaves packet by packet, each a message of its own on the socket, byte for byte, and each its own
    /// system call (see the header: a sendmmsg would lose all but the last packet of each batch on a real adapter).
    @Test func aBatchLeavesAPacketAMessageEachItsOwnCall() throws {
        try withOpenTransport { transport, kernel in
            let batch = controllerPackets(100).map { HCIPacket(type: $0.type == .event ? .command : .acl, bytes: $0.bytes) }
            transport.send(batch: batch)
            transport.send(HCIPacket(type: .command, bytes: [0x03, 0x0C, 0x00]))
            try expectMessages(batch + [HCIPacket(type: .command, bytes: [0x03, 0x0C, 0x00])], on: kernel)
            let stats = try #require(transport.statistics)
            #expect(stats.writes == 101)
            #expect(stats.packetsOut == 101)
            #expect(stats.bytesOut == batch.reduce(0) { $0 + $1.bytes.count + 1 } + 4)
        }
    }

    /// A packet the socket refuses (here larger than its send buffer) is lost alone: the packets after it in the
    /// batch still go.
    @Test func aRefusedPacketDoesNotTakeTheRestOfItsBatchWithIt() throws {
        try withOpenTransport { transport, kernel in
            let first = HCIPacket(type: .command, bytes: [0x01, 0x0C, 0x00])
            let huge = HCIPacket(type: .acl, bytes: [UInt8](repeating: 0xAA, count: 1 << 20))
            let last = HCIPacket(type: .command, bytes: [0x03, 0x0C, 0x00])
            transport.send(batch: [first, huge, last])
            try expectMessages([first, last], on: kernel)
            #expect(transport.statistics?.packetsOut == 2)
        }
    }

    /// A message larger than the reader's 4 KB slots, an empty-bodied one and one of no HCI type are dropped and
    /// counted; the packets around them arrive whole, and the transport goes on reading.
    @Test func messagesThatAreNoPacketAreDroppedAndTheRestArrive() throws {
        let (ours, kernel) = try seqpacketPair()
        defer { close(kernel) }
        let before = HCIPacket(type: .event, bytes: [0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00])
        let after = HCIPacket(type: .acl, bytes: [0x40, 0x20, 0x02, 0x00, 0x01, 0x02])
        let oversized = [HCIPacketType.acl.rawValue] + [UInt8](repeating: 0x55, count: 5000)
        for message in [before.h4Bytes, oversized, [HCIPacketType.event.rawValue], [0x77, 0x01, 0x02], after.h4Bytes] {
            #expect(send(kernel, message, message.count, 0) == message.count)
        }
        let sink = BatchSink()
        let transport = HCISocketTransport(index: 0) { ours }
        try transport.open(sink: sink)
        defer { transport.close() }
        try waitSync("the packets after the dropped messages") { sink.packets.count == 2 }
        #expect(sink.packets == [before, after])
        #expect(transport.droppedMessages == 3)
        // Still reading.
        let later = HCIPacket(type: .event, bytes: [0x13, 0x05, 0x01, 0x40, 0x00, 0x01, 0x00])
        #expect(send(kernel, later.h4Bytes, later.h4Bytes.count, 0) == later.h4Bytes.count)
        try waitSync("a packet after them") { sink.packets.count == 3 }
        #expect(sink.packets.last == later)
    }

    /// The host reopening the controller from within a batch (as it answers a Hardware Error event) finds the adapter
    /// free: `close()` on the reader thread closes the socket at once. This fake kernel, like Linux, keeps an adapter
    /// taken while a user channel on it is open; the reopen failed (EUSERS) while the reader held the old socket open
    /// until the batch returned. The old reader then reads nothing more, even when the new socket gets its number.
    @Test func closingAndReopeningFromWithinABatchFindsTheAdapterFree() throws {
        final class Kernel: @unchecked Sendable {
            let lock = NSLock()
            var ends: [(ours: Int32, kernel: Int32, identity: FileIdentity)] = []
            func bind() throws -> Int32 {
                try lock.withLock {
                    if let last = ends.last, FileIdentity(last.ours) == last.identity {
                        throw TransportError.connectFailed(HCISocketTransport.explainBindFailure(index: 0, errno: EUSERS))
                    }
                    let (ours, kernel) = try seqpacketPair()
                    ends.append((ours, kernel, try #require(FileIdentity(ours))))
                    return ours
                }
            }
            var kernelEnds: [Int32] { lock.withLock { ends.map(\.kernel) } }
        }
        final class Reopener: HCITransportSink, @unchecked Sendable {
            let lock = NSLock()
            var transport: HCISocketTransport?
            var reopen: Result<Void, any Error>?
            var received: [HCIPacket] = []
            func transport(didReceive packet: HCIPacket) { transport(didReceivePackets: [packet]) }
            func transport(didReceivePackets packets: [HCIPacket]) {
                for p in packets {
                    if p.type == .event && p.bytes.first == 0x10 && lock.withLock({ reopen == nil }) {
                        guard let transport else { continue }
                        transport.close()
                        let r = Result { try transport.open(sink: self) }
                        lock.withLock { reopen = r }
                    } else {
                        lock.withLock { received.append(p) }
                    }
                }
            }
            func transportDidClose(error: (any Error)?) {}
        }
        let kernel = Kernel()
        defer { kernel.kernelEnds.forEach { close($0) } }
        let transport = HCISocketTransport(index: 0) { try kernel.bind() }
        let sink = Reopener()
        sink.transport = transport
        try transport.open(sink: sink)
        defer { transport.close() }
        let hardwareError = HCIPacket(type: .event, bytes: [0x10, 0x01, 0x00])
        let first = try #require(kernel.kernelEnds.first)
        #expect(send(first, hardwareError.h4Bytes, hardwareError.h4Bytes.count, 0) == hardwareError.h4Bytes.count)
        try waitSync("the reopen") { sink.lock.withLock { sink.reopen != nil } }
        let reopened = sink.lock.withLock { sink.reopen }
        #expect(throws: Never.self) { try reopened?.get() }
        let ends = kernel.kernelEnds
        try #require(ends.count == 2, "the adapter was not bound again")
        let later = HCIPacket(type: .event, bytes: [0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00])
        #expect(send(ends[1], later.h4Bytes, later.h4Bytes.count, 0) == later.h4Bytes.count)
        try waitSync("the packet on the new socket") { sink.lock.withLock { !sink.received.isEmpty } }
        usleep(50_000)
        #expect(sink.lock.withLock { sink.received } == [later], "read once, by the new socket's reader alone")
        // The counts are the transport's, over both sockets: the old reader's read is not lost or overwritten.
        let stats = try #require(transport.statistics)
        #expect(stats.packetsIn == 2)
        #expect(stats.bytesIn == hardwareError.h4Bytes.count + later.h4Bytes.count)
        #expect(stats.reads >= 2)
    }

    /// The other end closing ends the transport once the packets sent before it are delivered.
    @Test func theEndOfTheSocketComesAfterItsPackets() throws {
        let (ours, kernel) = try seqpacketPair()
        let sent = controllerPackets(20)
        for p in sent { _ = send(kernel, p.h4Bytes, p.h4Bytes.count, 0) }
        close(kernel)
        final class ClosingSink: HCITransportSink, @unchecked Sendable {
            let inner = BatchSink()
            let closed = DispatchSemaphore(value: 0)
            let countAtClose = Locked(-1)
            func transport(didReceive packet: HCIPacket) { inner.transport(didReceive: packet) }
            func transport(didReceivePackets packets: [HCIPacket]) { inner.transport(didReceivePackets: packets) }
            func transportDidClose(error: (any Error)?) {
                countAtClose.withLock { $0 = inner.packets.count }
                closed.signal()
            }
        }
        let sink = ClosingSink()
        let transport = HCISocketTransport(index: 0) { ours }
        try transport.open(sink: sink)
        defer { transport.close() }
        #expect(sink.closed.wait(timeout: .now() + 10) == .success, "the end of the socket was not reported")
        #expect(sink.countAtClose.withLock { $0 } == 20)
        #expect(sink.inner.packets == sent)
    }
}
