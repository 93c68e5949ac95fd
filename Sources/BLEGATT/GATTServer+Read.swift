// Read procedures of the GATT server: Read, Read Blob, Read Multiple, Read Multiple Variable
// (Vol 3 Part F §3.4.4.3–§3.4.4.12; Vol 3 Part G §4.8).

import BLEATT

extension GATTServer {
    /// The attribute at `handle` if `client` may read it, else the error to send.
    func readable(_ handle: UInt16, _ client: GATTClientID) -> Result<GATTAttribute, ATTErrorCode> {
        guard handle != 0, let a = database.attribute(at: handle) else { return .failure(.invalidHandle) }
        if let e = readError(a, client) { return .failure(e) }
        return .success(a)
    }

    /// ATT_READ_REQ (§3.4.4.3): the value, cut to ATT_MTU − 1.
    mutating func read(_ r: ATTReadRequest, _ client: GATTClientID) -> [GATTServerAction] {
        let op = ATTOpcode.readRequest
        let a: GATTAttribute
        switch readable(r.handle, client) {
        case let .failure(e): return [errorResponse(op, r.handle, e, client)]
        case let .success(found): a = found
        }
        guard let value = knownValue(a, client) else {
            let id = park(.read(op, .read(handle: r.handle)), client)
            return [.readRequest(id: id, client: client, handle: r.handle, offset: 0)]
        }
        let mtu = clients[client]!.mtu
        return [.send(.readResponse(ATTReadResponse(value: Array(value.prefix(mtu - 1)))), to: client)]
    }

    /// ATT_READ_BLOB_REQ (§3.4.4.5): the value from an offset. Fixed-length attributes that fit a Read
    /// Response get Attribute Not Long; an offset past the end gets Invalid Offset.
    mutating func readBlob(_ r: ATTReadBlobRequest, _ client: GATTClientID) -> [GATTServerAction] {
        let op = ATTOpcode.readBlobRequest
        let a: GATTAttribute
        switch readable(r.handle, client) {
        case let .failure(e): return [errorResponse(op, r.handle, e, client)]
        case let .success(found): a = found
        }
        guard let value = knownValue(a, client) else {
            let id = park(.read(op, .readBlob(handle: r.handle)), client)
            return [.readRequest(id: id, client: client, handle: r.handle, offset: r.offset)]
        }
        let mtu = clients[client]!.mtu
        if a.hasFixedLength && value.count <= mtu - 3 { return [errorResponse(op, r.handle, .attributeNotLong, client)] }
        guard Int(r.offset) <= value.count else { return [errorResponse(op, r.handle, .invalidOffset, client)] }
        let part = Array(value[Int(r.offset)...].prefix(mtu - 1))
        return [.send(.readBlobResponse(ATTReadBlobResponse(partValue: part)), to: client)]
    }

    /// ATT_READ_MULTIPLE_REQ / ATT_READ_MULTIPLE_VARIABLE_REQ (§3.4.4.7, §3.4.4.11). Every handle is
    /// checked first (the first failure is the answer); dynamic values are then fetched in order.
    mutating func readMultiple(_ handles: [UInt16], variable: Bool, _ client: GATTClientID) -> [GATTServerAction] {
        let op: ATTOpcode = variable ? .readMultipleVariableRequest : .readMultipleRequest
        for h in handles {
            if case let .failure(e) = readable(h, client) { return [errorResponse(op, h, e, client)] }
        }
        return continueReadMultiple(handles, [], variable: variable, client)
    }

    mutating func continueReadMultiple(
        _ handles: [UInt16], _ collected: [[UInt8]], variable: Bool,
        _ client: GATTClientID
    ) -> [GATTServerAction] {
        let op: ATTOpcode = variable ? .readMultipleVariableRequest : .readMultipleRequest
        var values = collected
        while values.count < handles.count {
            let h = handles[values.count]
            guard let a = database.attribute(at: h) else { return [errorResponse(op, h, .invalidHandle, client)] }
            guard let v = knownValue(a, client) else {
                let id = park(.read(op, .readMultiple(handles: handles, collected: values, variable: variable)), client)
                return [.readRequest(id: id, client: client, handle: h, offset: 0)]
            }
            values.append(v)
        }
        let limit = clients[client]!.mtu - 1
        if !variable {
            let all = values.flatMap { $0 }
            return [.send(.readMultipleResponse(ATTReadMultipleResponse(values: Array(all.prefix(limit)))), to: client)]
        }
        // Length Value Tuples; the list is cut at ATT_MTU − 1 octets (§3.4.4.12).
        var tuples: [ATTLengthValue] = []
        var room = limit
        for v in values {
            guard room >= 2 else { break }
            let take = min(v.count, room - 2)
            tuples.append(ATTLengthValue(valueLength: UInt16(v.count), value: Array(v.prefix(take))))
            room -= 2 + take
        }
        return [.send(.readMultipleVariableResponse(ATTReadMultipleVariableResponse(lengthValueTupleList: tuples)), to: client)]
    }
}
