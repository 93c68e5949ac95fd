// Write procedures of the GATT server: Write Request, Write Command, Prepare Write, Execute Write,
// and Client Characteristic Configuration writes (Vol 3 Part F §3.4.5–§3.4.6; Vol 3 Part G §4.9,
// §3.3.3.3).

import BLEATT

extension GATTServer {
    /// The attribute at `handle` if `client` may write it, else the error to send.
    func writable(_ handle: UInt16, _ client: GATTClientID) -> Result<GATTAttribute, ATTErrorCode> {
        guard handle != 0, let a = database.attribute(at: handle) else { return .failure(.invalidHandle) }
        if let e = writeError(a, client) { return .failure(e) }
        return .success(a)
    }

    /// Checks a complete new value for `attribute`: its length, and for a CCCD, its bits against the
    /// characteristic's properties (unsupported bits: CCCD Improperly Configured).
    func validate(_ value: [UInt8], for a: GATTAttribute) -> ATTErrorCode? {
        guard value.count <= a.maximumLength else { return .invalidAttributeValueLength }
        guard case .clientConfiguration = a.value else { return nil }
        guard value.count == 2 else { return .invalidAttributeValueLength }
        let bits = UInt16(value[0]) | UInt16(value[1]) << 8
        var allowed: UInt16 = 0
        if let c = database.characteristic(containing: a.handle) {
            if c.properties.contains(.notify) { allowed |= GATTClientConfiguration.notification.rawValue }
            if c.properties.contains(.indicate) { allowed |= GATTClientConfiguration.indication.rawValue }
        }
        return bits & ~allowed == 0 ? nil : .cccdImproperlyConfigured
    }

    /// Applies a validated complete value to a stored attribute or a CCCD.
    mutating func apply(_ d: DeferredWrite, _ client: GATTClientID) -> [GATTServerAction] {
        guard let a = database.attribute(at: d.handle) else { return [] }
        switch a.value {
        case .stored:
            database.setValue(d.value, at: d.handle)
            return [.valueWritten(client: client, handle: d.handle, value: d.value)]
        case .clientConfiguration:
            let new = UInt16(d.value[0]) | UInt16(d.value[1]) << 8
            let old = clients[client]!.configuration[d.handle] ?? 0
            clients[client]!.configuration[d.handle] = new
            guard new != old, let c = database.characteristic(containing: d.handle) else { return [] }
            let cfg = GATTClientConfiguration(rawValue: new)
            return [
                .subscriptionChanged(
                    client: client, characteristicValueHandle: c.valueHandle,
                    notify: cfg.contains(.notification), indicate: cfg.contains(.indication))
            ]
        case .dynamic:
            return []
        }
    }

    /// ATT_WRITE_REQ (§3.4.5.1) and ATT_WRITE_CMD (§3.4.5.3). A command gets no answer, not even an error.
    mutating func write(handle: UInt16, value: [UInt8], opcode: ATTOpcode, _ client: GATTClientID) -> [GATTServerAction] {
        let isCommand = opcode == .writeCommand
        let a: GATTAttribute
        switch writable(handle, client) {
        case let .failure(e): return isCommand ? [] : [errorResponse(opcode, handle, e, client)]
        case let .success(found): a = found
        }
        if let e = validate(value, for: a) { return isCommand ? [] : [errorResponse(opcode, handle, e, client)] }
        if case .dynamic = a.value {
            let id = park(.write(opcode, handle: handle, deferred: []), client, blocking: !isCommand)
            return [
                .writeRequests(
                    id: id, client: client, writes: [GATTWrite(handle: handle, offset: 0, value: value)],
                    needsResponse: !isCommand)
            ]
        }
        var actions = apply(DeferredWrite(handle: handle, value: value), client)
        if !isCommand { actions.append(.send(.writeResponse(ATTWriteResponse()), to: client)) }
        return actions
    }

    /// ATT_PREPARE_WRITE_REQ (§3.4.6.1): permissions are checked now, values at execution.
    mutating func prepareWrite(_ r: ATTPrepareWriteRequest, _ client: GATTClientID) -> [GATTServerAction] {
        let op = ATTOpcode.prepareWriteRequest
        if case let .failure(e) = writable(r.handle, client) { return [errorResponse(op, r.handle, e, client)] }
        let state = clients[client]!
        guard state.preparedWrites.count < configuration.maximumPreparedWrites,
            state.preparedBytes + r.partValue.count <= configuration.maximumPreparedBytes
        else {
            return [errorResponse(op, r.handle, .prepareQueueFull, client)]
        }
        clients[client]!.preparedWrites.append(r)
        clients[client]!.preparedBytes += r.partValue.count
        let echo = ATTPrepareWriteResponse(handle: r.handle, offset: r.offset, partValue: r.partValue)
        return [.send(.prepareWriteResponse(echo), to: client)]
    }

    /// ATT_EXECUTE_WRITE_REQ (§3.4.6.3): all prepared writes or none. Stored values and CCCDs are
    /// assembled and checked first; dynamic parts go to the application in one batch and the rest is
    /// applied only once it accepts them.
    mutating func executeWrite(_ r: ATTExecuteWriteRequest, _ client: GATTClientID) -> [GATTServerAction] {
        let op = ATTOpcode.executeWriteRequest
        let queue = clients[client]!.preparedWrites
        clients[client]!.preparedWrites = []
        clients[client]!.preparedBytes = 0
        switch r.flags {
        case .cancelAll:
            return [.send(.executeWriteResponse(ATTExecuteWriteResponse()), to: client)]
        case .writeAll:
            break
        default:
            return [errorResponse(op, 0, .invalidPDU, client)]
        }
        var order: [UInt16] = []
        var working: [UInt16: [UInt8]] = [:]
        var dynamicWrites: [GATTWrite] = []
        for p in queue {
            guard let a = database.attribute(at: p.handle) else { return [errorResponse(op, p.handle, .invalidHandle, client)] }
            guard var value = working[p.handle] ?? knownValue(a, client) else {
                dynamicWrites.append(GATTWrite(handle: p.handle, offset: p.offset, value: p.partValue))
                continue
            }
            guard Int(p.offset) <= value.count else { return [errorResponse(op, p.handle, .invalidOffset, client)] }
            value = Array(value.prefix(Int(p.offset))) + p.partValue
            if working[p.handle] == nil { order.append(p.handle) }
            working[p.handle] = value
        }
        var deferred: [DeferredWrite] = []
        for h in order {
            let value = working[h]!
            if let e = validate(value, for: database.attribute(at: h)!) { return [errorResponse(op, h, e, client)] }
            deferred.append(DeferredWrite(handle: h, value: value))
        }
        if let first = dynamicWrites.first {
            let id = park(.write(op, handle: first.handle, deferred: deferred), client)
            return [.writeRequests(id: id, client: client, writes: dynamicWrites, needsResponse: true)]
        }
        var actions: [GATTServerAction] = []
        for d in deferred { actions += apply(d, client) }
        actions.append(.send(.executeWriteResponse(ATTExecuteWriteResponse()), to: client))
        return actions
    }
}
