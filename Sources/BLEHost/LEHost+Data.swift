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
    var hasRoomForUnacknowledgedData: Bool { aclWaitingPackets < unacknowledgedQueueLimit }

    // MARK: Inbound

    /// Everything one read from the controller held, handled in one hop onto the loop (or in place).
    public func transport(didReceivePackets packets: [HCIPacket]) {
        if loop.isInTurn {
            handle(batch: packets)
        } else if transport.deliversOnReaderThread {
            // A reader thread is never the loop outside a turn: no need to ask libdispatch.
            loop.runWaiting { handle(batch: packets) }
        } else if loop.isInLoop {
            handle(batch: packets)
        } else {
            loop.execute { [self] in handle(batch: packets) }
        }
    }

    /// The packets of one read, in order. The controller buffers that Number Of Completed Packets events among
    /// them free are spent once, after the last packet: a controller that reports every packet in an event of its
    /// own (rootcanal does) otherwise cost a send, and the work around it, for each packet (callgrind: about a
    /// quarter of a sender's instructions over rootcanal). Packets the others make meanwhile keep their order
    /// (they queue behind those waiting, see `sendACL`).
    func handle(batch packets: [HCIPacket]) {
        guard packets.count > 1 else {
            if let p = packets.first { handle(p) }
            return
        }
        spendsFreedCreditsLater = true
        for p in packets { handle(p) }
        spendsFreedCreditsLater = false
        if creditsFreedMeanwhile {
            creditsFreedMeanwhile = false
            aclCreditsFreed()
        }
    }

    /// An ACL packet from the controller (Vol 4 Part E §5.4.2), reported finished once it has been dispatched
    /// when the controller holds data for us (controller-to-host flow control, LEHost+FlowControl.swift).
    ///
    /// The connection is used without a retain and a release per packet: `lastACLConnection` holds it, and one
    /// it lets go while a packet is dispatched waits in `retiredACLConnections` until the dispatch is over.
    /// HostConnection is referenced weakly (by channels, by Core Bluetooth's links), so its reference count lives
    /// in a side table, and a retain and release of it cost about 170 instructions: 12 % of a receiver's over
    /// rootcanal (callgrind).
    func handleACL(_ packet: HCIPacket) {
        let b = packet.bytes
        let h: ACLPacket.Header
        do { h = try ACLPacket.Header.decode(b) } catch {
            log("dropping malformed ACL packet: \(error)")
            return
        }
        if lastACL?._withUnsafeGuaranteedRef({ $0.handle }) != h.handle { rememberACLConnection(connections[h.handle]) }
        guard let connection = lastACL else {
            log("ACL for unknown handle 0x\(String(h.handle, radix: 16))")
            return
        }
        aclDispatchDepth += 1
        connection._withUnsafeGuaranteedRef { c in
            dispatchACL(b, header: h, on: c)
            if controllerToHostFlowControl { finished(on: c) }
        }
        aclDispatchDepth -= 1
        if aclDispatchDepth == 0 && !retiredACLConnections.isEmpty { retiredACLConnections.removeAll() }
    }

    /// Makes `c` the connection of the next ACL packets (nil: none), keeping the one it replaces alive until the
    /// packet being dispatched, if any, is done with it.
    func rememberACLConnection(_ c: HostConnection?) {
        if aclDispatchDepth > 0, let old = lastACLConnection { retiredACLConnections.append(old) }
        lastACLConnection = c
        lastACL = c.map { Unmanaged.passUnretained($0) }
    }

    /// A whole L2CAP frame in one packet (the usual case) is dispatched with one copy of its payload;
    /// fragments go through the connection's recombiner.
    func dispatchACL(_ b: [UInt8], header h: ACLPacket.Header, on c: HostConnection) {
        if h.boundary != .continuing, h.length >= 4, c.recombiner.isIdle {
            let frameLength = Int(b[4]) | Int(b[5]) << 8
            if frameLength + 4 == h.length, frameLength <= c.recombiner.maximumFrameLength {
                // A central's hot path: a whole ATT_HANDLE_VALUE_NTF (Vol 3 Part F §3.4.7.1: opcode, handle,
                // value) on the ATT channel goes to the delegate as it lies in the packet, without building
                // the frame or decoding the PDU. It takes the checks `handleATT` makes for it (a handle present,
                // no longer than ATT_MTU), and leaves the traced path to `dispatch` when tracing is on.
                if b[6] == 0x04, b[7] == 0, frameLength >= 3, b[8] == Self.notificationOpcode, frameLength <= Int(c.attMTU),
                    !loggers.l2capTraces, !loggers.attTraces
                {
                    centralDelegate?.host(self, connection: c, didReceiveNotification: b[11...], forHandle: UInt16(b[9]) | UInt16(b[10]) << 8)
                    return
                }
                let cid = L2CAPChannelID(rawValue: UInt16(b[6]) | UInt16(b[7]) << 8)
                dispatch(L2CAPFrame(channelID: cid, payload: Array(b[8...])), on: c)
                return
            }
        }
        // Fragments (a long frame's continuations above all) go to the recombiner as they lie in the packet.
        handleFragment(b[4...], boundary: h.boundary, on: c)
    }

    static let notificationOpcode = ATTOpcode.handleValueNotification.rawValue

    func handleFragment(_ data: ArraySlice<UInt8>, boundary aclBoundary: ACLPacketBoundary, on c: HostConnection) {
        let boundary: L2CAPFragment.Boundary = aclBoundary == .continuing ? .continuing : .first
        let frame: L2CAPFrame?
        do {
            frame = try c.recombiner.append(data, boundary: boundary)
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
        case .notification:
            if case let .handleValueNotification(n) = pdu {
                // The hot path: the GATT client only hands a notification on, so it goes to the delegate
                // without an action list.
                centralDelegate?.host(self, connection: c, didReceiveValue: n.value, forHandle: n.handle, isIndication: false)
            } else {
                perform(c.gattClient.receive(pdu), on: c)
            }
        case .response, .indication:
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
            peripheralDelegate?.host(
                self,
                didReceiveRead: HostReadRequest(
                    id: id.rawValue, connectionHandle: UInt16(truncatingIfNeeded: client.rawValue), attributeHandle: handle, offset: offset))
        case let .writeRequests(id, client, writes, needsResponse):
            let items = writes.map { HostWriteRequest.Item(attributeHandle: $0.handle, offset: $0.offset, value: $0.value) }
            peripheralDelegate?.host(
                self,
                didReceiveWrite: HostWriteRequest(
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
        case let .valueWritten(client, handle, value):
            if let c = connection(client) { peripheralDelegate?.host(self, connection: c, didWriteStoredValue: value, forHandle: handle) }
        case .indicationConfirmed, .indicationAbandoned, .saveClientConfiguration:
            break
        }
    }

    // MARK: Outbound

    /// A PDU that fits one controller buffer (the usual case) is encoded straight into its ACL packet, behind
    /// the ACL and L2CAP headers: one array, no copy. A longer one is fragmented.
    func sendATT(_ pdu: ATTPDU, on c: HostConnection) {
        if loggers.attTraces { loggers.att.trace("PDU out", metadata: ["connection": "\(c.handle)", "pdu": "\(pdu)"]) }
        guard c.isOpen else { return }
        var w = ByteWriter(capacity: 8 + pdu.encodedSize)
        w.write(c.handle & 0x0FFF)   // Packet_Boundary_Flag 0: first non-flushable (Vol 4 Part E §5.4.2)
        w.write(UInt16(0)); w.write(UInt16(0))   // ACL and L2CAP lengths, patched below
        w.write(L2CAPChannelID.att.rawValue)
        pdu.encode(into: &w)
        let size = w.count - 8
        guard size + 4 <= aclBufferSize else { return sendL2CAP(Array(w.bytes[8...]), cid: .att, on: c) }
        w.patchUInt16(UInt16(size + 4), at: 2)
        w.patchUInt16(UInt16(size), at: 4)
        sendACL(HCIPacket(type: .acl, bytes: w.bytes), handle: c.handle)
    }

    func sendL2CAP(_ payload: [UInt8], cid: L2CAPChannelID, on c: HostConnection) {
        guard c.isOpen else { return }
        if cutsFramesNow { return queueFrame(payload, cid: cid.rawValue, handle: c.handle) }
        Self.forEachACLPacket(carrying: payload, cid: cid, handle: c.handle, fragmentSize: aclBufferSize, pool: &fragmentPool) { packet in
            sendACL(packet, handle: c.handle)
        }
    }

    /// Sends one packet at once while buffer credits last, else queues it behind the waiting ones.
    func sendACL(_ packet: HCIPacket, handle: UInt16) {
        if aclCredits > 0 && aclWaiting.isEmpty {
            aclCredits -= 1
            aclSent(1, on: handle)
            transport.send(packet)
            if recyclesSentPackets { fragmentPool.recycle(packet.bytes) }
        } else {
            if aclWaiting.isEmpty { transport.hostBacklogChanged(true) }
            aclWaiting.append((handle, .packet(packet)))
            aclWaitingPackets += 1
        }
    }

    /// Frames and fragments `payload`, adding what may leave now to `batch` (the rest waits for credits).
    func appendL2CAP(_ payload: [UInt8], cid: L2CAPChannelID, on c: HostConnection, into batch: inout [HCIPacket]) {
        Self.forEachACLPacket(carrying: payload, cid: cid, handle: c.handle, fragmentSize: aclBufferSize, pool: &fragmentPool) { packet in
            enqueueACL(packet, handle: c.handle, into: &batch)
        }
    }

    /// The ACL packets that carry `payload` as one L2CAP basic frame (Vol 3 Part A §3.1) to `handle`, in
    /// fragments of at most `fragmentSize` octets (Vol 4 Part E §5.4.2: first non-flushable, then continuing),
    /// each built straight from the payload: one array per packet (from `pool`, see the second form), no
    /// intermediate frame or fragment list.
    static func forEachACLPacket(
        carrying payload: [UInt8], cid: L2CAPChannelID, handle: UInt16, fragmentSize: Int,
        _ body: (HCIPacket) -> Void
    ) {
        var pool = HCIPacketBufferPool()
        forEachACLPacket(carrying: payload, cid: cid, handle: handle, fragmentSize: fragmentSize, pool: &pool, body)
    }

    /// `forEachACLPacket`, building each packet in an array of `pool` (the host's, whose arrays come back once
    /// the transport has written them: no allocation or free per fragment).
    static func forEachACLPacket(
        carrying payload: [UInt8], cid: L2CAPChannelID, handle: UInt16, fragmentSize: Int,
        pool: inout HCIPacketBufferPool, _ body: (HCIPacket) -> Void
    ) {
        guard fragmentSize >= 4 else {
            // A controller with buffers smaller than an L2CAP header: the general fragmenter copes.
            for f in L2CAPFragmenter.fragment(payload, channelID: cid, maximumFragmentSize: fragmentSize) {
                body(ACLPacket(handle: handle, boundary: f.boundary == .first ? .firstNonFlushable : .continuing, data: f.bytes).encode())
            }
            return
        }
        precondition(payload.count <= 0xFFFF, "an L2CAP frame carries at most 65535 octets")
        let frameLength = payload.count + 4
        var sent = 0   // octets of the frame (header included) already placed
        while sent < frameLength {
            let n = min(fragmentSize, frameLength - sent)
            let flags: UInt16 = sent == 0 ? UInt16(ACLPacketBoundary.firstNonFlushable.rawValue) : UInt16(ACLPacketBoundary.continuing.rawValue)
            let first = (handle & 0x0FFF) | flags << 12
            // Where this fragment's payload octets start in the packet, and in the payload.
            let head = sent == 0 ? 8 : 4
            let from = sent == 0 ? 0 : sent - 4
            let to = sent + n - 4
            let b = pool.make(count: 4 + n) { out in
                out[0] = UInt8(first & 0xFF); out[1] = UInt8(first >> 8)
                out[2] = UInt8(n & 0xFF); out[3] = UInt8(n >> 8)
                if sent == 0 {
                    out[4] = UInt8(payload.count & 0xFF); out[5] = UInt8(payload.count >> 8)
                    out[6] = UInt8(cid.rawValue & 0xFF); out[7] = UInt8(cid.rawValue >> 8)
                }
                if to > from {
                    payload.withUnsafeBytes { src in
                        UnsafeMutableRawBufferPointer(rebasing: out[head...]).copyMemory(from: UnsafeRawBufferPointer(rebasing: src[from..<to]))
                    }
                }
            }
            sent += n
            body(HCIPacket(type: .acl, bytes: b))
        }
    }

    /// Sends at once while buffer credits last (collecting into `batch`), else queues behind the waiting ones.
    func enqueueACL(_ packet: HCIPacket, handle: UInt16, into batch: inout [HCIPacket]) {
        if aclCredits > 0 && aclWaiting.isEmpty {
            aclCredits -= 1
            aclSent(1, on: handle)
            batch.append(packet)
        } else {
            if aclWaiting.isEmpty { transport.hostBacklogChanged(true) }
            aclWaiting.append((handle, .packet(packet)))
            aclWaitingPackets += 1
        }
    }

    /// L2CAP frames wait whole and are cut as credits free up (`queueFrame`): over a transport that takes H4 bytes,
    /// while HCI packets are not traced (their log shows packets), and with buffers that hold an L2CAP header.
    var cutsFramesNow: Bool { cutsFramesLate && !loggers.hciTraces && aclBufferSize >= 4 }

    /// Queues `payload` as one L2CAP basic frame to `cid` on `handle`, to be cut into fragments as credits free up
    /// (`cutsFramesLate`), and sends what credits let go now.
    func queueFrame(_ payload: [UInt8], cid: UInt16, handle: UInt16) {
        precondition(payload.count <= 0xFFFF, "an L2CAP frame carries at most 65535 octets")
        let frame = WaitingACL.Frame(payload: payload, cid: cid, fragmentSize: aclBufferSize)
        let wasEmpty = aclWaiting.isEmpty
        aclWaiting.append((handle, .frame(frame)))
        aclWaitingPackets += frame.fragmentsLeft
        sendWaitingACL()
        if wasEmpty && !aclWaiting.isEmpty { transport.hostBacklogChanged(true) }
    }

    /// Sends what waits while credits last: packets as they are, frames cut into fragments. Over a transport that
    /// takes H4 bytes, every fragment is written straight into one buffer: no packet, no array per fragment.
    func sendWaitingACL() {
        guard aclCredits > 0, !aclWaiting.isEmpty else { return }
        if cutsFramesNow {
            // The buffer is kept from send to send with its octets (only `used` of them count): no zeroing or
            // growing once it is large enough.
            var bytes = h4Scratch
            h4Scratch = []
            var used = 0
            var packets = 0
            takeWaitingACL(
                packet: { p in
                    WaitingACL.makeRoom(1 + p.bytes.count, in: &bytes, after: used)
                    bytes[used] = p.type.rawValue
                    bytes.withUnsafeMutableBytes { o in
                        p.bytes.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: o[used + 1..<used + 1 + $0.count]).copyMemory(from: $0) }
                    }
                    used += 1 + p.bytes.count
                    packets += 1
                    if recyclesSentPackets { fragmentPool.recycle(p.bytes) }
                },
                frame: { n, handle, item in
                    packets += n
                    return item.cut(n, handle: handle, into: &bytes, at: &used)
                })
            bytes.withUnsafeBytes { transport.send(h4: UnsafeRawBufferPointer(rebasing: $0[0..<used]), packets: packets) }
            h4Scratch = bytes
            return
        }
        // The array of the last batch is reused: no allocation for every Number Of Completed Packets.
        var batch = spareCreditBatch
        spareCreditBatch = []
        takeWaitingACL(
            packet: { batch.append($0) },
            frame: { n, handle, item in
                // Frames wait whole only over a transport that takes bytes; traced (or queued before tracing began),
                // they are cut into packets here.
                var cut: [UInt8] = []
                let done = item.cut(n, handle: handle, into: &cut)
                var framer = H4Framer()
                framer.append(cut)
                while let p = try? framer.nextPacket() { batch.append(p) }
                return done
            })
        sendBatch(batch)
        if recyclesSentPackets { fragmentPool.recycle(batch) }
        batch.removeAll(keepingCapacity: true)
        spareCreditBatch = batch
    }

    /// Takes from the waiting queue, in order, what credits let go, counting each packet in flight: `packet` gets
    /// each waiting packet; `frame` gets how many fragments of a waiting frame to cut now, and the frame, and says
    /// whether it is all cut.
    private func takeWaitingACL(packet: (HCIPacket) -> Void, frame: (Int, UInt16, inout WaitingACL) -> Bool) {
        while aclCredits > 0, !aclWaiting.isEmpty {
            let handle = aclWaiting.front.handle
            let n: Int
            switch aclWaiting.front.item {
            case .packet(let p):
                _ = aclWaiting.popFirst()
                n = 1
                packet(p)
            case .frame:
                n = min(aclCredits, aclWaiting.front.item.fragmentsLeft)
                if frame(n, handle, &aclWaiting.front.item) { _ = aclWaiting.popFirst() }
            }
            aclCredits -= n
            aclWaitingPackets -= n
            aclSent(n, on: handle)
        }
    }

    /// The fragments of one PDU (or the packets freed credits let go) go to the transport together; a
    /// stream transport gathers everything of one loop turn into one write anyway.
    func sendBatch(_ batch: [HCIPacket]) {
        if loggers.hciTraces { for p in batch { loggers.hci.trace("packet out", metadata: p.logMetadata) } }
        if batch.count == 1 { transport.send(batch[0]) } else if !batch.isEmpty { transport.send(batch: batch) }
    }

    func packetsCompleted(handle: UInt16, count: Int) {
        aclCredits += aclInFlight.completed(count, on: handle)
        publishACLTally()
    }
    /// `n` more ACL packets of `handle` handed to the transport: in flight, and counted as sent in the tally (what
    /// is done does not change).
    @inline(__always) func aclSent(_ n: Int, on handle: UInt16) {
        aclInFlight.sent(n, on: handle)
        aclSentTotal &+= n
        aclTallySent.store(aclSentTotal, ordering: .relaxed)
    }
    /// Publishes what is done after packets in flight were completed or dropped (`aclPacketTally`; `aclSent` keeps
    /// the sent count current).
    func publishACLTally() {
        aclTallyDone.store(aclSentTotal &- aclInFlight.total, ordering: .relaxed)
    }

    /// Sends waiting fragments while credits last, then tells writers who were refused that room is back.
    func aclCreditsFreed() {
        if spendsFreedCreditsLater {
            creditsFreedMeanwhile = true
            return
        }
        let hadBacklog = !aclWaiting.isEmpty
        if hadBacklog { sendWaitingACL() }
        if hadBacklog && aclWaiting.isEmpty { transport.hostBacklogChanged(false) }
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
        let hadBacklog = !aclWaiting.isEmpty
        aclWaiting.removeAll { $0.handle == handle }
        aclWaitingPackets = aclWaiting.reduce(0) { $0 + $1.item.fragmentsLeft }
        if hadBacklog && aclWaiting.isEmpty { transport.hostBacklogChanged(false) }
    }
}

/// What waits for a controller buffer: an ACL packet, or an L2CAP basic frame (Vol 3 Part A §3.1) cut into
/// fragments only as buffers free up (over a transport that takes H4 bytes, see `LEHost.cutsFramesLate`).
enum WaitingACL {
    case packet(HCIPacket)
    case frame(Frame)

    struct Frame {
        /// The frame's information payload, and the channel it goes to.
        let payload: [UInt8]
        let cid: UInt16
        /// The controller's buffer size: the largest fragment.
        let fragmentSize: Int
        /// Octets of the frame (its 4-octet header included) already cut.
        var cut = 0

        init(payload: [UInt8], cid: UInt16, fragmentSize: Int) {
            self.payload = payload
            self.cid = cid
            self.fragmentSize = fragmentSize
        }

        var fragmentsLeft: Int { (payload.count + 4 - cut + fragmentSize - 1) / fragmentSize }
    }

    /// ACL packets it still makes.
    var fragmentsLeft: Int {
        switch self {
        case .packet: return 1
        case .frame(let f): return f.fragmentsLeft
        }
    }

    /// Appends the next `count` fragments of a frame to `out` as H4 ACL packets; returns true once the frame is
    /// all cut. Only for `.frame`.
    mutating func cut(_ count: Int, handle: UInt16, into out: inout [UInt8]) -> Bool {
        var used = out.count
        let done = cut(count, handle: handle, into: &out, at: &used)
        out.removeLast(out.count - used)
        return done
    }

    /// Makes `out` hold at least `octets` more after its first `used` (doubling, so that a buffer kept from send
    /// to send soon stops growing).
    static func makeRoom(_ octets: Int, in out: inout [UInt8], after used: Int) {
        let need = used + octets
        if out.count < need { out.append(contentsOf: repeatElement(0, count: max(need, 2 * out.count) - out.count)) }
    }

    /// Writes the next `count` fragments of a frame into `out` from `used` on (moving `used` past them) as H4 ACL
    /// packets (Vol 4 Part E §5.4.2: first non-flushable, then continuing); returns true once the frame is all cut.
    /// Only for `.frame`.
    mutating func cut(_ count: Int, handle: UInt16, into out: inout [UInt8], at used: inout Int) -> Bool {
        guard case .frame(var f) = self else { preconditionFailure("only a frame is cut") }
        // (The frame is taken out while it is cut, so that its payload is not copied on write.)
        self = .packet(HCIPacket(type: .acl, bytes: []))
        let frameLength = f.payload.count + 4
        // The octets the fragments take (frame octets and a 5-octet H4 ACL header each), made room for at once and
        // written in place: appending them one by one cost more than the rest of the send.
        let fragments = min(count, f.fragmentsLeft)
        let octets = min(frameLength - f.cut, fragments * f.fragmentSize) + 5 * fragments
        Self.makeRoom(octets, in: &out, after: used)
        let start = used
        used += octets
        f.payload.withUnsafeBytes { payload in
            out.withUnsafeMutableBytes { o in
                // Raw stores and one copy per fragment (bounds made room for above): indexing and slicing the
                // buffers, each with its own check, cost twice the instructions.
                let to = o.baseAddress! + start
                var at = 0
                for _ in 0..<fragments {
                    let n = min(f.fragmentSize, frameLength - f.cut)
                    let flags = f.cut == 0 ? ACLPacketBoundary.firstNonFlushable.rawValue : ACLPacketBoundary.continuing.rawValue
                    to.storeBytes(of: HCIPacketType.acl.rawValue, toByteOffset: at, as: UInt8.self)
                    to.storeBytes(of: ((handle & 0x0FFF) | UInt16(flags) << 12).littleEndian, toByteOffset: at + 1, as: UInt16.self)
                    to.storeBytes(of: UInt16(n).littleEndian, toByteOffset: at + 3, as: UInt16.self)
                    at += 5
                    var from = f.cut - 4
                    if f.cut == 0 {
                        to.storeBytes(of: UInt16(f.payload.count).littleEndian, toByteOffset: at, as: UInt16.self)
                        to.storeBytes(of: f.cid.littleEndian, toByteOffset: at + 2, as: UInt16.self)
                        at += 4
                        from = 0
                    }
                    let end = f.cut + n - 4
                    if end > from {
                        (to + at).copyMemory(from: payload.baseAddress! + from, byteCount: end - from)
                        at += end - from
                    }
                    f.cut += n
                }
            }
        }
        let done = f.cut >= frameLength
        self = .frame(f)
        return done
    }
}
