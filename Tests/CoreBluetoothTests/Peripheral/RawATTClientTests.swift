// CBPeripheralManager answering hand-written ATT PDUs from a raw client (HCI and ATT bytes built by hand on
// a virtual controller, no host stack): offsets, invalid offsets, queued writes as one batch, refusals,
// malformed and unsupported requests, and a request left unanswered that does not wedge the server.
import Foundation
import Testing
import TestSupport
import CoreBluetooth
import BLEWire
import BLEHCI
import BLEATT
import BLETransport
import BLEVirtualRadio

/// A central made of raw HCI packets on a virtual controller.
final class RawATTClient: HCITransportSink, @unchecked Sendable {
    let controller: VirtualController
    private let lock = NSLock()
    private var events: [HCIEvent] = []
    private var att: [[UInt8]] = []
    private var other: [[UInt8]] = []
    var handle: UInt16 = 0

    init(air: VirtualAir) throws {
        controller = air.addController()
        try controller.open(sink: self)
        controller.send(HCICommand.setEventMask(0x2000_1FFF_FFFF_FFFF).encode())
    }

    func transport(didReceive packet: HCIPacket) {
        lock.lock(); defer { lock.unlock() }
        if packet.type == .event, let e = try? HCIEvent.decode(packet) { events.append(e) }
        // ATT is L2CAP channel 4; frames on the others (signalling, SMP) are not answers.
        if packet.type == .acl, let a = try? ACLPacket.decode(packet), a.data.count >= 4 {
            if a.data[2] == 0x04 && a.data[3] == 0x00 { att.append(Array(a.data[4...])) } else { other.append(Array(a.data)) }
        }
    }
    func transportDidClose(error: (any Error)?) {}

    func connect(to address: BluetoothAddress) async throws {
        controller.send(
            HCICommand.leCreateConnection(
                LECreateConnection(
                    leScanInterval: 0x10, leScanWindow: 0x10, initiatorFilterPolicy: 0, peerAddressType: 0, peerAddress: address, ownAddressType: 0,
                    connectionIntervalMin: 6, connectionIntervalMax: 6, maxLatency: 0, supervisionTimeout: 100, minCELength: 0, maxCELength: 0)
            ).encode())
        try await waitUntil("raw connection") {
            lock.withLock {
                events.contains {
                    if case .le(.connectionComplete(let c)) = $0, c.status == .success { handle = c.connectionHandle; return true }; return false
                }
            }
        }
    }

    /// Sends an ATT PDU (bytes as written by hand) and waits for one answer, or returns nil after `seconds`
    /// (generous: other suites run in this process at the same time), recording what came instead as an issue
    /// unless the request `mayGoUnanswered`.
    func request(_ pdu: [UInt8], seconds: Double = 30, mayGoUnanswered: Bool = false) async throws -> [UInt8]? {
        let before = lock.withLock { att.count }
        var frame: [UInt8] = [UInt8(pdu.count & 0xFF), UInt8(pdu.count >> 8), 0x04, 0x00]
        frame += pdu
        controller.send(ACLPacket(handle: handle, boundary: .firstNonFlushable, data: frame).encode())
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let r = lock.withLock({ att.count > before ? att[before] : nil }) { return r }
            try await pause(nanoseconds: 2_000_000)
        }
        // What came instead, for the failure (a full run under load once saw no answer at all).
        guard !mayGoUnanswered else { return nil }
        let seen = lock.withLock { "handle \(handle); ATT \(att); other L2CAP \(other); last events \(events.suffix(6))" }
        Issue.record("no answer to \(pdu) within \(seconds) s: \(seen)")
        return nil
    }
}

/// A peripheral with a dynamic 100-octet value (answered at any offset) and a read-only cached value.
final class OffsetPeripheral: NSObject, CBPeripheralManagerDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "raw.peripheral")
    let log = EventLog()
    var manager: CBPeripheralManager!
    let value = Data((0..<100).map { UInt8($0) })
    var readOffsets: [Int] = []
    var batches: [[(Int, Data)]] = []
    var ignoreReads = false
    var refuseWrites = false
    var dynamicHandle: UInt16 = 0

    func peripheralManagerDidUpdateState(_ p: CBPeripheralManager) {
        guard p.state == .poweredOn else { return }
        let s = CBMutableService(type: CBUUID(string: "FFF0"), primary: true)
        s.characteristics = [
            CBMutableCharacteristic(type: CBUUID(string: "FFF1"), properties: [.read, .write], value: nil, permissions: [.readable, .writeable]),
            CBMutableCharacteristic(type: CBUUID(string: "FFF2"), properties: [.read], value: Data("fixed".utf8), permissions: [.readable]),
        ]
        p.add(s)
    }
    func peripheralManager(_ p: CBPeripheralManager, didAdd service: CBService, error: Error?) {
        p.startAdvertising([CBAdvertisementDataLocalNameKey: "raw"])
    }
    func peripheralManagerDidStartAdvertising(_ p: CBPeripheralManager, error: Error?) { log.add("advertising") }
    func peripheralManager(_ p: CBPeripheralManager, didReceiveRead request: CBATTRequest) {
        readOffsets.append(request.offset)
        if ignoreReads { return }
        // The Programming Guide's pattern (seed 000).
        if request.offset > value.count { return p.respond(to: request, withResult: .invalidOffset) }
        request.value = value.subdata(in: request.offset..<value.count)
        p.respond(to: request, withResult: .success)
    }
    func peripheralManager(_ p: CBPeripheralManager, didReceiveWrite requests: [CBATTRequest]) {
        batches.append(requests.map { ($0.offset, $0.value ?? Data()) })
        p.respond(to: requests[0], withResult: refuseWrites ? .writeNotPermitted : .success)
    }
}

@Suite(.serialized) struct RawATTClientTests {
    func setUp() async throws -> (OffsetPeripheral, RawATTClient, VirtualAir) {
        let air = TestAir()
        let per = OffsetPeripheral()
        let host = try air.host("peripheral")
        per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: host)
        try await waitUntil("advertising") { per.log.contains("advertising") }
        let raw = try RawATTClient(air: air.air)
        try await raw.connect(to: BluetoothAddress(bytes: (host.transport as! VirtualController).address.bytes))
        // The GAP (1–5) and GATT (6–9) services come first: FFF0 at 10, FFF1 declared at 11 (value 12), FFF2 at 13 (value 14).
        return (per, raw, air.air)
    }

    @Test func readsWithOffsetsAndInvalidOffset() async throws {
        let (per, raw, _) = try await setUp()
        // ATT_READ_REQ handle 0x000C: 22 octets (ATT_MTU 23 − 1), from the delegate at offset 0.
        #expect(try await raw.request([0x0A, 0x0C, 0x00]) == [0x0B] + Array(0..<22))
        // ATT_READ_BLOB_REQ at 22, then past the end: the delegate's invalidOffset becomes error 0x07.
        #expect(try await raw.request([0x0C, 0x0C, 0x00, 22, 0x00]) == [0x0D] + Array(22..<44))
        #expect(try await raw.request([0x0C, 0x0C, 0x00, 101, 0x00]) == [0x01, 0x0C, 0x0C, 0x00, 0x07])
        #expect(per.queue.sync { per.readOffsets } == [0, 22, 101])
        // A cached value is served without the delegate.
        #expect(try await raw.request([0x0A, 0x0E, 0x00]) == [0x0B] + Array("fixed".utf8))
        #expect(per.queue.sync { per.readOffsets }.count == 3)
    }

    @Test func queuedWritesArriveAsOneBatch() async throws {
        let (per, raw, _) = try await setUp()
        for (offset, part) in [(0, [1, 2, 3]), (3, [4, 5]), (5, [6])] as [(UInt8, [UInt8])] {
            let pdu: [UInt8] = [0x16, 0x0C, 0x00, offset, 0x00] + part
            // ATT_PREPARE_WRITE_RSP echoes the request.
            #expect(try await raw.request(pdu) == [0x17] + Array(pdu.dropFirst()))
        }
        #expect(per.queue.sync { per.batches.isEmpty })
        #expect(try await raw.request([0x18, 0x01]) == [0x19])
        let batches = per.queue.sync { per.batches }
        #expect(batches.count == 1)
        #expect(batches.first?.map(\.0) == [0, 3, 5])
        #expect(batches.first?.map { [UInt8]($0.1) } == [[1, 2, 3], [4, 5], [6]])
        // Refused by the delegate: the Execute Write gets the error and nothing is applied.
        per.queue.sync { per.refuseWrites = true }
        _ = try await raw.request([0x16, 0x0C, 0x00, 0x00, 0x00, 9])
        #expect(try await raw.request([0x18, 0x01]) == [0x01, 0x18, 0x0C, 0x00, 0x03])
        // Cancelling a queue never reaches the delegate.
        _ = try await raw.request([0x16, 0x0C, 0x00, 0x00, 0x00, 9])
        #expect(try await raw.request([0x18, 0x00]) == [0x19])
        #expect(per.queue.sync { per.batches.count } == 2)
    }

    @Test func refusedMalformedAndUnsupportedRequests() async throws {
        let (per, raw, _) = try await setUp()
        defer { withExtendedLifetime(per) {} }   // the peripheral's manager (and host) live as long as the test
        // Write to a read-only cached value: Write Not Permitted (0x03).
        #expect(try await raw.request([0x12, 0x0E, 0x00, 0x41]) == [0x01, 0x12, 0x0E, 0x00, 0x03])
        // Read Request one octet short: Invalid PDU (0x04).
        #expect(try await raw.request([0x0A, 0x0C]) == [0x01, 0x0A, 0x00, 0x00, 0x04])
        // A request opcode the server does not know: Request Not Supported (0x06).
        #expect(try await raw.request([0x3E, 0x00]) == [0x01, 0x3E, 0x00, 0x00, 0x06])
        // Invalid handle.
        #expect(try await raw.request([0x0A, 0x00, 0x01]) == [0x01, 0x0A, 0x00, 0x01, 0x01])
    }

    @Test func aCompleteFrameRightAfterAnIncompleteOneIsAnswered() async throws {
        // Issue 16's first defect: a Read that is answered; an ACL start fragment whose L2CAP header announces
        // 32 octets with 1 following; then a complete Read Request — it must be answered, not lost.
        let (per, raw, _) = try await setUp()
        defer { withExtendedLifetime(per) {} }   // the peripheral's manager (and host) live as long as the test
        #expect(try await raw.request([0x0A, 0x0E, 0x00]) == [0x0B] + Array("fixed".utf8))
        raw.controller.send(ACLPacket(handle: raw.handle, boundary: .firstNonFlushable, data: [32, 0, 0x04, 0x00, 0x0A]).encode())
        #expect(try await raw.request([0x0A, 0x0E, 0x00]) == [0x0B] + Array("fixed".utf8))
    }

    @Test func anUnansweredReadDoesNotWedgeTheServer() async throws {
        let (per, raw, air) = try await setUp()
        per.queue.sync { per.ignoreReads = true }
        #expect(try await raw.request([0x0A, 0x0C, 0x00], seconds: 0.5, mayGoUnanswered: true) == nil)
        // Another client is served meanwhile.
        let other = try RawATTClient(air: air)
        let host = per.manager.leHostForTests
        try await other.connect(to: BluetoothAddress(bytes: (host.transport as! VirtualController).address.bytes))
        #expect(try await other.request([0x0A, 0x0E, 0x00]) == [0x0B] + Array("fixed".utf8))
    }
}
