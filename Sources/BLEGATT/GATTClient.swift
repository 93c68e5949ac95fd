// GATTClient: every GATT client procedure (Vol 3 Part G §4) as a pure state machine over ATT PDUs.
//
// Design: procedures queue FIFO; exactly one ATT request is outstanding on the bearer (Vol 3 Part F
// §3.3.2). `start` and `receive` return actions for the host to carry out. The host owns the 30-second
// transaction timer: it starts it on every `.send` and reports expiry with `transactionTimedOut()`,
// after which the bearer takes no more requests (§3.3.3). Discovery loops stop on Attribute Not Found or
// at the end of the range, and treat a server that does not advance as an invalid response rather than
// looping forever.
import BLEWire
import BLEATT

public struct GATTClient: Sendable {
    public private(set) var mtu: UInt16 = ATTMTU.default
    private var queue = FIFO<(ProcedureID, Procedure)>()
    private var running: (id: ProcedureID, step: Step, request: ATTOpcode)?
    private var nextID: ProcedureID = 1
    private var closedBy: Failure?

    public init(mtu: UInt16 = ATTMTU.default) {
        self.mtu = mtu
    }

    public var hasOutstandingRequest: Bool { running != nil }

    /// ATT_MTU is one value per bearer, for its client and its server role (Vol 3 Part F §3.4.2.2): when the
    /// server role answered the peer's Exchange MTU Request, the client role sends and expects PDUs of the new
    /// size too. An exchange of our own that the peer then refuses (an Error Response) leaves it as it is.
    public mutating func bearerMTUChanged(to newMTU: UInt16) {
        mtu = min(max(newMTU, ATTMTU.default), ATTMTU.maximum)
    }

    /// Where a running procedure stands.
    enum Step: Sendable {
        case mtu(client: UInt16)
        case primaryAll(next: UInt16, found: [GATTRemoteService])
        case primaryByUUID(uuid: BluetoothUUID, next: UInt16, found: [GATTRemoteService])
        case includes(end: UInt16, next: UInt16, found: [GATTRemoteInclude], resolving: Int?)
        case characteristics(end: UInt16, uuid: BluetoothUUID?, next: UInt16, found: [GATTRemoteCharacteristic])
        case descriptors(end: UInt16, next: UInt16, found: [GATTRemoteDescriptor])
        case read(handle: UInt16)
        case readLong(handle: UInt16, value: [UInt8])
        case readMultiple(handles: [UInt16], variable: Bool)
        case readByUUID(start: UInt16, end: UInt16, uuid: BluetoothUUID)
        case write(handle: UInt16, value: [UInt8])
        case prepare(parts: [ATTPrepareWriteRequest], index: Int)
        case execute(commit: Bool, failure: Failure?)
    }

    // MARK: API

    /// Queues a procedure; it starts when the bearer is free.
    public mutating func start(_ procedure: Procedure) -> (ProcedureID, [Action]) {
        let id = nextID
        nextID += 1
        if let closedBy {
            return (id, [.complete(id, .failure(closedBy == .disconnected ? .disconnected : .bearerClosed))])
        }
        queue.append((id, procedure))
        return (id, pump())
    }

    /// A Write Command (Vol 3 Part G §4.9.1): no response; refused beyond ATT_MTU − 3.
    public mutating func writeWithoutResponse(handle: UInt16, value: [UInt8]) -> [Action] {
        guard closedBy == nil, value.count <= Int(mtu) - 3 else { return [] }
        return [.sendCommand(.writeCommand(ATTWriteCommand(handle: handle, value: value)))]
    }

    /// The transaction timer fired: everything fails and the bearer is closed.
    public mutating func transactionTimedOut() -> [Action] {
        failAll(.timeout, then: .bearerClosed)
    }

    /// The link went down.
    public mutating func disconnected() -> [Action] {
        failAll(.disconnected, then: .disconnected)
    }

    private mutating func failAll(_ current: Failure, then later: Failure) -> [Action] {
        var actions: [Action] = []
        if let r = running { actions.append(.complete(r.id, .failure(current))) }
        running = nil
        for (id, _) in queue { actions.append(.complete(id, .failure(current == .timeout ? .bearerClosed : current))) }
        queue.removeAll()
        closedBy = later
        return actions
    }

    /// A response that cannot be taken (longer than ATT_MTU, Vol 3 Part F §3.2.8): the procedure in progress
    /// fails with `invalidResponse`, and the next one starts.
    public mutating func rejectResponse(_ why: String) -> [Action] {
        guard let r = running else { return [.protocolViolation(why)] }
        running = nil
        return [.complete(r.id, .failure(.invalidResponse(why)))] + pump()
    }

    /// A PDU from the server: a response to our request, or a notification / indication.
    public mutating func receive(_ pdu: ATTPDU) -> [Action] {
        switch pdu {
        case let .handleValueNotification(n):
            return [.notification(handle: n.handle, value: n.value)]
        case let .handleValueIndication(i):
            return [.indication(handle: i.handle, value: i.value), .sendCommand(.handleValueConfirmation(ATTHandleValueConfirmation()))]
        case let .multipleHandleValueNotification(m):
            return m.handleLengthValueTupleList.map { .notification(handle: $0.handle, value: $0.value) }
        default:
            break
        }
        guard let r = running else {
            return [.protocolViolation("\(pdu.opcode) received with no request outstanding")]
        }
        if case let .errorResponse(e) = pdu {
            guard e.requestOpcode == r.request else {
                return [.protocolViolation("Error Response for \(e.requestOpcode) while \(r.request) is outstanding")]
            }
        } else if ATTOpcode.responseOpcode(for: r.request) != pdu.opcode {
            return [.protocolViolation("\(pdu.opcode) does not answer \(r.request)")]
        }
        running = nil
        var actions = advance(r.id, r.step, pdu)
        actions += pump()
        return actions
    }

    // MARK: Driving procedures

    private mutating func pump() -> [Action] {
        var actions: [Action] = []
        while running == nil, let next = queue.popFirst() {
            actions += begin(next.0, next.1)
        }
        return actions
    }

    private mutating func begin(_ id: ProcedureID, _ p: Procedure) -> [Action] {
        switch p {
        case let .exchangeMTU(m):
            return issue(id, .mtu(client: m))
        case .discoverAllPrimaryServices:
            return issue(id, .primaryAll(next: 0x0001, found: []))
        case let .discoverPrimaryServices(uuid):
            return issue(id, .primaryByUUID(uuid: uuid, next: 0x0001, found: []))
        case let .findIncludedServices(start, end):
            guard start != 0, start <= end else { return [.complete(id, .failure(.invalidRequest("bad handle range")))] }
            return issue(id, .includes(end: end, next: start, found: [], resolving: nil))
        case let .discoverCharacteristics(start, end, uuid):
            guard start != 0, start <= end else { return [.complete(id, .failure(.invalidRequest("bad handle range")))] }
            return issue(id, .characteristics(end: end, uuid: uuid, next: start, found: []))
        case let .discoverDescriptors(start, end):
            guard start != 0, start <= end else { return [.complete(id, .success(.descriptors([])))] }
            return issue(id, .descriptors(end: end, next: start, found: []))
        case let .read(h):
            return issue(id, .read(handle: h))
        case let .readLong(h):
            return issue(id, .readLong(handle: h, value: []))
        case let .readMultiple(hs):
            guard hs.count >= 2 else { return [.complete(id, .failure(.invalidRequest("Read Multiple needs two or more handles")))] }
            return issue(id, .readMultiple(handles: hs, variable: false))
        case let .readMultipleVariable(hs):
            guard hs.count >= 2 else { return [.complete(id, .failure(.invalidRequest("Read Multiple Variable needs two or more handles")))] }
            return issue(id, .readMultiple(handles: hs, variable: true))
        case let .readUsingCharacteristicUUID(start, end, uuid):
            return issue(id, .readByUUID(start: start, end: end, uuid: uuid))
        case let .write(h, v):
            if v.count <= Int(mtu) - 3 { return issue(id, .write(handle: h, value: v)) }
            return issue(id, .prepare(parts: prepareParts([GATTHandleValue(handle: h, value: v)], offset: 0), index: 0))
        case let .writeLong(h, offset, v):
            return issue(id, .prepare(parts: prepareParts([GATTHandleValue(handle: h, value: v)], offset: offset), index: 0))
        case let .reliableWrite(items):
            guard !items.isEmpty else { return [.complete(id, .success(.written))] }
            return issue(id, .prepare(parts: prepareParts(items, offset: 0), index: 0))
        }
    }

    /// Splits values into Prepare Write requests of at most ATT_MTU − 5 octets (§4.9.4).
    private func prepareParts(_ items: [GATTHandleValue], offset: UInt16) -> [ATTPrepareWriteRequest] {
        let chunk = max(1, Int(mtu) - 5)
        var parts: [ATTPrepareWriteRequest] = []
        for item in items {
            var i = 0
            repeat {
                let end = min(item.value.count, i + chunk)
                parts.append(
                    ATTPrepareWriteRequest(
                        handle: item.handle, offset: offset &+ UInt16(truncatingIfNeeded: i),
                        partValue: Array(item.value[i..<end])))
                i = end
            } while i < item.value.count
        }
        return parts
    }

    /// Sends the request a step needs and records it as outstanding.
    private mutating func issue(_ id: ProcedureID, _ step: Step) -> [Action] {
        let pdu: ATTPDU
        switch step {
        case let .mtu(client):
            pdu = .exchangeMTURequest(ATTExchangeMTURequest(clientRxMTU: client))
        case let .primaryAll(next, _):
            pdu = .readByGroupTypeRequest(ATTReadByGroupTypeRequest(startingHandle: next, endingHandle: 0xFFFF, attributeGroupType: .primaryService))
        case let .primaryByUUID(uuid, next, _):
            let value = uuid.uuid16 != nil ? uuid.shortened.littleEndianBytes : uuid.expanded.littleEndianBytes
            pdu = .findByTypeValueRequest(ATTFindByTypeValueRequest(startingHandle: next, endingHandle: 0xFFFF, attributeType: 0x2800, attributeValue: value))
        case let .includes(end, next, found, resolving):
            if let i = resolving {
                pdu = .readRequest(ATTReadRequest(handle: found[i].startHandle))
            } else {
                pdu = .readByTypeRequest(ATTReadByTypeRequest(startingHandle: next, endingHandle: end, attributeType: .include))
            }
        case let .characteristics(end, _, next, _):
            pdu = .readByTypeRequest(ATTReadByTypeRequest(startingHandle: next, endingHandle: end, attributeType: .characteristic))
        case let .descriptors(end, next, _):
            pdu = .findInformationRequest(ATTFindInformationRequest(startingHandle: next, endingHandle: end))
        case let .read(h):
            pdu = .readRequest(ATTReadRequest(handle: h))
        case let .readLong(h, value):
            pdu =
                value.isEmpty
                ? .readRequest(ATTReadRequest(handle: h))
                : .readBlobRequest(ATTReadBlobRequest(handle: h, offset: UInt16(truncatingIfNeeded: value.count)))
        case let .readMultiple(hs, variable):
            pdu =
                variable
                ? .readMultipleVariableRequest(ATTReadMultipleVariableRequest(handles: hs))
                : .readMultipleRequest(ATTReadMultipleRequest(handles: hs))
        case let .readByUUID(start, end, uuid):
            pdu = .readByTypeRequest(ATTReadByTypeRequest(startingHandle: start, endingHandle: end, attributeType: uuid))
        case let .write(h, v):
            pdu = .writeRequest(ATTWriteRequest(handle: h, value: v))
        case let .prepare(parts, index):
            pdu = .prepareWriteRequest(parts[index])
        case let .execute(commit, _):
            pdu = .executeWriteRequest(ATTExecuteWriteRequest(flags: commit ? .writeAll : .cancelAll))
        }
        running = (id, step, pdu.opcode)
        return [.send(pdu)]
    }

    private func done(_ id: ProcedureID, _ outcome: Outcome) -> [Action] { [.complete(id, .success(outcome))] }
    private func fail(_ id: ProcedureID, _ f: Failure) -> [Action] { [.complete(id, .failure(f))] }

    /// Folds a response into a step: issue the next request or complete.
    private mutating func advance(_ id: ProcedureID, _ step: Step, _ pdu: ATTPDU) -> [Action] {
        let notFound: Bool = { if case let .errorResponse(e) = pdu { return e.error == .attributeNotFound } else { return false } }()
        switch step {
        case let .mtu(client):
            switch pdu {
            case let .exchangeMTUResponse(r):
                mtu = max(ATTMTU.default, min(client, r.serverRxMTU))
                return done(id, .mtu(mtu))
            case .errorResponse:
                // Refused (Request Not Supported, or any error from a server that took the peer's side of a
                // crossing exchange as the only one): the bearer keeps the MTU it has, which the server role
                // may already have raised.
                return done(id, .mtu(mtu))
            default: return failure(id, pdu)
            }

        case let .primaryAll(next, found):
            if notFound { return done(id, .services(found)) }
            guard case let .readByGroupTypeResponse(r) = pdu else { return failure(id, pdu) }
            var list = found
            var last = next
            for g in r.attributeDataList {
                guard g.handle >= next, g.endGroupHandle >= g.handle,
                    let uuid = try? BluetoothUUID(littleEndianBytes: g.value)
                else {
                    return fail(id, .invalidResponse("bad service group \(g.handle)-\(g.endGroupHandle)"))
                }
                list.append(GATTRemoteService(uuid: uuid, handle: g.handle, endHandle: g.endGroupHandle))
                last = g.endGroupHandle
            }
            if r.attributeDataList.isEmpty { return fail(id, .invalidResponse("empty Read By Group Type Response")) }
            if last == 0xFFFF { return done(id, .services(list)) }
            return issue(id, .primaryAll(next: last + 1, found: list))

        case let .primaryByUUID(uuid, next, found):
            if notFound { return done(id, .services(found)) }
            guard case let .findByTypeValueResponse(r) = pdu, !r.handlesInformationList.isEmpty else { return failure(id, pdu) }
            var list = found
            var last = next
            for h in r.handlesInformationList {
                guard h.foundAttributeHandle >= next, h.groupEndHandle >= h.foundAttributeHandle else {
                    return fail(id, .invalidResponse("bad handles \(h.foundAttributeHandle)-\(h.groupEndHandle)"))
                }
                list.append(GATTRemoteService(uuid: uuid, handle: h.foundAttributeHandle, endHandle: h.groupEndHandle))
                last = h.groupEndHandle
            }
            if last == 0xFFFF { return done(id, .services(list)) }
            return issue(id, .primaryByUUID(uuid: uuid, next: last + 1, found: list))

        case let .includes(end, next, found, resolving):
            if let i = resolving {
                var list = found
                if case let .readResponse(r) = pdu, r.value.count == 16, let uuid = try? BluetoothUUID(littleEndianBytes: r.value) {
                    list[i].uuid = uuid
                } else {
                    return failure(id, pdu)
                }
                return continueIncludes(id, end: end, next: next, found: list)
            }
            if notFound { return continueIncludes(id, end: end, next: 0, found: found) }
            guard case let .readByTypeResponse(r) = pdu, !r.attributeDataList.isEmpty else { return failure(id, pdu) }
            var list = found
            var last = next
            for d in r.attributeDataList {
                guard d.handle >= next, d.handle <= end, d.value.count == 4 || d.value.count == 6 else {
                    return fail(id, .invalidResponse("bad include declaration at \(d.handle)"))
                }
                var rd = ByteReader(d.value)
                let s = (try? rd.readUInt16()) ?? 0, e = (try? rd.readUInt16()) ?? 0
                // A 128-bit included service UUID is left out of the response and read separately (§4.5.1).
                let uuid = d.value.count == 6 ? ((try? rd.readUUID(size: 2)) ?? BluetoothUUID(0)) : BluetoothUUID(0)
                list.append(GATTRemoteInclude(declarationHandle: d.handle, startHandle: s, endHandle: e, uuid: uuid))
                last = d.handle
            }
            return continueIncludes(id, end: end, next: last == 0xFFFF || last >= end ? 0 : last + 1, found: list)

        case let .characteristics(end, uuid, next, found):
            if notFound { return done(id, .characteristics(filter(found, uuid))) }
            guard case let .readByTypeResponse(r) = pdu, !r.attributeDataList.isEmpty else { return failure(id, pdu) }
            var list = found
            var last = next
            for d in r.attributeDataList {
                guard d.handle >= next, d.handle <= end, d.value.count == 5 || d.value.count == 19 else {
                    return fail(id, .invalidResponse("bad characteristic declaration at \(d.handle)"))
                }
                var rd = ByteReader(d.value)
                guard let props = try? rd.readUInt8(), let vh = try? rd.readUInt16(),
                    let cu = try? rd.readUUID(size: d.value.count - 3)
                else {
                    return fail(id, .invalidResponse("bad characteristic declaration at \(d.handle)"))
                }
                // The value follows its declaration inside the service (Vol 3 Part G §3.3.1: declaration + 1).
                guard vh > d.handle, vh <= end else {
                    return fail(id, .invalidResponse("characteristic declared at \(d.handle) has value handle \(vh)"))
                }
                list.append(GATTRemoteCharacteristic(uuid: cu, declarationHandle: d.handle, valueHandle: vh, properties: props))
                last = d.handle
            }
            if last >= end || last == 0xFFFF { return done(id, .characteristics(filter(list, uuid))) }
            return issue(id, .characteristics(end: end, uuid: uuid, next: last + 1, found: list))

        case let .descriptors(end, next, found):
            if notFound { return done(id, .descriptors(found)) }
            guard case let .findInformationResponse(r) = pdu, !r.information.isEmpty else { return failure(id, pdu) }
            var list = found
            var last = next
            for info in r.information {
                guard info.handle >= next, info.handle <= end else {
                    return fail(id, .invalidResponse("descriptor handle \(info.handle) outside \(next)-\(end)"))
                }
                list.append(GATTRemoteDescriptor(uuid: info.uuid, handle: info.handle))
                last = info.handle
            }
            if last >= end || last == 0xFFFF { return done(id, .descriptors(list)) }
            return issue(id, .descriptors(end: end, next: last + 1, found: list))

        case .read:
            guard case let .readResponse(r) = pdu else { return failure(id, pdu) }
            return done(id, .value(r.value))

        case let .readLong(h, value):
            let part: [UInt8]
            switch pdu {
            case let .readResponse(r) where value.isEmpty: part = r.value
            case let .readBlobResponse(r) where !value.isEmpty: part = r.partValue
            case let .errorResponse(e) where !value.isEmpty && (e.error == .attributeNotLong || e.error == .invalidOffset):
                return done(id, .value(value))
            default: return failure(id, pdu)
            }
            let all = value + part
            if part.count < Int(mtu) - 1 || all.count >= 512 { return done(id, .value(all)) }
            return issue(id, .readLong(handle: h, value: all))

        case .readMultiple:
            switch pdu {
            case let .readMultipleResponse(r): return done(id, .value(r.values))
            case let .readMultipleVariableResponse(r): return done(id, .values(r.lengthValueTupleList.map(\.value)))
            default: return failure(id, pdu)
            }

        case .readByUUID:
            guard case let .readByTypeResponse(r) = pdu else { return failure(id, pdu) }
            return done(id, .handleValues(r.attributeDataList.map { GATTHandleValue(handle: $0.handle, value: $0.value) }))

        case .write:
            guard case .writeResponse = pdu else { return failure(id, pdu) }
            return done(id, .written)

        case let .prepare(parts, index):
            guard case let .prepareWriteResponse(r) = pdu else {
                // Cancel what was queued, then report the server's error.
                return issue(id, .execute(commit: false, failure: failureValue(pdu)))
            }
            let sent = parts[index]
            guard r.handle == sent.handle, r.offset == sent.offset, r.partValue == sent.partValue else {
                return issue(id, .execute(commit: false, failure: .invalidResponse("Prepare Write Response does not echo the request")))
            }
            if index + 1 < parts.count { return issue(id, .prepare(parts: parts, index: index + 1)) }
            return issue(id, .execute(commit: true, failure: nil))

        case let .execute(_, failure):
            if let failure { return fail(id, failure) }
            guard case .executeWriteResponse = pdu else { return self.failure(id, pdu) }
            return done(id, .written)
        }
    }

    private mutating func continueIncludes(_ id: ProcedureID, end: UInt16, next: UInt16, found: [GATTRemoteInclude]) -> [Action] {
        if let i = found.firstIndex(where: { $0.uuid == BluetoothUUID(0) }) {
            return issue(id, .includes(end: end, next: next, found: found, resolving: i))
        }
        if next == 0 { return done(id, .includedServices(found)) }
        return issue(id, .includes(end: end, next: next, found: found, resolving: nil))
    }

    private func filter(_ list: [GATTRemoteCharacteristic], _ uuid: BluetoothUUID?) -> [GATTRemoteCharacteristic] {
        guard let uuid else { return list }
        return list.filter { $0.uuid == uuid }
    }

    private func failureValue(_ pdu: ATTPDU) -> Failure {
        if case let .errorResponse(e) = pdu { return .att(e.error, handle: e.handle) }
        return .invalidResponse("unexpected \(pdu.opcode)")
    }

    private func failure(_ id: ProcedureID, _ pdu: ATTPDU) -> [Action] { fail(id, failureValue(pdu)) }
}
