// L2CAP credit-based channels in the host: published SPSMs, opening channels (securing the link first when
// the peer asks for it, as ATT does), the signalling actions, and the K-frame pump that sends while the
// peer's credits and the controller's buffers allow.
import BLEWire
import BLEHCI
import BLEL2CAP
import BLETransport
import BLEGAP

/// A published SPSM: its policy and who takes the channels peers open to it.
struct L2CAPServer {
    var policy: L2CAPServerPolicy
    var accept: (HostL2CAPChannel) -> Void
}

extension LEHost {
    /// Dynamic SPSMs we hand out (Vol 3 Part A §4.22: 0x0080–0x00FF).
    public static let dynamicPSMs: ClosedRange<UInt16> = 0x0080...0x00FF

    /// Receive parameters for channels when the caller names none: K-frames that fill one controller
    /// buffer, SDUs of 2 KB, a 64 KB receive window.
    public var defaultChannelParameters: L2CAPChannelParameters {
        L2CAPChannelParameters(mtu: 2048, mps: UInt16(clamping: max(23, min(aclBufferSize - 4, 2048))), window: 64 * 1024)
    }

    /// Publishes an SPSM (`psm` nil picks a free dynamic one); `accept` gets each channel a peer opens to it.
    /// Returns the SPSM, or nil when it is taken or none is free.
    public func publishL2CAP(
        psm: UInt16? = nil, security: L2CAPSecurityRequirement = .none, parameters: L2CAPChannelParameters? = nil,
        accept: @escaping (HostL2CAPChannel) -> Void
    ) -> UInt16? {
        loop.assertInLoop()
        let chosen: UInt16
        if let psm {
            guard psm != 0, l2capServers[psm] == nil else { return nil }
            chosen = psm
        } else {
            guard let free = Self.dynamicPSMs.first(where: { l2capServers[$0] == nil }) else { return nil }
            chosen = free
        }
        l2capServers[chosen] = L2CAPServer(
            policy: L2CAPServerPolicy(security: security, parameters: parameters ?? defaultChannelParameters),
            accept: accept)
        return chosen
    }

    /// Stops accepting channels on `psm`; open channels stay open. False when it was not published.
    @discardableResult
    public func unpublishL2CAP(psm: UInt16) -> Bool {
        loop.assertInLoop()
        return l2capServers.removeValue(forKey: psm) != nil
    }

    func linkSecurity(_ c: HostConnection) -> L2CAPLinkSecurity {
        L2CAPLinkSecurity(encrypted: c.security.encrypted, authenticated: c.security.authenticated, keySize: c.security.keySize)
    }

    func handleSignaling(_ bytes: [UInt8], on c: HostConnection) {
        let servers = l2capServers
        perform(c.signaling.receive(bytes, security: linkSecurity(c), servers: { servers[$0]?.policy }), on: c)
    }

    /// Carries out what the link's signalling state returned.
    func perform(_ actions: [L2CAPSignalingState.Action], on c: HostConnection) {
        for action in actions {
            switch action {
            case let .send(pdu):
                sendL2CAP(pdu, cid: .leSignaling, on: c)
            case let .connectionParameterUpdateRequested(identifier, minInterval, maxInterval, latency, timeout):
                // As central we accept any request within the spec's ranges and ask the controller for it.
                let ok = ConnectionParameters.isValid(
                    minInterval: minInterval, maxInterval: maxInterval,
                    latency: latency, supervisionTimeout: timeout)
                sendL2CAP(
                    c.signaling.connectionParameterUpdateResponse(identifier: identifier, accepted: ok),
                    cid: .leSignaling, on: c)
                if ok {
                    command(
                        .leConnectionUpdate(
                            LEConnectionUpdate(
                                connectionHandle: c.handle, connectionIntervalMin: minInterval, connectionIntervalMax: maxInterval,
                                maxLatency: latency, supervisionTimeout: timeout, minCELength: 0, maxCELength: 0)))
                }
            case .connectionParameterUpdateResponse, .commandRejected:
                break
            case let .channel(a):
                perform(a, on: c)
            }
        }
        if !c.channelOpens.isEmpty { finishOpenIfComplete(c) }
    }

    func perform(_ a: L2CAPCreditChannels.Action, on c: HostConnection) {
        switch a {
        case let .sendSignal(pdu):
            sendL2CAP(pdu, cid: .leSignaling, on: c)
        case let .startTimer(id):
            loop.cancel(c.signalTimers[id])
            c.signalTimers[id] = loop.schedule(after: signalingTimeout) { [weak self, weak c] in
                guard let self, let c, c.isOpen else { return }
                c.signalTimers[id] = nil
                loggers.l2cap.notice("signalling request got no response", metadata: ["connection": "\(c)", "identifier": "\(id)"])
                perform(c.signaling.channelTimeout(identifier: id), on: c)
            }
        case let .stopTimer(id):
            loop.cancel(c.signalTimers.removeValue(forKey: id) ?? nil)
        case let .opened(cid, token):
            guard let psm = c.signaling.credit.channels[cid]?.psm else { return }
            let ch = HostL2CAPChannel(psm: psm, localCID: cid, connection: c)
            c.channels[cid] = ch
            if let token {
                c.channelOpens[token, default: (nil, [])].opened.append(ch)
            } else if let server = l2capServers[psm] {
                server.accept(ch)
            }
        case let .openFailed(token, failure):
            c.channelOpens[token, default: (nil, [])].failure = failure
        case let .received(cid, sdu):
            c.channels[cid]?.onReceive?(sdu)
        case let .canSend(cid):
            if let ch = c.channels[cid] { pump(ch, on: c) }
        case let .closed(cid, reason):
            guard let ch = c.channels.removeValue(forKey: cid) else { return }
            if case let .violation(why) = reason { loggers.l2cap.notice("channel closed: the peer broke the protocol", metadata: ["channel": "\(ch)", "error": "\(why)"]) }
            ch.isOpen = false
            ch.closeReason = reason
            channelsWaitingForBuffers.removeAll { $0 === ch }
            ch.onClose?(reason)
        case let .reconfigured(cids, result):
            loggers.l2cap.debug("channels reconfigured", metadata: ["connection": "\(c)", "cids": "\(cids)", "result": "\(result)"])
        }
    }

    /// The response to one `open` is complete once all its actions ran; hand the channels (or the failure) over.
    func finishOpenIfComplete(_ c: HostConnection) {
        for (token, state) in c.channelOpens {
            guard let completion = c.channelCompletions.removeValue(forKey: token) else { continue }
            c.channelOpens[token] = nil
            if state.opened.isEmpty {
                completion(.failure(.failed(state.failure ?? .refused(.noResources))))
            } else {
                completion(.success(state.opened))
            }
        }
    }

    /// Sends a channel's queued K-frames while credits and controller buffers last; a channel stopped by
    /// full buffers resumes when they free.
    func pump(_ ch: HostL2CAPChannel, on c: HostConnection) {
        guard c.isOpen, ch.isOpen else { return }
        let late = cutsFramesNow
        var batch: [HCIPacket] = []
        while hasRoomForUnacknowledgedData, let (remote, frame) = c.signaling.credit.nextFrame(on: ch.localCID) {
            // Each K-frame waits whole and is cut as credits free up (`queueFrame`), or is cut into packets now.
            if late {
                queueFrame(frame, cid: remote, handle: c.handle)
            } else {
                appendL2CAP(frame, cid: L2CAPChannelID(rawValue: remote), on: c, into: &batch)
            }
        }
        if !batch.isEmpty {
            sendBatch(batch)
            if recyclesSentPackets { fragmentPool.recycle(batch) }
        }
        if !hasRoomForUnacknowledgedData, let s = ch.counters, s.queuedFrames > 0, s.sendCredits > 0,
            !channelsWaitingForBuffers.contains(where: { $0 === ch })
        {
            channelsWaitingForBuffers.append(ch)
        }
        if ch.closing {
            if ch.counters?.queuedFrames == 0 { perform(c.signaling.disconnectChannel(ch.localCID), on: c) }
            return
        }
        if ch.wantsWritable, ch.isWritable {
            ch.wantsWritable = false
            ch.onWritable?()
        }
    }

    /// Controller buffers freed: channels that were waiting for them send again.
    func pumpChannelsWaitingForBuffers() {
        guard !channelsWaitingForBuffers.isEmpty else { return }
        let waiting = channelsWaitingForBuffers
        channelsWaitingForBuffers.removeAll()
        for ch in waiting {
            guard let c = ch.connection else { continue }
            pump(ch, on: c)
        }
    }

    func channelsLinkClosed(_ c: HostConnection) {
        for (_, t) in c.signalTimers { loop.cancel(t) }
        c.signalTimers.removeAll()
        perform(c.signaling.linkClosed(), on: c)
    }
}

extension HostConnection {
    /// Opens credit-based channels to `psm` on the peer: one with the LE Credit Based Connection Request, or
    /// `count` (1 to 5) with the Enhanced one. When the peer asks for authentication or encryption, the
    /// link is secured (bond or pairing) and the request made once more, as iOS does. `completion` runs on
    /// the loop with the channels that opened (the enhanced procedure may open fewer than asked).
    public func openL2CAPChannel(
        psm: UInt16, parameters: L2CAPChannelParameters? = nil, count: Int = 1, enhanced: Bool = false,
        completion: @escaping (Result<[HostL2CAPChannel], L2CAPOpenError>) -> Void
    ) {
        guard isOpen, let host else { return completion(.failure(.notConnected)) }
        guard (1...5).contains(count), count == 1 || enhanced, psm != 0 else {
            return completion(.failure(.failed(.refused(.invalidParameters))))
        }
        let p = parameters ?? host.defaultChannelParameters
        startOpen(psm: psm, parameters: p, count: count, enhanced: enhanced) { [weak self] result in
            guard let self, let host = self.host, host.pairsOnInsufficientSecurity, self.role == .central,
                case let .failure(.failed(.refused(r))) = result, r.asksForSecurity
            else { return completion(result) }
            let mitm = r == .insufficientAuthentication && self.security.encrypted
            host.secure(self, mitm: mitm) { [weak self] secured in
                guard let self else { return }
                switch secured {
                case .success: self.startOpen(psm: psm, parameters: p, count: count, enhanced: enhanced, completion: completion)
                case let .failure(e): completion(.failure(.pairingFailed("\(e)")))
                }
            }
        }
    }

    func startOpen(
        psm: UInt16, parameters: L2CAPChannelParameters, count: Int, enhanced: Bool,
        completion: @escaping (Result<[HostL2CAPChannel], L2CAPOpenError>) -> Void
    ) {
        guard isOpen, let host else { return completion(.failure(.notConnected)) }
        nextChannelToken += 1
        let token = nextChannelToken
        channelCompletions[token] = completion
        host.perform(signaling.openChannel(psm: psm, parameters: parameters, count: count, enhanced: enhanced, token: token), on: self)
    }

    /// The link's open credit-based channels.
    public var l2capChannels: [HostL2CAPChannel] { channels.values.sorted { $0.localCID < $1.localCID } }
}
