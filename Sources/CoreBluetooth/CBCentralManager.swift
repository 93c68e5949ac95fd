// CBCentralManager (CBCentralManager.h): scanning, connecting, and the peripherals it knows.
//
// The manager is the host's central delegate: host callbacks arrive on the host loop, where the manager
// keeps its scan and connection bookkeeping; everything the app sees is then applied and announced on the
// delegate queue.
import Foundation
import BLEWire
import BLEHCI
import BLEHost

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
    private var storedIsScanning = false

    // Loop-confined.
    private var scan: ScanState?
    private var peripheralsByAddress: [BluetoothAddress: CBPeripheral] = [:]
    private var connectingPeripherals: [BluetoothAddress: CBPeripheral] = [:]
    private var cancelledConnects: Set<BluetoothAddress> = []
    private var connectionEventOptions: [CBConnectionEventMatchingOption: Any]?

    let eventListeners = EventListeners<CBCentralManagerEvent>()
    /// State restoration (CBCentralManagerOptionRestoreIdentifierKey).
    let restoreIdentifier: String?
    private var restorationChecked = false
    private var scanRecord: (services: [CBUUID]?, options: [String: Any]?)?

    // Any thread (under managerLock).
    private var peripheralsByIdentifier: [UUID: CBPeripheral] = [:]

    public convenience override init() {
        self.init(delegate: Optional<any CBCentralManagerDelegate>.none, queue: Optional<DispatchQueue>.none, options: Optional<[String: Any]>.none)
    }

    public convenience init(delegate: (any CBCentralManagerDelegate)?, queue: DispatchQueue?) {
        self.init(delegate: delegate, queue: queue, options: nil)
    }

    /// Creates a manager on the controller that `BLE_TRANSPORT` names (the virtual radio when unset).
    public convenience init(delegate: (any CBCentralManagerDelegate)?, queue: DispatchQueue?, options: [String: Any]?) {
        let made = Result { try HostFactory.makeHostFromEnvironment(name: "central") }
        self.init(delegate: delegate, queue: queue, made: made, restoreIdentifier: options?[CBCentralManagerOptionRestoreIdentifierKey] as? String)
    }

    /// Creates a manager on a given host (for tests and tools that choose the controller themselves).
    public convenience init(delegate: (any CBCentralManagerDelegate)?, queue: DispatchQueue?, options: [String: Any]? = nil, host: LEHost) {
        self.init(delegate: delegate, queue: queue, made: .success(host), restoreIdentifier: options?[CBCentralManagerOptionRestoreIdentifierKey] as? String)
    }

    private init(delegate: (any CBCentralManagerDelegate)?, queue: DispatchQueue?, made: Result<LEHost, any Error>, restoreIdentifier: String?) {
        self.queue = queue ?? .main
        self.restoreIdentifier = restoreIdentifier
        self.leHost = try? made.get()
        super.init()
        storedDelegate = delegate
        var failure: String?
        if case let .failure(e) = made { failure = "\(e)" }
        attach(failure: failure)
    }

    private func attach(failure: String?) {
        start(on: leHost, queue: queue, failure: failure,
              announceUnsupported: { [weak self] in if let self { self.delegate?.centralManagerDidUpdateState(self) } },
              register: { [weak self] host in
                  host.centralDelegate = self
                  // Once a device has told us its identity, its later private addresses find the same CBPeripheral.
                  host.addSecurityObserver { [weak self] c, e in
                      guard let self, case .paired = e, let p = c.context as? CBPeripheral, p.manager === self else { return }
                      peripheralsByAddress[c.identityAddress] = p
                  }
              },
              powerChanged: { [weak self] s in self?.hostPowerChanged(s) })
    }

    deinit {
        if let host = leHost {
            host.loop.execute { [host] in if host.peripheralDelegate == nil { host.powerOff() } }
        }
    }

    // MARK: State

    private func hostPowerChanged(_ s: HostPowerState) {
        let newState = s.managerState
        guard newState != .unknown else { return }
        if newState != .poweredOn {
            scan = nil
            connectingPeripherals.removeAll()
        }
        let q = queue
        q.async { [self] in
            if newState != .poweredOn {
                managerLock.withLock { storedIsScanning = false }
                // Links are gone; peripherals of this manager are disconnected (no didDisconnect, as on iOS).
                for p in managerLock.withLock({ Array(peripheralsByIdentifier.values) }) { p.resetAfterDisconnect() }
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

    /// Whether this platform supports a feature.
    open class func supports(_ features: Feature) -> Bool { features.isEmpty }

    open var isScanning: Bool { managerLock.withLock { storedIsScanning } }

    // MARK: Scanning

    /// Scans for peripherals advertising any of `serviceUUIDs` (nil: all). A new call replaces the filters.
    open func scanForPeripherals(withServices serviceUUIDs: [CBUUID]?, options: [String: Any]? = nil) {
        guard !misusedOutsidePoweredOn(), let host = leHost else { return }
        let allowDuplicates = (options?[CBCentralManagerScanOptionAllowDuplicatesKey] as? NSNumber)?.boolValue
            ?? (options?[CBCentralManagerScanOptionAllowDuplicatesKey] as? Bool) ?? false
        let solicited = (options?[CBCentralManagerScanOptionSolicitedServiceUUIDsKey] as? [CBUUID]) ?? []
        let state = ScanState(services: serviceUUIDs.map { Set($0.map(\.bluetoothUUID)) }.flatMap { $0.isEmpty ? nil : $0 },
                              solicited: Set(solicited.map(\.bluetoothUUID)), allowDuplicates: allowDuplicates)
        managerLock.withLock { storedIsScanning = true; scanRecord = (serviceUUIDs, options) }
        saveRestorationState()
        host.loop.execute { [self] in
            scan = state
            host.startScanning(active: true, filterDuplicates: false) { [weak self] e in
                guard let self, e != nil else { return }
                scan = nil
                managerLock.withLock { storedIsScanning = false }
            }
        }
    }

    open func stopScan() {
        guard !misusedOutsidePoweredOn(), let host = leHost else { return }
        managerLock.withLock { storedIsScanning = false; scanRecord = nil }
        saveRestorationState()
        host.loop.execute { [self] in
            scan = nil
            host.stopScanning()
        }
    }

    public func host(_ host: LEHost, didReceive report: AdvertisingReport) {
        guard var s = scan else { return }
        guard let decision = s.accept(report) else { scan = s; return }
        scan = s
        let p = peripheral(for: report.address)
        let rssi = NSNumber(value: Int(report.rssi))
        let box = UncheckedBox(decision.advertisement)
        let q = queue
        q.async { [self] in
            let advertisement = box.value
            if let name = advertisement[CBAdvertisementDataLocalNameKey] as? String { p.setAdvertisedName(name) }
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
        let peripherals = saved.addresses.map { a -> CBPeripheral in
            let p = CBPeripheral(manager: self, address: a, identifier: CBPeripheral.identifier(for: a))
            managerLock.withLock { peripheralsByIdentifier[p.identifier] = p }
            leHost?.loop.execute { [self] in if peripheralsByAddress[a] == nil { peripheralsByAddress[a] = p } }
            return p
        }
        return RestoredCentralState(peripherals: peripherals, scanning: saved.scanning, scanServices: saved.scanServices, scanOptions: saved.scanOptions)
    }

    /// Saves the peripherals connected or being connected, and the scan, for a later manager with this identifier.
    func saveRestorationState() {
        guard let id = restoreIdentifier else { return }
        let (peripherals, scanRecord) = managerLock.withLock { (Array(peripheralsByIdentifier.values), self.scanRecord) }
        let kept = peripherals.filter { $0.state == .connected || $0.state == .connecting }.map(\.deviceAddress)
        RestorationStore.saveCentral(id: id, addresses: kept, scanning: scanRecord != nil,
                                     scanServices: scanRecord?.services ?? nil, scanOptions: scanRecord?.options ?? nil)
    }

    /// The one CBPeripheral of this manager for an address (created on first sight). Loop only.
    /// A bonded device seen at a new private address is the same CBPeripheral (its IRK resolves the address).
    func peripheral(for address: BluetoothAddress) -> CBPeripheral {
        if let p = peripheralsByAddress[address] { return p }
        let identity = leHost?.identity(of: address) ?? address
        if identity != address, let p = peripheralsByAddress[identity] {
            p.deviceAddress = address
            peripheralsByAddress[address] = p
            return p
        }
        let p = CBPeripheral(manager: self, address: address, identifier: CBPeripheral.identifier(for: identity))
        peripheralsByAddress[address] = p
        if identity != address { peripheralsByAddress[identity] = p }
        managerLock.withLock { peripheralsByIdentifier[p.identifier] = p }
        return p
    }

    // MARK: Retrieval

    /// The known peripherals with these identifiers, in the order asked; unknown identifiers are skipped.
    open func retrievePeripherals(withIdentifiers identifiers: [UUID]) -> [CBPeripheral] {
        guard state == .poweredOn else { return [] }
        return managerLock.withLock { identifiers.compactMap { peripheralsByIdentifier[$0] } }
    }

    /// Connected peripherals that expose any of these services (as far as discovery has seen them).
    open func retrieveConnectedPeripherals(withServices serviceUUIDs: [CBUUID]) -> [CBPeripheral] {
        guard state == .poweredOn else { return [] }
        let wanted = Set(serviceUUIDs)
        return managerLock.withLock { Array(peripheralsByIdentifier.values) }
            .filter { $0.state == .connected && ($0.services ?? []).contains { wanted.contains($0.uuid) } }
            .sorted { $0.identifier.uuidString < $1.identifier.uuidString }
    }

    // MARK: Connections

    /// Connects; never times out. Ends in exactly one of didConnect or didFailToConnect.
    open func connect(_ peripheral: CBPeripheral, options: [String: Any]? = nil) {
        guard !misusedOutsidePoweredOn(), let host = leHost else { return }
        guard peripheral.manager === self else {
            CBLog.warning("\(peripheral) is not a valid peripheral for \(self)")
            return
        }
        if peripheral.state == .connected {
            queue.async { [self] in delegate?.centralManager(self, didConnect: peripheral); broadcast(.connected(peripheral)) }
            return
        }
        peripheral.setState(.connecting)
        peripheral.autoReconnect = (options?[CBConnectPeripheralOptionEnableAutoReconnect] as? NSNumber)?.boolValue
            ?? (options?[CBConnectPeripheralOptionEnableAutoReconnect] as? Bool) ?? false
        let delay = (options?[CBConnectPeripheralOptionStartDelayKey] as? NSNumber)?.doubleValue ?? 0
        host.loop.execute { [self] in
            let start = { [self] in
                guard peripheral.state == .connecting else { return }
                connectingPeripherals[peripheral.deviceAddress] = peripheral
                host.connect(to: peripheral.deviceAddress)
            }
            if delay > 0 { host.loop.schedule(after: .seconds(delay), start) } else { start() }
        }
    }

    /// Disconnects or cancels a pending connection; didDisconnectPeripheral follows with a nil error.
    open func cancelPeripheralConnection(_ peripheral: CBPeripheral) {
        guard !misusedOutsidePoweredOn(), let host = leHost else { return }
        let wasState = peripheral.state
        peripheral.autoReconnect = false
        guard wasState != .disconnected else { return }
        peripheral.setState(.disconnecting)
        host.loop.execute { [self] in
            if let c = peripheral.connection {
                peripheral.localCancel = true
                c.disconnect()
            } else if connectingPeripherals[peripheral.deviceAddress] != nil {
                cancelledConnects.insert(peripheral.deviceAddress)
                host.cancelConnect(to: peripheral.deviceAddress)
            } else {
                // Still waiting for a start delay: nothing on air yet.
                announceDisconnect(peripheral, error: nil)
            }
        }
    }

    public func host(_ host: LEHost, didConnect connection: HostConnection) {
        guard let p = connectingPeripherals.removeValue(forKey: connection.peerAddress) ?? peripheralsByAddress[connection.peerAddress],
              p.state == .connecting || p.state == .disconnecting || p.autoReconnect || cancelledConnects.contains(connection.peerAddress) else {
            // A link nobody here asked for (another manager on the same host): leave it alone.
            return
        }
        if cancelledConnects.remove(connection.peerAddress) != nil || p.state == .disconnecting {
            p.localCancel = true
            p.connection = connection
            connection.context = p
            connection.disconnect()
            return
        }
        p.connection = connection
        connection.context = p
        connection.exchangeMTU()
        p.watchServiceChanged(on: connection)
        let q = queue
        q.async { [self] in
            p.didConnect(mtu: connection.attMTU)
            saveRestorationState()
            delegate?.centralManager(self, didConnect: p)
            broadcast(.connected(p))
            if let events = managerLock.withLock({ connectionEventOptions }), matches(events, p) {
                delegate?.centralManager(self, connectionEventDidOccur: .peerConnected, for: p)
            }
        }
    }

    public func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {
        guard let p = connectingPeripherals.removeValue(forKey: address) else { return }
        if cancelledConnects.remove(address) != nil {
            announceDisconnect(p, error: nil)
            return
        }
        let q = queue
        q.async { [self] in
            p.resetAfterDisconnect()
            let e = CBError.from(hciStatus: status, connecting: true)
            delegate?.centralManager(self, didFailToConnect: p, error: e)
            broadcast(.failedToConnect(p, e))
        }
    }

    public func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {
        guard let p = connection.context as? CBPeripheral, p.manager === self else { return }
        let local = p.localCancel
        p.localCancel = false
        p.connection = nil
        // CBConnectPeripheralOptionEnableAutoReconnect: a link lost (not cancelled here) is connected again by
        // the system, and the app hears isReconnecting = true.
        let reconnect = !local && p.autoReconnect
        announceDisconnect(p, error: local ? nil : CBError.from(hciStatus: reason, connecting: false), isReconnecting: reconnect)
        if reconnect {
            connectingPeripherals[p.deviceAddress] = p
            host.connect(to: p.deviceAddress)
        }
    }

    private func announceDisconnect(_ p: CBPeripheral, error: (any Error)?, isReconnecting: Bool = false) {
        let q = queue
        q.async { [self] in
            p.resetAfterDisconnect()
            if isReconnecting { p.setState(.connecting) }
            saveRestorationState()
            delegate?.centralManager(self, didDisconnectPeripheral: p, timestamp: CFAbsoluteTimeGetCurrent(),
                                     isReconnecting: isReconnecting, error: error)
            broadcast(.disconnected(p, error.map { UncheckedBox($0) }))
            if let events = managerLock.withLock({ connectionEventOptions }), matches(events, p) {
                delegate?.centralManager(self, connectionEventDidOccur: .peerDisconnected, for: p)
            }
        }
    }

    public func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {
        (connection.context as? CBPeripheral)?.received(value: value, handle: handle)
    }

    public func host(_ host: LEHost, connectionIsReadyToSendWriteWithoutResponse connection: HostConnection) {
        (connection.context as? CBPeripheral)?.readyToSendWriteWithoutResponse()
    }

    public func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {
        (connection.context as? CBPeripheral)?.setMTU(mtu)
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

    /// The host this manager runs on (for tests and tools).
    package var leHostForTests: LEHost { leHost! }

    open override var description: String { "<CBCentralManager: \(address(of: self))>" }
}
