// GAP procedures over HCI: scanning (Vol 3 Part C §9.2), advertising (§9.1, §11), connection establishment
// (§9.3) with one LE Create Connection at a time and the rest queued.
import BLEWire
import BLEHCI
import BLEGAP
import BLETransport

/// What the peripheral role wants on air; re-applied after a connection stops legacy advertising.
public struct AdvertisingConfiguration: Sendable, Equatable {
    public var data: [UInt8]
    public var scanResponse: [UInt8]
    public var connectable: Bool
    /// Advertising interval in 0.625 ms units (Vol 4 Part E §7.8.5); 0x00A0 = 100 ms.
    public var interval: UInt16

    public init(data: [UInt8], scanResponse: [UInt8] = [], connectable: Bool = true, interval: UInt16 = 0x00A0) {
        self.data = data
        self.scanResponse = scanResponse
        self.connectable = connectable
        self.interval = interval
    }
}

extension LEHost {
    // MARK: Scanning

    /// Starts scanning; reports go to the central delegate. `active` sends scan requests.
    public func startScanning(
        active: Bool = true, filterDuplicates: Bool = false,
        interval: UInt16 = 0x0010, window: UInt16 = 0x0010,
        completion: @escaping (HostError?) -> Void = { _ in }
    ) {
        guard powerState == .on else { return completion(.notPoweredOn) }
        scanSettings = (active, filterDuplicates, interval, window)
        loggers.gap.debug("scanning", metadata: ["active": "\(active)", "filter-duplicates": "\(filterDuplicates)"])
        // The app's scan takes over from a scan for a private device being connected (its reports serve both).
        let restart = isScanning || scanningForConnects
        scanningForConnects = false
        isScanning = true
        if restart { command(scanEnableCommand(false)) }
        commandExpectingSuccess(scanParametersCommand(active: active, interval: interval, window: window)) { [self] e in
            if let e { isScanning = false; return completion(e) }
            commandExpectingSuccess(scanEnableCommand(true, filterDuplicates: filterDuplicates)) { [self] e in
                if e != nil { isScanning = false }
                completion(e)
            }
        }
    }

    /// Scanning again with the same settings after the own address changed (privacy).
    func restartScanningAfterAddressChange() {
        guard let s = scanSettings else { return }
        isScanning = false
        startScanning(active: s.active, filterDuplicates: s.filterDuplicates, interval: s.interval, window: s.window)
    }

    public func stopScanning(completion: @escaping (HostError?) -> Void = { _ in }) {
        guard isScanning else { return completion(nil) }
        isScanning = false
        loggers.gap.debug("scanning stopped")
        advertisingReassembly.removeAll()
        commandExpectingSuccess(scanEnableCommand(false), completion: completion)
        updateConnectScan()
    }

    // MARK: Advertising

    /// Starts (or restarts with new data) advertising: legacy PDUs (up to 31 bytes of data), or on a controller
    /// with extended advertising, extended PDUs for longer data (up to `maximumAdvertisingDataLength`).
    public func startAdvertising(_ config: AdvertisingConfiguration, completion: @escaping (HostError?) -> Void = { _ in }) {
        guard powerState == .on else { return completion(.notPoweredOn) }
        let setup: [HCICommand]
        switch advertisingSetupCommands(config) {
        case let .failure(e): return completion(e)
        case let .success(c): setup = c
        }
        wantsAdvertising = config
        loggers.gap.debug("advertising", metadata: ["connectable": "\(config.connectable)", "interval": "\(config.interval)"])
        isAdvertising = false
        // The whole sequence is queued at once, so it runs without another start, a resume after a disconnection
        // or an address rotation between its commands (commands run in order). It begins with a disable whatever
        // `isAdvertising` says: an enable queued earlier may have the controller advertising, and a controller
        // refuses new parameters while it advertises (Command Disallowed). Disabling what is off is no error.
        var failure: HostError?
        command(advertisingEnableCommand(false))
        for c in setup { commandExpectingSuccess(c) { e in if failure == nil { failure = e } } }
        commandExpectingSuccess(advertisingEnableCommand(true)) { [self] e in
            let error = failure ?? e
            let current = wantsAdvertising == config
            if error == nil {
                // Unless a later start or a stop has been queued since, which decides the state itself.
                if current { isAdvertising = true }
            } else {
                if failure != nil && e == nil && current { command(advertisingEnableCommand(false)) }
                if current { wantsAdvertising = nil }
            }
            completion(error)
        }
    }

    public func stopAdvertising(completion: @escaping (HostError?) -> Void = { _ in }) {
        if wantsAdvertising != nil { loggers.gap.debug("advertising stopped") }
        wantsAdvertising = nil
        isAdvertising = false
        // Whatever `isAdvertising` said: an enable may still be queued, and this disable comes after it.
        commandExpectingSuccess(advertisingEnableCommand(false), completion: completion)
    }

    /// Legacy advertising stops when a connection is made as peripheral; start it again if still wanted.
    func resumeAdvertisingIfWanted() {
        guard powerState == .on, let want = wantsAdvertising, !isAdvertising else { return }
        isAdvertising = true
        commandExpectingSuccess(advertisingEnableCommand(true)) { [self] e in
            if e != nil { isAdvertising = false }
            _ = want
        }
    }

    // MARK: Connecting
    //
    // Any number of connections may be pending at once, and none times out (as on iOS). With several
    // pending, the controller waits for all of them at once: they go on its filter accept list and one LE
    // Create Connection with filter policy 1 connects whichever is seen first (Vol 6 Part B §4.3.1, Vol 4
    // Part E §7.8.12); a change to the set (a new connect, a cancel) stops that initiation and starts the
    // next one with the new list, as the list may not change while it is used. One pending connection is
    // initiated directly. The list holds what the controller says it holds (LE Read Filter Accept List Size,
    // asked before the first initiation that needs it; 8 assumed when it does not say; less when an add
    // finds it full sooner). More pending connections than that take turns by groups: each group has the
    // controller for `connectRotationInterval`, then goes to the back of the queue. A controller whose
    // accept list fails is used by turns of one address each the same way.

    /// Connects to a device; the outcome arrives through the central delegate. Never times out by itself.
    public func connect(to address: BluetoothAddress) {
        guard powerState == .on else {
            centralDelegate?.host(self, didFailToConnectTo: address, status: .commandDisallowed)
            return
        }
        guard !initiatingFor.contains(address), !pendingConnects.contains(address) else { return }
        pendingConnects.append(address)
        if initiatingFor.isEmpty { return startNextConnect() }
        // A full list keeps its initiation; the new address waits for the next group's turn.
        if filterAcceptListUsable && initiatingFor.count < acceptListCapacity { regroupConnects() } else { scheduleConnectRotation() }
    }

    enum AcceptListSizeQuery { case notAsked, asking, answered }

    /// The accept list size assumed of a controller that does not report it (Zephyr and NimBLE default to 8).
    public static let assumedFilterAcceptListSize = 8

    /// How many devices the next initiation puts on the accept list.
    var acceptListCapacity: Int {
        max(1, min(filterAcceptListLimit ?? .max, filterAcceptListSize ?? Self.assumedFilterAcceptListSize))
    }

    /// A new controller is asked again (called when the controller goes away).
    func forgetFilterAcceptListSize() {
        filterAcceptListSize = nil
        filterAcceptListSizeQuery = .notAsked
        filterAcceptListUsable = true
    }

    /// LE Read Filter Accept List Size (Vol 4 Part E §7.8.14), once per controller; then the waiting
    /// connections start.
    private func askFilterAcceptListSize() {
        filterAcceptListSizeQuery = .asking
        command(.leReadFilterAcceptListSize) { [self] r in
            if case .failure(.transportClosed) = r { return }   // controllerLost forgot the question
            filterAcceptListSizeQuery = .answered
            if case let .success(.complete(p)) = r, let v = try? LEReadFilterAcceptListSizeReturn(decoding: p), v.status == .success {
                filterAcceptListSize = Int(v.size)
                if v.size == 0 { filterAcceptListUsable = false }
            } else {
                log("the controller does not report its accept list size; assuming \(Self.assumedFilterAcceptListSize)")
            }
            startNextConnect()
        }
    }

    /// The addresses with a connection pending: those being initiated first, then those waiting.
    public var pendingConnections: [BluetoothAddress] { initiatingFor + pendingConnects }

    /// Cancels a pending connection; the delegate hears didFailToConnect with Unknown Connection Identifier.
    public func cancelConnect(to address: BluetoothAddress) {
        if let i = pendingConnects.firstIndex(of: address) {
            pendingConnects.remove(at: i)
            centralDelegate?.host(self, didFailToConnectTo: address, status: .unknownConnectionIdentifier)
            return
        }
        guard initiatingFor.contains(address) else { return }
        if initiatingFor.count > 1 {
            // One of several on the accept list: it leaves now; the others are initiated again without it.
            initiatingFor.removeAll { $0 == address }
            centralDelegate?.host(self, didFailToConnectTo: address, status: .unknownConnectionIdentifier)
            regroupConnects()
            return
        }
        guard !connectCancelRequested else { return }
        connectCancelRequested = true
        stopInitiating()
    }

    /// Stops the current initiation so that the next one takes the addresses pending now.
    func regroupConnects() {
        guard !initiatingFor.isEmpty, !connectRegroupRequested else { return }
        connectRegroupRequested = true
        stopInitiating()
    }

    /// LE Create Connection Cancel, once per initiation; its Connection Complete (Unknown Connection
    /// Identifier) ends the initiation. Before the LE Create Connection was sent there is nothing to cancel:
    /// the initiation ends when its accept list is filled.
    private func stopInitiating() {
        let already = [connectCancelRequested, connectRegroupRequested, connectRotationRequested].filter { $0 }.count > 1
        if initiationCommandSent && !already { command(.leCreateConnectionCancel) }
    }

    func startNextConnect() {
        defer { updateConnectScan() }
        guard initiatingFor.isEmpty, !pendingConnects.isEmpty, powerState == .on else { return }
        if pendingConnects.count > 1 && filterAcceptListUsable {
            if filterAcceptListSize == nil {
                switch filterAcceptListSizeQuery {
                case .notAsked: return askFilterAcceptListSize()
                case .asking: return   // the answer starts the initiation
                case .answered: break
                }
            }
            let targets = Array(pendingConnects.prefix(acceptListCapacity))
            pendingConnects.removeFirst(targets.count)
            initiatingFor = targets
            initiationGeneration &+= 1
            let generation = initiationGeneration
            fillAcceptList(targets) { [self] outcome in
                // A controller lost meanwhile ended this initiation (and failed its commands).
                guard outcome != .abandoned, generation == initiationGeneration, !initiatingFor.isEmpty, powerState == .on else { return }
                if case let .full(held) = outcome, held > 0 {
                    // The list is full sooner than the controller said (or than assumed): it holds `held`.
                    log("filter accept list full at \(held) devices")
                    filterAcceptListSize = held
                    if !connectRegroupRequested {
                        pendingConnects.insert(contentsOf: initiatingFor.dropFirst(held), at: 0)
                        initiatingFor = Array(initiatingFor.prefix(held))
                    }
                } else if outcome != .filled {
                    // No usable accept list on this controller: take turns instead.
                    loggers.gap.notice("filter accept list unusable; pending connections take turns")
                    filterAcceptListUsable = false
                    pendingConnects.insert(contentsOf: initiatingFor, at: 0)
                    initiatingFor = []
                    connectRegroupRequested = false
                    return startNextConnect()
                }
                if connectRegroupRequested {
                    // The set changed while the list was filled: start over with the addresses pending now.
                    for t in initiationEnded(status: .unknownConnectionIdentifier, peer: nil) {
                        centralDelegate?.host(self, didFailToConnectTo: t, status: .unknownConnectionIdentifier)
                    }
                    return startNextConnect()
                }
                createConnection(to: nil)
                // More waiting than the list holds: the next group gets its turn after a while.
                scheduleConnectRotation()
            }
        } else {
            let address = pendingConnects.removeFirst()
            initiatingFor = [address]
            initiationGeneration &+= 1
            createConnection(to: initiationAddress(for: address))
            scheduleConnectRotation()
        }
    }

    enum AcceptListFill: Equatable { case filled, full(Int), refused, abandoned }

    /// Clear, then add each address: `.full(n)` when the controller's list was full after `n` of them
    /// (Memory Capacity Exceeded), `.refused` when the controller refuses a step, `.abandoned` when it went
    /// away meanwhile.
    private func fillAcceptList(_ addresses: [BluetoothAddress], done: @escaping (AcceptListFill) -> Void) {
        func outcome(_ e: HostError?, added: Int) -> AcceptListFill? {
            switch e {
            case nil: return nil
            case .transportClosed?: return .abandoned
            case .commandFailed(_, .memoryCapacityExceeded)?: return .full(added)
            default: return .refused
            }
        }
        commandExpectingSuccess(.leClearFilterAcceptList) { [self] e in
            if let o = outcome(e, added: 0) { return done(o == .full(0) ? .refused : o) }
            var rest = addresses[...]
            var added = 0
            func next() {
                guard let a = rest.popFirst() else { return done(.filled) }
                commandExpectingSuccess(.leAddDeviceToFilterAcceptList(a)) { e in
                    if let o = outcome(e, added: added) { return done(o) }
                    added += 1
                    next()
                }
            }
            next()
        }
    }

    /// LE Create Connection to `address`, or (nil) to any device on the accept list.
    private func createConnection(to address: BluetoothAddress?) {
        initiationCommandSent = true
        let peer = address ?? .zero
        let params = LECreateConnection(
            leScanInterval: 0x0060, leScanWindow: 0x0030, initiatorFilterPolicy: address == nil ? 1 : 0,
            peerAddressType: peer.type.isRandom ? 1 : 0, peerAddress: peer, ownAddressType: ownAddressType,
            connectionIntervalMin: 0x0018, connectionIntervalMax: 0x0028, maxLatency: 0,
            supervisionTimeout: 0x01F4, minCELength: 0, maxCELength: 0)
        let generation = initiationGeneration
        command(createConnectionCommand(params)) { [self] r in
            var failed: HCIStatus?
            switch r {
            case let .success(.status(s)) where s != .success: failed = s
            case let .failure(e):
                failed = {
                    if case let .commandFailed(_, s) = e { return s }; return .unspecifiedError
                }()
            default: break
            }
            guard let s = failed, generation == initiationGeneration, !initiatingFor.isEmpty else { return }
            if case .failure(.transportClosed) = r { return }   // the controller went away: controllerLost reports
            if address == nil && s != .commandDisallowed {
                // The controller refused to initiate from its accept list: take turns instead.
                filterAcceptListUsable = false
                pendingConnects.insert(contentsOf: initiatingFor, at: 0)
                resetInitiation()
                return startNextConnect()
            }
            let failedFor = initiatingFor
            resetInitiation()
            for t in failedFor { centralDelegate?.host(self, didFailToConnectTo: t, status: s) }
            startNextConnect()
        }
    }

    /// Forgets the connection being initiated and its pending cancel, regroup and rotation. Loop only.
    func resetInitiation() {
        initiatingFor = []
        initiationCommandSent = false
        connectCancelRequested = false
        connectRegroupRequested = false
        connectRotationRequested = false
        loop.cancel(connectRotationTimer)
        connectRotationTimer = nil
    }

    /// While others wait (no usable accept list, or more pending than it holds), the address or group being
    /// initiated gives up its turn after `connectRotationInterval`.
    func scheduleConnectRotation() {
        guard connectRotationTimer == nil, !initiatingFor.isEmpty, !pendingConnects.isEmpty else { return }
        let current = initiatingFor
        connectRotationTimer = loop.schedule(after: connectRotationInterval) { [weak self] in
            guard let self else { return }
            self.connectRotationTimer = nil
            guard self.initiatingFor == current, !self.pendingConnects.isEmpty, self.initiationCommandSent,
                !self.connectCancelRequested, !self.connectRotationRequested, !self.connectRegroupRequested
            else {
                return self.scheduleConnectRotation()
            }
            self.connectRotationRequested = true
            self.command(.leCreateConnectionCancel)
        }
    }

    /// The end of an initiation (its Connection Complete): returns the addresses whose attempt failed for
    /// good. A connection made takes its address; the others of the accept list, and those of an initiation
    /// stopped for a regroup or a turn, wait again.
    func initiationEnded(status: HCIStatus, peer: BluetoothAddress?) -> [BluetoothAddress] {
        let targets = initiatingFor
        let appCancel = connectCancelRequested, rotated = connectRotationRequested, regrouped = connectRegroupRequested
        resetInitiation()
        func same(_ a: BluetoothAddress, _ b: BluetoothAddress?) -> Bool {
            guard let b else { return false }
            return a.bytes == b.bytes && a.type.isRandom == b.type.isRandom
        }
        if status == .success {
            pendingConnects.insert(contentsOf: targets.filter { !same($0, peer) && !same(initiationAddress(for: $0), peer) }, at: 0)
            return []
        }
        if status == .unknownConnectionIdentifier && !appCancel && (rotated || regrouped) {
            if rotated { pendingConnects.append(contentsOf: targets) } else { pendingConnects.insert(contentsOf: targets, at: 0) }
            return []
        }
        if targets.count > 1, let hit = targets.first(where: { same($0, peer) }) {
            // One device of the accept list failed to connect: the others wait again.
            pendingConnects.insert(contentsOf: targets.filter { $0 != hit }, at: 0)
            return [hit]
        }
        return targets
    }
}

extension LEHost {
    /// As peripheral, asks the central for new connection parameters with an L2CAP Connection Parameter
    /// Update Request (Vol 3 Part A §4.20); the central decides. Intervals in 1.25 ms, timeout in 10 ms units.
    public func requestConnectionParameters(handle: UInt16, minInterval: UInt16, maxInterval: UInt16, latency: UInt16, timeout: UInt16) {
        guard let c = connections[handle], c.role == .peripheral else { return }
        sendL2CAP(
            c.signaling.connectionParameterUpdateRequest(minInterval: minInterval, maxInterval: maxInterval, latency: latency, timeout: timeout),
            cid: .leSignaling, on: c)
    }
}

extension LEHost {
    /// Asks the controller for PHYs on a link (HCI LE Set PHY): bit 0 LE 1M, bit 1 LE 2M, bit 2 LE Coded;
    /// `codedOptions` 1 prefers S=2, 2 prefers S=8.
    public func setPHY(handle: UInt16, phys: UInt8, codedOptions: UInt16 = 0, completion: @escaping (HostError?) -> Void = { _ in }) {
        guard connections[handle] != nil else { return completion(.invalidState("no such connection")) }
        guard controllerInfo?.supports(.leSetPHY) ?? false else {
            return completion(.commandFailed(opcode: HCIOpcode.leSetPHY, status: .unknownCommand))
        }
        command(.leSetPHY(LESetPHY(connectionHandle: handle, allPHYs: 0, txPHYs: phys, rxPHYs: phys, phyOptions: codedOptions))) { r in
            if case let .success(.status(s)) = r, s != .success { return completion(.commandFailed(opcode: HCIOpcode.leSetPHY, status: s)) }
            if case let .failure(e) = r { return completion(e) }
            completion(nil)
        }
    }

    /// Asks the controller for a larger LL data PDU payload on a link (HCI LE Set Data Length), 27…251 octets.
    public func setDataLength(handle: UInt16, octets: UInt16, completion: @escaping (HostError?) -> Void = { _ in }) {
        guard connections[handle] != nil else { return completion(.invalidState("no such connection")) }
        guard controllerInfo?.supports(.leSetDataLength) ?? false else {
            return completion(.commandFailed(opcode: HCIOpcode.leSetDataLength, status: .unknownCommand))
        }
        let time = UInt16(min(17040, (Int(octets) + 14) * 8))   // the LE 1M time for that many octets
        commandExpectingSuccess(.leSetDataLength(handle: handle, txOctets: octets, txTime: max(328, time)), completion: completion)
    }

    /// As central, changes a link's connection parameters (HCI LE Connection Update). Units of 1.25 ms / 10 ms.
    public func updateConnection(
        handle: UInt16, interval: UInt16, latency: UInt16 = 0, timeout: UInt16 = 400,
        completion: @escaping (HostError?) -> Void = { _ in }
    ) {
        guard let c = connections[handle], c.role == .central else { return completion(.invalidState("not a central link")) }
        command(
            .leConnectionUpdate(
                LEConnectionUpdate(
                    connectionHandle: handle, connectionIntervalMin: interval, connectionIntervalMax: interval,
                    maxLatency: latency, supervisionTimeout: timeout, minCELength: 0, maxCELength: 0))
        ) { r in
            if case let .success(.status(s)) = r, s != .success { return completion(.commandFailed(opcode: HCIOpcode.leConnectionUpdate, status: s)) }
            if case let .failure(e) = r { return completion(e) }
            completion(nil)
        }
    }
}
