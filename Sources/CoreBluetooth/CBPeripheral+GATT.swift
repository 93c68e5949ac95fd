// CBPeripheral's GATT operations: discovery with merging by handle, reads (long reads done for the app),
// writes of both types, notifications, and descriptors.
import Foundation
import BLEWire
import BLEATT
import BLEGATT
import BLEHost

extension CBPeripheral {
    // MARK: Discovery

    public func discoverServices(_ serviceUUIDs: [CBUUID]?) {
        if let b = bluez { return b.discoverServices(self, serviceUUIDs) }
        let filter = serviceUUIDs.flatMap { $0.isEmpty ? nil : $0 }
        withConnection("discoverServices") { [self] c in
            let procedure: GATTClient.Procedure =
                filter?.count == 1
                ? .discoverPrimaryServices(uuid: filter![0].bluetoothUUID) : .discoverAllPrimaryServices
            c.gatt(procedure) { [self] r in
                switch r {
                case let .success(.services(found)):
                    let wanted = filter.map { Set($0.map(\.bluetoothUUID)) }
                    let kept = found.filter { wanted?.contains($0.uuid) ?? true }
                    guard kept.count + (services?.count ?? 0) <= Self.maximumServices else {
                        return deliver { $0.peripheral(self, didDiscoverServices: Self.tooLarge("services", kept.count)) }
                    }
                    deliver({ $0.peripheral(self, didDiscoverServices: nil) }, prepare: { [self] in mergeServices(kept) })
                case let .failure(f):
                    let error = cbError(f)   // on the loop: the pairing error is the link's now
                    deliver { $0.peripheral(self, didDiscoverServices: error) }
                default:
                    deliver { $0.peripheral(self, didDiscoverServices: CBError(.unknown)) }
                }
            }
        }
    }

    /// What one peripheral's database may make us hold (a hostile peer must not exhaust memory or hold the
    /// delegate queue): beyond these, discovery fails with CBError.outOfSpace. Real devices stay far below.
    static let maximumServices = 1024
    static let maximumCharacteristicsPerService = 4096
    static let maximumDescriptorsPerCharacteristic = 256

    static func tooLarge(_ what: String, _ n: Int) -> CBError {
        CBError(.outOfSpace, userInfo: [NSLocalizedFailureReasonErrorKey: "the peripheral reports \(n) \(what), more than this stack keeps"])
    }

    /// Merges discovered services into `services`, keeping existing objects (keyed by handle): linear in
    /// what is found and what is known.
    func mergeServices(_ found: [GATTRemoteService]) {
        var list = services ?? []
        var known = Set(list.map(\.handle))
        for s in found where known.insert(s.handle).inserted {
            list.append(CBService(uuid: CBUUID(s.uuid), isPrimary: true, handle: s.handle, endHandle: s.endHandle, peripheral: self))
        }
        list.sort { $0.handle < $1.handle }
        setServices(list)
    }

    public func discoverIncludedServices(_ includedServiceUUIDs: [CBUUID]?, for service: CBService) {
        guard validate(service) else { return }
        if let b = bluez { return b.discoverIncludedServices(self, includedServiceUUIDs, for: service) }
        let filter = includedServiceUUIDs.flatMap { $0.isEmpty ? nil : Set($0) }
        let (start, end) = (service.handle, service.endHandle)
        withConnection("discoverIncludedServices") { [self] c in
            c.gatt(.findIncludedServices(start: start, end: end)) { [self] r in
                switch r {
                case let .success(.includedServices(found)):
                    deliver(
                        { $0.peripheral(self, didDiscoverIncludedServicesFor: service, error: nil) },
                        prepare: { [self] in
                            var list = service._includedServices ?? []
                            var known = Set(list.map(\.handle))
                            let byHandle = Dictionary((services ?? []).map { ($0.handle, $0) }, uniquingKeysWith: { a, _ in a })
                            for inc in found.prefix(Self.maximumServices) where filter?.contains(CBUUID(inc.uuid)) ?? true {
                                guard known.insert(inc.startHandle).inserted else { continue }
                                let existing = byHandle[inc.startHandle]
                                list.append(
                                    existing
                                        ?? CBService(
                                            uuid: CBUUID(inc.uuid), isPrimary: false, handle: inc.startHandle,
                                            endHandle: inc.endHandle, peripheral: self))
                            }
                            service._includedServices = list
                        })
                case let .failure(f):
                    let error = cbError(f)   // on the loop: the pairing error is the link's now
                    deliver { $0.peripheral(self, didDiscoverIncludedServicesFor: service, error: error) }
                default:
                    deliver { $0.peripheral(self, didDiscoverIncludedServicesFor: service, error: CBError(.unknown)) }
                }
            }
        }
    }

    public func discoverCharacteristics(_ characteristicUUIDs: [CBUUID]?, for service: CBService) {
        guard validate(service) else { return }
        if let b = bluez { return b.discoverCharacteristics(self, characteristicUUIDs, for: service) }
        let filter = characteristicUUIDs.flatMap { $0.isEmpty ? nil : Set($0) }
        let (start, end) = (service.handle, service.endHandle)
        withConnection("discoverCharacteristics") { [self] c in
            // Discover every characteristic of the service: their handles bound each one's descriptors.
            c.gatt(.discoverCharacteristics(start: start, end: end, uuid: nil)) { [self] r in
                switch r {
                case let .success(.characteristics(found)):
                    guard found.count <= Self.maximumCharacteristicsPerService else {
                        return deliver { $0.peripheral(self, didDiscoverCharacteristicsFor: service, error: Self.tooLarge("characteristics", found.count)) }
                    }
                    deliver(
                        { $0.peripheral(self, didDiscoverCharacteristicsFor: service, error: nil) },
                        prepare: { [self] in
                            mergeCharacteristics(found, into: service, filter: filter)
                        })
                case let .failure(f):
                    let error = cbError(f)   // on the loop: the pairing error is the link's now
                    deliver { $0.peripheral(self, didDiscoverCharacteristicsFor: service, error: error) }
                default:
                    deliver { $0.peripheral(self, didDiscoverCharacteristicsFor: service, error: CBError(.unknown)) }
                }
            }
        }
    }

    public func discoverDescriptors(for characteristic: CBCharacteristic) {
        guard validate(characteristic) else { return }
        if let b = bluez { return b.discoverDescriptors(self, for: characteristic) }
        let (start, end) = (characteristic.valueHandle &+ 1, characteristic.endHandle)
        withConnection("discoverDescriptors") { [self] c in
            let finish: (Result<[GATTRemoteDescriptor], GATTClient.Failure>) -> Void = { [self] r in
                switch r {
                case let .success(found):
                    guard found.count <= Self.maximumDescriptorsPerCharacteristic else {
                        return deliver { $0.peripheral(self, didDiscoverDescriptorsFor: characteristic, error: Self.tooLarge("descriptors", found.count)) }
                    }
                    deliver(
                        { $0.peripheral(self, didDiscoverDescriptorsFor: characteristic, error: nil) },
                        prepare: { [self] in
                            mergeDescriptors(found, into: characteristic)
                        })
                case let .failure(f):
                    let error = cbError(f)   // on the loop: the pairing error is the link's now
                    deliver { $0.peripheral(self, didDiscoverDescriptorsFor: characteristic, error: error) }
                }
            }
            guard start <= end, start != 0 else { return finish(.success([])) }
            c.gatt(.discoverDescriptors(start: start, end: end)) { r in
                switch r {
                case let .success(.descriptors(d)): finish(.success(d))
                case let .failure(f): finish(.failure(f))
                default: finish(.failure(.invalidResponse("unexpected outcome")))
                }
            }
        }
    }

    /// Merges discovered characteristics into a service (keyed by declaration handle); every one found bounds
    /// the descriptors of the one before it.
    func mergeCharacteristics(_ found: [GATTRemoteCharacteristic], into service: CBService, filter: Set<CBUUID>?) {
        var list = service._characteristics ?? []
        var known = Set(list.map(\.handle))
        for (i, ch) in found.enumerated() {
            let endHandle = i + 1 < found.count ? found[i + 1].declarationHandle - 1 : service.endHandle
            guard filter?.contains(CBUUID(ch.uuid)) ?? true, known.insert(ch.declarationHandle).inserted else { continue }
            list.append(
                CBCharacteristic(
                    uuid: CBUUID(ch.uuid), properties: CBCharacteristicProperties(rawValue: UInt(ch.properties)),
                    service: service, handle: ch.declarationHandle, valueHandle: ch.valueHandle, endHandle: endHandle))
        }
        list.sort { $0.handle < $1.handle }
        service._characteristics = list
    }

    func mergeDescriptors(_ found: [GATTRemoteDescriptor], into characteristic: CBCharacteristic) {
        var list = characteristic._descriptors ?? []
        var known = Set(list.map(\.handle))
        for d in found where known.insert(d.handle).inserted {
            list.append(CBDescriptor(uuid: CBUUID(d.uuid), characteristic: characteristic, handle: d.handle))
        }
        list.sort { $0.handle < $1.handle }
        characteristic._descriptors = list
    }

    // MARK: Characteristic values

    public func readValue(for characteristic: CBCharacteristic) {
        guard validate(characteristic) else { return }
        if let b = bluez { return b.read(self, characteristic) }
        let handle = characteristic.valueHandle
        withConnection("readValue") { [self] c in
            c.gatt(.readLong(handle: handle)) { [self] r in
                switch r {
                case let .success(.value(v)):
                    let data = Data(v)
                    deliver(
                        { $0.peripheral(self, didUpdateValueFor: characteristic, error: nil) },
                        prepare: { characteristic._value = data })
                case let .failure(f):
                    let error = cbError(f)   // on the loop: the pairing error is the link's now
                    deliver { $0.peripheral(self, didUpdateValueFor: characteristic, error: error) }
                default:
                    deliver { $0.peripheral(self, didUpdateValueFor: characteristic, error: CBError(.unknown)) }
                }
            }
        }
    }

    public func writeValue(_ data: Data, for characteristic: CBCharacteristic, type: CBCharacteristicWriteType) {
        guard validate(characteristic) else { return }
        let handle = characteristic.valueHandle
        let bytes = [UInt8](data)
        switch type {
        case .withoutResponse:
            guard characteristic.properties.contains(.writeWithoutResponse) else {
                CBLog.warning("Characteristic \(characteristic) does not support write without response; the write is dropped")
                return
            }
            markWriteWithoutResponsePending()
            if let b = bluez { return b.write(self, data, characteristic, type: type) }
            withConnection("writeValue") { [self] c in
                if sendOrHoldWrite(handle, Array(bytes.prefix(Int(c.attMTU) - 3)), on: c) { readyToSendWriteWithoutResponse() }
            }
        default:
            if let b = bluez { return b.write(self, data, characteristic, type: type) }
            withConnection("writeValue") { [self] c in
                c.gatt(.write(handle: handle, value: bytes)) { [self] r in
                    let error: (any Error)? = { if case let .failure(f) = r { return self.cbError(f) } else { return nil } }()
                    deliver { $0.peripheral(self, didWriteValueFor: characteristic, error: error) }
                }
            }
        }
    }

    /// Enables or disables notifications (preferred) or indications by writing the CCCD.
    public func setNotifyValue(_ enabled: Bool, for characteristic: CBCharacteristic) {
        guard validate(characteristic) else { return }
        let props = characteristic.properties
        guard props.contains(.notify) || props.contains(.indicate) else {
            deliver { $0.peripheral(self, didUpdateNotificationStateFor: characteristic, error: CBATTError(.requestNotSupported)) }
            return
        }
        if let b = bluez { return b.setNotify(self, enabled, characteristic) }
        let value: [UInt8] = !enabled ? [0, 0] : props.contains(.notify) ? [1, 0] : [2, 0]
        let known = characteristic._descriptors?.first { $0.uuid.bluetoothUUID == .clientCharacteristicConfiguration }?.handle
        let (start, end) = (characteristic.valueHandle &+ 1, characteristic.endHandle)
        let valueHandle = characteristic.valueHandle
        withConnection("setNotifyValue") { [self] c in
            // The descriptor is the link's (shared with other managers' peripherals on it, as on iOS).
            let write: (UInt16) -> Void = { [self] cccd in
                SharedLink.of(c).configure(user: linkUserID, valueHandle: valueHandle, descriptor: cccd, value: enabled ? value : nil) { [self] f in
                    if let f {
                        let error = cbError(f)   // on the loop: the pairing error is the link's now
                        deliver { $0.peripheral(self, didUpdateNotificationStateFor: characteristic, error: error) }
                    } else {
                        deliver(
                            { $0.peripheral(self, didUpdateNotificationStateFor: characteristic, error: nil) },
                            prepare: { characteristic._isNotifying = enabled })
                    }
                }
            }
            if let h = known { return write(h) }
            guard start <= end else {
                return deliver { $0.peripheral(self, didUpdateNotificationStateFor: characteristic, error: CBATTError(.attributeNotFound)) }
            }
            c.gatt(.discoverDescriptors(start: start, end: end)) { [self] r in
                guard case let .success(.descriptors(found)) = r,
                    let cccd = found.first(where: { $0.uuid == .clientCharacteristicConfiguration })
                else {
                    let err: any Error = { if case let .failure(f) = r { return self.cbError(f) } else { return CBATTError(.attributeNotFound) } }()
                    return deliver { $0.peripheral(self, didUpdateNotificationStateFor: characteristic, error: err) }
                }
                queue.async { [self] in mergeDescriptors(found, into: characteristic) }
                write(cccd.handle)
            }
        }
    }

    /// Loop: a notification or indication arrived for `handle`.
    package func received(value: [UInt8], handle: UInt16) {
        valueInbox.received(value: value, handle: handle)
    }

    /// Delegate queue: hands every waiting value to the delegate.
    func deliverInbound() {
        let batch = inbound.take()
        guard state == .connected else { return }
        // The delegate is read once for the burst, not for every value (a weak load each, on the runtime's
        // slow path). A delegate set meanwhile, by a callback or another thread, is read anew before the next
        // value. (A delegate the app lets go of during a burst is kept until the burst ends.)
        var changes = delegateChanges.load(ordering: .acquiring)
        var d = delegate
        // The characteristic is looked up, and bound, once for each run of values for the same handle: a
        // discovered characteristic is held weakly by its descriptors, so each retain of it takes the slow path.
        var i = 0
        while i < batch.count {
            let handle = batch[i].0
            guard let ch = characteristic(forValueHandle: handle) else {
                while i < batch.count && batch[i].0 == handle { i += 1 }
                continue
            }
            while i < batch.count && batch[i].0 == handle {
                ch._value = batch[i].1
                i += 1
                let now = delegateChanges.load(ordering: .acquiring)
                if now != changes {
                    changes = now
                    d = delegate
                }
                d?.peripheral(self, didUpdateValueFor: ch, error: nil)
            }
        }
    }

    func characteristic(forValueHandle handle: UInt16) -> CBCharacteristic? {
        for s in services ?? [] where s.handle <= handle && handle <= s.endHandle {
            if let c = s.characteristics?.first(where: { $0.valueHandle == handle }) { return c }
        }
        return nil
    }

    // MARK: Write-without-response flow control

    /// Write Commands held for room, at most; an app that writes on while `canSendWriteWithoutResponse` is false
    /// loses what goes past this (logged), as iOS drops such writes.
    static let heldWriteLimit = 64

    /// Loop: sends a Write Command, or holds it while the host's queue is full. The app may write whenever
    /// `canSendWriteWithoutResponse` was true, and that can be true while the host's queue fills with our other
    /// traffic (an indication's confirmation, a notification of ours), so a refused write is held, not lost, and
    /// goes out in order when room frees. Returns true when the write went out and room remains.
    func sendOrHoldWrite(_ handle: UInt16, _ value: [UInt8], on c: HostConnection) -> Bool {
        if heldWrites.isEmpty, c.writeWithoutResponse(handle: handle, value: value) { return true }
        guard heldWrites.count < Self.heldWriteLimit else {
            CBLog.warning(
                "\(self): \(Self.heldWriteLimit) writes without response already wait for room; this one is dropped"
                    + " (wait for peripheralIsReady(toSendWriteWithoutResponse:))")
            return false
        }
        heldWrites.append((handle, value))
        return false
    }

    /// Loop: the host has room again; sends what was held, in order. True when nothing is held any more.
    package func sendHeldWrites(on c: HostConnection) -> Bool {
        guard c === connection else { return true }
        var sent = 0
        defer { heldWrites.removeFirst(sent) }
        for w in heldWrites {
            guard c.writeWithoutResponse(handle: w.handle, value: w.value) else { return false }
            sent += 1
        }
        return true
    }

    private func markWriteWithoutResponsePending() {
        updateWritesPending { $0 += 1 }
    }

    /// Loop: the host has buffer room again; tells the app once if writes were pending.
    package func readyToSendWriteWithoutResponse() {
        queue.async { [self] in
            var had = 0
            updateWritesPending {
                had = $0; $0 = 0
            }
            guard had > 0 else { return }
            guard state == .connected else { return }
            delegate?.peripheralIsReady(toSendWriteWithoutResponse: self)
        }
    }

    // MARK: Descriptors

    public func readValue(for descriptor: CBDescriptor) {
        guard let ch = descriptor.characteristic, validate(ch) else { return }
        if let b = bluez { return b.read(self, descriptor) }
        let handle = descriptor.handle
        withConnection("readValue") { [self] c in
            c.gatt(.readLong(handle: handle)) { [self] r in
                switch r {
                case let .success(.value(v)):
                    deliver(
                        { $0.peripheral(self, didUpdateValueFor: descriptor, error: nil) },
                        prepare: { descriptor._value = CBDescriptor.typedValue(v, for: descriptor.uuid) })
                case let .failure(f):
                    let error = cbError(f)   // on the loop: the pairing error is the link's now
                    deliver { $0.peripheral(self, didUpdateValueFor: descriptor, error: error) }
                default:
                    deliver { $0.peripheral(self, didUpdateValueFor: descriptor, error: CBError(.unknown)) }
                }
            }
        }
    }

    public func writeValue(_ data: Data, for descriptor: CBDescriptor) {
        guard let ch = descriptor.characteristic, validate(ch) else { return }
        if descriptor.uuid.bluetoothUUID == .clientCharacteristicConfiguration {
            CBLog.misuse("Client Characteristic Configuration descriptors must be configured using setNotifyValue:forCharacteristic:")
            deliver { $0.peripheral(self, didWriteValueFor: descriptor, error: CBATTError(.writeNotPermitted)) }
            return
        }
        if let b = bluez { return b.write(self, data, descriptor) }
        let handle = descriptor.handle
        let bytes = [UInt8](data)
        withConnection("writeValue") { [self] c in
            c.gatt(.write(handle: handle, value: bytes)) { [self] r in
                let error: (any Error)? = { if case let .failure(f) = r { return self.cbError(f) } else { return nil } }()
                deliver { $0.peripheral(self, didWriteValueFor: descriptor, error: error) }
            }
        }
    }

    // MARK: Validation (C5)

    func validate(_ service: CBService) -> Bool {
        if owns(service) { return true }
        CBLog.warning("\(service) is not a valid service for peripheral \(self)")
        return false
    }

    func validate(_ characteristic: CBCharacteristic) -> Bool {
        if let s = characteristic.service, owns(s) { return true }
        CBLog.warning("\(characteristic) is not a valid characteristic for peripheral \(self)")
        return false
    }
}

extension CBPeripheral {
    /// The error for a failed procedure; when the stack paired for it and pairing failed, the reason is in
    /// `userInfo` (NSLocalizedFailureReasonErrorKey, and "OCBPairingFailureReason" with the SMP code).
    /// Loop only, when the failure arrives: the link is loop-confined, and later (on the delegate queue) it may
    /// be gone or pairing again, which lost the reason.
    func cbError(_ f: GATTClient.Failure) -> any Error {
        guard case let .att(code, _) = f, code == .insufficientAuthentication || code == .insufficientEncryption,
            let pairing = connection?.lastPairingError
        else { return f.cbError }
        var info: [String: Any] = [NSLocalizedFailureReasonErrorKey: "\(pairing)"]
        if let r = pairing.reason { info["OCBPairingFailureReason"] = Int(r.rawValue) }
        return CBATTError(CBATTError.Code(rawValue: Int(code.rawValue)) ?? .unlikelyError, userInfo: info)
    }
}

extension GATTClient.Failure {
    /// The error Core Bluetooth reports for a failed GATT procedure.
    var cbError: any Error {
        switch self {
        case let .att(code, _): return CBATTError(CBATTError.Code(rawValue: Int(code.rawValue)) ?? .unlikelyError)
        case .timeout: return CBError(.connectionTimeout)
        case .disconnected: return CBError(.peripheralDisconnected)
        case .bearerClosed: return CBError(.notConnected)
        case .invalidResponse: return CBError(.unknown)
        case .invalidRequest: return CBError(.invalidParameters)
        }
    }
}
