// CBCentralManager (CBCentralManager.h): scanning, connecting, and the peripherals it knows.
//
// The manager is the host's central delegate: host callbacks arrive on the host loop, where the manager
// keeps its scan and connection bookkeeping; everything the app sees is then applied and announced on the
// delegate queue.
import Foundation
import BLEWire
import BLEHCI
import BLEHost
import BLETransport

open class CBCentralManager: CBManager, HostCentralDelegate, @unchecked Sendable {
    public typealias Feature = CBCentralManagerFeature

    private weak var storedDelegate: (any CBCentralManagerDelegate)?
    /// The delegate; weak, as in Core Bluetooth.
    open weak var delegate: (any CBCentralManagerDelegate)? {
        get { managerLock.withLock { storedDelegate } }
        set { managerLock.withLock { storedDelegate = newValue } }
    }

    package let queue: DispatchQueue
    package let leHost: LEHost?
    /// The BlueZ backend, when BLE_TRANSPORT is `bluez[:hciN]` (then `leHost` is nil): the manager and its
    /// peripherals hand their work to it instead of the host.
    let bluez: BlueZCentral?
    private var storedIsScanning = false

    // Loop-confined. Peripherals are held weakly, pending and connected ones too: the app keeps those it
    // uses, as on iOS, and one it releases has its connection cancelled (`sweepReleased`). A long scan among
    // rotating private addresses does not grow memory.
    private var scan: ScanState?
    private var peripheralsByAddress = WeakTable<BluetoothAddress, CBPeripheral>()
    private var connectingPeripherals: [BluetoothAddress: WeakPeripheral] = [:]
    private var cancelledConnects: Set<BluetoothAddress> = []
    private var connectionEventOptions: [CBConnectionEventMatchingOption: Any]?
    /// The host's hub, which this manager shares with the others on the host (set on the loop; read
    /// under managerLock elsewhere).
    private var hub: HostHub? {
        get { managerLock.withLock { storedHub } }
        set { managerLock.withLock { storedHub = newValue } }
    }
    private var storedHub: HostHub?

    let eventListeners = EventListeners<CBCentralManagerEvent>()
    /// State restoration (CBCentralManagerOptionRestoreIdentifierKey).
    let restoreIdentifier: String?
    private var restorationChecked = false
    private var scanRecord: (services: [CBUUID]?, options: [String: Any]?)?

    // Any thread (under managerLock).
    private var peripheralsByIdentifier = WeakTable<UUID, CBPeripheral>()
    /// The host's device cache (identifiers, addresses, names), set when the controller is first on.
    private var storedDeviceCache: DeviceCache?
    var deviceCache: DeviceCache? { managerLock.withLock { storedDeviceCache } }

    public convenience override init() {
        self.init(delegate: Optional<any CBCentralManagerDelegate>.none, queue: Optional<DispatchQueue>.none, options: Optional<[String: Any]>.none)
    }

    public convenience init(delegate: (any CBCentralManagerDelegate)?, queue: DispatchQueue?) {
        self.init(delegate: delegate, queue: queue, options: nil)
    }

    /// Creates a manager on the controller that `BLE_TRANSPORT` names (the virtual radio when unset). On a
    /// real controller every manager of the process shares one host; on the virtual radio each manager is
    /// a device of its own (pass one host to several managers to put them on one device).
    public convenience init(delegate: (any CBCentralManagerDelegate)?, queue: DispatchQueue?, options: [String: Any]?) {
        if let bluez = BlueZOptions.fromEnvironment() {
            self.init(delegate: delegate, queue: queue, options: options, bluez: bluez)
            return
        }
        let made = Result { try HostFactory.sharedHostFromEnvironment(name: "central") }
        self.init(delegate: delegate, queue: queue, made: made, restoreIdentifier: options?[CBCentralManagerOptionRestoreIdentifierKey] as? String)
    }

    /// Creates a manager on a given host (for tests and tools that choose the controller themselves).
    public convenience init(delegate: (any CBCentralManagerDelegate)?, queue: DispatchQueue?, options: [String: Any]? = nil, host: LEHost) {
        self.init(delegate: delegate, queue: queue, made: .success(host), restoreIdentifier: options?[CBCentralManagerOptionRestoreIdentifierKey] as? String)
    }

    /// Creates a manager on bluetoothd's adapter through BlueZ's D-Bus API (what BLE_TRANSPORT=bluez[:hciN] chooses;
    /// tests pass a private bus).
    package convenience init(delegate: (any CBCentralManagerDelegate)?, queue: DispatchQueue?, options: [String: Any]? = nil, bluez: BlueZOptions) {
        self.init(
            delegate: delegate, queue: queue, made: .failure(CBError(.unknown)),
            restoreIdentifier: options?[CBCentralManagerOptionRestoreIdentifierKey] as? String, bluez: bluez)
    }

    private init(
        delegate: (any CBCentralManagerDelegate)?, queue: DispatchQueue?, made: Result<LEHost, any Error>, restoreIdentifier: String?,
        bluez: BlueZOptions? = nil
    ) {
        self.queue = queue ?? .main
        self.restoreIdentifier = restoreIdentifier
        self.leHost = bluez == nil ? try? made.get() : nil
        self.bluez = bluez.map { BlueZCentral(options: $0) }
        super.init()
        storedDelegate = delegate
        if let backend = self.bluez {
            backend.start(self)
            return
        }
        var failure: String?
        if case let .failure(e) = made { failure = "\(e)" }
        attach(failure: failure)
    }

    private func attach(failure: String?) {
        start(
            on: leHost, queue: queue, failure: failure,
            announceUnsupported: { [weak self] in if let self { self.delegate?.centralManagerDidUpdateState(self) } },
            register: { [weak self] host in
                guard let self else { return }
                let hub = HostHub.of(host)
                hub.add(self)
                self.hub = hub
                // Once a device has told us its identity, its later private addresses find the same CBPeripheral.
                host.addSecurityObserver { [weak self] c, e in
                    guard let self, case .paired = e, let link = SharedLink.existing(c) else { return }
                    for p in link.peripherals(of: self) {
                        peripheralsByAddress[c.identityAddress] = p
                        deviceCache?.bind(p.identifier, toIdentity: c.identityAddress)
                    }
                }
            },
            powerChanged: { [weak self] s in self?.hostPowerChanged(s) })
    }

    deinit {
        bluez?.close()
        if let host = leHost {
            // The host stays on while another manager uses it (HostHub).
            host.loop.execute { [host] in HostHub.of(host).managerGone() }
        }
    }

    // MARK: State

    func hostPowerChanged(_ newState: CBManagerState) {
        guard newState != .unknown else { return }
        if newState == .poweredOn, let host = leHost {
            let cache = DeviceCache.of(host)
            managerLock.withLock { storedDeviceCache = cache }
        }
        if newState != .poweredOn {
            scan = nil
            connectingPeripherals.removeAll()
        }
        let q = queue
        q.async { [self] in
            if newState != .poweredOn {
                managerLock.withLock { storedIsScanning = false }
                // Links are gone; peripherals of this manager are disconnected (no didDisconnect, as on iOS).
                for p in managerLock.withLock({ peripheralsByIdentifier.values }) { p.resetAfterDisconnect() }
            }
            guard state != newState else { return }
            let restored = newState == .poweredOn ? takeRestoredState() : nil
            if let restored {
                // willRestoreState comes first; then the state; then the restored work resumes.
                var dict: [String: Any] = [CBCentralManagerRestoredStatePeripheralsKey: restored.peripherals]
                if let scan = restored.scanServices { dict[CBCentralManagerRestoredStateScanServicesKey] = scan }
                if let opts = restored.scanOptions { dict[CBCentralManagerRestoredStateScanOptionsKey] = opts }
                delegate?.centralManager(self, willRestoreState: dict)
            }
            setState(newState)
            delegate?.centralManagerDidUpdateState(self)
            broadcast(.stateUpdated(newState))
            if let restored {
                for p in restored.peripherals { connect(p, options: nil) }
                if restored.scanning { scanForPeripherals(withServices: restored.scanServices, options: restored.scanOptions) }
            }
        }
    }

    /// Whether the controller supports a feature: `.extendedScanAndConnect` when it reports LE Extended
    /// Advertising and the extended scanning and connection commands, which the host then uses. Answered from
    /// the controller that BLE_TRANSPORT names once a manager has powered it on (else from the controller this
    /// process started last); before any is on, and on the virtual radio, which advertises the legacy way, false.
    @discardableResult
    open class func supports(_ features: Feature) -> Bool {
        if features.isEmpty { return true }
        let shared = (try? TransportSpec.fromEnvironment()).flatMap { HostFactory.runningSharedHost(spec: $0)?.controllerInfo }
        guard let info = shared ?? LEHost.runningControllers.last else { return false }
        var have: Feature = []
        if info.supportsExtendedAdvertising { have.insert(.extendedScanAndConnect) }
        return have.isSuperset(of: features)
    }

    open var isScanning: Bool { managerLock.withLock { storedIsScanning } }

    // MARK: Scanning

    /// Scans for peripherals advertising any of `serviceUUIDs` (nil: all). A new call replaces the filters.
    open func scanForPeripherals(withServices serviceUUIDs: [CBUUID]?, options: [String: Any]? = nil) {
        guard !misusedOutsidePoweredOn(), leHost != nil || bluez != nil else { return }
        let allowDuplicates =
            (options?[CBCentralManagerScanOptionAllowDuplicatesKey] as? NSNumber)?.boolValue
            ?? (options?[CBCentralManagerScanOptionAllowDuplicatesKey] as? Bool) ?? false
        let solicited = (options?[CBCentralManagerScanOptionSolicitedServiceUUIDsKey] as? [CBUUID]) ?? []
        let state = ScanState(
            services: serviceUUIDs.map { Set($0.map(\.bluetoothUUID)) }.flatMap { $0.isEmpty ? nil : $0 },
            solicited: Set(solicited.map(\.bluetoothUUID)), allowDuplicates: allowDuplicates)
        managerLock.withLock {
            storedIsScanning = true; scanRecord = (serviceUUIDs, options)
        }
        saveRestorationState()
        if let bluez { return bluez.startScan(services: serviceUUIDs, allowDuplicates: allowDuplicates) }
        leHost!.loop.execute { [self] in
            scan = state
            hub?.startScanning(for: self) { [weak self] e in
                guard let self, e != nil else { return }
                scan = nil
                managerLock.withLock { storedIsScanning = false }
            }
        }
    }

    open func stopScan() {
        guard !misusedOutsidePoweredOn() else { return }
        managerLock.withLock {
            storedIsScanning = false; scanRecord = nil
        }
        saveRestorationState()
        if let bluez { return bluez.stopScan() }
        guard let host = leHost else { return }
        host.loop.execute { [self] in
            scan = nil
            hub?.stopScanning(for: self)
        }
    }

    /// Host plumbing (Linux addition, not for apps): an advertising report, delivered as `centralManager(_:didDiscover:advertisementData:rssi:)`.
    public func host(_ host: LEHost, didReceive report: AdvertisingReport) {
        guard var s = scan else { return }
        guard let decision = s.accept(report) else { scan = s; return }
        scan = s
        deliverDiscovery(peripheral(for: report.address), advertisement: decision.advertisement, rssi: NSNumber(value: Int(report.rssi)))
    }

    /// A scan failed below (the BlueZ backend): isScanning reads false again.
    func scanFailed() {
        managerLock.withLock {
            storedIsScanning = false; scanRecord = nil
        }
    }

    /// Announces a discovery on the delegate queue (both backends).
    func deliverDiscovery(_ p: CBPeripheral, advertisement: [String: Any], rssi: NSNumber) {
        let box = UncheckedBox(advertisement)
        let q = queue
        q.async { [self] in
            let advertisement = box.value
            if let name = advertisement[CBAdvertisementDataLocalNameKey] as? String {
                p.setAdvertisedName(name)
                deviceCache?.setName(name, for: p.identifier)
            }
            if let uuids = advertisement[CBAdvertisementDataServiceUUIDsKey] as? [CBUUID] { p.addAdvertisedServices(uuids) }
            guard isScanning else { return }
            delegate?.centralManager(self, didDiscover: p, advertisementData: advertisement, rssi: rssi)
            broadcast(.discovered(CBDiscovery(peripheral: p, advertisementData: UncheckedBox(advertisement), rssi: rssi.intValue)))
        }
    }

    /// The saved state, once per manager, if it has a restore identifier and something was saved.
    private func takeRestoredState() -> RestoredCentralState? {
        guard let id = restoreIdentifier, !restorationChecked else { return nil }
        restorationChecked = true
        guard let saved = RestorationStore.loadCentral(id: id) else { return nil }
        let peripherals = saved.peripherals.map { (a, savedID) -> CBPeripheral in
            // A restored peripheral keeps the identifier the app knew it by.
            let id = deviceCache?.identifier(for: a, preferring: savedID) ?? savedID ?? UUID()
            return existingOrNewPeripheral(identifier: id, address: a, name: deviceCache?.entry(for: id)?.name)
        }
        return RestoredCentralState(peripherals: peripherals, scanning: saved.scanning, scanServices: saved.scanServices, scanOptions: saved.scanOptions)
    }

    /// Saves the peripherals connected or being connected, and the scan, for a later manager with this identifier.
    func saveRestorationState() {
        guard let id = restoreIdentifier else { return }
        let (peripherals, scanRecord) = managerLock.withLock { (peripheralsByIdentifier.values, self.scanRecord) }
        let kept = peripherals.filter { $0.state == .connected || $0.state == .connecting }.map { ($0.deviceAddress, $0.identifier) }
        RestorationStore.saveCentral(
            id: id, peripherals: kept, scanning: scanRecord != nil,
            scanServices: scanRecord?.services ?? nil, scanOptions: scanRecord?.options ?? nil)
    }

    /// The one CBPeripheral of this manager for an address (created on first sight). Loop only.
    /// A bonded device seen at a new private address is the same CBPeripheral (its IRK resolves the address),
    /// and keeps its identifier through the device cache.
    func peripheral(for address: BluetoothAddress) -> CBPeripheral {
        if let p = peripheralsByAddress[address] { return p }
        let identity = leHost?.identity(of: address) ?? address
        if identity != address, let p = peripheralsByAddress[identity] {
            p.deviceAddress = address
            peripheralsByAddress[address] = p
            return p
        }
        let bonded = leHost?.bondStore.bond(matching: address) != nil
        let id = deviceCache?.identifier(for: identity, bonded: bonded) ?? UUID()
        let p = managerLock.withLock { () -> CBPeripheral in
            if let p = peripheralsByIdentifier[id] { return p }
            let p = CBPeripheral(manager: self, address: address, identifier: id)
            peripheralsByIdentifier[id] = p
            return p
        }
        p.deviceAddress = address
        peripheralsByAddress[address] = p
        if identity != address { peripheralsByAddress[identity] = p }
        return p
    }

    /// The live CBPeripheral with this identifier, or a new one at `address` (registered on the loop). Any thread.
    func existingOrNewPeripheral(identifier id: UUID, address: BluetoothAddress, name: String?) -> CBPeripheral {
        let (p, made) = managerLock.withLock { () -> (CBPeripheral, Bool) in
            if let p = peripheralsByIdentifier[id] { return (p, false) }
            let p = CBPeripheral(manager: self, address: address, identifier: id)
            peripheralsByIdentifier[id] = p
            return (p, true)
        }
        guard made else { return p }
        if let name { p.setAdvertisedName(name) }
        let box = UncheckedBox(p)
        leHost?.loop.execute { [self] in if peripheralsByAddress[address] == nil { peripheralsByAddress[address] = box.value } }
        return p
    }

    // MARK: Retrieval

    /// The known peripherals with these identifiers, in the order asked; unknown identifiers are skipped.
    /// Known means met by this host, in this run or an earlier one (the device cache), as on iOS; a
    /// peripheral found only in the cache is returned disconnected, ready for `connect`.
    @discardableResult
    open func retrievePeripherals(withIdentifiers identifiers: [UUID]) -> [CBPeripheral] {
        guard state == .poweredOn else { return [] }
        if let bluez { return bluez.retrieve(identifiers) }
        let cache = deviceCache
        return identifiers.compactMap { id -> CBPeripheral? in
            if let p = managerLock.withLock({ peripheralsByIdentifier[id] }) { return p }
            guard let e = cache?.entry(for: id), let a = e.bluetoothAddress else { return nil }
            return existingOrNewPeripheral(identifier: id, address: a, name: e.name)
        }
    }

    /// Connected peripherals that expose any of these services: those this manager connected, and those
    /// other managers of the process connected on the same controller (returned as this manager's
    /// peripherals, disconnected until it connects them, as iOS returns links other apps made). iOS
    /// discovers every connected device's primary services itself, so a peripheral is found right after
    /// `didConnect`, before the app has discovered anything.
    @discardableResult
    open func retrieveConnectedPeripherals(withServices serviceUUIDs: [CBUUID]) -> [CBPeripheral] {
        guard state == .poweredOn else { return [] }
        if let bluez { return bluez.retrieveConnected(withServices: serviceUUIDs) }
        let wanted = Set(serviceUUIDs)
        func exposes(_ p: CBPeripheral) -> Bool {
            p.state == .connected
                && (!wanted.isDisjoint(with: p.linkServiceUUIDs) || (p.services ?? []).contains { wanted.contains($0.uuid) })
        }
        var found: [UUID: CBPeripheral] = [:]
        for p in managerLock.withLock({ peripheralsByIdentifier.values }) where exposes(p) { found[p.identifier] = p }
        for other in hub?.centralManagersOnHost ?? [] where other !== self {
            for p in other.managerLock.withLock({ other.peripheralsByIdentifier.values }) where exposes(p) && found[p.identifier] == nil {
                found[p.identifier] = existingOrNewPeripheral(identifier: p.identifier, address: p.deviceAddress, name: p.name)
            }
        }
        return found.values.sorted { $0.identifier.uuidString < $1.identifier.uuidString }
    }

    // MARK: Connections
    //
    // Any number of connections may be pending; none times out (the host gives each its turn on the
    // controller). Once a link is up, the manager exchanges the ATT MTU and discovers the primary services,
    // as iOS does on every connection, and only then announces didConnect: `maximumWriteValueLength` is
    // final in didConnect, and `retrieveConnectedPeripherals(withServices:)` finds the peripheral at once.
    // A link lost before that is a failed connection (didFailToConnect with the reason).
    //
    // Managers on one host share links as apps on an iPhone do (SharedLink): a connect to a device another
    // manager is connected to, or connecting to, joins that link; a cancel, or releasing the peripheral,
    // lets go of it, and the link drops (or the pending connection is cancelled) only when nobody else
    // wants it. The others hear nothing until then.

    /// Connects; never times out. Ends in exactly one of didConnect or didFailToConnect (or didDisconnect
    /// with a nil error, when cancelled first).
    open func connect(_ peripheral: CBPeripheral, options: [String: Any]? = nil) {
        guard !misusedOutsidePoweredOn(), leHost != nil || bluez != nil else { return }
        guard peripheral.manager === self else {
            CBLog.warning("\(peripheral) is not a valid peripheral for \(self)")
            return
        }
        if peripheral.state == .connected {
            queue.async { [self] in
                delegate?.centralManager(self, didConnect: peripheral); broadcast(.connected(peripheral))
            }
            return
        }
        guard peripheral.state != .connecting else { return }
        peripheral.setState(.connecting)
        peripheral.autoReconnect =
            (options?[CBConnectPeripheralOptionEnableAutoReconnect] as? NSNumber)?.boolValue
            ?? (options?[CBConnectPeripheralOptionEnableAutoReconnect] as? Bool) ?? false
        let delay = (options?[CBConnectPeripheralOptionStartDelayKey] as? NSNumber)?.doubleValue ?? 0
        let attempt = peripheral.beginConnectAttempt()
        if let bluez { return bluez.connect(peripheral, attempt: attempt) }
        let host = leHost!
        host.loop.execute { [self] in
            let start = { [self] in
                guard peripheral.isCurrentConnectAttempt(attempt), peripheral.state == .connecting else { return }
                let link = hub?.centralLink(to: peripheral.deviceAddress)
                if let link, !SharedLink.of(link).isClosing {
                    // Another manager's link to this device: share it.
                    return attach(peripheral, to: link)
                }
                connectingPeripherals[peripheral.deviceAddress] = WeakPeripheral(peripheral)
                // A link closing as its last user let go: connected anew once it is gone (HostHub).
                if link == nil { host.connect(to: peripheral.deviceAddress) }
            }
            if delay > 0 { host.loop.schedule(after: .seconds(delay), start) } else { start() }
        }
    }

    /// Disconnects or cancels a pending connection; didDisconnectPeripheral follows with a nil error. A
    /// pending connection reads `.disconnected` at once, as on iOS.
    open func cancelPeripheralConnection(_ peripheral: CBPeripheral) {
        guard !misusedOutsidePoweredOn(), leHost != nil || bluez != nil else { return }
        let wasState = peripheral.state
        peripheral.autoReconnect = false
        guard wasState != .disconnected else { return }
        peripheral.setState(wasState == .connecting ? .disconnected : .disconnecting)
        peripheral.beginConnectAttempt()   // a start delay still running will not start
        if let bluez { return bluez.cancel(peripheral) }
        let host = leHost!
        host.loop.execute { [self] in
            let address = peripheral.deviceAddress
            if let c = peripheral.connection {
                if let link = SharedLink.existing(c), link.hasUser(besides: peripheral) {
                    // Another manager still uses the link: only this one lets go.
                    link.remove(peripheral)
                    peripheral.connection = nil
                    announceDisconnect(peripheral, error: nil)
                } else {
                    peripheral.localCancel = true
                    SharedLink.close(c)
                }
            } else if connectingPeripherals[address]?.value === peripheral {
                if hub?.isConnecting(to: address, besides: self) == true {
                    // Another manager still waits for this device: the connection stays pending for it.
                    connectingPeripherals[address] = nil
                    announceDisconnect(peripheral, error: nil)
                } else {
                    cancelledConnects.insert(address)
                    host.cancelConnect(to: address)
                }
            } else {
                // Still waiting for a start delay: nothing on air yet.
                announceDisconnect(peripheral, error: nil)
            }
        }
    }

    /// Whether this manager waits for a connection to `address`. Loop.
    func isConnecting(to address: BluetoothAddress) -> Bool {
        connectingPeripherals[address]?.value != nil && !cancelledConnects.contains(address)
    }

    /// Loop: the connects that waited for `connection` (closing when they were made) start.
    func resumeConnects(afterClosing connection: HostConnection) {
        guard let host = leHost else { return }
        for (address, w) in connectingPeripherals where w.value != nil && !cancelledConnects.contains(address) {
            if address == connection.peerAddress || host.identity(of: address) == connection.identityAddress {
                host.connect(to: address)
            }
        }
    }

    /// A peripheral of this manager was released (any thread): its pending connection is cancelled and its
    /// link let go, on the loop.
    func peripheralReleased() {
        leHost?.loop.execute { [weak self] in self?.sweepReleased() }
    }

    /// Loop: cancels the pending connections whose peripheral the app released (unless another manager
    /// waits for the same device), and lets go of the links whose users are gone.
    func sweepReleased() {
        guard let host = leHost else { return }
        for (address, w) in connectingPeripherals where w.value == nil {
            connectingPeripherals[address] = nil
            if cancelledConnects.remove(address) == nil, hub?.isConnecting(to: address, besides: self) != true {
                host.cancelConnect(to: address)
            }
        }
        for c in host.connections.values where c.role == .central {
            if let link = SharedLink.existing(c), link.sweep() { SharedLink.close(c) }
        }
    }

    /// Host plumbing (Linux addition, not for apps): a link is up; `centralManager(_:didConnect:)` follows once the MTU and services are known.
    public func host(_ host: LEHost, didConnect connection: HostConnection) {
        switch claim(connection) {
        case .claimed, .notMine: break
        case let .cancelled(p): closeCancelled(p, on: connection)
        }
    }

    package enum Claim {
        /// Nobody here asked for the link.
        case notMine
        case claimed
        /// This manager asked for it, then cancelled: the peripheral is not attached.
        case cancelled(CBPeripheral)
    }

    /// Takes a new central link if this manager asked for it (several managers may share it).
    package func claim(_ connection: HostConnection) -> Claim {
        var address = connection.peerAddress
        if connectingPeripherals[address] == nil, let host = leHost {
            // A bonded device that moved to a new private address while it was being connected: the host
            // followed it (LEHost+PrivateConnect.swift); the connection was asked for at an address of the same identity.
            let identity = host.identity(of: address)
            if identity != address, let asked = connectingPeripherals.keys.first(where: { host.identity(of: $0) == identity }) {
                address = asked
            }
        }
        let asked = connectingPeripherals.removeValue(forKey: address)?.value
        guard let p = asked ?? peripheralsByAddress[address], asked != nil || p.autoReconnect else { return .notMine }
        // Cancelled on the loop, or by the app before the loop heard of it (the state changes at the call). An
        // automatic reconnection may still read `.connected` here: its `.connecting` is set on the delegate
        // queue, with the didDisconnect before it.
        if cancelledConnects.remove(address) != nil || p.state == .disconnected || p.state == .disconnecting { return .cancelled(p) }
        if address != connection.peerAddress {
            p.deviceAddress = connection.peerAddress
            peripheralsByAddress[connection.peerAddress] = p
        }
        attach(p, to: connection)
        return .claimed
    }

    /// A link this manager cancelled while it was being made, and nobody else wants: it is closed, and
    /// didDisconnect (nil error) follows. Loop.
    package func closeCancelled(_ p: CBPeripheral, on connection: HostConnection) {
        SharedLink.of(connection).add(p)
        p.connection = connection
        p.announcedConnected = false
        p.localCancel = true
        SharedLink.close(connection)
    }

    /// A link this manager cancelled while it was being made, which another manager keeps: this one only
    /// hears didDisconnect (nil error). Loop.
    package func dropCancelled(_ p: CBPeripheral) {
        announceDisconnect(p, error: nil)
    }

    /// Makes `p` a user of the link, then announces didConnect once the link is set up: the ATT MTU
    /// exchanged and the primary services discovered, once per link (a later user reuses them). Loop.
    private func attach(_ p: CBPeripheral, to connection: HostConnection) {
        let link = SharedLink.of(connection)
        link.add(p)
        p.connection = connection
        p.announcedConnected = false
        link.watchServiceChanged()
        let bonded = leHost?.bondStore.bond(matching: connection.peerAddress) != nil
        deviceCache?.markConnected(p.identifier, bonded: bonded)
        if let services = link.systemServices {
            return announceConnected(p, on: connection, mtu: connection.attMTU, services: services)
        }
        let setUp = { [self, weak connection] in
            guard let connection, connection.isOpen else { return }
            connection.exchangeMTU { [self, weak connection] _ in
                guard let connection, connection.isOpen else { return }
                connection.gatt(.discoverAllPrimaryServices) { [self, weak connection] r in
                    guard let connection, connection.isOpen, p.connection === connection else { return }
                    var uuids: Set<CBUUID> = []
                    if case let .success(.services(found)) = r { uuids = Set(found.prefix(CBPeripheral.maximumServices).map { CBUUID($0.uuid) }) }
                    if link.systemServices == nil { link.systemServices = uuids }
                    announceConnected(p, on: connection, mtu: connection.attMTU, services: link.systemServices ?? uuids)
                }
            }
        }
        // A bonded device's link is encrypted with the stored key first, as iOS does. A peer that refuses the key
        // (it removed its pairing information) makes the host drop the link with PIN or Key Missing: the
        // connection fails with CBError.peerRemovedPairingInformation and the bond stays until it is forgotten.
        // Any other outcome goes on with the set-up (encryption is then asked for again when the peer requires it).
        if let host = leHost, connection.role == .central, !connection.isEncrypted,
            host.bondStore.bond(matching: connection.peerAddress)?.centralKey != nil
        {
            host.secure(connection) { _ in setUp() }
        } else {
            setUp()
        }
    }

    /// The link is set up: hands the values the delegate queue reads over to it, then calls didConnect. Loop.
    private func announceConnected(_ p: CBPeripheral, on connection: HostConnection, mtu: UInt16, services: Set<CBUUID>) {
        p.announcedConnected = true
        announceConnected(p, mtu: mtu, services: services)
    }

    /// Calls didConnect on the delegate queue (both backends).
    func announceConnected(_ p: CBPeripheral, mtu: UInt16, services: Set<CBUUID>) {
        let q = queue
        q.async { [self] in
            guard p.state == .connecting else { return }   // cancelled meanwhile: didDisconnect follows
            p.didConnect(mtu: mtu, linkServices: services)
            saveRestorationState()
            delegate?.centralManager(self, didConnect: p)
            broadcast(.connected(p))
            if let events = managerLock.withLock({ connectionEventOptions }), matches(events, p) {
                delegate?.centralManager(self, connectionEventDidOccur: .peerConnected, for: p)
            }
        }
    }

    /// Host plumbing (Linux addition, not for apps): a connection failed, delivered as `centralManager(_:didFailToConnect:error:)`.
    public func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {
        guard let p = connectingPeripherals[address]?.value else {
            connectingPeripherals[address] = nil
            return
        }
        if cancelledConnects.remove(address) != nil {
            connectingPeripherals[address] = nil
            announceDisconnect(p, error: nil)
            return
        }
        if status == .unknownConnectionIdentifier && host.powerState == .on {
            // Cancelled, but not by this manager (another one, or a released peripheral, that waited for the
            // same device): this connection never times out, so it is asked for again.
            return host.connect(to: address)
        }
        connectingPeripherals[address] = nil
        announceFailure(p, CBError.from(hciStatus: status, connecting: true))
    }

    func announceFailure(_ p: CBPeripheral, _ e: CBError) {
        let q = queue
        q.async { [self] in
            p.resetAfterDisconnect()
            delegate?.centralManager(self, didFailToConnect: p, error: e)
            broadcast(.failedToConnect(p, e))
        }
    }

    /// Host plumbing (Linux addition, not for apps): a link is down, delivered as `centralManager(_:didDisconnectPeripheral:error:)`.
    public func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {
        for p in SharedLink.existing(connection)?.peripherals(of: self) ?? [] where p.connection === connection {
            linkClosed(p, reason: reason)
        }
    }

    private func linkClosed(_ p: CBPeripheral, reason: HCIStatus) {
        guard let host = leHost else { return }
        let local = p.localCancel
        p.localCancel = false
        p.connection = nil
        if !p.announcedConnected && !local {
            // Lost while being set up: the connection failed.
            announceFailure(p, CBError.from(hciStatus: reason, connecting: true))
            return
        }
        // CBConnectPeripheralOptionEnableAutoReconnect: a link lost (not cancelled here) is connected again by
        // the system, and the app hears isReconnecting = true.
        let reconnect = !local && p.autoReconnect
        announceDisconnect(p, error: local ? nil : CBError.from(hciStatus: reason, connecting: false), isReconnecting: reconnect)
        if reconnect {
            connectingPeripherals[p.deviceAddress] = WeakPeripheral(p)
            host.connect(to: p.deviceAddress)
        }
    }

    func announceDisconnect(_ p: CBPeripheral, error: (any Error)?, isReconnecting: Bool = false) {
        let q = queue
        q.async { [self] in
            p.resetAfterDisconnect()
            if isReconnecting { p.setState(.connecting) }
            saveRestorationState()
            delegate?.centralManager(
                self, didDisconnectPeripheral: p, timestamp: CFAbsoluteTimeGetCurrent(),
                isReconnecting: isReconnecting, error: error)
            broadcast(.disconnected(p, error.map { UncheckedBox($0) }))
            if let events = managerLock.withLock({ connectionEventOptions }), matches(events, p) {
                delegate?.centralManager(self, connectionEventDidOccur: .peerDisconnected, for: p)
            }
        }
    }

    /// Host plumbing (Linux addition, not for apps): a notification or indication, delivered as `peripheral(_:didUpdateValueFor:error:)`.
    public func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {
        SharedLink.existing(connection)?.forEachRecipient(of: handle) { p in
            if p.manager === self { p.received(value: value, handle: handle) }
        }
    }

    /// Host plumbing (Linux addition, not for apps): room for writes without response, delivered as `peripheralIsReady(toSendWriteWithoutResponse:)`.
    public func host(_ host: LEHost, connectionIsReadyToSendWriteWithoutResponse connection: HostConnection) {
        for p in SharedLink.existing(connection)?.peripherals(of: self) ?? [] where p.sendHeldWrites(on: connection) {
            p.readyToSendWriteWithoutResponse()
        }
    }

    /// Host plumbing (Linux addition, not for apps): the ATT MTU of a link changed.
    public func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {
        // Handed over in order with the other link events, so didConnect's value is never overwritten by an
        // older one.
        for p in SharedLink.existing(connection)?.peripherals(of: self) ?? [] { queue.async { p.setMTU(mtu) } }
    }

    // MARK: Connection events

    /// Registers for connect/disconnect events matching the options; nil clears the registration.
    open func registerForConnectionEvents(options: [CBConnectionEventMatchingOption: Any]? = nil) {
        managerLock.withLock { connectionEventOptions = options }
    }

    private func matches(_ options: [CBConnectionEventMatchingOption: Any], _ p: CBPeripheral) -> Bool {
        if let ids = options[.peripheralUUIDs] as? [UUID], ids.contains(p.identifier) { return true }
        if let uuids = options[.serviceUUIDs] as? [CBUUID] {
            let have = Set((p.services ?? []).map(\.uuid)).union(p.advertisedServiceUUIDs)
            return uuids.contains { have.contains($0) }
        }
        return options.isEmpty
    }

    /// How many CBPeripherals this manager holds alive, and how many table entries it keeps (for tests).
    package var peripheralCounts: (alive: Int, stored: Int) {
        managerLock.withLock { (peripheralsByIdentifier.values.count, peripheralsByIdentifier.storedCount) }
    }

    /// How many devices the host's device cache holds (for tests); nil before the controller was on.
    package var deviceCacheCount: Int? { deviceCache?.count }

    /// The host this manager runs on (for tests and tools).
    package var leHostForTests: LEHost { leHost! }

    open override var description: String { "<CBCentralManager: \(address(of: self))>" }
}
