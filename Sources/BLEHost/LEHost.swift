// The host core: one per controller. It owns the HCI command queue and the ACL buffer credits, the
// connections (each with its L2CAP recombiner, signalling, GATT client and its slot in the GATT server),
// advertising and scanning, and executes the actions that the pure protocol state machines return.
//
// Threading contract: everything here runs on `loop`. Packets from the transport may arrive on any thread;
// they are moved onto the loop (or handled inline when the transport already delivers on the loop, as the
// in-process virtual radio does). Public methods must be called on the loop; callers on other threads
// use `loop.execute`.
//
// Stored properties read or changed for every packet are `@exclusivity(unchecked)`: the host's state is
// loop-confined and none of them is modified while an access to it is open (no inout of one is held across
// a call that could reach it again), so the runtime's dynamic exclusivity bookkeeping (a begin and an end
// access, a thread-local access set, per property touched) was pure cost: 3–6 % of a notification's
// processor time in the profile of `ble bench --api corebluetooth`. HostConnection does the same.
import BLEWire
import BLEHCI
import BLEL2CAP
import BLEATT
import BLEGATT
import BLEGAP
import BLETransport
import BLESMP
import Synchronization
import struct Foundation.URL
#if canImport(Glibc)
import Glibc
#endif

public final class LEHost: HCITransportSink, @unchecked Sendable {
    public let loop: EventLoop
    public let transport: any HCITransport
    public let name: String
    /// Where the host's diagnostics go: one swift-log logger per layer (see `HostLoggers`). Made with the
    /// host from the backend `LoggingSystem` has then; replace them before powering on to send them elsewhere.
    @exclusivity(unchecked) public var loggers: HostLoggers

    @exclusivity(unchecked) public private(set) var powerState: HostPowerState = .off
    /// The operating system refused this process the controller (EPERM/EACCES when opening it: a missing
    /// capability or group); the power state then reads `.unsupported` with the reason.
    public private(set) var controllerAccessDenied = false
    private var powerObservers: [UInt64: (HostPowerState) -> Void] = [:]
    private var nextObserverID: UInt64 = 0

    /// The delegates, held weakly. A delegate given to `hold(centralDelegate:)` instead is held strongly.
    public var centralDelegate: (any HostCentralDelegate)? {
        get {
            if let d = heldCentralDelegate { return d }
            return weakCentralDelegate
        }
        set { weakCentralDelegate = newValue; heldCentralDelegate = nil }
    }
    public var peripheralDelegate: (any HostPeripheralDelegate)? {
        get {
            if let d = heldPeripheralDelegate { return d }
            return weakPeripheralDelegate
        }
        set { weakPeripheralDelegate = newValue; heldPeripheralDelegate = nil }
    }
    private weak var weakCentralDelegate: (any HostCentralDelegate)?
    private weak var weakPeripheralDelegate: (any HostPeripheralDelegate)?
    // A delegate the host keeps alive, for one that holds the host only weakly (Core Bluetooth's hub). It is
    // read for every value received: a weak reference would cost a weak load, and would move the delegate's
    // reference counts to a side table, where every retain and release takes the runtime's slow path.
    @exclusivity(unchecked) private var heldCentralDelegate: (any HostCentralDelegate)?
    @exclusivity(unchecked) private var heldPeripheralDelegate: (any HostPeripheralDelegate)?

    /// Makes `d` the central delegate, held strongly (it must not hold the host strongly, or neither is
    /// ever freed). Loop only, like `centralDelegate`.
    package func hold(centralDelegate d: any HostCentralDelegate) {
        weakCentralDelegate = nil
        heldCentralDelegate = d
    }

    /// Makes `d` the peripheral delegate, held strongly (see `hold(centralDelegate:)`).
    package func hold(peripheralDelegate d: any HostPeripheralDelegate) {
        weakPeripheralDelegate = nil
        heldPeripheralDelegate = d
    }

    /// True between powerOn and powerOff: a lost controller is then retried.
    private var wantsPower = false
    /// Set once a controller has been initialised.
    var hadController = false
    private var reconnectTimer: LoopTimer?
    /// How often a lost or unreachable controller is retried; nil never retries.
    public var reconnectInterval: LoopTime? = .seconds(1)

    // Controller facts, read during start-up.
    /// Our identity address: the controller's public address, or the static random one the host uses when
    /// the controller has none (see LEHost+Startup.swift).
    public internal(set) var localAddress = BluetoothAddress.zero
    public internal(set) var controllerVersion: ReadLocalVersionReturn?
    @exclusivity(unchecked) public internal(set) var aclBufferSize = 27
    @exclusivity(unchecked) public internal(set) var aclBufferCount = 1
    public internal(set) var leFeatures: UInt64 = 0
    /// What start-up is learning about the controller (loop only); `controllerInfo` is the finished copy.
    var startupInfo = ControllerInfo()
    let controllerInfoSnapshot = Locked<ControllerInfo?>(nil)
    var zephyrCommands: [UInt8]?
    var zephyrStaticAddress: BluetoothAddress?
    /// The static random address that is our identity on a controller without a public address.
    public internal(set) var controllerStaticAddress: BluetoothAddress?
    /// Extended advertising, scanning and initiating commands are used on this controller (decided at
    /// start-up from its features and supported commands; never mixed with the legacy ones).
    public internal(set) var usesExtendedAdvertising = false
    /// Use the legacy advertising, scanning and connecting commands even on a controller with extended
    /// advertising (a controller whose extended implementation misbehaves); `BLE_LEGACY_ADVERTISING=1` sets it.
    public var prefersLegacyAdvertising: Bool = {
        if let v = getenv("BLE_LEGACY_ADVERTISING") { return String(cString: v) == "1" }
        return false
    }()
    /// Ask the controller for controller-to-host ACL flow control (Vol 4 Part E §4.2) where it lists the
    /// commands: on by default; `BLE_HOST_FLOW_CONTROL=0` turns it off (for debugging). Read at start-up.
    public var wantsControllerToHostFlowControl: Bool = {
        if let v = getenv("BLE_HOST_FLOW_CONTROL") { return String(cString: v) != "0" }
        return true
    }()
    /// The controller holds ACL data for us beyond `hostBuffers.totalNumACLDataPackets` unacknowledged
    /// packets, and the host acknowledges each packet it has finished with (LEHost+FlowControl.swift).
    @exclusivity(unchecked) public internal(set) var controllerToHostFlowControl = false {
        didSet { updateACLMergeability() }
    }
    /// `acceptsMergedACLContinuations`, kept where the transport's reader thread can read it.
    let aclContinuationsMergeable = Atomic<Bool>(false)
    func updateACLMergeability() {
        aclContinuationsMergeable.store(!loggers.hciTraces && !controllerToHostFlowControl, ordering: .relaxed)
    }
    /// The buffers announced with Host Buffer Size (`LEHost.hostACLBuffers` unless a test wants fewer or smaller).
    public var announcedHostBuffers = LEHost.hostACLBuffers
    /// The links with finished ACL packets not yet reported with Host Number Of Completed Packets (loop only).
    @exclusivity(unchecked) var hostCompletions: [HostConnection] = []
    @exclusivity(unchecked) var hostCompletionsFlushScheduled = false
    /// How long HCI_Reset may take: some controllers answer only after seconds (the Linux kernel waits 10 s).
    public var resetTimeout: LoopTime = .seconds(10)

    // HCI command flow (Vol 4 Part E §4.4): credits granted by Num_HCI_Command_Packets.
    struct PendingCommand {
        var command: HCICommand
        /// nil: `commandTimeout`.
        var timeout: LoopTime? = nil
        var completion: (Result<CommandOutcome, HostError>) -> Void
    }
    enum CommandOutcome {
        case complete([UInt8])
        case status(HCIStatus)
    }
    var commandCredits = 1
    var commandQueue: [PendingCommand] = []
    var commandQueueHead = 0
    var outstandingCommand: (opcode: HCIOpcode, pending: PendingCommand, timer: LoopTimer)?
    /// How long a command may go unanswered before the host gives up on it.
    public var commandTimeout: LoopTime = .seconds(5)

    // ACL data flow (Vol 4 Part E §4.1.1): one credit per controller buffer.
    @exclusivity(unchecked) var aclCredits = 1
    /// What waits for controller buffers, oldest first: packets, and L2CAP frames still to be cut (`WaitingACL`).
    @exclusivity(unchecked) var aclWaiting = FIFO<(handle: UInt16, item: WaitingACL)>()
    /// ACL packets waiting: a frame counts the fragments it still makes.
    @exclusivity(unchecked) var aclWaitingPackets = 0
    /// The transport takes H4 bytes as cheaply as packets (`HCITransport.takesH4Bytes`): L2CAP frames wait whole and
    /// are cut as credits free up, straight into `h4Scratch`.
    let cutsFramesLate: Bool
    @exclusivity(unchecked) var h4Scratch: [UInt8] = []
    /// The emptied array of the last batch that freed credits let go (`aclCreditsFreed`), kept for the next.
    @exclusivity(unchecked) var spareCreditBatch: [HCIPacket] = []
    /// Arrays of ACL packets the transport has written, for the next fragments (loop-confined), when it is done
    /// with them once `send` returns (`recyclesSentPackets`).
    @exclusivity(unchecked) var fragmentPool = HCIPacketBufferPool()
    let recyclesSentPackets: Bool
    @exclusivity(unchecked) var aclInFlight = ACLPacketsInFlight()
    /// ACL packets handed to the transport so far (loop-confined), and the tally the transport's reader reads
    /// (`aclPacketTally`, kept current by `aclSent` and `publishACLTally`).
    @exclusivity(unchecked) var aclSentTotal = 0
    let aclTallySent = Atomic<Int>(0)
    let aclTallyDone = Atomic<Int>(0)
    /// While a read's packets are handled, credits they free are spent after the last (`handle(batch:)`).
    @exclusivity(unchecked) var spendsFreedCreditsLater = false
    @exclusivity(unchecked) var creditsFreedMeanwhile = false

    @exclusivity(unchecked) public internal(set) var connections: [UInt16: HostConnection] = [:]
    /// The connection the last ACL packet from the controller went to (`handleACL`), and the same unretained;
    /// only `rememberACLConnection` changes them. `connectionClosed` forgets a closed one, so it is never kept
    /// alive here.
    @exclusivity(unchecked) var lastACLConnection: HostConnection?
    @exclusivity(unchecked) var lastACL: Unmanaged<HostConnection>?
    /// Connections `lastACLConnection` let go while a packet was dispatched to them, and how deep that is.
    @exclusivity(unchecked) var retiredACLConnections: [HostConnection] = []
    @exclusivity(unchecked) var aclDispatchDepth = 0

    // GAP state.
    public internal(set) var isScanning = false
    public internal(set) var isAdvertising = false
    var wantsAdvertising: AdvertisingConfiguration?
    /// Extended advertising data arriving in several reports, per advertiser (LEHost+ExtendedGAP.swift).
    var advertisingReassembly: [String: [UInt8]] = [:]
    var pendingConnects: [BluetoothAddress] = []
    /// The addresses the current LE Create Connection waits for: one (direct), or several (filter accept list).
    var initiatingFor: [BluetoothAddress] = []
    /// The LE Create Connection of the current initiation was sent (after the accept list was filled).
    var initiationCommandSent = false
    /// Counts initiations, so that answers to an earlier one's commands are told apart.
    var initiationGeneration: UInt64 = 0
    /// The app cancelled the one address being initiated.
    var connectCancelRequested = false
    /// The initiation is being cancelled to start again with the addresses pending now.
    var connectRegroupRequested = false
    /// The address a pending connection to a bonded private device is initiated at: where it was last seen
    /// (LEHost+PrivateConnect.swift), by the address the connection was asked for.
    var privateTargetAddresses: [BluetoothAddress: BluetoothAddress] = [:]
    /// The controller scans (passively) for such a device while the app does not scan.
    var scanningForConnects = false
    /// The address being initiated when it is that of a bonded device with an IRK (nil otherwise).
    var followedPrivateTarget: BluetoothAddress?
    /// Whether the controller takes an accept list to wait for several devices at once; false once it failed.
    public internal(set) var filterAcceptListUsable = true
    /// How many devices the controller's accept list holds (LE Read Filter Accept List Size, read before the
    /// first initiation that needs it; lowered when the controller says its list is full sooner). Nil until read,
    /// or when the controller does not say: `assumedFilterAcceptListSize` is used then.
    public internal(set) var filterAcceptListSize: Int?
    var filterAcceptListSizeQuery = AcceptListSizeQuery.notAsked
    /// At most this many devices on the accept list per initiation (nil: as many as the controller holds).
    public var filterAcceptListLimit: Int?
    /// Set while the current LE Create Connection is being cancelled to give the next address its turn.
    var connectRotationRequested = false
    var connectRotationTimer: LoopTimer?
    /// How long one LE Create Connection runs before the next waiting address gets its turn, when several
    /// connections are pending (one alone is never interrupted).
    public var connectRotationInterval: LoopTime = .milliseconds(1500)

    // L2CAP credit-based channels (LEHost+Channels.swift).
    var l2capServers: [UInt16: L2CAPServer] = [:]
    @exclusivity(unchecked) var channelsWaitingForBuffers: [HostL2CAPChannel] = []
    /// How long our L2CAP signalling requests wait for an answer (the RTX timer, Vol 3 Part A §6.2.1).
    public var signalingTimeout: LoopTime = .seconds(30)

    // GATT server shared by every connection.
    @exclusivity(unchecked) public internal(set) var gattServer: GATTServer
    var nextRequestID: UInt64 = 0
    @exclusivity(unchecked) var subscribersWaitingForRoom = false
    /// Updates submitted from other threads (see `submitUpdate`), shared under a lock.
    struct PendingUpdate { var value: [UInt8]; var handle: UInt16; var clients: [UInt16]? }
    struct TransmitQueue { var submitted = 0; var waitingPackets = 0; var wantsReady = false; var updates: [PendingUpdate] = [] }
    let transmitQueue = Locked(TransmitQueue())
    /// How many updates may wait in the host before `submitUpdate` says the queue is full; room is reported
    /// again when fewer than a quarter wait. 64 (it was 32, with room at half): the same 16 updates still
    /// queued when the submitter is told, three times as many per refill, so a third of the hand-offs to the
    /// submitter's queue (the largest single source of thread wake-ups in the Core Bluetooth bench).
    @exclusivity(unchecked) public var transmitQueueLimit = 64
    /// `aclWaiting.count` as last copied into `transmitQueue` (`mirrorWaitingPackets`).
    @exclusivity(unchecked) var mirroredWaitingPackets = 0

    // Security (LEHost+Security.swift).
    /// Bonds and our IRK; in memory unless the host is given a file-backed store or `bondStoreDirectory`.
    public var bondStore = BondStore()
    /// When set, the host keeps its bonds in `bonds-<controller address>.json` there, opened when the
    /// controller is up (HostFactory sets it for real controllers; virtual ones keep bonds in memory).
    public var bondStoreDirectory: URL?
    public var pairingAgent: any PairingAgent = JustWorksAgent()
    public var securityConfiguration = HostSecurityConfiguration()
    /// Our P-256 key pair for Secure Connections (one per host, so OOB data stays valid).
    public internal(set) lazy var smpKeyPair = SMPKeyPair.generate()
    /// Per device (identity address octets): when it may try pairing again, and the current waiting interval.
    var pairingBackoff: [[UInt8]: (until: LoopTime, interval: LoopTime)] = [:]
    var securityObservers: [UInt64: (HostConnection, HostSecurityEvent) -> Void] = [:]
    /// The resolvable private address in use while privacy is on (LEHost+Privacy.swift).
    public internal(set) var currentPrivateAddress: BluetoothAddress?
    /// The static random address set with `setStaticRandomAddress`: our identity address in key
    /// distribution, and set again on a controller that comes back.
    public internal(set) var staticIdentityAddress: BluetoothAddress?
    var privacyTimer: LoopTimer?
    var privacyInterval: LoopTime?
    var scanSettings: (active: Bool, filterDuplicates: Bool, interval: UInt16, window: UInt16)?
    /// Retry reads, writes and subscriptions that fail for lack of encryption after securing the link (iOS behaviour).
    public var pairsOnInsufficientSecurity = true
    /// After a connection as central completes, ask for the largest LL data length (Data Length Extension)
    /// and LE 2M when the controller supports them, as iOS does.
    public var requestsFastLinks = true

    public init(
        transport: any HCITransport, loop: EventLoop, name: String = "host",
        database: GATTDatabase = GATTDatabase.withDefaultServices(deviceName: "OpenCoreBluetooth", appearance: 0)
    ) {
        self.transport = transport
        recyclesSentPackets = !transport.keepsSentPackets
        cutsFramesLate = transport.takesH4Bytes
        self.loop = loop
        self.name = name
        self.loggers = HostLoggers(hostName: name)
        self.gattServer = GATTServer(database: database)
    }

    // MARK: Power

    /// Observes power-state changes; the handler runs on the loop. Returns a token for `removePowerObserver`.
    @discardableResult
    public func addPowerObserver(_ handler: @escaping (HostPowerState) -> Void) -> UInt64 {
        nextObserverID += 1
        powerObservers[nextObserverID] = handler
        return nextObserverID
    }

    public func removePowerObserver(_ token: UInt64) { powerObservers[token] = nil }

    /// Observes pairing and encryption on every link; the handler runs on the loop.
    @discardableResult
    public func addSecurityObserver(_ handler: @escaping (HostConnection, HostSecurityEvent) -> Void) -> UInt64 {
        nextObserverID += 1
        securityObservers[nextObserverID] = handler
        return nextObserverID
    }

    public func removeSecurityObserver(_ token: UInt64) { securityObservers[token] = nil }

    func setPowerState(_ s: HostPowerState) {
        guard s != powerState else { return }
        powerState = s
        for (_, o) in powerObservers.sorted(by: { $0.key < $1.key }) { o(s) }
    }

    /// Opens the transport and initialises the controller. Call on the loop. While the host is wanted on,
    /// a controller that cannot be reached or that goes away is retried every `reconnectInterval`.
    public func powerOn() {
        loop.assertInLoop()
        wantsPower = true
        guard powerState == .off || { if case .unsupported = powerState { return true } else { return false } }() else { return }
        loop.cancel(reconnectTimer)
        reconnectTimer = nil
        setPowerState(.starting)
        updateACLMergeability()
        do {
            try transport.open(sink: self)
            controllerAccessDenied = false
            loggers.transport.debug("opened", metadata: ["transport": "\(transport.name)"])
        } catch {
            loggers.transport.warning("cannot open the controller", metadata: ["transport": "\(transport.name)", "error": "\(error)"])
            // A controller we had before is "off" while it is away; one never reached is "unsupported".
            if case TransportError.permissionDenied = error { controllerAccessDenied = true }
            // A controller we had before is "off" while it is away; one never reached is "unsupported".
            setPowerState(hadController && !controllerAccessDenied ? .off : .unsupported("\(error)"))
            scheduleReconnect()
            return
        }
        runInitialisation()
    }

    /// Drops every link and closes the transport; no reconnection is attempted.
    public func powerOff() {
        loop.assertInLoop()
        wantsPower = false
        loop.cancel(reconnectTimer)
        reconnectTimer = nil
        guard powerState != .off else { return }
        transport.close()
        controllerLost(error: nil, finalState: .off)
    }

    /// Tries the controller again at once (a virtual radio that was powered back on, a dongle plugged in).
    public func reconnectNow() {
        loop.assertInLoop()
        guard wantsPower, powerState != .on, powerState != .starting else { return }
        transport.close()
        powerOn()
    }

    private func scheduleReconnect() {
        guard wantsPower, let interval = reconnectInterval, reconnectTimer == nil else { return }
        reconnectTimer = loop.schedule(after: interval) { [weak self] in
            guard let self else { return }
            self.reconnectTimer = nil
            self.reconnectNow()
        }
    }

    /// A procedure-level line at debug on `opencorebluetooth.host` (the message is built only when the level is on).
    func log(_ message: @autoclosure () -> String) {
        loggers.host.debug("\(message())")
    }

    func initFailed(why: String) {
        loggers.hci.warning("controller start-up failed", metadata: ["error": "\(why)"])
        transport.close()
        controllerLost(error: nil, finalState: hadController ? .off : .unsupported(why))
        // A controller that did not answer in time (busy, still booting) is tried again.
        scheduleReconnect()
    }

    /// Tears everything down after the controller went away or was powered off.
    func controllerLost(error: (any Error)?, finalState: HostPowerState) {
        if let out = outstandingCommand {
            loop.cancel(out.timer)
            outstandingCommand = nil
            out.pending.completion(.failure(.transportClosed))
        }
        let queued = commandQueue[commandQueueHead...]
        commandQueue.removeAll()
        commandQueueHead = 0
        for c in queued { c.completion(.failure(.transportClosed)) }
        // A new controller starts with one command credit and reports its buffers again.
        commandCredits = 1
        aclWaiting.removeAll()
        aclWaitingPackets = 0
        aclInFlight.removeAll()
        publishACLTally()
        controllerToHostFlowControl = false
        hostCompletions.removeAll()
        isScanning = false
        scanningForConnects = false
        followedPrivateTarget = nil
        privateTargetAddresses.removeAll()
        isAdvertising = false
        wantsAdvertising = nil
        // A new controller has no random address until the host sets one again.
        currentPrivateAddress = nil
        controllerInfoSnapshot.withLock { $0 = nil }
        advertisingReassembly.removeAll()
        loop.cancel(privacyTimer)
        privacyTimer = nil
        let pending = initiatingFor + pendingConnects
        pendingConnects.removeAll()
        resetInitiation()
        forgetFilterAcceptListSize()
        for (_, c) in connections.sorted(by: { $0.key < $1.key }) {
            connectionClosed(c, reason: .connectionTimeout)
        }
        for a in pending { centralDelegate?.host(self, didFailToConnectTo: a, status: .unspecifiedError) }
        setPowerState(finalState)
    }

    // MARK: HCITransportSink

    public func transport(didReceive packet: HCIPacket) {
        if loop.isInLoop { handle(packet) } else if transport.deliversOnReaderThread { loop.runWaiting { handle(packet) } } else { loop.execute { [self] in handle(packet) } }
    }

    /// A host counts the buffers Number Of Completed Packets events free, so a run of them can come as one
    /// (`HCITransportSink.acceptsMergedCompletions`); not while it traces HCI packets, whose log shows each
    /// event as the controller sent it.
    public var acceptsMergedCompletions: Bool { !loggers.hciTraces }

    /// A host recombines L2CAP frames from ACL fragments as they come, so the continuations of a packet can come in
    /// it (`HCITransportSink.acceptsMergedACLContinuations`); not while it reports each ACL packet back to the
    /// controller (controller-to-host flow control counts packets), nor while it traces HCI packets.
    public var acceptsMergedACLContinuations: Bool { aclContinuationsMergeable.load(ordering: .relaxed) }
    /// What the host has sent and what the controller is done with (`HCITransportSink.aclPacketTally`).
    public var aclPacketTally: (sent: Int, done: Int)? {
        (aclTallySent.load(ordering: .relaxed), aclTallyDone.load(ordering: .relaxed))
    }

    public func transportDidClose(error: (any Error)?) {
        loop.execute { [self] in
            guard powerState != .off else { return }
            loggers.transport.warning("controller lost", metadata: ["transport": "\(transport.name)", "error": "\(error.map { "\($0)" } ?? "closed")"])
            controllerLost(error: error, finalState: .off)
            scheduleReconnect()
        }
    }

    func handle(_ packet: HCIPacket) {
        guard powerState != .off else { return }
        if loggers.hciTraces { loggers.hci.trace("packet in", metadata: packet.logMetadata) }
        switch packet.type {
        case .event:
            if handleCompletedPacketsInPlace(packet.bytes) { return }
            do {
                handle(event: try HCIEvent.decode(packet))
            } catch {
                loggers.hci.notice("dropping a malformed event", metadata: ["packet": "\(packet.bytes.hexString)", "error": "\(error)"])
            }
        case .acl:
            handleACL(packet)
        default:
            loggers.hci.notice("ignoring a packet of this type from the controller", metadata: ["type": "\(packet.type)"])
        }
    }

    /// Number Of Completed Packets (Vol 4 Part E §7.7.19: Num_Handles, then a handle and a count per entry), the
    /// event a sender gets most, read where it lies: no event value and array of entries made and freed for each
    /// one. Takes exactly what `HCIEvent.decode` accepts for it (the parameter length and the entries agree);
    /// returns false for any other packet, which goes the general way.
    func handleCompletedPacketsInPlace(_ b: [UInt8]) -> Bool {
        guard b.count >= 3, b[0] == 0x13, Int(b[1]) == b.count - 2, b.count == 3 + 4 * Int(b[2]) else { return false }
        var o = 3
        while o < b.count {
            packetsCompleted(handle: UInt16(b[o]) | UInt16(b[o + 1]) << 8, count: Int(UInt16(b[o + 2]) | UInt16(b[o + 3]) << 8))
            o += 4
        }
        aclCreditsFreed()
        return true
    }
}
