// The data path: ACL in → L2CAP recombination → fixed-channel dispatch → ATT → GATT client or server;
// and back out: L2CAP framing → fragmentation to the controller's buffer size → ACL buffer credits.
//
// This is the hot path: no actor hops, no dictionary lookups beyond the connection, one decode per PDU.
import BLEWire
import BLEHCI
import BLEL2CAP
import BLEATT
import BLEGATT
import BLETransport
import BLEGAP

extension LEHost {
    /// Packets beyond the controller's buffers that the host accepts before saying "full" to the app.
    var unacknowledgedQueueLimit: Int { max(4, aclBufferCount) }

    /// Room for a Write Command or a notification without overrunning the host's queue.
    var hasRoomForUnacknowledgedData: Bool { aclWaiting.count - aclWaitingHead < unacknowledgedQueueLimit }

    // MARK: Inbound

    func handle(acl: ACLPacket) {
        guard let c = connections[acl.handle] else {
            loggers.hci.debug("ACL for an unknown connection handle", metadata: ["handle": "0x\(String(acl.handle, radix: 16))"])
            return
        }
        let boundary: L2CAPFragment.Boundary = acl.boundary == .continuing ? .continuing : .first
        let frame: L2CAPFrame?
        do {
            frame = try c.recombiner.append(acl.data, boundary: boundary)
        } catch {
            loggers.l2cap.debug("recombination error", metadata: ["connection": "\(c)", "error": "\(error)"])
            // A start fragment that ended an incomplete frame may itself have completed one.
            if let f = c.recombiner.pendingFrame() { dispatch(f, on: c) }
            return
        }
        if let frame { dispatch(frame, on: c) }
    }

    func dispatch(_ frame: L2CAPFrame, on c: HostConnection) {
        if loggers.l2capTraces { loggers.l2cap.trace("frame in", metadata: ["connection": "\(c.handle)", "cid": "\(frame.channelID)", "octets": "\(frame.payload.count)"]) }
        switch frame.channelID {
        case .att: handleATT(frame.payload, on: c)
        case .leSignaling: handleSignaling(frame.payload, on: c)
        case .smp:
            handleSMP(frame.payload, on: c)
        default:
            if L2CAPCreditChannels.dynamicCIDs.contains(frame.channelID.rawValue) {
                let actions = c.signaling.channelFrame(frame.payload, on: frame.channelID.rawValue)
                if !actions.isEmpty { perform(actions, on: c) }
            } else {
                loggers.l2cap.debug("frame for an unsupported channel dropped", metadata: ["cid": "\(frame.channelID)"])
            }
        }
    }

    func handleATT(_ bytes: [UInt8], on c: HostConnection) {
        let pdu: ATTPDU
        do {
            pdu = try ATTPDU.decode(bytes)
        } catch {
            loggers.att.debug("malformed PDU", metadata: ["connection": "\(c)", "error": "\(error)"])
            if let rsp = error.serverErrorResponse { sendATT(.errorResponse(rsp), on: c) }
            return
        }
        if loggers.attTraces { loggers.att.trace("PDU in", metadata: ["connection": "\(c.handle)", "pdu": "\(pdu)"]) }
        // Nothing longer than ATT_MTU may cross the bearer (Vol 3 Part F §3.2.8): a request gets Invalid PDU,
        // a response fails the procedure it answers, a command or notification is dropped.
        if bytes.count > Int(c.attMTU) {
            loggers.att.debug("PDU exceeds ATT_MTU", metadata: ["connection": "\(c)", "opcode": "\(pdu.opcode)", "octets": "\(bytes.count)", "mtu": "\(c.attMTU)"])
            switch pdu.opcode.kind {
            case .request:
                sendATT(.errorResponse(ATTErrorResponse(requestOpcode: pdu.opcode, handle: 0, error: .invalidPDU)), on: c)
            case .response:
                perform(c.gattClient.rejectResponse("\(pdu.opcode) of \(bytes.count) octets exceeds ATT_MTU \(c.attMTU)"), on: c)
            default:
                break
            }
            return
        }
        switch pdu.opcode.kind {
        case .request, .command:
            perform(gattServer.handle(pdu, from: c.clientID))
        case .response, .notification, .indication:
            perform(c.gattClient.receive(pdu), on: c)
        case .confirmation:
            perform(gattServer.handle(pdu, from: c.clientID))
        case .unknown:
            if let rsp = pdu.opcode.unsupportedServerResponse { sendATT(.errorResponse(rsp), on: c) }
        }
    }

    // MARK: Actions of the protocol machines

    func perform(_ actions: [GATTClient.Action], on c: HostConnection) {
        for a in actions {
            switch a {
            case let .send(pdu):
                loop.cancel(c.attTimer)
                c.attTimer = loop.schedule(after: .seconds(30)) { [weak self, weak c] in
                    guard let self, let c, c.isOpen else { return }
                    loggers.att.notice("transaction timed out: disconnecting", metadata: ["connection": "\(c)"])
                    c.attTimer = nil
                    perform(c.gattClient.transactionTimedOut(), on: c)
                    // No more ATT on this bearer (Vol 3 Part F §3.3.3); as iOS does, the link goes down and
                    // the layers above hear "connection timeout".
                    c.closeReasonOverride = .connectionTimeout
                    c.disconnect()
                }
                sendATT(pdu, on: c)
            case let .sendCommand(pdu):
                sendATT(pdu, on: c)
            case let .complete(id, result):
                if !c.gattClient.hasOutstandingRequest {
                    loop.cancel(c.attTimer)
                    c.attTimer = nil
                }
                if case let .success(.mtu(m)) = result { c.mtuDidChange(m) }
                c.gattCompletions.removeValue(forKey: id)?(result)
            case let .notification(handle, value):
                centralDelegate?.host(self, connection: c, didReceiveValue: value, forHandle: handle, isIndication: false)
            case let .indication(handle, value):
                centralDelegate?.host(self, connection: c, didReceiveValue: value, forHandle: handle, isIndication: true)
            case let .protocolViolation(why):
                loggers.att.notice("the peer's GATT server broke the protocol", metadata: ["connection": "\(c)", "error": "\(why)"])
            }
        }
    }

    func connection(_ client: GATTClientID) -> HostConnection? {
        connections[UInt16(truncatingIfNeeded: client.rawValue)]
    }

    func perform(_ action: GATTServerAction) {
        switch action {
        case let .send(pdu, client):
            if let c = connection(client) { sendATT(pdu, on: c) }
        case let .readRequest(id, client, handle, offset):
            peripheralDelegate?.host(self, didReceiveRead: HostReadRequest(
                id: id.rawValue, connectionHandle: UInt16(truncatingIfNeeded: client.rawValue), attributeHandle: handle, offset: offset))
        case let .writeRequests(id, client, writes, needsResponse):
            let items = writes.map { HostWriteRequest.Item(attributeHandle: $0.handle, offset: $0.offset, value: $0.value) }
            peripheralDelegate?.host(self, didReceiveWrite: HostWriteRequest(
                id: id.rawValue, connectionHandle: UInt16(truncatingIfNeeded: client.rawValue), items: items, needsResponse: needsResponse))
        case let .subscriptionChanged(client, valueHandle, notify, indicate):
            if let c = connection(client) {
                peripheralDelegate?.host(self, connection: c, didChangeSubscriptionOf: valueHandle, notify: notify, indicate: indicate)
            }
        case let .mtuChanged(client, mtu):
            if let c = connection(client) { c.mtuDidChange(mtu) }
        case let .startConfirmationTimer(client):
            guard let c = connection(client) else { return }
            loop.cancel(c.confirmationTimer)
            c.confirmationTimer = loop.schedule(after: .seconds(30)) { [weak self, weak c] in
                guard let self, let c, c.isOpen else { return }
                c.confirmationTimer = nil
                loggers.att.notice("indication confirmation timed out", metadata: ["connection": "\(c)"])
                perform(gattServer.confirmationTimeout(c.clientID))
            }
        case let .stopConfirmationTimer(client):
            if let c = connection(client) { loop.cancel(c.confirmationTimer); c.confirmationTimer = nil }
        case let .protocolError(client, error):
            loggers.att.notice("a client broke the ATT protocol", metadata: ["client": "\(client)", "error": "\(error)"])
        case .valueWritten, .indicationConfirmed, .indicationAbandoned, .saveClientConfiguration:
            break
        }
    }

    // MARK: Outbound

    func sendATT(_ pdu: ATTPDU, on c: HostConnection) {
        if loggers.attTraces { loggers.att.trace("PDU out", metadata: ["connection": "\(c.handle)", "pdu": "\(pdu)"]) }
        sendL2CAP(pdu.encode(), cid: .att, on: c)
    }

    func sendL2CAP(_ payload: [UInt8], cid: L2CAPChannelID, on c: HostConnection) {
        guard c.isOpen else { return }
        var batch: [HCIPacket] = []
        appendL2CAP(payload, cid: cid, on: c, into: &batch)
        sendBatch(batch)
    }

    /// Frames and fragments `payload`, adding what may leave now to `batch` (the rest waits for credits).
    func appendL2CAP(_ payload: [UInt8], cid: L2CAPChannelID, on c: HostConnection, into batch: inout [HCIPacket]) {
        for f in L2CAPFragmenter.fragment(payload, channelID: cid, maximumFragmentSize: aclBufferSize) {
            let acl = ACLPacket(handle: c.handle, boundary: f.boundary == .first ? .firstNonFlushable : .continuing,
                                broadcast: 0, data: f.bytes)
            enqueueACL(acl.encode(), handle: c.handle, into: &batch)
        }
    }

    /// Sends at once while buffer credits last (collecting into `batch`), else queues behind the waiting ones.
    func enqueueACL(_ packet: HCIPacket, handle: UInt16, into batch: inout [HCIPacket]) {
        if aclCredits > 0 && aclWaitingHead == aclWaiting.count {
            aclCredits -= 1
            aclInFlight[handle, default: 0] += 1
            batch.append(packet)
        } else {
            aclWaiting.append((handle, packet))
        }
    }

    /// The fragments of one PDU (or the packets freed credits let go) leave in one transport write.
    func sendBatch(_ batch: [HCIPacket]) {
        if loggers.hciTraces { for p in batch { loggers.hci.trace("packet out", metadata: p.logMetadata) } }
        if batch.count == 1 { transport.send(batch[0]) } else if !batch.isEmpty { transport.send(batch: batch) }
    }

    func packetsCompleted(handle: UInt16, count: Int) {
        guard let n = aclInFlight[handle] else { return }
        let done = min(n, count)
        aclInFlight[handle] = n - done
        aclCredits += done
    }

    /// Sends waiting fragments while credits last, then tells writers who were refused that room is back.
    func aclCreditsFreed() {
        var batch: [HCIPacket] = []
        while aclCredits > 0 && aclWaitingHead < aclWaiting.count {
            let (h, p) = aclWaiting[aclWaitingHead]
            aclWaitingHead += 1
            aclCredits -= 1
            aclInFlight[h, default: 0] += 1
            batch.append(p)
        }
        sendBatch(batch)
        if aclWaitingHead == aclWaiting.count {
            aclWaiting.removeAll(keepingCapacity: true)
            aclWaitingHead = 0
        }
        mirrorWaitingPackets()
        guard hasRoomForUnacknowledgedData else { return }
        pumpChannelsWaitingForBuffers()
        for (_, c) in connections where c.wantsWriteReady {
            c.wantsWriteReady = false
            centralDelegate?.host(self, connectionIsReadyToSendWriteWithoutResponse: c)
        }
        if subscribersWaitingForRoom {
            subscribersWaitingForRoom = false
            peripheralDelegate?.hostIsReadyToUpdateSubscribers(self)
        }
    }

    func removeWaitingACL(for handle: UInt16) {
        let rest = aclWaiting[aclWaitingHead...].filter { $0.handle != handle }
        aclWaiting = Array(rest)
        aclWaitingHead = 0
    }
}
