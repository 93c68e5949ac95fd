// SimulatedPeripheral: one device on the simulation's air, made from a PeripheralSpec. It is a whole host
// of our stack with its own virtual controller and GATT server: the app under test meets it exactly as it
// would a device in the room. Every characteristic value is answered here (the spec's handlers, or the
// stored value), so a read can be delayed, refused or never answered, and a capture's values replayed.
//
// Threading: the peripheral's state lives on the air's loop; handlers run there and must not block. The
// `simulate…` methods are called from the test; each takes effect on the loop and then lets the app react
// (the simulation's runUntilIdle) before it returns.
import Foundation
import BLEWire
import BLEHCI
import BLEATT
import BLEGATT
import BLEHost
import BLETransport
import BLEVirtualRadio
@preconcurrency import CoreBluetooth

public final class SimulatedPeripheral: HostPeripheralDelegate, @unchecked Sendable {
    /// The device's host (our stack, in the peripheral role) and its controller.
    public let host: LEHost
    public let controller: VirtualController
    public private(set) var spec: PeripheralSpec
    private weak var simulation: BluetoothSimulation?
    private var loop: EventLoop { host.loop }

    // Loop-confined.
    private struct Characteristic { var service: BluetoothUUID; var uuid: BluetoothUUID; var valueHandle: UInt16 }
    private var characteristicsByHandle: [UInt16: Characteristic] = [:]
    private var values: [UInt16: [UInt8]] = [:]
    private var readCounts: [UInt16: Int] = [:]
    private var removed = false
    private var advertisingWanted = true
    private var replayTimers: [UInt16: [LoopTimer]] = [:]
    private var backlog: [(value: [UInt8], handle: UInt16, clients: [UInt16]?)] = []
    private var macChanges: UInt8 = 0
    private var subscriptions: [UInt16: Set<UInt16>] = [:]   // value handle → connection handles

    init(spec: PeripheralSpec, simulation: BluetoothSimulation) throws {
        self.spec = spec
        self.simulation = simulation
        let air = simulation.air
        controller = air.addController(address: spec.address, position: VirtualPosition(x: spec.proximity.distance, y: 0))
        host = LEHost(transport: controller, loop: air.loop, name: spec.name ?? "simulated peripheral")
        simulation.watchPower(controller, host)
        let database = try buildDatabase(spec.services)
        host.useDatabase(database, configuration: GATTServerConfiguration(preferredMTU: min(max(spec.mtu, ATTMTU.default), ATTMTU.maximum)))
        host.peripheralDelegate = self
    }

    /// Builds the database with every characteristic value answered here (the stored value kept aside).
    private func buildDatabase(_ services: [GATTServiceDefinition]) throws -> GATTDatabase {
        var db = spec.includesDefaultServices ? GATTDatabase.withDefaultServices(deviceName: spec.name ?? "Simulated") : GATTDatabase()
        for s in services { try add(s, to: &db) }
        return db
    }

    private func add(_ service: GATTServiceDefinition, to db: inout GATTDatabase) throws {
        let handles = try db.add(dynamic(service))
        record(service, handles)
    }

    private func dynamic(_ service: GATTServiceDefinition) -> GATTServiceDefinition {
        var s = service
        for i in s.characteristics.indices { s.characteristics[i].value = nil }
        return s
    }

    private func record(_ service: GATTServiceDefinition, _ handles: GATTServiceHandles) {
        for (def, h) in zip(service.characteristics, handles.characteristics) {
            characteristicsByHandle[h.value] = Characteristic(service: service.uuid, uuid: def.uuid, valueHandle: h.value)
            values[h.value] = def.value ?? []
        }
    }

    func start() {
        loop.execute { [self] in
            host.addPowerObserver { [weak self] state in
                guard let self, state == .on, !self.removed else { return }
                self.publishChannels()
                self.startAdvertising(first: true)
            }
            host.powerOn()
        }
    }

    /// Takes the device off the air for good.
    func remove() {
        loop.sync {
            removed = true
            for (_, timers) in replayTimers { for t in timers { loop.cancel(t) } }
            replayTimers.removeAll()
            host.powerOff()
        }
        simulation?.air.remove(controller)
    }

    private func sync<T>(_ work: () throws -> T) rethrows -> T { loop.isInLoop ? try work() : try loop.sync(work) }
    private func settle() { if !loop.isInLoop { simulation?.runUntilIdle() } }

    // MARK: Advertising

    private func startAdvertising(first: Bool) {
        guard let a = spec.advertising, advertisingWanted, !removed, host.powerState == .on else { return }
        let config = AdvertisingConfiguration(
            data: a.data, scanResponse: a.scanResponse, connectable: a.isConnectable && spec.isConnectable,
            interval: UInt16(clamping: Int((min(max(a.interval, 0.02), 10.24) / 0.000625).rounded())))
        let go = { [weak self] in
            guard let self, !self.removed, self.host.powerState == .on else { return }
            if !self.host.connections.isEmpty && !a.alsoWhenConnected { return }
            self.host.startAdvertising(config)
        }
        if first && a.delay > 0 { loop.schedule(after: .seconds(a.delay), go) } else { go() }
    }

    private func publishChannels() {
        for c in spec.channels {
            _ = host.publishL2CAP(psm: c.psm) { [weak self] channel in
                guard let self else { return }
                let wrapped = SimulatedL2CAPChannel(channel: channel, loop: self.loop)
                switch c.response {
                case .accept: c.handler(wrapped)
                case let .delayed(t): self.loop.schedule(after: .seconds(t)) { c.handler(wrapped) }
                }
            }
        }
    }

    // MARK: HostPeripheralDelegate (on the loop)

    public func host(_ host: LEHost, didConnect connection: HostConnection) {
        if let interval = spec.connectionInterval {
            let units = UInt16(clamping: Int((min(max(interval, 0.0075), 4.0) / 0.00125).rounded()))
            host.requestConnectionParameters(handle: connection.handle, minInterval: units, maxInterval: units, latency: 0, timeout: 400)
        }
        // Legacy advertising stops with the connection, and the host would resume it: a device that does not
        // advertise while connected stops here (CoreBluetoothMock's alsoWhenConnected: false).
        if spec.advertising?.alsoWhenConnected == true { startAdvertising(first: false) } else { host.stopAdvertising() }
    }

    public func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {
        for (h, set) in subscriptions { subscriptions[h] = set.subtracting([connection.handle]) }
        cancelReplay(for: connection.handle)
        if !host.isAdvertising { startAdvertising(first: false) }
    }

    public func host(_ host: LEHost, didReceiveRead request: HostReadRequest) {
        guard let c = characteristicsByHandle[request.attributeHandle] else {
            return host.respondToRead(id: request.id, result: .failure(.readNotPermitted))
        }
        let handle = request.attributeHandle
        if request.offset == 0, let recorded = spec.recordedValues[handle], !recorded.isEmpty {
            let n = readCounts[handle, default: 0]
            values[handle] = recorded[min(n, recorded.count - 1)]
            readCounts[handle] = n + 1
        }
        let current = Data(values[handle] ?? [])
        let r = SimulatedReadRequest(
            service: CBUUID(c.service), characteristic: CBUUID(c.uuid), handle: handle,
            offset: Int(request.offset), currentValue: current)
        answer(read: request, with: spec.onRead?(r) ?? .value(current))
    }

    private func answer(read request: HostReadRequest, with response: SimulatedReadResponse) {
        switch response {
        case let .value(v):
            let offset = Int(request.offset)
            guard offset <= v.count else { return host.respondToRead(id: request.id, result: .failure(.invalidOffset)) }
            host.respondToRead(id: request.id, result: .success([UInt8](v.dropFirst(offset))))
        case let .error(code):
            host.respondToRead(id: request.id, result: .failure(ATTErrorCode(rawValue: UInt8(clamping: code.rawValue))))
        case let .delayed(t, then):
            loop.schedule(after: .seconds(max(t, 0))) { [weak self] in self?.answer(read: request, with: then) }
        case .noResponse:
            break
        }
    }

    public func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) {
        var outcome: SimulatedWriteResponse = .success
        for item in request.items {
            guard let c = characteristicsByHandle[item.attributeHandle] else { outcome = .error(.writeNotPermitted); break }
            let w = SimulatedWriteRequest(
                service: CBUUID(c.service), characteristic: CBUUID(c.uuid), handle: item.attributeHandle,
                offset: Int(item.offset), value: Data(item.value), withResponse: request.needsResponse)
            let r = spec.onWrite?(w) ?? .success
            if case .success = r {
                let old = values[item.attributeHandle] ?? []
                values[item.attributeHandle] = Array(old.prefix(Int(item.offset))) + item.value
            } else {
                outcome = r
                break
            }
        }
        answer(write: request, with: outcome)
    }

    private func answer(write request: HostWriteRequest, with response: SimulatedWriteResponse) {
        guard request.needsResponse else { return host.respondToWrite(id: request.id, error: nil) }
        switch response {
        case .success: host.respondToWrite(id: request.id, error: nil)
        case let .error(code): host.respondToWrite(id: request.id, error: ATTErrorCode(rawValue: UInt8(clamping: code.rawValue)))
        case let .delayed(t, then):
            loop.schedule(after: .seconds(max(t, 0))) { [weak self] in self?.answer(write: request, with: then) }
        case .noResponse: break
        }
    }

    public func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {
        let on = notify || indicate
        if on { subscriptions[valueHandle, default: []].insert(connection.handle) } else { subscriptions[valueHandle]?.remove(connection.handle) }
        if let c = characteristicsByHandle[valueHandle] { spec.onSubscriptionChange?(CBUUID(c.uuid), on) }
        if on { replay(valueHandle, to: connection.handle) } else { cancelReplay(for: connection.handle, handle: valueHandle) }
    }

    public func hostIsReadyToUpdateSubscribers(_ host: LEHost) {
        let waiting = backlog
        backlog.removeAll()
        for u in waiting { send(u.value, handle: u.handle, to: u.clients) }
    }

    private func send(_ value: [UInt8], handle: UInt16, to clients: [UInt16]?) {
        if !backlog.isEmpty || !host.updateValue(value, forHandle: handle, to: clients) { backlog.append((value, handle, clients)) }
    }

    /// The notifications and indications a capture recorded for this value handle, at their recorded pace.
    private func replay(_ handle: UInt16, to connection: UInt16) {
        guard let updates = spec.recordedUpdates[handle], !updates.isEmpty else { return }
        cancelReplay(for: connection, handle: handle)
        var timers: [LoopTimer] = []
        for u in updates {
            timers.append(
                loop.schedule(after: .seconds(max(u.after, 0))) { [weak self] in
                    guard let self, self.host.connections[connection] != nil else { return }
                    self.values[handle] = u.value
                    self.send(u.value, handle: handle, to: [connection])
                })
        }
        replayTimers[handle, default: []] += timers
    }

    private func cancelReplay(for connection: UInt16, handle: UInt16? = nil) {
        for (h, timers) in replayTimers where handle == nil || h == handle {
            for t in timers { loop.cancel(t) }
            replayTimers[h] = nil
        }
    }

    // MARK: Looking the device up

    /// The value handle of a characteristic (the first with this UUID, or in `service`).
    public func handle(of characteristic: CBUUID, in service: CBUUID? = nil) -> UInt16? {
        sync {
            characteristicsByHandle.values.sorted { $0.valueHandle < $1.valueHandle }
                .first { $0.uuid == characteristic.bluetoothUUID && (service == nil || $0.service == service!.bluetoothUUID) }?.valueHandle
        }
    }

    /// The value the peripheral holds for a characteristic now (what was last written, updated or read).
    public func value(of characteristic: CBUUID) -> Data? {
        sync { handle(of: characteristic).flatMap { values[$0] }.map { Data($0) } }
    }

    /// The address the device uses on the air now.
    public var address: BluetoothAddress { sync { host.currentPrivateAddress ?? controller.address } }

    /// The identifier the phone knows this device by (`CBPeripheral.identifier`): the phone's device cache
    /// learns the device if it had not met it.
    public var identifier: UUID? {
        guard let sim = simulation else { return nil }
        let a = address
        return sim.phone.loop.sync { DeviceCache.of(sim.phone).identifier(for: sim.phone.identity(of: a)) }
    }

    /// The centrals connected now (connection handles on this device).
    public var connectionCount: Int { sync { host.connections.count } }

    // MARK: CoreBluetoothMock's simulations

    /// Moves the device: its RSSI changes, and `.outOfRange` stops its advertisements reaching the phone and
    /// loses its links after their supervision timeout. Coming back in range, it is seen again.
    public func simulateProximityChange(_ proximity: Proximity) {
        sync { spec.proximity = proximity }
        simulation?.air.move(controller, to: VirtualPosition(x: proximity.distance, y: 0))
        settle()
    }

    /// The device ends its connections: with no error (or any error but a timeout) it disconnects (Remote
    /// User Terminated: the app gets `CBError.peripheralDisconnected`); with `CBError(.connectionTimeout)`
    /// the link is lost instead and both sides find out after the supervision timeout.
    public func simulateDisconnection(withError error: Error? = nil) {
        if let e = error as? CBError, e.code == .connectionTimeout {
            simulation?.air.breakLinks(of: controller)
        } else {
            sync { for h in host.connections.keys.sorted() { host.disconnect(handle: h) } }
        }
        settle()
    }

    /// The device resets: it drops off the air (the phone notices after the supervision timeout) and comes
    /// straight back, advertising again, with its database; subscriptions are gone.
    public func simulateReset() {
        controller.powerOff()
        settle()
        controller.powerOn()
        settle()
    }

    /// Replaces the device's services (the default GAP and GATT services stay): connected centrals get
    /// Service Changed, and the app `peripheral(_:didModifyServices:)`.
    public func simulateServiceChange(newName: String? = nil, newServices: [CBMutableService]) throws {
        let defs = newServices.map(GATTServiceDefinition.init(simulating:))
        try sync { () throws -> Void in
            let keep: Set<BluetoothUUID> = spec.includesDefaultServices ? [.gapService, .gattService] : []
            for s in host.gattServer.database.services where !keep.contains(s.uuid) {
                host.removeService(startHandle: s.range.lowerBound)
            }
            characteristicsByHandle.removeAll()
            for d in defs {
                let handles = try host.addService(dynamic(d))
                record(d, handles)
            }
            if let newName {
                spec.name = newName
                if let h = host.gattServer.database.characteristics.first(where: { $0.uuid == .deviceName })?.valueHandle {
                    host.setValue(Array(newName.utf8), forHandle: h)
                }
            }
            spec.services = defs
        }
        settle()
    }

    /// Sets a characteristic's value and notifies (or indicates) it to the subscribed centrals. Returns
    /// false when no characteristic has that UUID.
    @discardableResult
    public func simulateValueUpdate(_ data: Data, for characteristic: CBUUID) -> Bool {
        let ok = sync { () -> Bool in
            guard let h = handle(of: characteristic) else { return false }
            values[h] = [UInt8](data)
            send([UInt8](data), handle: h, to: nil)
            return true
        }
        settle()
        return ok
    }

    /// Advertises new data from now on (Core Bluetooth's advertisement keys).
    public func simulateAdvertisementChange(_ advertisementData: [String: Any]) {
        let packed = AdvertisementEncoder.encode(advertisementData, connectable: spec.isConnectable)
        sync {
            spec.advertising?.data = packed.data
            spec.advertising?.scanResponse = packed.scanResponse
            if host.isAdvertising {
                host.stopAdvertising { [weak self] _ in self?.startAdvertising(first: false) }
            }
        }
        settle()
    }

    /// The phone has met this device before (as if it had scanned it): `retrievePeripherals(withIdentifiers:)`
    /// with the returned identifier finds it without a scan.
    @discardableResult
    public func simulateCaching() -> UUID? { identifier }

    /// The device comes back with a new address (a firmware update, say): the phone sees a new peripheral.
    public func simulateMacChange() {
        sync {
            macChanges &+= 1
            let old = controller.address.bytes
            let bytes = [old[0] ^ 0x5A, old[1], old[2] &+ macChanges, old[3], old[4], 0xC0 | (old[5] & 0x3F)]
            let address = BluetoothAddress(bytes: bytes, type: .random)
            // A controller refuses a new random address while it advertises (Vol 4 Part E §7.8.4).
            if host.isAdvertising {
                host.stopAdvertising { [weak self] _ in
                    self?.host.setStaticRandomAddress(address) { _ in self?.startAdvertising(first: false) }
                }
            } else {
                host.setStaticRandomAddress(address)
            }
        }
        settle()
    }

    /// Another app on the phone connects to this device: the app under test finds it with
    /// `retrieveConnectedPeripherals(withServices:)`. Returns whether the connection was made within 30 s.
    @discardableResult
    public func simulateConnection() -> Bool {
        guard let sim = simulation, let id = identifier else { return false }
        let queue = DispatchQueue(label: "simulated other app")
        let other = CBCentralManager(delegate: nil, queue: queue, options: nil, host: sim.phone)
        sim.keep(other)
        guard sim.run(until: { other.state == .poweredOn }, within: .seconds(5)),
            let p = queue.sync(execute: { other.retrievePeripherals(withIdentifiers: [id]).first })
        else { return false }
        // The other app holds its peripheral, as an app must: a released peripheral lets go of its link.
        sim.keep(p)
        queue.sync { other.connect(p) }
        return sim.run(until: { p.state == .connected }, within: .seconds(30))
    }

    // MARK: What only a real stack can do

    /// The device stops answering (true) or answers again (false): its link layer still acknowledges, so the
    /// link stays up, but nothing it sends arrives — a request in flight times out after 30 s (ATT).
    public func simulateUnresponsiveness(_ on: Bool = true) {
        simulation?.air.silence(controller, on)
        settle()
    }

    /// The radio path to the device vanishes mid-procedure: both sides report a connection timeout after
    /// the supervision timeout, whatever was in flight fails.
    public func simulateLinkLoss() {
        simulation?.air.breakLinks(of: controller)
        settle()
    }

    /// The device forgets its bonds (a factory reset of its keys): as on iOS, the phone's next connection
    /// encrypts with its stored key, the device refuses it, and the connection fails with
    /// CBError.peerRemovedPairingInformation; the phone pairs again only once its bond is forgotten.
    public func simulateBondLoss() {
        sync { host.bondStore.removeAll() }
        settle()
    }

    /// The device advertises and connects from resolvable private addresses renewed every `interval`
    /// seconds: a phone that has not bonded with it sees a new peripheral each time, a bonded one resolves
    /// it to the same CBPeripheral.
    public func simulatePrivateAddressRotation(every interval: TimeInterval) {
        sync { host.enablePrivacy(rotatingEvery: .seconds(interval)) }
        settle()
    }

    /// Stops (false) or resumes (true) advertising.
    public func simulateAdvertising(_ on: Bool) {
        sync {
            advertisingWanted = on
            if on { startAdvertising(first: false) } else { host.stopAdvertising() }
        }
        settle()
    }
}
