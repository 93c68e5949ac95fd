// Security: the Security Manager on L2CAP CID 0x0006, link encryption (LE Enable Encryption on the central,
// Long Term Key Request on the peripheral, Encryption Change / Key Refresh), bonds, and what the layers
// above see: the link's security level, pairing on demand and pairing prompts for an agent.
import BLEWire
import BLEHCI
import BLEL2CAP
import BLEATT
import BLEGATT
import BLESMP
import BLETransport

/// The security a link has now.
public struct LinkSecurity: Sendable, Hashable, CustomStringConvertible {
    public var encrypted = false
    /// The key came from an authenticated (MITM-protected) pairing.
    public var authenticated = false
    public var secureConnections = false
    public var keySize: UInt8 = 0
    public init(encrypted: Bool = false, authenticated: Bool = false, secureConnections: Bool = false, keySize: UInt8 = 0) {
        self.encrypted = encrypted
        self.authenticated = authenticated
        self.secureConnections = secureConnections
        self.keySize = keySize
    }
    public var description: String {
        guard encrypted else { return "not encrypted" }
        return "encrypted (\(authenticated ? "authenticated" : "unauthenticated"), \(secureConnections ? "Secure Connections" : "legacy"), \(keySize)-octet key)"
    }
}

/// An answer to a pairing prompt.
public enum PairingAnswer: Sendable, Hashable {
    case accept(Bool)
    /// The passkey typed, or nil when the user cancelled.
    case passkey(UInt32?)
}

/// Answers pairing prompts for the host; Linux has no system dialog. Called on the host's loop; answer from
/// any thread, now or later (pairing times out after 30 s without an answer).
public protocol PairingAgent: AnyObject, Sendable {
    /// What this agent can show and read (drives the choice of pairing method).
    var ioCapability: IOCapability { get }
    func pairing(_ connection: HostConnection, prompt: PairingPrompt, answer: @escaping @Sendable (PairingAnswer) -> Void)
}

/// The default agent: no display, no keyboard; accepts Just Works and nothing that needs a user.
public final class JustWorksAgent: PairingAgent {
    public init() {}
    public var ioCapability: IOCapability { .noInputNoOutput }
    public func pairing(_ connection: HostConnection, prompt: PairingPrompt, answer: @escaping @Sendable (PairingAnswer) -> Void) {
        switch prompt {
        case .acceptPairing: answer(.accept(true))
        case .confirmNumber: answer(.accept(false))
        case .enterPasskey: answer(.passkey(nil))
        case .displayPasskey: break
        }
    }
}

/// Things that happened to a link's security, for observers.
public enum HostSecurityEvent: Sendable {
    case encryptionChanged(LinkSecurity)
    case paired(PairingResult)
    case pairingFailed(PairingError)
    case bondRemoved(BluetoothAddress)
}

/// How the host pairs; the IO capability comes from the agent.
public struct HostSecurityConfiguration: Sendable {
    public var bondable = true
    public var secureConnections = true
    public var secureConnectionsOnly = false
    /// Set the MITM flag in pairing requests, as iOS does (the method still follows the IO capabilities).
    public var mitm = true
    /// Refuse pairings that cannot give MITM protection.
    public var requireMITM = false
    public var maximumKeySize: UInt8 = 16
    public var minimumKeySize: UInt8 = 7
    /// Legacy and Secure Connections out-of-band data for the next pairing.
    public var legacyOOBKey: [UInt8]?
    public var localOOB: SecureConnectionsOOBData?
    public var peerOOB: SecureConnectionsOOBData?
    /// First waiting time after a failed pairing before the same device may try again (doubles per failure).
    public var repeatedAttemptsInterval: LoopTime = .seconds(1)
    public var maximumRepeatedAttemptsInterval: LoopTime = .seconds(64)
    public init() {}
}

extension LEHost {
    // MARK: Public API

    /// Makes the link secure enough: encrypts with a stored bond, or pairs (as central), or asks the central to
    /// (Security Request, as peripheral). `mitm` asks for an authenticated key. `completion` runs on the loop.
    public func secure(_ c: HostConnection, mitm: Bool = false, completion: @escaping (Result<LinkSecurity, PairingError>) -> Void) {
        loop.assertInLoop()
        guard c.isOpen else { return completion(.failure(.disconnected)) }
        if c.security.encrypted && (c.security.authenticated || !mitm) && c.smp?.isInProgress != true {
            return completion(.success(c.security))
        }
        c.securityWaiters.append(completion)
        guard c.smp?.isInProgress != true, !c.encryptingWithBond else { return }   // the answer comes with what is under way
        switch c.role {
        case .central:
            if let bond = bondStore.bond(matching: c.peerAddress), let key = bond.centralKey, !c.security.encrypted,
                bond.authenticated || !mitm
            {
                startEncryption(c, key: key, bond: bond)
            } else {
                startPairing(c, mitm: mitm)
            }
        case .peripheral:
            // The same AuthReq as our Pairing Response will carry (MITM only when we can take part in an
            // authenticated method or insist on one: see SMPConfiguration.authRequirements).
            var auth = smpConfiguration(mitm: mitm).authRequirements
            auth.insert(.secureConnections)
            c.mitmRequested = mitm
            sendSMP(.securityRequest(auth), on: c)
        }
    }

    /// Pairs afresh even if a bond exists (as central); as peripheral, sends a Security Request.
    public func pair(_ c: HostConnection, mitm: Bool = false, completion: @escaping (Result<LinkSecurity, PairingError>) -> Void) {
        loop.assertInLoop()
        guard c.isOpen else { return completion(.failure(.disconnected)) }
        c.securityWaiters.append(completion)
        guard c.smp?.isInProgress != true else { return }
        if c.role == .central { startPairing(c, mitm: mitm) } else { c.securityWaiters.removeLast(); secure(c, mitm: mitm, completion: completion) }
    }

    /// Encryption Key Refresh on an encrypted link (central): the controller pauses and resumes encryption.
    public func refreshEncryption(_ c: HostConnection, completion: @escaping (Result<LinkSecurity, PairingError>) -> Void) {
        loop.assertInLoop()
        guard c.isOpen, c.role == .central, c.security.encrypted, let bond = bondStore.bond(matching: c.peerAddress), let key = bond.centralKey else {
            return completion(.failure(.encryptionFailed(HCIStatus.commandDisallowed.rawValue)))
        }
        c.securityWaiters.append(completion)
        startEncryption(c, key: key, bond: bond)
    }

    /// Forgets a bond (and disconnects the device if it is connected, as iOS's "Forget This Device" does not).
    @discardableResult
    public func removeBond(_ identity: BluetoothAddress) -> Bool {
        loop.assertInLoop()
        guard bondStore.remove(identity) else { return false }
        for (_, c) in connections where c.identityAddress.bytes == identity.bytes {
            securityEvent(c, .bondRemoved(identity))
        }
        return true
    }

    /// The identity of a device seen at `address`: a bonded device's identity address when its IRK resolves it.
    public func identity(of address: BluetoothAddress) -> BluetoothAddress {
        bondStore.bond(matching: address)?.identityAddress ?? address
    }

    // MARK: Pairing

    func smpConfiguration(mitm: Bool) -> SMPConfiguration {
        let s = securityConfiguration
        return SMPConfiguration(
            ioCapability: pairingAgent.ioCapability, bondable: s.bondable, mitm: mitm || s.mitm, requireMITM: mitm || s.requireMITM,
            secureConnections: s.secureConnections, secureConnectionsOnly: s.secureConnectionsOnly,
            maximumKeySize: s.maximumKeySize, minimumKeySize: s.minimumKeySize,
            legacyOOBKey: s.legacyOOBKey, localOOB: s.localOOB, peerOOB: s.peerOOB)
    }

    /// The address we show on links: our RPA while privacy is on, else the controller's public address.
    var ownLinkAddress: BluetoothAddress { currentPrivateAddress ?? localAddress }

    /// Our identity address: a static random address when the host uses one, else the public address.
    var localIdentity: SMPLocalIdentity { SMPLocalIdentity(irk: bondStore.localIRK, address: staticIdentityAddress ?? localAddress) }

    func makeSession(_ c: HostConnection, role: SMPSession.Role, mitm: Bool) -> SMPSession {
        let me = c.localLinkAddress
        return SMPSession(
            role: role, configuration: smpConfiguration(mitm: mitm), identity: localIdentity, keyPair: smpKeyPair,
            initiatorAddress: role == .initiator ? me : c.peerAddress,
            responderAddress: role == .initiator ? c.peerAddress : me)
    }

    /// True (and the pairing refused) while a device that failed pairing must wait (Vol 3 Part H §2.3.6).
    func mustWaitAfterFailures(_ c: HostConnection) -> Bool {
        guard let b = pairingBackoff[c.identityAddress.bytes] else { return false }
        return loop.now < b.until
    }

    func startPairing(_ c: HostConnection, mitm: Bool) {
        guard !c.smpTimedOut else {
            c.lastPairingError = .timeout
            return finishSecurity(c, .failure(.timeout))
        }
        if mustWaitAfterFailures(c) {
            c.lastPairingError = .local(.repeatedAttempts)
            return finishSecurity(c, .failure(.local(.repeatedAttempts)))
        }
        let s = makeSession(c, role: .initiator, mitm: mitm)
        c.smp = s
        perform(s.start(), session: s, on: c)
    }

    func handleSMP(_ bytes: [UInt8], on c: HostConnection) {
        if loggers.smpTraces {
            loggers.smp.trace(
                "PDU in", metadata: ["connection": "\(c.handle)", "code": "\(bytes.first.map { SMPCode(rawValue: $0).map { "\($0)" } ?? "0x\(String($0, radix: 16))" } ?? "none")"])
        }
        // After an SMP timeout nothing more is exchanged on this link (Vol 3 Part H §3.4).
        guard !c.smpTimedOut else { return }
        if let s = c.smp, s.isInProgress {
            return perform(s.receive(bytes), session: s, on: c)
        }
        guard let code = bytes.first else { return }
        switch (SMPCode(rawValue: code), c.role) {
        case (.pairingRequest?, .peripheral):
            let s = makeSession(c, role: .responder, mitm: c.mitmRequested)
            c.smp = s
            if mustWaitAfterFailures(c) { return perform(s.fail(.repeatedAttempts), session: s, on: c) }
            perform(s.receive(bytes), session: s, on: c)
        case (.securityRequest?, .central):
            // The peripheral asks for security: encrypt with the bond, or pair (Vol 3 Part H §2.4.6).
            // Its MITM flag is a wish: our request carries the flag, and the peripheral refuses a weaker pairing if it must.
            secure(c) { _ in }
        case (.pairingFailed?, _), (.keypressNotification?, _):
            break
        case (nil, _):
            sendSMP(.pairingFailed(.commandNotSupported), on: c)
        case (.pairingRequest?, .central), (.securityRequest?, .peripheral):
            // A role that cannot receive this command.
            sendSMP(.pairingFailed(.commandNotSupported), on: c)
        default:
            // Pairing commands outside a pairing.
            sendSMP(.pairingFailed(.unspecifiedReason), on: c)
        }
    }

    func perform(_ actions: [SMPSession.Action], session s: SMPSession, on c: HostConnection) {
        for a in actions {
            guard c.isOpen, c.smp === s else { return }
            switch a {
            case let .send(pdu):
                sendL2CAP(pdu, cid: .smp, on: c)
            case .restartTimer:
                loop.cancel(c.smpTimer)
                c.smpTimer = loop.schedule(after: .seconds(30)) { [weak self, weak c, weak s] in
                    guard let self, let c, let s, c.isOpen else { return }
                    c.smpTimer = nil
                    loggers.smp.notice("pairing timed out", metadata: ["connection": "\(c)"])
                    c.smpTimedOut = true
                    perform(s.timedOut(), session: s, on: c)
                }
            case .stopTimer:
                loop.cancel(c.smpTimer)
                c.smpTimer = nil
            case let .prompt(p):
                let agent = pairingAgent
                agent.pairing(c, prompt: p) { [weak self] answer in
                    guard let self else { return }
                    loop.execute { [self] in
                        guard c.isOpen, c.smp === s else { return }
                        switch answer {
                        case let .accept(yes): perform(s.accept(yes), session: s, on: c)
                        case let .passkey(v): perform(s.enterPasskey(v), session: s, on: c)
                        }
                    }
                }
            case let .startEncryption(key, ediv, rand):
                command(.leStartEncryption(handle: c.handle, random: rand, ediv: ediv, ltk: key)) { [weak self, weak c] r in
                    guard let self, let c else { return }
                    if case let .success(.status(st)) = r, st != .success {
                        perform(s.encryptionChanged(success: false, status: st.rawValue), session: s, on: c)
                    }
                }
            case let .completed(result):
                pairingCompleted(c, result: result)
            case let .failed(error):
                loggers.smp.notice("pairing failed", metadata: ["connection": "\(c)", "error": "\(error)"])
                switch error.reason {
                case .confirmValueFailed?, .dhKeyCheckFailed?, .passkeyEntryFailed?, .numericComparisonFailed?:
                    // Authentication failures make the device wait, longer each time (Vol 3 Part H §2.3.6).
                    let key = c.identityAddress.bytes
                    let previous = pairingBackoff[key]?.interval
                    let interval =
                        previous.map { min($0 * 2, securityConfiguration.maximumRepeatedAttemptsInterval) }
                        ?? securityConfiguration.repeatedAttemptsInterval
                    pairingBackoff[key] = (loop.now + interval, interval)
                default:
                    break
                }
                c.lastPairingError = error
                securityEvent(c, .pairingFailed(error))
                finishSecurity(c, .failure(error))
            }
        }
    }

    func pairingCompleted(_ c: HostConnection, result: PairingResult) {
        loggers.smp.debug(
            "paired",
            metadata: ["connection": "\(c)", "bonded": "\(result.bonded)", "authenticated": "\(result.authenticated)", "secure-connections": "\(result.secureConnections)"])
        pairingBackoff[c.identityAddress.bytes] = nil
        c.lastPairingError = nil
        if let id = result.keys.peerIdentityAddress { c.identityAddress = id }
        if result.bonded {
            let identity = result.keys.peerIdentityAddress ?? c.peerAddress
            var keys = result.keys
            keys.peerIdentityAddress = identity
            let seenAt = c.peerAddress.randomKind == .resolvablePrivate || c.peerAddress.bytes == identity.bytes ? [] : [c.peerAddress]
            bondStore.store(
                Bond(
                    identityAddress: identity, keys: keys, authenticated: result.authenticated,
                    secureConnections: result.secureConnections, keySize: result.keySize, otherAddresses: seenAt))
        }
        updateServerSecurity(c)
        securityEvent(c, .paired(result))
        finishSecurity(c, .success(c.security))
    }

    func finishSecurity(_ c: HostConnection, _ result: Result<LinkSecurity, PairingError>) {
        let waiters = c.securityWaiters
        c.securityWaiters.removeAll()
        for w in waiters { w(result) }
    }

    func securityEvent(_ c: HostConnection, _ e: HostSecurityEvent) {
        for (_, o) in securityObservers.sorted(by: { $0.key < $1.key }) { o(c, e) }
    }

    func sendSMP(_ pdu: SMPPDU, on c: HostConnection) { sendL2CAP(pdu.encode(), cid: .smp, on: c) }

    // MARK: Encryption

    func startEncryption(_ c: HostConnection, key: PairingKeys.LongTermKey, bond: Bond) {
        c.encryptingWithBond = true
        c.bondSecurity = LinkSecurity(encrypted: true, authenticated: bond.authenticated, secureConnections: bond.secureConnections, keySize: bond.keySize)
        command(.leStartEncryption(handle: c.handle, random: key.rand, ediv: key.ediv, ltk: key.key)) { [weak self, weak c] r in
            guard let self, let c else { return }
            if case let .success(.status(st)) = r, st != .success { encryptionFinished(c, status: st, enabled: false) }
        }
    }

    /// Peripheral: the controller asks for the key the central wants to encrypt with.
    func longTermKeyRequested(_ c: HostConnection, ediv: UInt16, rand: UInt64) {
        if let s = c.smp, s.isInProgress, let key = s.encryptionKey {
            return command(.leLongTermKeyRequestReply(handle: c.handle, ltk: key))
        }
        if let bond = bondStore.bond(matching: c.peerAddress), let key = bond.peripheralKey(ediv: ediv, rand: rand) {
            c.bondSecurity = LinkSecurity(encrypted: true, authenticated: bond.authenticated, secureConnections: bond.secureConnections, keySize: bond.keySize)
            c.encryptingWithBond = true
            return command(.leLongTermKeyRequestReply(handle: c.handle, ltk: key.key))
        }
        // No key: the central learns it from the Encryption Change (PIN or Key Missing) and may pair again.
        loggers.smp.notice("no long-term key for the peer; refusing encryption", metadata: ["peer": "\(c.peerAddress)", "ediv": "0x\(String(ediv, radix: 16))"])
        command(.leLongTermKeyRequestNegativeReply(handle: c.handle))
    }

    /// Encryption Change or Encryption Key Refresh Complete.
    func encryptionFinished(_ c: HostConnection, status: HCIStatus, enabled: Bool) {
        if let s = c.smp, s.isInProgress {
            if status == .success && enabled {
                c.security = LinkSecurity(encrypted: true, authenticated: s.method.isAuthenticated, secureConnections: s.secureConnections, keySize: s.keySize)
                updateServerSecurity(c)
                securityEvent(c, .encryptionChanged(c.security))
            }
            return perform(s.encryptionChanged(success: status == .success && enabled, status: status.rawValue), session: s, on: c)
        }
        let withBond = c.encryptingWithBond
        c.encryptingWithBond = false
        if status == .success && enabled {
            if withBond, let b = c.bondSecurity { c.security = b } else { c.security.encrypted = true }
            if let bond = bondStore.bond(matching: c.peerAddress) { c.identityAddress = bond.identityAddress }
            updateServerSecurity(c)
            securityEvent(c, .encryptionChanged(c.security))
            finishSecurity(c, .success(c.security))
            return
        }
        if status == .success && !enabled {
            c.security = LinkSecurity()
            updateServerSecurity(c)
            return
        }
        // The peer refused our stored key: PIN or Key Missing (the LTK Negative Reply of a peer that removed its
        // pairing information; rootcanal reports Authentication Failure for it) or a MIC failure (it holds
        // another key). iOS does not pair again on its own, which would let any device claiming the address
        // replace the bond: the link is dropped with PIN or Key Missing as its reason
        // (CBError.peerRemovedPairingInformation) and the bond stays until the user forgets the device.
        if withBond && c.role == .central
            && (status == .pinOrKeyMissing || status == .authenticationFailure || status == .connectionTerminatedMICFailure)
        {
            loggers.smp.notice(
                "the peer refused our stored key: it removed its pairing information; forget the bond to pair again",
                metadata: ["peer": "\(c.peerAddress)", "status": "\(status)"])
            finishSecurity(c, .failure(.encryptionFailed(HCIStatus.pinOrKeyMissing.rawValue)))
            if c.isOpen {
                c.closeReasonOverride = .pinOrKeyMissing
                c.disconnect(reason: .authenticationFailure)
            }
            return
        }
        loggers.smp.notice("encryption failed", metadata: ["peer": "\(c.peerAddress)", "status": "\(status)", "with-bond": "\(withBond)"])
        finishSecurity(c, .failure(.encryptionFailed(status.rawValue)))
    }

    func updateServerSecurity(_ c: HostConnection) {
        let s = c.security
        let bonded = bondStore.bond(matching: c.peerAddress) != nil
        gattServer.updateSecurity(
            ATTSecurity(encrypted: s.encrypted, authenticated: s.authenticated, keySize: s.keySize, hasLongTermKey: bonded),
            bonded: bonded, for: c.clientID)
    }
}
