// The GATT server: a pure state machine over a GATTDatabase (Vol 3 Part G §4, Vol 3 Part F §3.4).
//
// No I/O, no clock. The host hands it each PDU a client sent (`handle(_:from:)`) and carries out the
// returned actions in order. Values stored in the database are answered at once; dynamic values
// (definition value nil) become `.readRequest` / `.writeRequests` actions that the application
// answers later with `completeRead` / `completeWrite`, which yield the response. ATT lets a client
// have one request outstanding (Vol 3 Part F §3.3.2), so while one of its requests waits for the
// application, another request from that client is a protocol violation and is dropped.
//
// Per client: ATT_MTU and indication flow (an ATTBearerServer), link security, Client
// Characteristic Configuration values, the prepare-write queue and the waiting request.
// Discovery procedures are in GATTServer+Discovery.swift, reads in +Read, writes in +Write.

import BLEATT
import BLEWire

public struct GATTServer: Sendable {
    /// Whether a client has a request waiting for the application.
    enum Transaction: Sendable, Equatable {
        case idle
        case awaitingApplication(GATTRequestID)
    }

    struct ClientState: Sendable {
        var bearer: ATTBearerServer
        var security: ATTSecurity
        var isBonded: Bool
        /// CCCD values by descriptor handle; absent means 0.
        var configuration: [UInt16: UInt16] = [:]
        var preparedWrites: [ATTPrepareWriteRequest] = []
        var preparedBytes = 0
        var transaction: Transaction = .idle
        var mtu: Int { Int(bearer.mtu) }
    }

    /// What to do when the application answers.
    enum Pending: Sendable {
        case read(ATTOpcode, PendingRead)
        /// A Write Request (respond), a Write Command (stay silent), or an Execute Write whose stored
        /// and configuration parts are applied only if the application accepts its part.
        case write(ATTOpcode, handle: UInt16, deferred: [DeferredWrite])
    }

    enum PendingRead: Sendable {
        case read(handle: UInt16)
        case readBlob(handle: UInt16)
        case readByType(handle: UInt16)
        case readMultiple(handles: [UInt16], collected: [[UInt8]], variable: Bool)
    }

    /// A write to apply later: a stored value or a CCCD.
    struct DeferredWrite: Sendable {
        var handle: UInt16
        var value: [UInt8]
    }

    public internal(set) var database: GATTDatabase
    public let configuration: GATTServerConfiguration
    var clients: [GATTClientID: ClientState] = [:]
    var pending: [GATTRequestID: (client: GATTClientID, what: Pending)] = [:]
    private var nextRequestID: UInt64 = 1

    public init(database: GATTDatabase, configuration: GATTServerConfiguration = GATTServerConfiguration()) {
        self.database = database
        self.configuration = configuration
    }

    // MARK: - Clients

    /// Registers a client. `clientConfiguration` restores a bonded client's CCCD values.
    public mutating func clientConnected(
        _ client: GATTClientID, security: ATTSecurity = .none, bonded: Bool = false,
        clientConfiguration: [UInt16: UInt16] = [:]
    ) {
        var state = ClientState(
            bearer: ATTBearerServer(preferredMTU: configuration.preferredMTU),
            security: security, isBonded: bonded)
        for (h, v) in clientConfiguration where database.attribute(at: h)?.value == .clientConfiguration {
            state.configuration[h] = v
        }
        clients[client] = state
    }

    /// The link's security changed (encryption started, pairing finished).
    public mutating func updateSecurity(_ security: ATTSecurity, bonded: Bool? = nil, for client: GATTClientID) {
        ensure(client)
        clients[client]!.security = security
        if let bonded { clients[client]!.isBonded = bonded }
    }

    /// The client role of the same bearer negotiated a new ATT_MTU.
    public mutating func updateMTU(_ mtu: UInt16, for client: GATTClientID) {
        ensure(client)
        clients[client]!.bearer.updateMTU(mtu)
    }

    /// The client's connection ended: its state goes; subscriptions end (a bonded client's CCCD
    /// values are handed out to be stored, Vol 3 Part G §3.3.3.3).
    public mutating func clientDisconnected(_ client: GATTClientID) -> [GATTServerAction] {
        guard var state = clients.removeValue(forKey: client) else { return [] }
        pending = pending.filter { $0.value.client != client }
        var actions = map(state.bearer.close(), client)
        for (h, v) in state.configuration.sorted(by: { $0.key < $1.key }) where v != 0 {
            if let c = database.characteristic(containing: h) {
                actions.append(
                    .subscriptionChanged(
                        client: client, characteristicValueHandle: c.valueHandle,
                        notify: false, indicate: false))
            }
        }
        if state.isBonded {
            state.configuration = state.configuration.filter { $0.value != 0 }
            actions.append(.saveClientConfiguration(client: client, values: state.configuration))
        }
        return actions
    }

    /// Reads and writes the application has not answered yet.
    public var pendingRequestCount: Int { pending.count }

    public func mtu(for client: GATTClientID) -> UInt16 { clients[client]?.bearer.mtu ?? ATTMTU.default }

    /// The client's configuration of the characteristic whose value is at `valueHandle`.
    public func subscription(of client: GATTClientID, valueHandle: UInt16) -> GATTClientConfiguration {
        guard let cccd = database.characteristic(valueHandle: valueHandle)?.clientConfigurationHandle else { return [] }
        return GATTClientConfiguration(rawValue: clients[client]?.configuration[cccd] ?? 0)
    }

    mutating func ensure(_ client: GATTClientID) {
        if clients[client] == nil { clientConnected(client) }
    }

    // MARK: - Database changes

    /// Adds a service to the live database.
    @discardableResult
    public mutating func addService(_ service: GATTServiceDefinition) throws(GATTDatabaseError) -> GATTServiceHandles {
        try database.add(service)
    }

    /// Removes a service; CCCD values and prepared writes in its range are dropped.
    public mutating func removeService(_ range: ClosedRange<UInt16>) throws(GATTDatabaseError) {
        try database.remove(serviceRange: range)
        for id in clients.keys {
            clients[id]!.configuration = clients[id]!.configuration.filter { !range.contains($0.key) }
            clients[id]!.preparedWrites.removeAll { range.contains($0.handle) }
            clients[id]!.preparedBytes = clients[id]!.preparedWrites.reduce(0) { $0 + $1.partValue.count }
        }
    }

    /// Replaces a stored value (the application's own update; no notification is sent).
    @discardableResult
    public mutating func setValue(_ value: [UInt8], at handle: UInt16) -> Bool {
        database.setValue(value, at: handle)
    }

    // MARK: - Requests

    /// Decodes and handles one PDU; a malformed request gets Invalid PDU.
    public mutating func handle(bytes: [UInt8], from client: GATTClientID) -> [GATTServerAction] {
        do {
            return handle(try ATTPDU.decode(bytes), from: client)
        } catch {
            guard let response = error.serverErrorResponse else { return [] }
            ensure(client)
            if case .awaitingApplication = clients[client]!.transaction { return [] }
            return [.send(.errorResponse(response), to: client)]
        }
    }

    /// Handles one PDU a client sent.
    public mutating func handle(_ pdu: ATTPDU, from client: GATTClientID) -> [GATTServerAction] {
        ensure(client)
        if pdu.opcode.isRequest, case .awaitingApplication = clients[client]!.transaction {
            // A second request while one is outstanding breaks §3.3.2: no answer can be given in order.
            return [.protocolError(client: client, .requestWhileOutstanding(pdu.opcode))]
        }
        switch pdu {
        case let .exchangeMTURequest(r):
            let (response, newMTU) = clients[client]!.bearer.exchangeMTU(r)
            var actions: [GATTServerAction] = [.send(response, to: client)]
            if let newMTU { actions.append(.mtuChanged(client: client, mtu: newMTU)) }
            return actions
        case let .findInformationRequest(r): return findInformation(r, client)
        case let .findByTypeValueRequest(r): return findByTypeValue(r, client)
        case let .readByTypeRequest(r): return readByType(r, client)
        case let .readByGroupTypeRequest(r): return readByGroupType(r, client)
        case let .readRequest(r): return read(r, client)
        case let .readBlobRequest(r): return readBlob(r, client)
        case let .readMultipleRequest(r): return readMultiple(r.handles, variable: false, client)
        case let .readMultipleVariableRequest(r): return readMultiple(r.handles, variable: true, client)
        case let .writeRequest(r): return write(handle: r.handle, value: r.value, opcode: .writeRequest, client)
        case let .writeCommand(r): return write(handle: r.handle, value: r.value, opcode: .writeCommand, client)
        case .signedWriteCommand:
            // Signed writes need the peer's CSRK from pairing, which this stack does not keep yet:
            // a command that cannot be verified is ignored (Vol 3 Part F §3.4.5.4).
            return []
        case let .prepareWriteRequest(r): return prepareWrite(r, client)
        case let .executeWriteRequest(r): return executeWrite(r, client)
        case .handleValueConfirmation:
            return map(clients[client]!.bearer.receiveConfirmation(), client)
        case .errorResponse, .exchangeMTUResponse, .findInformationResponse, .findByTypeValueResponse,
            .readByTypeResponse, .readResponse, .readBlobResponse, .readMultipleResponse,
            .readMultipleVariableResponse, .readByGroupTypeResponse, .writeResponse, .prepareWriteResponse,
            .executeWriteResponse, .handleValueNotification, .handleValueIndication,
            .multipleHandleValueNotification:
            // Client-role PDUs: the host routes them to the client, never here.
            return [.protocolError(client: client, .wrongRole(pdu.opcode))]
        case let .unknown(opcode, _):
            return opcode.unsupportedServerResponse.map { [.send(.errorResponse($0), to: client)] } ?? []
        }
    }

    // MARK: - Application answers

    /// The application's answer to `.readRequest`: the value from the requested offset on, or an error.
    public mutating func completeRead(id: GATTRequestID, result: Result<[UInt8], ATTErrorCode>) -> [GATTServerAction] {
        guard let (client, what) = pending.removeValue(forKey: id), clients[client] != nil,
            case let .read(opcode, kind) = what
        else { return [] }
        clients[client]!.transaction = .idle
        let handle: UInt16
        switch kind {
        case let .read(h), let .readBlob(h), let .readByType(h): handle = h
        case let .readMultiple(handles, collected, _): handle = handles[collected.count]
        }
        let value: [UInt8]
        switch result {
        case let .failure(error): return [errorResponse(opcode, handle, error, client)]
        case let .success(v): value = v
        }
        let mtu = clients[client]!.mtu
        switch kind {
        case .read:
            return [.send(.readResponse(ATTReadResponse(value: Array(value.prefix(mtu - 1)))), to: client)]
        case .readBlob:
            return [.send(.readBlobResponse(ATTReadBlobResponse(partValue: Array(value.prefix(mtu - 1)))), to: client)]
        case let .readByType(h):
            let entry = ATTHandleValue(handle: h, value: Array(value.prefix(min(mtu - 4, 253))))
            return [.send(.readByTypeResponse(ATTReadByTypeResponse(attributeDataList: [entry])), to: client)]
        case let .readMultiple(handles, collected, variable):
            return continueReadMultiple(handles, collected + [value], variable: variable, client)
        }
    }

    /// The application's answer to `.writeRequests`: nil when all writes were applied.
    public mutating func completeWrite(id: GATTRequestID, error: ATTErrorCode?) -> [GATTServerAction] {
        guard let (client, what) = pending.removeValue(forKey: id), clients[client] != nil,
            case let .write(opcode, handle, deferred) = what
        else { return [] }
        if opcode != .writeCommand { clients[client]!.transaction = .idle }
        if let error {
            return opcode == .writeCommand ? [] : [errorResponse(opcode, handle, error, client)]
        }
        var actions: [GATTServerAction] = []
        for d in deferred { actions += apply(d, client) }
        switch opcode {
        case .writeRequest: actions.append(.send(.writeResponse(ATTWriteResponse()), to: client))
        case .executeWriteRequest: actions.append(.send(.executeWriteResponse(ATTExecuteWriteResponse()), to: client))
        default: break
        }
        return actions
    }

    // MARK: - Notifications and indications (Vol 3 Part G §4.10, §4.11)

    /// A notification of `value` (cut to ATT_MTU − 3) if the client enabled notifications.
    public func notify(handle: UInt16, value: [UInt8], to client: GATTClientID) -> [GATTServerAction] {
        guard let state = clients[client], subscription(of: client, valueHandle: handle).contains(.notification) else {
            return []
        }
        return [.send(state.bearer.notification(handle: handle, value: value), to: client)]
    }

    /// `notify` without the action list, for a host's send path: the PDU, or nil when the client has not
    /// enabled notifications.
    public func notification(handle: UInt16, value: [UInt8], to client: GATTClientID) -> ATTPDU? {
        // Every notification sent passes here: the bearer is read in place, not copied out of the table.
        guard subscription(of: client, valueHandle: handle).contains(.notification) else { return nil }
        return clients[client]?.bearer.notification(handle: handle, value: value)
    }

    /// An indication of `value` (cut to ATT_MTU − 3) if the client enabled indications; it waits
    /// behind an indication not yet confirmed.
    public mutating func indicate(handle: UInt16, value: [UInt8], to client: GATTClientID) -> [GATTServerAction] {
        guard clients[client] != nil, subscription(of: client, valueHandle: handle).contains(.indication) else { return [] }
        do {
            return map(try clients[client]!.bearer.indicate(handle: handle, value: value), client)
        } catch {
            return []
        }
    }

    /// Tells every client that enabled Service Changed indications that `range` changed (§7.1).
    public mutating func serviceChanged(_ range: ClosedRange<UInt16>) -> [GATTServerAction] {
        guard let handle = database.serviceChangedHandle else { return [] }
        var w = ByteWriter(capacity: 4)
        w.write(range.lowerBound); w.write(range.upperBound)
        var actions: [GATTServerAction] = []
        for client in clients.keys.sorted(by: { $0.rawValue < $1.rawValue }) {
            actions += indicate(handle: handle, value: w.bytes, to: client)
        }
        return actions
    }

    /// The confirmation timer of `client` fired: its bearer is dead (Vol 3 Part F §3.3.3).
    public mutating func confirmationTimeout(_ client: GATTClientID) -> [GATTServerAction] {
        guard clients[client] != nil else { return [] }
        return map(clients[client]!.bearer.timeout(), client)
    }

    // MARK: - Helpers shared by the procedures

    func map(_ actions: [ATTBearerServerAction], _ client: GATTClientID) -> [GATTServerAction] {
        actions.map {
            switch $0 {
            case let .send(pdu): return .send(pdu, to: client)
            case .startConfirmationTimer: return .startConfirmationTimer(client: client)
            case .stopConfirmationTimer: return .stopConfirmationTimer(client: client)
            case let .indicationConfirmed(h): return .indicationConfirmed(client: client, handle: h)
            case let .indicationAbandoned(h): return .indicationAbandoned(client: client, handle: h)
            case let .protocolError(e): return .protocolError(client: client, e)
            }
        }
    }

    func errorResponse(_ opcode: ATTOpcode, _ handle: UInt16, _ error: ATTErrorCode, _ client: GATTClientID) -> GATTServerAction {
        .send(.errorResponse(ATTErrorResponse(requestOpcode: opcode, handle: handle, error: error)), to: client)
    }

    mutating func makeRequestID() -> GATTRequestID {
        defer { nextRequestID += 1 }
        return GATTRequestID(rawValue: nextRequestID)
    }

    /// Parks a request for the application; requests (not commands) block the client's transaction.
    mutating func park(_ what: Pending, _ client: GATTClientID, blocking: Bool = true) -> GATTRequestID {
        let id = makeRequestID()
        pending[id] = (client, what)
        if blocking { clients[client]!.transaction = .awaitingApplication(id) }
        return id
    }

    /// The error a read of `attribute` by `client` must get, or nil (Vol 3 Part F §4.5.x).
    func readError(_ attribute: GATTAttribute, _ client: GATTClientID) -> ATTErrorCode? {
        let p = attribute.permissions
        guard p.contains(.readable) else { return .readNotPermitted }
        return clients[client]!.security.check(
            encryption: p.contains(.readEncryptionRequired),
            authentication: p.contains(.readAuthenticationRequired),
            minimumKeySize: configuration.minimumKeySize)
    }

    func writeError(_ attribute: GATTAttribute, _ client: GATTClientID) -> ATTErrorCode? {
        let p = attribute.permissions
        guard p.contains(.writeable) else { return .writeNotPermitted }
        return clients[client]!.security.check(
            encryption: p.contains(.writeEncryptionRequired),
            authentication: p.contains(.writeAuthenticationRequired),
            minimumKeySize: configuration.minimumKeySize)
    }

    /// The value the server itself knows: stored, or the client's CCCD; nil for dynamic values.
    func knownValue(_ attribute: GATTAttribute, _ client: GATTClientID) -> [UInt8]? {
        switch attribute.value {
        case let .stored(v): return v
        case .clientConfiguration:
            let v = clients[client]!.configuration[attribute.handle] ?? 0
            return [UInt8(truncatingIfNeeded: v), UInt8(truncatingIfNeeded: v >> 8)]
        case .dynamic: return nil
        }
    }
}
