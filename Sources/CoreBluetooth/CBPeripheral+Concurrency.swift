// Swift concurrency for CBPeripheral, beside the delegate API (the delegate is not called for these).
// Every pending call ends with CBError.peripheralDisconnected when the link drops; notification streams end.
// Names differ from the delegate-style methods so that existing code calling those from async contexts
// still compiles unchanged.
import Foundation
import BLEWire
import BLEGATT
import BLEHost
import Synchronization

extension CBPeripheral {
    /// Runs a GATT procedure, applies `apply` to the model on the delegate queue, then returns.
    func gattAsync<T: Sendable>(
        _ procedure: GATTClient.Procedure,
        _ apply: @escaping @Sendable (GATTClient.Outcome) throws -> T
    ) async throws -> T {
        guard state == .connected, let host = manager?.leHost else { throw asyncUnavailable }
        let q = queue
        return try await withCheckedThrowingContinuation { (cont: CheckedContinuation<T, any Error>) in
            host.loop.execute { [self] in
                guard let c = connection, c.isOpen else { return cont.resume(throwing: CBError(.notConnected)) }
                c.gatt(procedure) { r in
                    // The error is made here, on the loop, where the link's pairing outcome is current.
                    let error: (any Error)? = { if case let .failure(f) = r { return self.cbError(f) } else { return nil } }()
                    q.async {
                        switch r {
                        case let .success(o): cont.resume(with: Result { try apply(o) })
                        case .failure: cont.resume(throwing: error ?? CBError(.unknown))
                        }
                    }
                }
            }
        }
    }

    /// Discovers primary services (all, or those listed) and returns this peripheral's `services`.
    public func services(_ uuids: [CBUUID]? = nil) async throws -> [CBService] {
        if let b = bluez { return try await bluezAsync { b.discoverServices(self, uuids, done: $0) } }
        let filter = uuids.flatMap { $0.isEmpty ? nil : Set($0.map(\.bluetoothUUID)) }
        return try await gattAsync(.discoverAllPrimaryServices) { [self] o in
            guard case let .services(found) = o else { throw CBError(.unknown) }
            mergeServices(found.filter { filter?.contains($0.uuid) ?? true })
            return (services ?? []).filter { filter?.contains($0.uuid.bluetoothUUID) ?? true }
        }
    }

    /// Discovers the characteristics of a service and returns them.
    public func characteristics(_ uuids: [CBUUID]? = nil, for service: CBService) async throws -> [CBCharacteristic] {
        if let b = bluez { return try await bluezAsync { b.discoverCharacteristics(self, uuids, for: service, done: $0) } }
        let filter = uuids.flatMap { $0.isEmpty ? nil : Set($0) }
        return try await gattAsync(.discoverCharacteristics(start: service.handle, end: service.endHandle, uuid: nil)) { [self] o in
            guard case let .characteristics(found) = o else { throw CBError(.unknown) }
            mergeCharacteristics(found, into: service, filter: filter)
            return (service.characteristics ?? []).filter { filter?.contains($0.uuid) ?? true }
        }
    }

    /// Discovers the descriptors of a characteristic and returns them.
    public func descriptors(for characteristic: CBCharacteristic) async throws -> [CBDescriptor] {
        if let b = bluez { return try await bluezAsync { b.discoverDescriptors(self, for: characteristic, done: $0) } }
        let (start, end) = (characteristic.valueHandle &+ 1, characteristic.endHandle)
        guard start <= end else { return [] }
        return try await gattAsync(.discoverDescriptors(start: start, end: end)) { [self] o in
            guard case let .descriptors(found) = o else { throw CBError(.unknown) }
            mergeDescriptors(found, into: characteristic)
            return characteristic.descriptors ?? []
        }
    }

    /// Reads a characteristic's value (long values in full) and returns it.
    public func value(for characteristic: CBCharacteristic) async throws -> Data {
        if let b = bluez { return try await bluezAsync { b.read(self, characteristic, done: $0) } }
        return try await gattAsync(.readLong(handle: characteristic.valueHandle)) { o in
            guard case let .value(v) = o else { throw CBError(.unknown) }
            let d = Data(v)
            characteristic._value = d
            return d
        }
    }

    /// Writes with response (long values as prepared writes) and returns when the peripheral accepted it.
    public func write(_ data: Data, to characteristic: CBCharacteristic) async throws {
        if let b = bluez { return try await bluezAsync { b.write(self, data, characteristic, type: .withResponse, done: $0) } }
        try await gattAsync(.write(handle: characteristic.valueHandle, value: [UInt8](data))) { _ in () }
    }

    /// Subscribes and returns the values as they come (notifications or indications). The stream ends when
    /// the link drops; dropping the stream unsubscribes when it was the last listener.
    public func updates(of characteristic: CBCharacteristic) async throws -> AsyncStream<Data> {
        let handle = characteristic.valueHandle
        let (stream, continuation) = AsyncStream<Data>.makeStream()
        let id = UUID()
        valueListeners.add(id: id, handle: handle, continuation)
        continuation.onTermination = { [weak self] _ in
            guard let self, self.valueListeners.remove(id: id) == 0, self.state == .connected else { return }
            self.queue.async { self.setNotifyValue(false, for: characteristic) }
        }
        if let b = bluez {
            // BlueZ writes the CCCD itself (StartNotify), notifications or indications as the characteristic allows.
            do {
                try await bluezAsync { b.setNotify(self, true, characteristic, done: $0) }
            } catch {
                valueListeners.remove(id: id)
                continuation.finish()
                throw error
            }
            return stream
        }
        let props = characteristic.properties
        let cccdValue: [UInt8] = props.contains(.notify) ? [1, 0] : [2, 0]
        let descriptors = try await self.descriptors(for: characteristic)
        guard let cccd = descriptors.first(where: { $0.uuid.bluetoothUUID == .clientCharacteristicConfiguration }) else {
            continuation.finish()
            throw CBATTError(.requestNotSupported)
        }
        try await configureNotifications(characteristic, descriptor: cccd.handle, value: cccdValue)
        return stream
    }

    /// Writes the link's configuration of a characteristic (SharedLink) and sets `isNotifying` to match.
    func configureNotifications(_ characteristic: CBCharacteristic, descriptor: UInt16, value: [UInt8]?) async throws {
        guard state == .connected, let host = manager?.leHost else { throw asyncUnavailable }
        let q = queue
        let valueHandle = characteristic.valueHandle
        try await withCheckedThrowingContinuation { (cont: CheckedContinuation<Void, any Error>) in
            host.loop.execute { [self] in
                guard let c = connection, c.isOpen else { return cont.resume(throwing: CBError(.notConnected)) }
                SharedLink.of(c).configure(user: linkUserID, valueHandle: valueHandle, descriptor: descriptor, value: value) { f in
                    let error = f.map { self.cbError($0) }   // on the loop, as above
                    q.async {
                        if let error { return cont.resume(throwing: error) }
                        characteristic._isNotifying = value != nil
                        cont.resume()
                    }
                }
            }
        }
    }

    /// Reads the RSSI of the link in dBm.
    public func currentRSSI() async throws -> Int {
        if let b = bluez { return try await bluezAsync { b.readRSSI(self, done: $0) } }
        guard state == .connected, let host = manager?.leHost else { throw asyncUnavailable }
        return try await withCheckedThrowingContinuation { (cont: CheckedContinuation<Int, any Error>) in
            host.loop.execute { [self] in
                guard let c = connection else { return cont.resume(throwing: CBError(.notConnected)) }
                c.readRSSI { r in
                    switch r {
                    case let .success(v): cont.resume(returning: Int(v))
                    case .failure: cont.resume(throwing: CBError(.unknown))
                    }
                }
            }
        }
    }
}

/// Listeners of characteristic values, by value handle (any thread).
final class ValueListeners: @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [UUID: (handle: UInt16, continuation: AsyncStream<Data>.Continuation)] = [:]
    /// How many entries there are, readable without the lock: every value received asks, and usually nobody
    /// listens. Written under the lock, after the entries change.
    private let count = Atomic<Int>(0)

    func add(id: UUID, handle: UInt16, _ c: AsyncStream<Data>.Continuation) {
        lock.withLock {
            entries[id] = (handle, c)
            count.store(entries.count, ordering: .releasing)
        }
    }

    /// Removes a listener and returns how many remain for its handle.
    @discardableResult
    func remove(id: UUID) -> Int {
        lock.withLock {
            guard let e = entries.removeValue(forKey: id) else { return -1 }
            count.store(entries.count, ordering: .releasing)
            return entries.values.filter { $0.handle == e.handle }.count
        }
    }

    /// Every value received passes here: with nobody listening (the usual case) it costs one atomic load.
    func yield(_ value: Data, handle: UInt16) {
        guard count.load(ordering: .acquiring) > 0 else { return }
        let listening = lock.withLock { entries.values.filter { $0.handle == handle }.map(\.continuation) }
        for c in listening { c.yield(value) }
    }

    func finishAll() {
        for e in lock.withLock({ () -> [AsyncStream<Data>.Continuation] in
            let v = entries.values.map(\.continuation)
            entries.removeAll()
            count.store(0, ordering: .releasing)
            return v
        }) { e.finish() }
    }
}
