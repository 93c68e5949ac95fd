// CBPeripheralManager (CBPeripheralManager.h): publishing a local GATT database, advertising, answering
// reads and writes, and updating subscribers.
//
// The manager is the host's peripheral delegate. Local attributes map to database handles; requests for
// dynamic values (a characteristic created with a nil value) go to the delegate as CBATTRequests and are
// answered with `respond(to:withResult:)`; cached values are served by the GATT server directly.
import Foundation
import BLEWire
import BLEHCI
import BLEATT
import BLEGATT
import BLEGAP
import BLEHost

open class CBPeripheralManager: CBManager, HostPeripheralDelegate, @unchecked Sendable {
    private weak var storedDelegate: (any CBPeripheralManagerDelegate)?
    open weak var delegate: (any CBPeripheralManagerDelegate)? {
        get { managerLock.withLock { storedDelegate } }
        set { managerLock.withLock { storedDelegate = newValue } }
    }

    package let queue: DispatchQueue
    package let leHost: LEHost?
    /// The BlueZ backend, when BLE_TRANSPORT is `bluez[:hciN]` (then `leHost` is nil).
    let bluez: BlueZPeripheral?
    private var storedIsAdvertising = false
    /// State restoration (CBPeripheralManagerOptionRestoreIdentifierKey): what is published and advertised
    /// is saved, and a manager created later with the same identifier gets it back.
    let restoreIdentifier: String?
    private var restorationChecked = false
    private var advertisedData: [String: Any]?

    // Under managerLock.
    private var characteristicsByValueHandle: [UInt16: CBMutableCharacteristic] = [:]
    private var descriptorsByHandle: [UInt16: CBDescriptor] = [:]
    private var publishedServices: [ObjectIdentifier: (service: CBMutableService, range: ClosedRange<UInt16>)] = [:]
    /// Requests waiting for `respond(to:withResult:)`, by the request's identity. The entry holds its request
    /// weakly and answers only to that very object: a request the app let go of leaves an entry that no newer
    /// request at the same address can answer for (it is dropped when met).
    private var pendingRequests: [ObjectIdentifier: PendingRequest] = [:]
    private struct PendingRequest {
        weak var request: CBATTRequest?
        var id: UInt64
        var isWrite: Bool
    }
    private var centrals: [UInt16: CBCentral] = [:]
    /// Services added and not yet answered (their didAdd is pending): they may already be included.
    private var addingServices: Set<ObjectIdentifier> = []
    // Loop-confined: the declaration handle of every service in the database, so that an include is
    // resolved when its parent reaches the loop, after every add queued before it (adds queue, as on iOS).
    private var serviceHandlesOnLoop: [ObjectIdentifier: UInt16] = [:]

    public convenience override init() {
        self.init(delegate: Optional<any CBPeripheralManagerDelegate>.none, queue: Optional<DispatchQueue>.none, options: Optional<[String: Any]>.none)
    }

    public convenience init(delegate: (any CBPeripheralManagerDelegate)?, queue: DispatchQueue?) {
        self.init(delegate: delegate, queue: queue, options: nil)
    }

    /// Creates a manager on the controller that `BLE_TRANSPORT` names (the virtual radio when unset). On a
    /// real controller every manager of the process shares one host; on the virtual radio each manager is
    /// a device of its own (pass one host to several managers to put them on one device).
    public convenience init(delegate: (any CBPeripheralManagerDelegate)?, queue: DispatchQueue?, options: [String: Any]?) {
        if let bluez = BlueZOptions.fromEnvironment() {
            self.init(delegate: delegate, queue: queue, options: options, bluez: bluez)
            return
        }
        let made = Result { try HostFactory.sharedHostFromEnvironment(name: "peripheral") }
        self.init(
            delegate: delegate, queue: queue, made: made,
            restoreIdentifier: options?[CBPeripheralManagerOptionRestoreIdentifierKey] as? String)
    }

    /// Creates a manager on a given host (for tests and tools that choose the controller themselves).
    public convenience init(delegate: (any CBPeripheralManagerDelegate)?, queue: DispatchQueue?, options: [String: Any]? = nil, host: LEHost) {
        self.init(
            delegate: delegate, queue: queue, made: .success(host),
            restoreIdentifier: options?[CBPeripheralManagerOptionRestoreIdentifierKey] as? String)
    }

    /// Creates a manager whose database and advertisement bluetoothd serves, through BlueZ's D-Bus API (what
    /// BLE_TRANSPORT=bluez[:hciN] chooses; tests pass a private bus).
    package convenience init(delegate: (any CBPeripheralManagerDelegate)?, queue: DispatchQueue?, options: [String: Any]? = nil, bluez: BlueZOptions) {
        self.init(
            delegate: delegate, queue: queue, made: .failure(CBError(.unknown)),
            restoreIdentifier: options?[CBPeripheralManagerOptionRestoreIdentifierKey] as? String, bluez: bluez)
    }

    private init(
        delegate: (any CBPeripheralManagerDelegate)?, queue: DispatchQueue?, made: Result<LEHost, any Error>, restoreIdentifier: String?,
        bluez: BlueZOptions? = nil
    ) {
        self.queue = queue ?? .main
        self.restoreIdentifier = restoreIdentifier
        self.leHost = bluez == nil ? try? made.get() : nil
        self.bluez = bluez.map { BlueZPeripheral(options: $0) }
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
            announceUnsupported: { [weak self] in if let self { self.delegate?.peripheralManagerDidUpdateState(self) } },
            register: { [weak self] host in if let self { HostHub.of(host).add(self) } },
            powerChanged: { [weak self] s in self?.hostPowerChanged(s) })
    }

    deinit {
        bluez?.close()
        if let host = leHost {
            // The host stays on while another manager uses it (HostHub).
            host.loop.execute { [host] in HostHub.of(host).managerGone() }
        }
    }

    func hostPowerChanged(_ newState: CBManagerState) {
        guard newState != .unknown else { return }
        if newState != .poweredOn { serviceHandlesOnLoop.removeAll() }
        queue.async { [self] in
            if newState != .poweredOn {
                // Below poweredOn advertising stops and centrals are gone; the database must be re-added.
                managerLock.withLock {
                    storedIsAdvertising = false
                    for (_, p) in publishedServices { p.service.isPublished = false }
                    publishedServices.removeAll()
                    characteristicsByValueHandle.removeAll()
                    descriptorsByHandle.removeAll()
                    centrals.removeAll()
                }
            }
            guard state != newState else { return }
            let restored = newState == .poweredOn ? takeRestoredState() : nil
            if let restored {
                // willRestoreState is "the first method invoked", before the state update.
                delegate?.peripheralManager(
                    self,
                    willRestoreState: [
                        CBPeripheralManagerRestoredStateServicesKey: restored.services,
                        CBPeripheralManagerRestoredStateAdvertisementDataKey: restored.advertisement ?? [:],
                    ])
            }
            setState(newState)
            delegate?.peripheralManagerDidUpdateState(self)
            if let restored {
                for s in restored.services { publish(s, announce: false) }
                if let adv = restored.advertisement { advertise(adv, announce: false) }
            }
        }
    }

    /// The saved state, once per manager, if it has a restore identifier and something was saved.
    private func takeRestoredState() -> RestoredPeripheralState? {
        guard let id = restoreIdentifier, !restorationChecked else { return nil }
        restorationChecked = true
        return RestorationStore.loadPeripheral(id: id)
    }

    func saveRestorationState() {
        guard let id = restoreIdentifier else { return }
        let services = managerLock.withLock { publishedServices.values.sorted { $0.range.lowerBound < $1.range.lowerBound }.map(\.service) }
        RestorationStore.savePeripheral(id: id, services: services, advertisement: managerLock.withLock { advertisedData })
    }

    @available(*, deprecated, message: "Use CBManager.authorization instead")
    @discardableResult
    open class func authorizationStatus() -> CBPeripheralManagerAuthorizationStatus { .authorized }

    // MARK: Advertising

    open var isAdvertising: Bool { managerLock.withLock { storedIsAdvertising } }

    /// Advertises; only the local name and service UUIDs are honoured, packed as iOS packs them.
    open func startAdvertising(_ advertisementData: [String: Any]?) {
        guard !misusedOutsidePoweredOn(), leHost != nil || bluez != nil else { return }
        let name = advertisementData?[CBAdvertisementDataLocalNameKey] as? String
        let uuids = (advertisementData?[CBAdvertisementDataServiceUUIDsKey] as? [CBUUID]) ?? []
        if isAdvertising {
            queue.async { [self] in delegate?.peripheralManagerDidStartAdvertising(self, error: CBError(.alreadyAdvertising)) }
            return
        }
        var honoured: [String: Any] = [CBAdvertisementDataServiceUUIDsKey: uuids]
        if let name { honoured[CBAdvertisementDataLocalNameKey] = name }
        advertise(honoured, announce: true)
    }

    /// Starts advertising the honoured keys; `announce` calls didStartAdvertising.
    func advertise(_ data: [String: Any], announce: Bool) {
        let name = data[CBAdvertisementDataLocalNameKey] as? String
        let uuids = (data[CBAdvertisementDataServiceUUIDsKey] as? [CBUUID]) ?? []
        if let bluez {
            managerLock.withLock {
                storedIsAdvertising = true; advertisedData = data
            }
            saveRestorationState()
            return bluez.startAdvertising(name: name, services: uuids)
        }
        guard let host = leHost else { return }
        let packed = AdvertisingPacker.pack(localName: name, serviceUUIDs: uuids.map(\.bluetoothUUID))
        managerLock.withLock {
            storedIsAdvertising = true; advertisedData = data
        }
        saveRestorationState()
        host.loop.execute { [self] in
            host.startAdvertising(AdvertisingConfiguration(data: packed.advertisingData, scanResponse: packed.scanResponseData)) { [self] e in
                queue.async { [self] in
                    if e != nil { managerLock.withLock { storedIsAdvertising = false } }
                    if announce { delegate?.peripheralManagerDidStartAdvertising(self, error: e.map { _ in CBError(.unknown) }) }
                }
            }
        }
    }

    open func stopAdvertising() {
        guard !misusedOutsidePoweredOn(), leHost != nil || bluez != nil else { return }
        managerLock.withLock {
            storedIsAdvertising = false; advertisedData = nil
        }
        saveRestorationState()
        if let bluez { return bluez.stopAdvertising() }
        guard let host = leHost else { return }
        host.loop.execute { host.stopAdvertising() }
    }

    /// A best-effort latency hint for a connected central: sent as an L2CAP Connection Parameter Update
    /// Request (low 7.5–15 ms, medium 30–50 ms, high 100–150 ms connection intervals); the central decides.
    open func setDesiredConnectionLatency(_ latency: CBPeripheralManagerConnectionLatency, for central: CBCentral) {
        guard !misusedOutsidePoweredOn(), let host = leHost else { return }
        guard let handle = managerLock.withLock({ centrals.first { $0.value === central }?.key }) else { return }
        let (lo, hi): (UInt16, UInt16)
        switch latency {
        case .low: (lo, hi) = (6, 12)
        case .medium: (lo, hi) = (24, 40)
        case .high: (lo, hi) = (80, 120)
        @unknown default: (lo, hi) = (24, 40)
        }
        host.loop.execute { host.requestConnectionParameters(handle: handle, minInterval: lo, maxInterval: hi, latency: 0, timeout: 500) }
    }

    /// The BlueZ backend's advertisement ended (refused, or released by bluetoothd).
    func advertisingEnded() {
        managerLock.withLock { storedIsAdvertising = false }
    }

    // MARK: Services

    open func add(_ service: CBMutableService) {
        guard !misusedOutsidePoweredOn() else { return }
        if let problem = publicationProblem(service) {
            CBLog.warning(problem.message)
            queue.async { [self] in delegate?.peripheralManager(self, didAdd: service, error: problem.error) }
            return
        }
        publish(service, announce: true)
    }

    /// Puts a service in the local database; `announce` calls didAdd.
    func publish(_ service: CBMutableService, announce: Bool) {
        if let bluez {
            service.isPublished = true
            return bluez.add(service)
        }
        guard let host = leHost else { return }
        let included = (service.includedServices ?? []).map { ObjectIdentifier($0) }
        let chars = (service.characteristics ?? []).compactMap { $0 as? CBMutableCharacteristic }
        let uuid = service.uuid.bluetoothUUID, isPrimary = service.isPrimary
        let characteristics = chars.map { $0.gattDefinition }
        let key = ObjectIdentifier(service)
        service.isPublished = true
        managerLock.withLock { _ = addingServices.insert(key) }
        host.loop.execute { [self] in
            let result = Result { () throws -> GATTServiceHandles in
                let includes = try included.map { inc -> GATTServiceReference in
                    guard let h = serviceHandlesOnLoop[inc] else { throw CBError(.invalidParameters) }
                    return GATTServiceReference(handle: h)
                }
                return try host.addService(
                    GATTServiceDefinition(
                        uuid: uuid, isPrimary: isPrimary, includedServices: includes,
                        characteristics: characteristics))
            }
            if case let .success(handles) = result { serviceHandlesOnLoop[key] = handles.range.lowerBound }
            queue.async { [self] in
                managerLock.withLock { _ = addingServices.remove(key) }
                switch result {
                case let .success(handles):
                    managerLock.withLock {
                        publishedServices[ObjectIdentifier(service)] = (service, handles.range)
                        for (c, h) in zip(chars, handles.characteristics) {
                            characteristicsByValueHandle[h.value] = c
                            c.handle = h.declaration
                            c.valueHandle = h.value
                            c.endHandle = h.endHandle
                            c._service = service
                            // The stack's own CCCD (and Extended Properties) come first; the app's descriptors follow.
                            var own = h.descriptors.filter { $0 != h.clientConfiguration }
                            if c.properties.contains(.extendedProperties), !own.isEmpty { own.removeFirst() }
                            for (d, dh) in zip(c.descriptors ?? [], own) {
                                descriptorsByHandle[dh] = d
                                d.handle = dh
                            }
                        }
                    }
                    service.handle = handles.range.lowerBound
                    service.endHandle = handles.range.upperBound
                    saveRestorationState()
                    if announce { delegate?.peripheralManager(self, didAdd: service, error: nil) }
                case let .failure(e):
                    service.isPublished = false
                    CBLog.warning("could not publish \(service): \(e)")
                    delegate?.peripheralManager(self, didAdd: service, error: CBError(.invalidParameters))
                }
            }
        }
    }

    private func publicationProblem(_ service: CBMutableService) -> (message: String, error: any Error)? {
        if service.isPublished { return ("\(service) is already published", CBError(.invalidParameters)) }
        let reserved: Set<BluetoothUUID> = [.gapService, .gattService]
        if reserved.contains(service.uuid.bluetoothUUID) {
            return ("the \(service.uuid) service is reserved by the system", CBError(.uuidNotAllowed))
        }
        for inc in service.includedServices ?? [] {
            let published = managerLock.withLock {
                publishedServices[ObjectIdentifier(inc)] != nil || addingServices.contains(ObjectIdentifier(inc))
            }
            if !published { return ("included service \(inc) must be published first", CBError(.invalidParameters)) }
        }
        for c in service.characteristics ?? [] {
            guard let m = c as? CBMutableCharacteristic else {
                return ("\(c) is not a CBMutableCharacteristic", CBError(.invalidParameters))
            }
            if let p = m.publicationProblem { return (p, CBError(.invalidParameters)) }
            for d in m.descriptors ?? [] {
                if let md = d as? CBMutableDescriptor, let p = md.publicationProblem { return (p, CBError(.invalidParameters)) }
            }
        }
        return nil
    }

    open func remove(_ service: CBMutableService) {
        guard !misusedOutsidePoweredOn() else { return }
        if let bluez {
            service.isPublished = false
            return bluez.remove(service)
        }
        guard let host = leHost else { return }
        guard let entry = managerLock.withLock({ publishedServices.removeValue(forKey: ObjectIdentifier(service)) }) else { return }
        managerLock.withLock {
            characteristicsByValueHandle = characteristicsByValueHandle.filter { !entry.range.contains($0.key) }
            descriptorsByHandle = descriptorsByHandle.filter { !entry.range.contains($0.key) }
        }
        service.isPublished = false
        saveRestorationState()
        let key = ObjectIdentifier(service)
        host.loop.execute { [self] in
            serviceHandlesOnLoop[key] = nil
            host.removeService(startHandle: entry.range.lowerBound)
        }
    }

    open func removeAllServices() {
        guard !misusedOutsidePoweredOn() else { return }
        if let bluez { return bluez.removeAll() }
        let all = managerLock.withLock { publishedServices.values.sorted { $0.range.lowerBound > $1.range.lowerBound }.map(\.service) }
        for s in all { remove(s) }
    }

    // MARK: Requests

    /// Host plumbing (Linux addition, not for apps): a central connected.
    public func host(_ host: LEHost, didConnect connection: HostConnection) {
        _ = central(for: connection)
    }

    /// Host plumbing (Linux addition, not for apps): a central disconnected; its subscriptions end.
    public func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {
        guard let central = managerLock.withLock({ centrals.removeValue(forKey: connection.handle) }) else { return }
        queue.async { [self] in
            // A subscribed central that leaves unsubscribes from everything.
            let subscribed = managerLock.withLock { Array(characteristicsByValueHandle.values) }
                .filter { $0.subscribedCentrals?.contains(where: { $0 === central }) ?? false }
                .sorted { $0.valueHandle < $1.valueHandle }
            for c in subscribed {
                c._subscribedCentrals = c._subscribedCentrals?.filter { $0 !== central }
                c._isNotifying = !(c._subscribedCentrals ?? []).isEmpty
                delegate?.peripheralManager(self, central: central, didUnsubscribeFrom: c)
            }
        }
    }

    /// Whether this manager published the characteristic with this value handle.
    package func publishes(_ valueHandle: UInt16) -> Bool {
        managerLock.withLock { characteristicsByValueHandle[valueHandle] != nil }
    }

    package func central(for connection: HostConnection) -> CBCentral {
        managerLock.withLock {
            if let c = centrals[connection.handle] { return c }
            // Centrals get per-host random identifiers from the device cache, as peripherals do. (Loop.)
            let id = leHost.map { DeviceCache.of($0).identifier(for: connection.identityAddress) } ?? UUID()
            let c = CBCentral(identifier: id, maximumUpdateValueLength: Int(connection.attMTU) - 3)
            centrals[connection.handle] = c
            return c
        }
    }

    /// Host plumbing (Linux addition, not for apps): the ATT MTU of a link changed.
    public func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {
        central(for: connection)._maximumUpdateValueLength = Int(mtu) - 3
    }

    /// Host plumbing (Linux addition, not for apps): a read request, delivered as `peripheralManager(_:didReceiveRead:)`.
    public func host(_ host: LEHost, didReceiveRead request: HostReadRequest) {
        guard let connection = host.connections[request.connectionHandle] else { return }
        let central = central(for: connection)
        guard let characteristic = managerLock.withLock({ characteristicsByValueHandle[request.attributeHandle] }) else {
            host.respondToRead(id: request.id, result: .failure(.readNotPermitted))
            return
        }
        let r = CBATTRequest(central: central, characteristic: characteristic, offset: Int(request.offset), value: nil)
        managerLock.withLock { pendingRequests[ObjectIdentifier(r)] = PendingRequest(request: r, id: request.id, isWrite: false) }
        queue.async { [self] in delegate?.peripheralManager(self, didReceiveRead: r) }
    }

    /// Host plumbing (Linux addition, not for apps): write requests, delivered as `peripheralManager(_:didReceiveWrite:)`.
    public func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) {
        guard let connection = host.connections[request.connectionHandle] else { return }
        let central = central(for: connection)
        var requests: [CBATTRequest] = []
        for item in request.items {
            guard let c = managerLock.withLock({ characteristicsByValueHandle[item.attributeHandle] }) else {
                host.respondToWrite(id: request.id, error: .writeNotPermitted)
                return
            }
            requests.append(CBATTRequest(central: central, characteristic: c, offset: Int(item.offset), value: Data(item.value)))
        }
        guard let first = requests.first else { return host.respondToWrite(id: request.id, error: nil) }
        if request.needsResponse {
            managerLock.withLock { pendingRequests[ObjectIdentifier(first)] = PendingRequest(request: first, id: request.id, isWrite: true) }
        } else {
            host.respondToWrite(id: request.id, error: nil)
        }
        let batch = requests
        queue.async { [self] in delegate?.peripheralManager(self, didReceiveWrite: batch) }
    }

    /// Answers a read, or a batch of writes (pass the first request of the batch), exactly once.
    open func respond(to request: CBATTRequest, withResult result: CBATTError.Code) {
        if let bluez { return bluez.respond(to: request, withResult: result) }
        guard let host = leHost else { return }
        let pending = managerLock.withLock { () -> PendingRequest? in
            let key = ObjectIdentifier(request)
            guard let entry = pendingRequests[key] else { return nil }
            // Not this request's entry: one of a request that is gone, which nobody can answer any more.
            if entry.request !== request {
                if entry.request == nil { pendingRequests[key] = nil }
                return nil
            }
            pendingRequests[key] = nil
            return entry
        }
        guard let pending else {
            CBLog.warning("respond(to:withResult:) for \(request), which is not waiting for an answer")
            return
        }
        let value = request.value.map { [UInt8]($0) } ?? []
        let code = ATTErrorCode(rawValue: UInt8(truncatingIfNeeded: result.rawValue))
        host.loop.execute {
            if pending.isWrite {
                host.respondToWrite(id: pending.id, error: result == .success ? nil : code)
            } else {
                host.respondToRead(id: pending.id, result: result == .success ? .success(value) : .failure(code))
            }
        }
    }

    /// Host plumbing (Linux addition, not for apps): a subscription changed, delivered as `peripheralManager(_:central:didSubscribeTo:)` or `…didUnsubscribeFrom:`.
    public func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {
        guard let c = managerLock.withLock({ characteristicsByValueHandle[valueHandle] }) else { return }
        let central = central(for: connection)
        let on = notify || indicate
        queue.async { [self] in
            var list = c._subscribedCentrals ?? []
            let was = list.contains { $0 === central }
            if on && !was { list.append(central) }
            if !on { list.removeAll { $0 === central } }
            c._subscribedCentrals = list
            c._isNotifying = !list.isEmpty
            if on && !was { delegate?.peripheralManager(self, central: central, didSubscribeTo: c) }
            if !on && was { delegate?.peripheralManager(self, central: central, didUnsubscribeFrom: c) }
        }
    }

    /// Sends a value to subscribed centrals (all when nil). Returns false when the transmit queue is full;
    /// `peripheralManagerIsReady(toUpdateSubscribers:)` follows when there is room again.
    @discardableResult
    open func updateValue(_ value: Data, for characteristic: CBMutableCharacteristic, onSubscribedCentrals centrals: [CBCentral]?) -> Bool {
        guard !misusedOutsidePoweredOn() else { return false }
        if let bluez { return bluez.updateValue(value, for: characteristic) }
        guard let host = leHost else { return false }
        let handle = characteristic.valueHandle
        guard handle != 0 else { return false }
        let handles: [UInt16]? = centrals.map { wanted in
            managerLock.withLock { self.centrals.filter { entry in wanted.contains { $0 === entry.value } }.map(\.key) }
        }
        // One memcpy: `[UInt8](value)` copies a Data through its generic sequence path, octet by octet.
        let bytes = [UInt8](unsafeUninitializedCapacity: value.count) { buffer, count in count = value.copyBytes(to: buffer) }
        return host.submitUpdate(bytes, forHandle: handle, to: handles)
    }

    public func hostIsReadyToUpdateSubscribers(_ host: LEHost) { readyToUpdateSubscribers() }

    /// Room for updates again (our host's queue, or the BlueZ backend's window): the delegate hears it on its queue.
    func readyToUpdateSubscribers() {
        queue.async { [self] in delegate?.peripheralManagerIsReady(toUpdateSubscribers: self) }
    }

    /// The host this manager runs on (for tests and tools).
    package var leHostForTests: LEHost { leHost! }

    open override var description: String { "<CBPeripheralManager: \(address(of: self))>" }
}

extension CBMutableCharacteristic {
    /// The database definition of this local characteristic.
    var gattDefinition: GATTCharacteristicDefinition {
        let perms = permissions
        var p: AttributePermissions = []
        if perms.contains(.readable) { p.insert(.readable) }
        if perms.contains(.writeable) { p.insert(.writeable) }
        if perms.contains(.readEncryptionRequired) { p.formUnion([.readable, .readEncryptionRequired]) }
        if perms.contains(.writeEncryptionRequired) { p.formUnion([.writeable, .writeEncryptionRequired]) }
        var descriptors: [GATTDescriptorDefinition] = (descriptors ?? []).map { d in
            GATTDescriptorDefinition(uuid: d.uuid.bluetoothUUID, permissions: .readable, value: CBDescriptor.wireValue(of: d.value))
        }
        // notify/indicateEncryptionRequired: the characteristic notifies or indicates, and subscribing (writing
        // its Client Characteristic Configuration) needs an encrypted link, so a central pairs first.
        var wire = GATTCharacteristicProperties(rawValue: UInt8(truncatingIfNeeded: properties.rawValue))
        if properties.contains(.notifyEncryptionRequired) { wire.insert(.notify) }
        if properties.contains(.indicateEncryptionRequired) { wire.insert(.indicate) }
        if !properties.isDisjoint(with: [.notifyEncryptionRequired, .indicateEncryptionRequired]) {
            descriptors.append(
                GATTDescriptorDefinition(
                    uuid: .clientCharacteristicConfiguration,
                    permissions: [.readable, .writeable, .writeEncryptionRequired], value: nil))
        }
        return GATTCharacteristicDefinition(
            uuid: uuid.bluetoothUUID, properties: wire,
            permissions: p, value: value.map { [UInt8]($0) }, descriptors: descriptors)
    }
}
