// A software LE controller below HCI: it decodes the host's commands and ACL data with BLEHCI, runs the
// link layer on the air, and answers with the events a real controller sends (Vol 4 Part E, Vol 6 Part B).
//
// Threading: state is confined to the air's loop. `send` may be called on the loop (in-process hosts) or
// from another thread (it then hops onto the loop). Packets to the host are always delivered through
// `loop.execute`, never inside `send`, in the order they were produced.
import Foundation
import BLEWire
import BLEHCI
import BLETransport

public enum VirtualRadioError: Error, Equatable, Sendable {
    case poweredOff
    case removed
}

/// One LE link as a controller sees it.
final class VirtualLink {
    let handle: UInt16
    let role: UInt8   // 0 central, 1 peripheral
    weak var peer: VirtualController?
    var peerHandle: UInt16
    var interval: UInt16
    var latency: UInt16
    var timeout: UInt16
    var encrypted = false
    var pendingLTK: [UInt8]?
    var lost = false
    var lossTimer: LoopTimer?
    // Airtime model (VirtualController+Airtime.swift).
    var phy: LEPHY = .le1M
    var dataLength = 27
    var airQueue = FIFO<AirPacket>()
    var eventTimer: LoopTimer?
    /// The air had an airtime model when the link was made (it is set before connections are made).
    var timed = false
    /// Our host's packets that the peer's full buffers hold back (VirtualController+HostFlow.swift).
    var waitingForPeer = FIFO<HCIPacket>()

    init(handle: UInt16, role: UInt8, peer: VirtualController, peerHandle: UInt16, interval: UInt16, latency: UInt16, timeout: UInt16) {
        self.handle = handle; self.role = role; self.peer = peer; self.peerHandle = peerHandle
        self.interval = interval; self.latency = latency; self.timeout = timeout
    }
}

public final class VirtualController: HCITransport, @unchecked Sendable {
    public let address: BluetoothAddress
    /// Weak: an air that goes away silences its controllers (timers find no air and stop). The ACL path does
    /// not read it for every packet: it reads `silenced` and its link's `timed`.
    weak var airRef: VirtualAir?
    /// The air loses every ACL packet this controller sends (`VirtualAir.silence`). Loop-confined.
    var silenced = false
    /// Why the "operating system" refuses to open this controller (`refuseAccess`); any thread. The
    /// controller's own: it goes with it, and no later controller inherits it.
    let refusal = Locked<String?>(nil)
    let loop: EventLoop
    public var name: String { "virtual:\(address.string)" }

    private let positionLock = Locked(VirtualPosition.origin)
    public var position: VirtualPosition {
        get { positionLock.withLock { $0 } }
        set { positionLock.withLock { $0 = newValue } }
    }

    /// The host's end, and how many times it was set: a burst looks the sink up once, then checks before
    /// each packet that it was not closed or replaced meanwhile (a counter read under the lock, not a
    /// reference retained and released for every packet).
    private struct SinkSlot {
        var sink: (any HCITransportSink)?
        var changes: UInt64 = 0
        mutating func set(_ s: (any HCITransportSink)?) {
            sink = s
            changes &+= 1
        }
    }
    private let sinkLock = Locked(SinkSlot())
    /// The power switch as other threads see it (`isPoweredOn` is the loop's copy).
    private let poweredFlag = Locked(true)
    private let powerHandler = Locked<(@Sendable (Bool) -> Void)?>(nil)
    public var onPowerChange: (@Sendable (Bool) -> Void)? {
        get { powerHandler.withLock { $0 } }
        set { powerHandler.withLock { $0 = newValue } }
    }

    /// ACL buffers reported by LE Read Buffer Size.
    public var aclBufferSize: UInt16 = 251
    public var aclBufferCount: UInt8 = 8
    public static let leFeatures: LEFeatures = [
        .encryption, .extendedRejectIndication, .peripheralInitiatedFeaturesExchange,
        .dataPacketLengthExtension, .le2MPHY,
    ]

    // Loop-confined link-layer state.
    var isPoweredOn = true
    var eventMask: UInt64 = 0x0000_1FFF_FFFF_FFFF
    var leEventMask: UInt64 = 0x0000_0000_0000_001F
    var randomAddress: BluetoothAddress?
    var advertisingParameters = LESetAdvertisingParameters()
    var advertisingData: [UInt8] = []
    var scanResponseData: [UInt8] = []
    var advertising = false
    var advertisingTimer: LoopTimer?
    var scanParameters = LESetScanParameters()
    /// The air keeps lists of scanning and initiating controllers, so that an advertising event costs
    /// what it reaches, not the number of devices on the air.
    var scanning = false {
        didSet { if scanning != oldValue { airRef?.listening(self, scanning: scanning) } }
    }
    var filterDuplicates = false
    var reportedDuplicates: Set<[UInt8]> = []
    /// The filter accept list (Vol 6 Part B §4.3.1): devices an initiator with filter policy 1 connects to.
    var filterAcceptList: [BluetoothAddress] = []
    /// How many devices the accept list holds (a test may give a controller a smaller or larger one), and
    /// whether LE Read Filter Accept List Size tells the host (false answers Unknown HCI Command). Loop-confined.
    public var filterAcceptListCapacity = VirtualControllerLimits.filterAcceptListCapacity
    public var reportsFilterAcceptListSize = true
    var initiating: LECreateConnection? {
        didSet { if (initiating == nil) != (oldValue == nil) { airRef?.listening(self, initiating: initiating != nil) } }
    }
    var links: [UInt16: VirtualLink] = [:]
    var nextHandle: UInt16 = 0x0040
    var completedPackets: [UInt16: UInt16] = [:]
    /// Controller-to-host flow control (VirtualController+HostFlow.swift).
    var hostFlow = HostFlowState()
    /// How many ACL packets this controller holds for a host that has not reported them finished before its
    /// link layer stops acknowledging the peer (its receive buffers). Loop-confined.
    public var heldACLLimit = 32
    /// Whether the controller lists and implements controller-to-host flow control (false: like a controller
    /// without it, the commands are not in its map and answer Unknown HCI Command). Loop-confined.
    public var supportsHostFlowControl = true
    var completedFlushScheduled = false
    /// Packets for the host waiting for their loop hop (`deliver`), and the emptied array of the last hop.
    var outbox: [HCIPacket] = []
    var spareOutbox: [HCIPacket] = []
    /// The loop work of `deliver` and `creditReturned`, made once: a closure made for every hop costs an
    /// allocation, and on a busy link there is a hop for nearly every packet. Weak, so as not to keep the
    /// controller alive from itself.
    private lazy var flushOutboxWork: @Sendable () -> Void = { [weak self] in self?.flushOutbox() }
    private lazy var flushCompletedWork: @Sendable () -> Void = { [weak self] in self?.flushCompletedPackets() }

    init(air: VirtualAir, address: BluetoothAddress, position: VirtualPosition) {
        self.airRef = air
        self.loop = air.loop
        self.address = address
        positionLock.withLock { $0 = position }
    }

    // MARK: HCITransport

    public func open(sink: any HCITransportSink) throws {
        guard poweredFlag.withLock({ $0 }) else { throw VirtualRadioError.poweredOff }
        if let refusal = accessRefusal { throw refusal }   // VirtualAir+Faults.swift
        sinkLock.withLock { $0.set(sink) }
    }

    /// The host is gone: nothing more is delivered, and the radio goes quiet (links drop; peers time out).
    public func close() {
        sinkLock.withLock { $0.set(nil) }
        let work: @Sendable () -> Void = { [self] in resetState() }
        if loop.isInLoop { work() } else { loop.execute(work) }
    }

    public func send(_ packet: HCIPacket) {
        if loop.isInLoop { receive(packet) } else { loop.execute { [self] in receive(packet) } }
    }

    /// Hands a packet to the host, after whatever this controller queued for it before. Packets produced
    /// while earlier ones wait go with them in one loop hop (one closure and one lock per burst, not per
    /// packet); each is still handed over on its own, in order, with the sink looked up for each.
    func deliver(_ packet: HCIPacket) {
        outbox.append(packet)
        if outbox.count == 1 { loop.execute(flushOutboxWork) }
    }

    /// Loop: hands the waiting packets to the host. Packets produced while it runs (the host answering at
    /// once) wait for the next hop, as they would have behind a queued closure each.
    func flushOutbox() {
        var batch = spareOutbox
        spareOutbox = []
        swap(&batch, &outbox)
        var (sink, changes) = sinkLock.withLock { ($0.sink, $0.changes) }
        for p in batch {
            let now = sinkLock.withLock { $0.changes }
            if now != changes { (sink, changes) = sinkLock.withLock { ($0.sink, $0.changes) } }
            sink?.transport(didReceive: p)
        }
        batch.removeAll(keepingCapacity: true)
        spareOutbox = batch
    }

    func deliver(_ event: HCIEvent) {
        guard isPoweredOn, eventAllowed(event) else { return }
        deliver(event.encode())
        if hostFlow.aclOn, case let .disconnectionComplete(.success, handle, _) = event { hostFlowLinkEnded(handle) }
    }

    /// Vol 4 Part E §7.3.1 and §7.8.1: events masked off by the host are not sent.
    func eventAllowed(_ e: HCIEvent) -> Bool {
        switch e {
        case .commandComplete, .commandStatus, .numberOfCompletedPackets: return true
        case let .le(meta):
            guard eventMask & (1 << 61) != 0 else { return false }
            let bit = UInt64(meta.subevent) - 1
            return bit < 64 && leEventMask & (1 << bit) != 0
        default:
            let bit = UInt64(e.code) - 1
            return bit < 64 && eventMask & (1 << bit) != 0
        }
    }

    func receive(_ packet: HCIPacket) {
        guard isPoweredOn else { return }
        switch packet.type {
        case .command:
            // Host Number Of Completed Packets, read in place (VirtualController+HostFlow.swift).
            if packet.bytes.count >= 2, packet.bytes[0] == 0x35, packet.bytes[1] == 0x0C { return hostNumberOfCompletedPackets(packet: packet.bytes) }
            do {
                handle(command: try HCICommand.decode(packet))
            } catch {
                // A malformed known command: Invalid HCI Command Parameters.
                let op = packet.bytes.count >= 2 ? HCIOpcode(rawValue: UInt16(packet.bytes[0]) | UInt16(packet.bytes[1]) << 8) : HCIOpcode(rawValue: 0)
                complete(op, StatusReturn(status: .invalidParameters))
            }
        case .acl:
            receiveACL(packet)
        default:
            break
        }
    }

    // MARK: Power

    /// Switches the radio off: links drop (peers time out), advertising and scanning stop, and the host's
    /// transport closes.
    public func powerOff() {
        let work: @Sendable () -> Void = { [self] in
            guard isPoweredOn else { return }
            poweredFlag.withLock { $0 = false }
            leaveAir(reason: .poweredOff)
            onPowerChange?(false)
        }
        if loop.isInLoop { work() } else { loop.execute(work) }
    }

    /// Switches the radio back on; the host re-opens and starts from Reset.
    public func powerOn() {
        let work: @Sendable () -> Void = { [self] in
            guard !isPoweredOn else { return }
            isPoweredOn = true
            poweredFlag.withLock { $0 = true }
            resetState()
            onPowerChange?(true)
        }
        if loop.isInLoop { work() } else { loop.execute(work) }
    }

    func leaveAir(reason: VirtualRadioError) {
        for (_, link) in links { link.peer?.peerLost(link.peerHandle) }
        links.removeAll()
        resetState()
        isPoweredOn = false
        let sink = sinkLock.withLock { s -> (any HCITransportSink)? in
            let v = s.sink; s.set(nil); return v
        }
        loop.execute { sink?.transportDidClose(error: reason) }
    }

    func resetState() {
        advertising = false
        loop.cancel(advertisingTimer)
        advertisingTimer = nil
        scanning = false
        initiating = nil
        reportedDuplicates.removeAll()
        filterAcceptList.removeAll()
        for (_, link) in links { link.peer?.peerLost(link.peerHandle) }
        links.removeAll()
        completedPackets.removeAll()
        hostFlow = HostFlowState()   // Reset turns controller-to-host flow control off
        eventMask = 0x0000_1FFF_FFFF_FFFF
        leEventMask = 0x0000_0000_0000_001F
        advertisingParameters = LESetAdvertisingParameters()
        advertisingData = []
        scanResponseData = []
        scanParameters = LESetScanParameters()
    }

    /// The peer of one of our links vanished: the link is lost after its supervision timeout (Vol 6 Part B §4.5.2).
    func peerLost(_ handle: UInt16) {
        guard let link = links[handle], !link.lost else { return }
        link.lost = true
        link.peer = nil
        link.lossTimer = loop.schedule(after: UInt64(link.timeout) * 10_000_000) { [weak self] in
            guard let self, self.links[handle] === link else { return }
            self.links[handle] = nil
            self.deliver(.disconnectionComplete(status: .success, handle: handle, reason: .connectionTimeout))
        }
    }

    // MARK: Data

    /// ACL data from the host. Without an airtime model the packet crosses to the peer as it came, with the
    /// peer's handle written over ours (flags and data untouched): it is not decoded into an `ACLPacket` and
    /// encoded again. A packet whose length field disagrees with its size, or for no link, is dropped.
    func receiveACL(_ packet: HCIPacket) {
        guard let h = try? ACLPacket.Header.decode(packet.bytes), let link = links[h.handle] else { return }
        // A silenced device (VirtualAir+Faults.swift): its link layer still acknowledges, its data is lost.
        if silenced { return creditReturned(handle: h.handle) }
        if link.timed, let model = airtime(for: link) {
            let acl = ACLPacket(handle: h.handle, boundary: h.boundary, broadcast: h.broadcast, data: Array(packet.bytes[4...]))
            return enqueueForAir(acl, on: link, model: model)
        }
        if !link.lost, let peer = link.peer {
            var out = packet
            let first = (link.peerHandle & 0x0FFF) | UInt16(h.boundary.rawValue) << 12 | UInt16(h.broadcast & 0x3) << 14
            out.bytes[0] = UInt8(first & 0xFF)
            out.bytes[1] = UInt8(first >> 8)
            // The peer's buffers for its host are full: the packet waits, and so does its credit.
            guard forward(out, on: link, to: peer) else { return }
        }
        // The packet left our buffers: return the credit.
        creditReturned(handle: h.handle)
    }

    func creditReturned(handle: UInt16) {
        completedPackets[handle, default: 0] += 1
        if !completedFlushScheduled {
            completedFlushScheduled = true
            loop.execute(flushCompletedWork)
        }
    }

    func flushCompletedPackets() {
        completedFlushScheduled = false
        guard !completedPackets.isEmpty else { return }
        let list: [CompletedPackets]
        if completedPackets.count == 1, let (handle, count) = completedPackets.first {
            list = [CompletedPackets(handle: handle, count: count)]   // one link (the usual case): nothing to sort
        } else {
            list = completedPackets.sorted { $0.key < $1.key }.map { CompletedPackets(handle: $0.key, count: $0.value) }
        }
        completedPackets.removeAll(keepingCapacity: true)
        deliver(.numberOfCompletedPackets(list))
    }
}

/// What a virtual controller holds.
public enum VirtualControllerLimits {
    /// Devices on a filter accept list (LE Add Device To Filter Accept List answers Memory Capacity
    /// Exceeded beyond this).
    public static let filterAcceptListCapacity = 16
}
