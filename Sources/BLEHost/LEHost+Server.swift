// The peripheral role's GATT server, as the layers above drive it: publishing services, answering dynamic
// reads and writes, and sending notifications and indications with back-pressure.
import BLEWire
import BLEATT
import BLEGATT

extension LEHost {
    /// Replaces the whole local database (before clients connect: no Service Changed is sent); the
    /// configuration sets the server's ATT_MTU and limits (a simulated device's MTU, in CoreBluetoothTesting).
    public func useDatabase(_ database: GATTDatabase, configuration: GATTServerConfiguration = GATTServerConfiguration()) {
        gattServer = GATTServer(database: database, configuration: configuration)
    }

    /// The stored value of an attribute, if it has one.
    public func storedValue(at handle: UInt16) -> [UInt8]? {
        if case let .stored(v) = gattServer.database.attribute(at: handle)?.value { return v }
        return nil
    }

    /// Adds a service to the local database; Service Changed is indicated to connected clients.
    public func addService(_ definition: GATTServiceDefinition) throws -> GATTServiceHandles {
        let handles = try gattServer.addService(definition)
        perform(gattServer.serviceChanged(handles.range))
        return handles
    }

    public func removeService(startHandle: UInt16) {
        guard let record = gattServer.database.service(declaredAt: startHandle) else { return }
        do {
            try gattServer.removeService(record.range)
            perform(gattServer.serviceChanged(record.range))
        } catch {
            loggers.att.warning("could not remove a service", metadata: ["handle": "0x\(String(startHandle, radix: 16))", "error": "\(error)"])
        }
    }

    func perform(_ actions: [GATTServerAction]) {
        for a in actions { perform(a) }
    }

    /// Answers a dynamic read.
    public func respondToRead(id: UInt64, result: Result<[UInt8], ATTErrorCode>) {
        perform(gattServer.completeRead(id: GATTRequestID(rawValue: id), result: result))
    }

    /// Accepts (nil) or refuses a batch of writes.
    public func respondToWrite(id: UInt64, error: ATTErrorCode?) {
        perform(gattServer.completeWrite(id: GATTRequestID(rawValue: id), error: error))
    }

    /// Sets a characteristic's stored value (what static reads return).
    public func setValue(_ value: [UInt8], forHandle handle: UInt16) {
        gattServer.setValue(value, at: handle)
    }

    /// Notifies or indicates a value to the subscribed clients (all, or those listed). Returns false and
    /// later calls `hostIsReadyToUpdateSubscribers` when the transmit queue is full. Call on the loop.
    public func updateValue(_ value: [UInt8], forHandle handle: UInt16, to clients: [UInt16]? = nil) -> Bool {
        guard hasRoomForUnacknowledgedData else {
            subscribersWaitingForRoom = true
            return false
        }
        sendUpdate(value, forHandle: handle, to: clients)
        return true
    }

    /// `updateValue` from any thread, without waiting for the loop: the update is queued if the transmit
    /// queue (updates not yet handed to the controller plus packets waiting for controller buffers) has room;
    /// otherwise it returns false and `hostIsReadyToUpdateSubscribers` follows when room frees.
    public func submitUpdate(_ value: [UInt8], forHandle handle: UInt16, to clients: [UInt16]? = nil) -> Bool {
        let limit = transmitQueueLimit
        let (accepted, schedule) = transmitQueue.withLock { q -> (Bool, Bool) in
            if q.submitted + q.waitingPackets >= limit {
                q.wantsReady = true
                return (false, false)
            }
            q.submitted += 1
            q.updates.append(PendingUpdate(value: value, handle: handle, clients: clients))
            return (true, q.updates.count == 1)
        }
        guard accepted else { return false }
        // One loop turn takes every update submitted meanwhile.
        if schedule { loop.execute { [self] in sendSubmittedUpdates() } }
        return true
    }

    func sendSubmittedUpdates() {
        let batch = transmitQueue.withLock { q -> [PendingUpdate] in
            let b = q.updates
            q.updates.removeAll(keepingCapacity: true)
            q.submitted -= b.count
            return b
        }
        for u in batch { sendUpdate(u.value, forHandle: u.handle, to: u.clients) }
        mirrorWaitingPackets(submittedChanged: true)
    }

    /// Keeps the thread-safe copy of the controller backlog current, and reports room to a refused submitter.
    /// Room can only come from fewer waiting packets or fewer submitted updates (`submittedChanged`): otherwise
    /// nothing a submitter sees has changed, and the lock is not taken (this runs for every Number Of Completed
    /// Packets event).
    func mirrorWaitingPackets(submittedChanged: Bool = false) {
        let waiting = aclWaitingPackets
        guard submittedChanged || waiting != mirroredWaitingPackets else { return }
        mirroredWaitingPackets = waiting
        let limit = transmitQueueLimit
        let ready = transmitQueue.withLock { q -> Bool in
            q.waitingPackets = waiting
            // Room again once three quarters of the queue have drained: refills come in batches of about
            // 48 (a thread hand-off to the submitter each), while 16 updates still wait to go.
            if q.wantsReady && q.submitted + waiting < limit / 4 {
                q.wantsReady = false
                return true
            }
            return false
        }
        if ready { peripheralDelegate?.hostIsReadyToUpdateSubscribers(self) }
    }

    func sendUpdate(_ value: [UInt8], forHandle handle: UInt16, to clients: [UInt16]?) {
        if let clients {
            for h in clients { if let c = connections[h] { sendUpdate(value, forHandle: handle, on: c) } }
        } else if connections.count == 1, let c = connections.first?.value {
            // One link (the usual case): no sorted list of handles built for every update.
            sendUpdate(value, forHandle: handle, on: c)
        } else {
            for h in connections.keys.sorted() { sendUpdate(value, forHandle: handle, on: connections[h]!) }
        }
    }

    private func sendUpdate(_ value: [UInt8], forHandle handle: UInt16, on c: HostConnection) {
        // A notification (the hot path) goes straight out, without an action list.
        if let pdu = gattServer.notificationInPlace(handle: handle, value: value, to: c.clientID) {
            sendATT(pdu, on: c)
        } else if gattServer.subscription(of: c.clientID, valueHandle: handle).contains(.indication) {
            perform(gattServer.indicate(handle: handle, value: value, to: c.clientID))
        }
    }
}

extension GATTServer {
    /// `notification(handle:value:to:)` on the server where it lies. Called on the host's stored `gattServer`,
    /// a non-mutating method works on a copy of the whole server (a retain and a release of each of its
    /// tables, for every notification: about 2 % of a notification's time in the Core Bluetooth bench's
    /// profile); a mutating one is handed the property's storage.
    mutating func notificationInPlace(handle: UInt16, value: [UInt8], to client: GATTClientID) -> ATTPDU? {
        notification(handle: handle, value: value, to: client)
    }
}
