// HCI events: command answers, connection lifecycle, advertising reports, buffer credits.
import BLEWire
import BLEHCI
import BLEGATT
import BLETransport
import BLEATT

extension LEHost {
    func handle(event: HCIEvent) {
        switch event {
        case let .commandComplete(credits, opcode, params):
            commandAnswered(opcode: opcode, credits: credits, outcome: .complete(params))
        case let .commandStatus(status, credits, opcode):
            commandAnswered(opcode: opcode, credits: credits, outcome: .status(status))
        case let .numberOfCompletedPackets(list):
            for e in list { packetsCompleted(handle: e.handle, count: Int(e.count)) }
            aclCreditsFreed()
        case let .disconnectionComplete(status, handle, reason):
            guard status == .success, let c = connections[handle] else { return }
            connectionClosed(c, reason: reason)
        case let .encryptionChange(status, handle, enabled):
            if let c = connections[handle] { encryptionFinished(c, status: status, enabled: enabled != 0) }
        case let .encryptionKeyRefreshComplete(status, handle):
            if let c = connections[handle] { encryptionFinished(c, status: status, enabled: true) }
        case let .hardwareError(code):
            // Vol 4 Part E §7.7.16: the controller failed and its state is gone. As BlueZ does, the host
            // starts it again: links are reported lost, managers see the power go off, then Reset and the
            // whole initialisation run again.
            loggers.hci.warning("controller hardware error; resetting the controller", metadata: ["code": "0x\(String(code, radix: 16))"])
            controllerLost(error: nil, finalState: .off)
            reconnectNow()
        case let .le(meta):
            handle(le: meta)
        default:
            loggers.hci.debug("unhandled event", metadata: ["event": "\(event)"])
        }
    }

    func handle(le event: LEMetaEvent) {
        switch event {
        case let .connectionComplete(e):
            connectionCompleted(
                status: e.status, handle: e.connectionHandle, role: e.role,
                peer: BluetoothAddress(bytes: e.peerAddress.bytes, type: AddressType(rawValue: e.peerAddressType) ?? .public),
                interval: e.connectionInterval, latency: e.peripheralLatency, timeout: e.supervisionTimeout)
        case let .enhancedConnectionComplete(e):
            connectionCompleted(
                status: e.status, handle: e.connectionHandle, role: e.role,
                peer: BluetoothAddress(bytes: e.peerAddress.bytes, type: AddressType(rawValue: e.peerAddressType) ?? .public),
                interval: e.connectionInterval, latency: e.peripheralLatency, timeout: e.supervisionTimeout)
        case let .advertisingReport(reports):
            if followedPrivateTarget != nil {
                for r in reports where r.eventType.rawValue <= 1 {   // ADV_IND, ADV_DIRECT_IND: connectable
                    followPrivateTarget(seenAt: BluetoothAddress(bytes: r.address.bytes, type: AddressType(rawValue: r.addressType) ?? .public))
                }
            }
            guard isScanning, let d = centralDelegate else { return }
            for r in reports {
                guard let kind = AdvertisingReport.Kind(rawValue: r.eventType.rawValue) else { continue }
                let addr = BluetoothAddress(bytes: r.address.bytes, type: AddressType(rawValue: r.addressType) ?? .public)
                d.host(self, didReceive: AdvertisingReport(kind: kind, address: addr, data: r.data, rssi: r.rssi))
            }
        case let .connectionUpdateComplete(e):
            if let c = connections[e.connectionHandle], e.status == .success {
                c.interval = e.connectionInterval
                c.latency = e.peripheralLatency
                c.supervisionTimeout = e.supervisionTimeout
            }
        case let .dataLengthChange(e):
            if let c = connections[e.connectionHandle] {
                c.maxTxOctets = e.maxTxOctets
                c.maxRxOctets = e.maxRxOctets
                loggers.gap.debug("data length changed", metadata: ["connection": "\(c)", "tx": "\(e.maxTxOctets)", "rx": "\(e.maxRxOctets)"])
            }
        case let .phyUpdateComplete(status, handle, tx, rx):
            if status == .success, let c = connections[handle] {
                c.txPHY = tx
                c.rxPHY = rx
                loggers.gap.debug("PHY changed", metadata: ["connection": "\(c)", "tx": "\(tx)", "rx": "\(rx)"])
            }
        case let .extendedAdvertisingReport(reports):
            handleExtendedReports(reports)
        case let .advertisingSetTerminated(e):
            // The set stopped: a connection was made (its LE Connection Complete came first and resumes
            // advertising if still wanted) or it ended by itself.
            if e.connectionHandle == 0 || connections[e.connectionHandle] == nil { isAdvertising = false }
            log("advertising set \(e.advertisingHandle) terminated (\(e.status))")
        case let .longTermKeyRequest(handle, random, ediv):
            if let c = connections[handle] { longTermKeyRequested(c, ediv: ediv, rand: random) } else { command(.leLongTermKeyRequestNegativeReply(handle: handle)) }
        default:
            break
        }
    }

    // MARK: Connections

    func connectionCompleted(
        status: HCIStatus, handle: UInt16, role: UInt8, peer: BluetoothAddress,
        interval: UInt16, latency: UInt16, timeout: UInt16
    ) {
        let asCentral = role == 0
        if asCentral {
            let failed = initiationEnded(status: status, peer: peer)
            guard status == .success else {
                for t in failed { centralDelegate?.host(self, didFailToConnectTo: t, status: status) }
                startNextConnect()
                return
            }
        } else {
            // A connection as peripheral ends legacy advertising in the controller (Vol 6 Part B §4.4.2).
            if status == .success { isAdvertising = false }
            guard status == .success else { return }
        }
        let c = HostConnection(
            handle: handle, role: asCentral ? .central : .peripheral, peerAddress: peer,
            localAddress: ownLinkAddress, interval: interval, latency: latency, timeout: timeout, host: self)
        connections[handle] = c
        rememberACLConnection(nil)
        loggers.gap.debug("connected", metadata: ["connection": "\(c)", "interval": "\(interval)"])
        aclInFlight.start(handle)
        publishACLTally()
        let bond = bondStore.bond(matching: peer)
        if let bond { c.identityAddress = bond.identityAddress }
        gattServer.clientConnected(
            GATTClientID(UInt64(handle)),
            security: ATTSecurity(hasLongTermKey: bond != nil), bonded: bond != nil)
        if asCentral {
            if requestsFastLinks { requestFastLink(c) }
            centralDelegate?.host(self, didConnect: c)
            startNextConnect()
        } else {
            peripheralDelegate?.host(self, didConnect: c)
            resumeAdvertisingIfWanted()
        }
    }

    func connectionClosed(_ c: HostConnection, reason given: HCIStatus) {
        guard c.isOpen else { return }
        let reason = c.closeReasonOverride ?? given
        loggers.gap.debug("disconnected", metadata: ["connection": "\(c)", "reason": "\(reason)"])
        c.isOpen = false
        connections[c.handle] = nil
        if lastACLConnection === c { rememberACLConnection(nil) }
        loop.cancel(c.attTimer)
        c.attTimer = nil
        // The controller frees the buffers of a closed link (Vol 4 Part E §4.3).
        if let n = aclInFlight.remove(c.handle) { aclCredits += n }
        publishACLTally()
        removeWaitingACL(for: c.handle)
        // Nor do its packets at our side get reported any more: the controller forgot them with the link.
        forgetHostCompletions(of: c)
        // Fail what the client was waiting for.
        let actions = c.gattClient.disconnected()
        perform(actions, on: c)
        for w in c.rssiWaiters { w(.failure(.invalidState("disconnected"))) }
        loop.cancel(c.smpTimer)
        c.smpTimer = nil
        if let s = c.smp { perform(s.disconnected(), session: s, on: c) }
        finishSecurity(c, .failure(.disconnected))
        c.rssiWaiters.removeAll()
        loop.cancel(c.confirmationTimer)
        c.confirmationTimer = nil
        perform(gattServer.clientDisconnected(c.clientID))
        channelsLinkClosed(c)
        switch c.role {
        case .central: centralDelegate?.host(self, didDisconnect: c, reason: reason)
        case .peripheral:
            peripheralDelegate?.host(self, didDisconnect: c, reason: reason)
            resumeAdvertisingIfWanted()
        }
        aclCreditsFreed()
    }

    /// Data Length Extension to 251 octets and LE 2M, when this controller supports them (the peer's
    /// controller negotiates: an older peer keeps 27 octets or LE 1M). Vol 4 Part E §7.8.33, §7.8.49.
    func requestFastLink(_ c: HostConnection) {
        // Gated on the feature bit and the supported-commands bit both: a 4.0 or 4.1 controller has neither.
        guard let info = controllerInfo else { return }
        if info.supportsDataLengthExtension {
            let octets = min(251, max(27, info.maxTxOctets ?? 251))
            setDataLength(handle: c.handle, octets: octets) { [self] e in if let e { log("data length not raised on \(c): \(e)") } }
        }
        if info.supportsLE2M {
            setPHY(handle: c.handle, phys: 0x02) { [self] e in if let e { log("LE 2M not set on \(c): \(e)") } }
        }
    }

    func mtuChanged(on c: HostConnection) {
        gattServer.updateMTU(c.attMTU, for: c.clientID)
        switch c.role {
        case .central: centralDelegate?.host(self, connection: c, didChangeMTU: c.attMTU)
        case .peripheral: peripheralDelegate?.host(self, connection: c, didChangeMTU: c.attMTU)
        }
    }

    /// Disconnects a link (Vol 4 Part E §7.1.6).
    public func disconnect(handle: UInt16, reason: HCIStatus = .remoteUserTerminated) {
        guard connections[handle] != nil else { return }
        command(.disconnect(handle: handle, reason: reason))
    }
}
