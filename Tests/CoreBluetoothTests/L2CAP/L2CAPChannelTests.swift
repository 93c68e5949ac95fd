// CBL2CAPChannel end to end on the virtual radio, through the Core Bluetooth API only: publishing (the PSM
// found through CBUUIDL2CAPPSMCharacteristicString as apps do), opening, streams scheduled on a run loop of
// a background thread, data both ways, a slow reader, errors iOS gives, encryption, releasing, unpublishing.
import Foundation
import Testing
import TestSupport
import CoreBluetooth
import BoundStreams

/// Runs a run loop on a background thread, as an app's stream thread does.
final class StreamLoop: @unchecked Sendable {
    private(set) var runLoop: RunLoop!
    private let lock = NSLock()
    private var stopped = false
    init() {
        let ready = DispatchSemaphore(value: 0)
        Thread { [self] in
            runLoop = RunLoop.current
            runLoop.add(Timer(timeInterval: 86_400, repeats: true) { _ in }, forMode: .default)
            ready.signal()
            while !lock.withLock({ stopped }) { _ = runLoop.run(mode: .default, before: Date().addingTimeInterval(0.2)) }
        }.start()
        ready.wait()
    }
    func stop() { lock.withLock { stopped = true } }
}

/// Reads everything a channel's input stream delivers (optionally slowly) and writes queued data into its
/// output stream as space allows, on the stream loop.
final class ChannelEndpoint: NSObject, StreamDelegate, @unchecked Sendable {
    /// The streams only: the app's reference to the channel itself decides how long it stays open.
    let input: InputStream
    let output: OutputStream
    private let lock = NSLock()
    private let readLock = NSLock()
    private var _received: [UInt8] = []
    private var _events: [Stream.Event] = []
    private var outgoing: [UInt8] = []
    private var zeroWrites = 0
    var readPaused = false
    var received: [UInt8] { lock.withLock { _received } }
    var events: [Stream.Event] { lock.withLock { _events } }
    var throttled: Int { lock.withLock { zeroWrites } }

    init(_ channel: CBL2CAPChannel, on loop: StreamLoop) {
        input = channel.inputStream
        output = channel.outputStream
        super.init()
        for s in [input as Stream, output as Stream] {
            s.delegate = self
            s.schedule(in: loop.runLoop, forMode: .default)
            s.open()
        }
    }

    func send(_ data: [UInt8]) {
        lock.withLock { outgoing += data }
        // Writing happens on .hasSpaceAvailable; kick it in case the stream has space now.
        stream(output, handle: .hasSpaceAvailable)
    }

    func resumeReading() {
        lock.withLock { readPaused = false }
        stream(input, handle: .hasBytesAvailable)
    }

    func stream(_ s: Stream, handle e: Stream.Event) {
        lock.withLock { _events.append(e) }
        switch e {
        case .hasBytesAvailable:
            guard let i = s as? InputStream, !lock.withLock({ readPaused }) else { return }
            var buf = [UInt8](repeating: 0, count: 8192)
            // One reader at a time: `resumeReading` reads on the test's thread while the loop may be
            // handling an event; two readers would append their chunks in either order.
            readLock.withLock {
                while i.hasBytesAvailable {
                    let n = i.read(&buf, maxLength: buf.count)
                    guard n > 0 else { break }
                    lock.withLock { _received += buf[0..<n] }
                }
            }
        case .hasSpaceAvailable:
            guard let o = s as? OutputStream else { return }
            lock.withLock {
                while !outgoing.isEmpty {
                    let n = outgoing.withUnsafeBufferPointer { o.write($0.baseAddress!, maxLength: min($0.count, 32_768)) }
                    if n <= 0 { zeroWrites += 1; return }
                    outgoing.removeFirst(n)
                }
            }
        default:
            break
        }
    }
}

final class L2CAPPeripheral: NSObject, CBPeripheralManagerDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "l2cap.peripheral")
    let log = EventLog()
    var manager: CBPeripheralManager!
    var psm: CBL2CAPPSM = 0
    var channels: [CBL2CAPChannel] = []
    var encrypted = false
    func peripheralManagerDidUpdateState(_ p: CBPeripheralManager) {
        if p.state == .poweredOn { p.publishL2CAPChannel(withEncryption: encrypted) }
    }
    func peripheralManager(_ p: CBPeripheralManager, didPublishL2CAPChannel PSM: CBL2CAPPSM, error: Error?) {
        psm = PSM
        log.add("published:\(PSM):\(error == nil)")
        let c = CBMutableCharacteristic(
            type: CBUUID(string: CBUUIDL2CAPPSMCharacteristicString), properties: [.read],
            value: Data([UInt8(PSM & 0xFF), UInt8(PSM >> 8)]), permissions: [.readable])
        let s = CBMutableService(type: CBUUID(string: "0000FEED-0000-1000-8000-00805F9B34FB"), primary: true)
        s.characteristics = [c]
        p.add(s)
    }
    func peripheralManager(_ p: CBPeripheralManager, didAdd s: CBService, error: Error?) {
        p.startAdvertising([CBAdvertisementDataLocalNameKey: "L2CAP", CBAdvertisementDataServiceUUIDsKey: [s.uuid]])
    }
    func peripheralManager(_ p: CBPeripheralManager, didUnpublishL2CAPChannel PSM: CBL2CAPPSM, error: Error?) {
        log.add("unpublished:\(PSM):\(error.map { "\(($0 as NSError).code)" } ?? "ok")")
    }
    func peripheralManager(_ p: CBPeripheralManager, didOpen channel: CBL2CAPChannel?, error: Error?) {
        if let channel { channels.append(channel) }
        log.add("opened:\(channel != nil)")
    }
}

final class L2CAPCentral: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate, @unchecked Sendable {
    let queue = DispatchQueue(label: "l2cap.central")
    let log = EventLog()
    var manager: CBCentralManager!
    var peripheral: CBPeripheral?
    var psm: CBL2CAPPSM?
    var opened: [(CBL2CAPChannel?, Error?)] = []
    func centralManagerDidUpdateState(_ c: CBCentralManager) { if c.state == .poweredOn { c.scanForPeripherals(withServices: nil) } }
    func centralManager(_ c: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
        guard peripheral == nil, advertisementData[CBAdvertisementDataLocalNameKey] as? String == "L2CAP" else { return }
        peripheral = p
        c.stopScan()
        c.connect(p)
    }
    func centralManager(_ c: CBCentralManager, didConnect p: CBPeripheral) { p.delegate = self; p.discoverServices(nil) }
    func centralManager(_ c: CBCentralManager, didDisconnectPeripheral p: CBPeripheral, error: Error?) { log.add("disconnected") }
    func peripheral(_ p: CBPeripheral, didDiscoverServices error: Error?) {
        for s in p.services ?? [] { p.discoverCharacteristics([CBUUID(string: CBUUIDL2CAPPSMCharacteristicString)], for: s) }
    }
    func peripheral(_ p: CBPeripheral, didDiscoverCharacteristicsFor s: CBService, error: Error?) {
        for c in s.characteristics ?? [] { p.readValue(for: c) }
    }
    func peripheral(_ p: CBPeripheral, didUpdateValueFor c: CBCharacteristic, error: Error?) {
        guard c.uuid == CBUUID(string: CBUUIDL2CAPPSMCharacteristicString), let v = c.value, v.count == 2 else { return }
        psm = CBL2CAPPSM(v[0]) | CBL2CAPPSM(v[1]) << 8
        log.add("psm")
    }
    func peripheral(_ p: CBPeripheral, didOpen channel: CBL2CAPChannel?, error: Error?) {
        opened.append((channel, error))
        log.add("didOpen:\(channel != nil)")
    }
}

struct L2CAPRig {
    let air = TestAir()
    let per = L2CAPPeripheral()
    let cen = L2CAPCentral()
    let loop = StreamLoop()

    init(encrypted: Bool = false) async throws {
        per.encrypted = encrypted
        per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: try air.host("p"))
        cen.manager = CBCentralManager(delegate: cen, queue: cen.queue, options: nil, host: try air.host("c"))
        try await waitUntil("PSM read", seconds: 10) { cen.log.contains("psm") }
    }

    /// Opens a channel to `psm` (the published one by default); returns both ends.
    func open(_ psm: CBL2CAPPSM? = nil) async throws -> (CBL2CAPChannel?, Error?, CBL2CAPChannel?) {
        let before = cen.queue.sync { cen.opened.count }
        let accepted = per.queue.sync { per.channels.count }
        cen.queue.sync { cen.peripheral!.openL2CAPChannel(psm ?? cen.psm!) }
        try await waitUntil("didOpen", seconds: 10) { cen.queue.sync { cen.opened.count } > before }
        let (ch, e) = cen.queue.sync { cen.opened.last! }
        if ch != nil { try await waitUntil("accepted") { per.queue.sync { per.channels.count } > accepted } }
        return (ch, e, ch == nil ? nil : per.queue.sync { per.channels.last })
    }
}

@Suite(.serialized) struct L2CAPChannelTests {
    @Test func dataBothWaysThroughStreamsOnARunLoop() async throws {
        let rig = try await L2CAPRig()
        defer { rig.loop.stop() }
        let (c, e, _) = try await rig.open()
        #expect(e == nil)
        let ours = try #require(c)
        // The peripheral's end is held only by its delegate's list, so the test can release it below.
        let b = try rig.per.queue.sync { () throws -> ChannelEndpoint in
            let theirs = try #require(rig.per.channels.last)
            #expect(ours.psm == rig.cen.psm && theirs.psm == ours.psm)
            #expect(theirs.peer is CBCentral && ours.peer is CBPeripheral)
            return ChannelEndpoint(theirs, on: rig.loop)
        }
        #expect(ours.peer.identifier == rig.cen.peripheral?.identifier)
        let a = ChannelEndpoint(ours, on: rig.loop)
        let up = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 1) }
        let down = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 11) }
        a.send(up)
        b.send(down)
        try await waitUntil("1 MB up, 300 KB down", seconds: 30) { b.received.count == up.count && a.received.count == down.count }
        #expect(b.received == up && a.received == down)
        #expect(a.events.first == .openCompleted && a.events.contains(.hasSpaceAvailable))
        // The peer closes (by releasing its channel): our input stream ends.
        rig.per.queue.sync { rig.per.channels.removeAll() }
        try await waitUntil("end", seconds: 5) { a.events.contains(.endEncountered) }
        #expect(ours.inputStream.streamStatus == .atEnd)
    }

    @Test func aSlowReaderThrottlesTheWriter() async throws {
        let rig = try await L2CAPRig()
        defer { rig.loop.stop() }
        let (c, _, p) = try await rig.open()
        let a = ChannelEndpoint(try #require(c), on: rig.loop), b = ChannelEndpoint(try #require(p), on: rig.loop)
        b.readPaused = true
        let data = (0..<600_000).map { UInt8(truncatingIfNeeded: $0 &* 3) }
        a.send(data)
        let inbound = try #require(p?.inputStream as? PipeInputStream)
        // The writer is refused (write returns 0) once the paused reader's window has filled. How soon that
        // happens is the machine's business; that it happens, and what is held then, is the channel's.
        try await waitUntil("the writer held back by a full window", seconds: 20) {
            a.throttled > 0 && inbound.bufferedByteCount > 32_000
        }
        // Given more time, the receiver still holds at most its window (64 KB) plus one SDU, and the
        // sender's pipe at most its capacity: the rest of the 600 KB waits with the writer.
        try await pause(nanoseconds: 300_000_000)
        let held = inbound.bufferedByteCount
        #expect(held <= 64 * 1024 + 2048, "held \(held)")
        let queued = try #require(c?.outputStream as? PipeOutputStream)
        #expect(queued.bufferedByteCount <= queued.capacity)
        b.resumeReading()
        try await waitUntil("all of it", seconds: 30) { b.received.count == data.count }
        #expect(b.received == data)
    }

    @Test func errorsAsIOSGivesThem() async throws {
        let rig = try await L2CAPRig()
        defer { rig.loop.stop() }
        // A PSM outside the LE range: invalidParameters (observed on iOS).
        let (c1, e1, _) = try await rig.open(0x2349)
        #expect(c1 == nil && (e1 as? CBError)?.code == .invalidParameters)
        // A PSM nobody published: the peer refuses.
        let (c2, e2, _) = try await rig.open(0x00F0)
        #expect(c2 == nil && (e2 as? CBError)?.code == .connectionFailed)
        #expect(((e2 as? CBError)?.userInfo[NSLocalizedFailureReasonErrorKey] as? String)?.contains("SPSM not supported") == true)
        // Unpublishing closes the channels on that PSM and refuses new ones; unpublishing again is an error.
        let (c3, _, _) = try await rig.open()
        let a = ChannelEndpoint(try #require(c3), on: rig.loop)
        let psm = rig.cen.psm!
        rig.per.queue.sync { rig.per.manager.unpublishL2CAPChannel(psm) }
        try await waitUntil("closed by unpublish", seconds: 5) { a.events.contains(.endEncountered) }
        // didUnpublish runs on the peripheral's queue, which may come after the central saw the end.
        try await waitUntil("unpublished", seconds: 5) { rig.per.log.contains("unpublished:\(psm):ok") }
        let (c4, _, _) = try await rig.open()
        #expect(c4 == nil)
        rig.per.queue.sync { rig.per.manager.unpublishL2CAPChannel(psm) }
        try await waitUntil("second unpublish") { rig.per.log.contains("unpublished:\(psm):1") }
    }

    @Test func encryptionRequiredPairsFirst() async throws {
        let rig = try await L2CAPRig(encrypted: true)
        defer { rig.loop.stop() }
        let (c, e, p) = try await rig.open()
        #expect(e == nil)
        let a = ChannelEndpoint(try #require(c), on: rig.loop), b = ChannelEndpoint(try #require(p), on: rig.loop)
        a.send([1, 2, 3])
        try await waitUntil("bytes") { b.received == [1, 2, 3] }
    }

    @Test func aLostLinkEndsTheStreamsAndReleasingAChannelClosesIt() async throws {
        let rig = try await L2CAPRig()
        defer { rig.loop.stop() }
        // Released by the central app (only the delegate's list held it): the peripheral's end sees the end.
        let b1 = ChannelEndpoint(try #require(try await rig.open().2), on: rig.loop)
        rig.cen.queue.sync { rig.cen.opened.removeAll() }
        try await waitUntil("released channel closed", seconds: 5) { b1.events.contains(.endEncountered) }
        // The link drops mid-transfer: both ends' streams end, no crash, the writer sees an error.
        let (c2, _, p2) = try await rig.open()
        let a2 = ChannelEndpoint(try #require(c2), on: rig.loop), b2 = ChannelEndpoint(try #require(p2), on: rig.loop)
        // The reader holds off, so the transfer is surely still under way when the link drops (a fast link
        // could otherwise finish 2 MB before the test's task runs again).
        b2.readPaused = true
        a2.send([UInt8](repeating: 5, count: 2_000_000))
        try await waitUntil("the writer held back", seconds: 10) { a2.throttled > 0 }
        rig.cen.queue.sync { rig.cen.manager.cancelPeripheralConnection(rig.cen.peripheral!) }
        b2.resumeReading()
        try await waitUntil("both ends", seconds: 5) {
            a2.events.contains(.errorOccurred) && b2.events.contains(.endEncountered)
        }
        #expect(b2.received.count < 2_000_000 && b2.received.allSatisfy { $0 == 5 })
    }
}
