// One pairing on one link, as an explicit state machine (Vol 3 Part H §2.3, §3). It does no I/O: the host
// feeds it SMP PDUs, the user's answers, encryption changes and the 30-second timeout, and carries out the
// actions it returns (send a PDU, start encryption, prompt the user, restart the timer, report the result).
//
// Phase 1 is the feature exchange, phase 2 the key generation — LE legacy pairing (TK → confirm/random →
// STK) or LE Secure Connections (P-256 public keys → authentication stage 1 → DHKey check → LTK) — and
// phase 3 the key distribution over the encrypted link, responder first.
import BLEWire
import BLECrypto

/// Our P-256 key pair for Secure Connections; kept by the host so that OOB data stays valid across pairings.
public struct SMPKeyPair: Sendable {
    /// Most significant octet first, as the P-256 functions take them.
    public let privateKey: [UInt8]
    public let x: [UInt8], y: [UInt8]

    public init(privateKey: [UInt8]) throws {
        self.privateKey = privateKey
        (x, y) = try SMPCrypto.publicKey(privateKey: privateKey)
    }

    public static func generate() -> SMPKeyPair {
        while true {
            if let k = try? SMPKeyPair(privateKey: SMPCrypto.generatePrivateKey()) { return k }
        }
    }

    /// Our out-of-band data for Secure Connections: r and C = f4(PKx, PKx, r, 0), least significant first.
    public func oobData(random r: [UInt8]) throws -> SecureConnectionsOOBData {
        let c = try SMPCrypto.f4(u: x, v: x, x: r.reversed(), z: 0)
        return SecureConnectionsOOBData(random: r, confirm: c.reversed())
    }
}

public final class SMPSession: @unchecked Sendable {   // confined to its host's loop
    public enum Role: Sendable { case initiator, responder }

    public enum Action: Sendable, Equatable {
        case send([UInt8])
        /// (Re)start the 30-second SMP timer; `stopTimer` cancels it.
        case restartTimer
        case stopTimer
        case prompt(PairingPrompt)
        /// Initiator: encrypt the link with this key (HCI LE Enable Encryption), least significant octet first.
        case startEncryption(key: [UInt8], ediv: UInt16, rand: UInt64)
        case completed(PairingResult)
        case failed(PairingError)
    }

    enum Phase: Equatable {
        case idle, waitResponse, waitAcceptance, waitPublicKey, waitConfirm, waitRandom, waitDHKeyCheck
        case waitEncryption, keyDistribution, complete, failed
    }

    public let role: Role
    public let configuration: SMPConfiguration
    let identity: SMPLocalIdentity?
    let keyPair: SMPKeyPair
    let initiatorAddress: BluetoothAddress
    let responderAddress: BluetoothAddress
    let random: (Int) -> [UInt8]

    private(set) var phase: Phase = .idle
    public var isFinished: Bool { phase == .complete || phase == .failed }
    public var isInProgress: Bool { phase != .idle && !isFinished }

    // Phase 1.
    var preq: [UInt8] = [], pres: [UInt8] = []
    var requestFeatures: PairingFeatures?
    var responseFeatures: PairingFeatures?
    public private(set) var secureConnections = false
    public private(set) var method: PairingMethod = .justWorks
    public private(set) var keySize: UInt8 = 16
    var pendingPrompt: PairingPrompt?

    // Legacy (values most significant octet first).
    var tk: [UInt8]?
    var localRandom: [UInt8] = []
    var peerRandom: [UInt8] = []
    var peerConfirm: [UInt8]?
    var stk: [UInt8] = []

    // Secure Connections.
    var peerX: [UInt8] = [], peerY: [UInt8] = []
    var dhKey: [UInt8] = []
    var passkey: UInt32?
    var passkeyRound = 0
    var na: [UInt8] = [], nb: [UInt8] = []
    var numberConfirmed = false
    var peerDHKeyCheck: [UInt8]?
    var macKey: [UInt8] = [], ltk: [UInt8] = []

    // Phase 3.
    var expectedKeys: [SMPCode] = []
    var keys = PairingKeys()
    /// The key the controller encrypts with now (STK or LTK), least significant octet first.
    public private(set) var encryptionKey: [UInt8]?

    public init(
        role: Role, configuration: SMPConfiguration, identity: SMPLocalIdentity?, keyPair: SMPKeyPair,
        initiatorAddress: BluetoothAddress, responderAddress: BluetoothAddress,
        random: @escaping (Int) -> [UInt8] = SMPSession.systemRandom
    ) {
        self.role = role
        self.configuration = configuration
        self.identity = identity
        self.keyPair = keyPair
        self.initiatorAddress = initiatorAddress
        self.responderAddress = responderAddress
        self.random = random
    }

    public static func systemRandom(_ n: Int) -> [UInt8] {
        var g = SystemRandomNumberGenerator()
        return (0..<n).map { _ in UInt8.random(in: 0...255, using: &g) }
    }

    private struct Failure: Error { let reason: PairingFailureReason }

    // MARK: Inputs

    /// Initiator: sends the Pairing Request.
    public func start() -> [Action] {
        guard role == .initiator, phase == .idle else { return [] }
        let c = configuration
        let f = PairingFeatures(
            ioCapability: c.ioCapability, oobDataPresent: hasPeerOOBData,
            authRequirements: c.authRequirements, maximumKeySize: c.maximumKeySize,
            initiatorKeys: c.bondable ? c.keysToDistribute : [], responderKeys: c.bondable ? c.keysToRequest : [])
        requestFeatures = f
        let pdu = SMPPDU.pairingRequest(f).encode()
        preq = pdu
        phase = .waitResponse
        return [.send(pdu), .restartTimer]
    }

    /// An SMP PDU from the peer.
    public func receive(_ bytes: [UInt8]) -> [Action] {
        guard !isFinished else { return [] }
        let pdu: SMPPDU
        do {
            pdu = try SMPPDU.decode(bytes)
        } catch {
            return fail(error.failureReason)
        }
        if case let .pairingFailed(reason) = pdu {
            phase = .failed
            return [.stopTimer, .failed(.remote(reason))]
        }
        if case .keypressNotification = pdu { return [.restartTimer] }
        do {
            return [.restartTimer] + (try handle(pdu))
        } catch let f as Failure {
            return fail(f.reason)
        } catch {
            return fail(.unspecifiedReason)
        }
    }

    /// The user's yes or no to `acceptPairing` or `confirmNumber`.
    public func accept(_ yes: Bool) -> [Action] {
        guard let p = pendingPrompt else { return [] }
        do {
            switch p {
            case .acceptPairing:
                pendingPrompt = nil
                guard yes else { return fail(.pairingNotSupported) }
                return try sendResponse()
            case .confirmNumber:
                pendingPrompt = nil
                guard yes else { return fail(.numericComparisonFailed) }
                numberConfirmed = true
                return try afterNumberConfirmed()
            default:
                return []
            }
        } catch let f as Failure {
            return fail(f.reason)
        } catch {
            return fail(.unspecifiedReason)
        }
    }

    /// The passkey the user typed, or nil when they cancelled.
    public func enterPasskey(_ value: UInt32?) -> [Action] {
        guard pendingPrompt == .enterPasskey else { return [] }
        pendingPrompt = nil
        guard let value, value <= 999_999 else { return fail(.passkeyEntryFailed) }
        passkey = value
        do {
            return try passkeyReady()
        } catch let f as Failure {
            return fail(f.reason)
        } catch {
            return fail(.unspecifiedReason)
        }
    }

    /// The controller reported an Encryption Change (or Key Refresh) on the link.
    public func encryptionChanged(success: Bool, status: UInt8 = 0) -> [Action] {
        guard phase == .waitEncryption else { return [] }
        guard success else {
            phase = .failed
            return [.stopTimer, .failed(.encryptionFailed(status))]
        }
        do {
            return try startKeyDistribution()
        } catch let f as Failure {
            return fail(f.reason)
        } catch {
            return fail(.unspecifiedReason)
        }
    }

    /// No SMP command for 30 seconds: pairing is over and no Pairing Failed is sent (Vol 3 Part H §3.4).
    public func timedOut() -> [Action] {
        guard isInProgress else { return [] }
        phase = .failed
        return [.failed(.timeout)]
    }

    /// The link closed.
    public func disconnected() -> [Action] {
        guard isInProgress else { return [] }
        phase = .failed
        return [.stopTimer, .failed(.disconnected)]
    }

    /// Ends pairing with Pairing Failed and the given reason (also for the host, e.g. repeated attempts).
    public func fail(_ reason: PairingFailureReason) -> [Action] {
        guard !isFinished else { return [] }
        phase = .failed
        return [.send(SMPPDU.pairingFailed(reason).encode()), .stopTimer, .failed(.local(reason))]
    }

    // MARK: Phase 1

    var hasPeerOOBData: Bool {
        configuration.peerOOB != nil || configuration.legacyOOBKey != nil
    }

    private func handle(_ pdu: SMPPDU) throws -> [Action] {
        switch (pdu, phase) {
        case let (.pairingRequest(f), .idle) where role == .responder: return try handleRequest(f, bytes: pdu.encode())
        case let (.pairingResponse(f), .waitResponse) where role == .initiator: return try handleResponse(f, bytes: pdu.encode())
        case let (.pairingPublicKey(x, y), .waitPublicKey): return try handlePublicKey(x: x, y: y)
        case let (.pairingConfirm(v), .waitConfirm): return try handleConfirm(Array(v.reversed()))
        case let (.pairingRandom(v), .waitRandom): return try handleRandom(Array(v.reversed()))
        case let (.pairingDHKeyCheck(v), .waitDHKeyCheck): return try handleDHKeyCheck(Array(v.reversed()))
        case (.encryptionInformation, .keyDistribution), (.centralIdentification, .keyDistribution),
            (.identityInformation, .keyDistribution), (.identityAddressInformation, .keyDistribution),
            (.signingInformation, .keyDistribution):
            return try handleKey(pdu)
        case (.securityRequest, _) where role == .initiator:
            return []   // pairing is already under way
        default:
            // A command that is not allowed now (Vol 3 Part H §3.3: unexpected → Unspecified Reason).
            throw Failure(reason: .unspecifiedReason)
        }
    }

    private func handleRequest(_ f: PairingFeatures, bytes: [UInt8]) throws -> [Action] {
        preq = bytes
        requestFeatures = f
        let c = configuration
        secureConnections = f.authRequirements.contains(.secureConnections) && c.secureConnections
        if c.secureConnectionsOnly && !secureConnections { throw Failure(reason: .authenticationRequirements) }
        keySize = min(f.maximumKeySize, c.maximumKeySize)
        if keySize < c.minimumKeySize { throw Failure(reason: .encryptionKeySize) }
        let bonding = f.authRequirements.wantsBonding && c.bondable
        let r = PairingFeatures(
            ioCapability: c.ioCapability, oobDataPresent: hasPeerOOBData, authRequirements: c.authRequirements,
            maximumKeySize: c.maximumKeySize,
            initiatorKeys: bonding ? f.initiatorKeys.intersection(c.keysToRequest) : [],
            responderKeys: bonding ? f.responderKeys.intersection(c.keysToDistribute) : [])
        responseFeatures = r
        method = PairingMethodSelection.method(initiator: f, responder: r, secureConnections: secureConnections)
        if method == .outOfBand && !secureConnections && c.legacyOOBKey == nil { throw Failure(reason: .oobNotAvailable) }
        if c.requireMITM && !method.isAuthenticated { throw Failure(reason: .authenticationRequirements) }
        if method == .justWorks {
            // Just Works has nothing to compare: the user (or the default agent) accepts the device.
            pendingPrompt = .acceptPairing
            phase = .waitAcceptance
            return [.prompt(.acceptPairing)]
        }
        return try sendResponse()
    }

    private func sendResponse() throws -> [Action] {
        guard let r = responseFeatures else { return [] }
        let pdu = SMPPDU.pairingResponse(r).encode()
        pres = pdu
        var out: [Action] = [.send(pdu)]
        if secureConnections {
            phase = .waitPublicKey
        } else {
            phase = .waitConfirm
            out += try prepareTemporaryKey()
        }
        return out
    }

    private func handleResponse(_ f: PairingFeatures, bytes: [UInt8]) throws -> [Action] {
        guard let req = requestFeatures else { throw Failure(reason: .unspecifiedReason) }
        pres = bytes
        responseFeatures = f
        let c = configuration
        // The responder may only narrow the key distribution we offered.
        guard f.initiatorKeys.isSubset(of: req.initiatorKeys), f.responderKeys.isSubset(of: req.responderKeys) else {
            throw Failure(reason: .invalidParameters)
        }
        secureConnections = f.authRequirements.contains(.secureConnections) && c.secureConnections
        if c.secureConnectionsOnly && !secureConnections { throw Failure(reason: .authenticationRequirements) }
        keySize = min(f.maximumKeySize, c.maximumKeySize)
        if keySize < c.minimumKeySize { throw Failure(reason: .encryptionKeySize) }
        method = PairingMethodSelection.method(initiator: req, responder: f, secureConnections: secureConnections)
        if method == .outOfBand && !secureConnections && c.legacyOOBKey == nil { throw Failure(reason: .oobNotAvailable) }
        if c.requireMITM && !method.isAuthenticated { throw Failure(reason: .authenticationRequirements) }
        if secureConnections {
            phase = .waitPublicKey
            return [.send(SMPPDU.pairingPublicKey(x: keyPair.x.reversed(), y: keyPair.y.reversed()).encode())]
        }
        phase = .waitConfirm
        return try prepareTemporaryKey()
    }

    // MARK: LE legacy pairing (§2.3.5.2–2.3.5.5)

    private var initiatorInputs: Bool {
        guard let i = requestFeatures, let r = responseFeatures else { return false }
        return PairingMethodSelection.passkeyInput(initiator: i.ioCapability, responder: r.ioCapability).initiatorInputs
    }

    private var responderInputs: Bool {
        guard let i = requestFeatures, let r = responseFeatures else { return false }
        return PairingMethodSelection.passkeyInput(initiator: i.ioCapability, responder: r.ioCapability).responderInputs
    }

    private var weInput: Bool { role == .initiator ? initiatorInputs : responderInputs }

    /// Sets up the passkey: shown by the displaying side (a random six-digit number), asked of the typing side.
    private func preparePasskey() -> [Action] {
        if weInput {
            pendingPrompt = .enterPasskey
            return [.prompt(.enterPasskey)]
        }
        let bytes = random(4)
        let v = (UInt32(bytes[0]) | UInt32(bytes[1]) << 8 | UInt32(bytes[2]) << 16 | UInt32(bytes[3]) << 24) % 1_000_000
        passkey = v
        return [.prompt(.displayPasskey(v))]
    }

    private func prepareTemporaryKey() throws -> [Action] {
        switch method {
        case .justWorks, .numericComparison:
            tk = [UInt8](repeating: 0, count: 16)
        case .outOfBand:
            guard let k = configuration.legacyOOBKey, k.count == 16 else { throw Failure(reason: .oobNotAvailable) }
            tk = k.reversed()
        case .passkeyEntry:
            let out = preparePasskey()
            if let p = passkey { tk = passkey128(p) }
            return out + (try legacyTKReady())
        }
        return try legacyTKReady()
    }

    private func passkey128(_ p: UInt32) -> [UInt8] {
        [UInt8](repeating: 0, count: 12) + [UInt8(p >> 24 & 0xFF), UInt8(p >> 16 & 0xFF), UInt8(p >> 8 & 0xFF), UInt8(p & 0xFF)]
    }

    /// Continues legacy pairing once the TK is known: the initiator sends Mconfirm; the responder answers
    /// a confirm that came while the user was still typing.
    private func legacyTKReady() throws -> [Action] {
        guard tk != nil else { return [] }
        if role == .initiator { return try sendLegacyConfirm() }
        if peerConfirm != nil {
            phase = .waitRandom
            return try sendLegacyConfirm()
        }
        return []
    }

    private func legacyConfirmValue(random r: [UInt8]) throws -> [UInt8] {
        guard let tk else { throw Failure(reason: .unspecifiedReason) }
        return try SMPCrypto.c1(
            k: tk, r: r, preq: preq.reversed(), pres: pres.reversed(),
            iat: initiatorAddress.type.isRandom ? 1 : 0, rat: responderAddress.type.isRandom ? 1 : 0,
            ia: initiatorAddress.bytes.reversed(), ra: responderAddress.bytes.reversed())
    }

    private func sendLegacyConfirm() throws -> [Action] {
        localRandom = random(16)
        let confirm = try legacyConfirmValue(random: localRandom)
        return [.send(SMPPDU.pairingConfirm(confirm.reversed()).encode())]
    }

    private func passkeyReady() throws -> [Action] {
        guard let p = passkey else { return [] }
        if !secureConnections {
            tk = passkey128(p)
            return try legacyTKReady()
        }
        // Secure Connections: the rounds begin once the public keys are exchanged.
        guard !dhKey.isEmpty else { return [] }
        if role == .initiator { return try sendPasskeyCommitment() }
        if peerConfirm != nil { return try sendPasskeyCommitment() }
        return []
    }

    private func handleConfirm(_ value: [UInt8]) throws -> [Action] {
        peerConfirm = value
        if secureConnections { return try handleSecureConfirm() }
        switch role {
        case .responder:
            // Mconfirm: answer with Sconfirm once our TK is known.
            guard tk != nil else { return [] }
            phase = .waitRandom
            return try sendLegacyConfirm()
        case .initiator:
            // Sconfirm: reveal Mrand.
            phase = .waitRandom
            return [.send(SMPPDU.pairingRandom(localRandom.reversed()).encode())]
        }
    }

    private func handleRandom(_ value: [UInt8]) throws -> [Action] {
        peerRandom = value
        if secureConnections { return try handleSecureRandom() }
        guard let peerConfirm, try legacyConfirmValue(random: value) == peerConfirm else { throw Failure(reason: .confirmValueFailed) }
        let (mrand, srand) = role == .initiator ? (localRandom, value) : (value, localRandom)
        guard let tk else { throw Failure(reason: .unspecifiedReason) }
        stk = mask(try SMPCrypto.s1(k: tk, r1: srand, r2: mrand))
        encryptionKey = stk.reversed()
        phase = .waitEncryption
        switch role {
        case .initiator: return [.startEncryption(key: stk.reversed(), ediv: 0, rand: 0)]
        case .responder: return [.send(SMPPDU.pairingRandom(localRandom.reversed()).encode())]
        }
    }

    /// Shortens a key (most significant octet first) to the negotiated size (Vol 3 Part H §2.3.4).
    private func mask(_ key: [UInt8]) -> [UInt8] {
        let drop = 16 - Int(keySize)
        return [UInt8](repeating: 0, count: drop) + key[drop...]
    }

    // MARK: LE Secure Connections (§2.3.5.6)

    private func handlePublicKey(x: [UInt8], y: [UInt8]) throws -> [Action] {
        peerX = x.reversed()
        peerY = y.reversed()
        // A key equal to ours is a reflection, and a point off the curve an invalid-curve attack: both fail.
        guard peerX != keyPair.x || peerY != keyPair.y, let dh = try? SMPCrypto.dhKey(privateKey: keyPair.privateKey, peerX: peerX, peerY: peerY) else {
            throw Failure(reason: .dhKeyCheckFailed)
        }
        dhKey = dh
        var out: [Action] = []
        if role == .responder {
            out.append(.send(SMPPDU.pairingPublicKey(x: keyPair.x.reversed(), y: keyPair.y.reversed()).encode()))
        }
        switch method {
        case .justWorks, .numericComparison:
            if role == .responder {
                nb = random(16)
                let cb = try SMPCrypto.f4(u: keyPair.x, v: peerX, x: nb, z: 0)
                out.append(.send(SMPPDU.pairingConfirm(cb.reversed()).encode()))
                phase = .waitRandom
            } else {
                na = random(16)
                phase = .waitConfirm
            }
        case .passkeyEntry:
            phase = .waitConfirm
            passkeyRound = 0
            out += preparePasskey()
            if role == .initiator, passkey != nil { out += try sendPasskeyCommitment() }
        case .outOfBand:
            if let peer = configuration.peerOOB {
                let c = try SMPCrypto.f4(u: peerX, v: peerX, x: peer.random.reversed(), z: 0)
                guard c == peer.confirm.reversed() else { throw Failure(reason: .confirmValueFailed) }
            }
            phase = .waitRandom
            if role == .initiator {
                na = random(16)
                out.append(.send(SMPPDU.pairingRandom(na.reversed()).encode()))
            }
        }
        return out
    }

    private var passkeyBit: UInt8 { 0x80 | UInt8(((passkey ?? 0) >> UInt32(passkeyRound)) & 1) }

    /// Passkey Entry round i: our commitment Cai = f4(PKax, PKbx, Nai, rai) or Cbi = f4(PKbx, PKax, Nbi, rbi).
    private func sendPasskeyCommitment() throws -> [Action] {
        localRandom = random(16)
        let c = try SMPCrypto.f4(u: keyPair.x, v: peerX, x: localRandom, z: passkeyBit)
        if role == .responder { phase = .waitRandom }
        return [.send(SMPPDU.pairingConfirm(c.reversed()).encode())]
    }

    private func handleSecureConfirm() throws -> [Action] {
        switch (method, role) {
        case (.justWorks, .initiator), (.numericComparison, .initiator):
            phase = .waitRandom
            return [.send(SMPPDU.pairingRandom(na.reversed()).encode())]
        case (.passkeyEntry, .initiator):
            phase = .waitRandom
            return [.send(SMPPDU.pairingRandom(localRandom.reversed()).encode())]
        case (.passkeyEntry, .responder):
            guard passkey != nil else { return [] }   // answered when the user has typed it
            return try sendPasskeyCommitment()
        default:
            throw Failure(reason: .unspecifiedReason)
        }
    }

    private func handleSecureRandom() throws -> [Action] {
        switch method {
        case .justWorks, .numericComparison:
            if role == .responder {
                na = peerRandom
                phase = .waitDHKeyCheck
                var out: [Action] = [.send(SMPPDU.pairingRandom(nb.reversed()).encode())]
                if method == .numericComparison {
                    pendingPrompt = .confirmNumber(try comparisonValue())
                    out.append(.prompt(.confirmNumber(try comparisonValue())))
                } else {
                    numberConfirmed = true
                }
                return out
            }
            nb = peerRandom
            guard let cb = peerConfirm, try SMPCrypto.f4(u: peerX, v: keyPair.x, x: nb, z: 0) == cb else {
                throw Failure(reason: .confirmValueFailed)
            }
            phase = .waitDHKeyCheck
            if method == .numericComparison {
                pendingPrompt = .confirmNumber(try comparisonValue())
                return [.prompt(.confirmNumber(try comparisonValue()))]
            }
            numberConfirmed = true
            return try sendInitiatorDHKeyCheck()
        case .passkeyEntry:
            guard let c = peerConfirm, try SMPCrypto.f4(u: peerX, v: keyPair.x, x: peerRandom, z: passkeyBit) == c else {
                throw Failure(reason: .confirmValueFailed)
            }
            peerConfirm = nil
            var out: [Action] = []
            if role == .responder { out.append(.send(SMPPDU.pairingRandom(localRandom.reversed()).encode())) }
            passkeyRound += 1
            guard passkeyRound == 20 else {
                phase = .waitConfirm
                if role == .initiator { out += try sendPasskeyCommitment() }
                return out
            }
            (na, nb) = role == .initiator ? (localRandom, peerRandom) : (peerRandom, localRandom)
            numberConfirmed = true
            phase = .waitDHKeyCheck
            if role == .initiator { out += try sendInitiatorDHKeyCheck() }
            return out
        case .outOfBand:
            numberConfirmed = true
            phase = .waitDHKeyCheck
            if role == .responder {
                na = peerRandom
                nb = random(16)
                return [.send(SMPPDU.pairingRandom(nb.reversed()).encode())]
            }
            nb = peerRandom
            return try sendInitiatorDHKeyCheck()
        }
    }

    /// Numeric Comparison: Va = g2(PKax, PKbx, Na, Nb) mod 10^6 (§2.3.5.6.2).
    private func comparisonValue() throws -> UInt32 {
        let (pka, pkb) = role == .initiator ? (keyPair.x, peerX) : (peerX, keyPair.x)
        return try SMPCrypto.g2(u: pka, v: pkb, x: na, y: nb) % 1_000_000
    }

    private func addressField(_ a: BluetoothAddress) -> [UInt8] { [a.type.isRandom ? 1 : 0] + a.bytes.reversed() }

    private func ioCapField(_ pdu: [UInt8]) -> [UInt8] { [pdu[3], pdu[2], pdu[1]] }   // AuthReq || OOB || IO

    /// Stage 2: MacKey and LTK from f5, and the DHKey checks Ea and Eb from f6 (§2.3.5.6.5).
    private func checkValues() throws -> (ea: [UInt8], eb: [UInt8]) {
        let a = addressField(initiatorAddress), b = addressField(responderAddress)
        (macKey, ltk) = try SMPCrypto.f5(w: dhKey, n1: na, n2: nb, a1: a, a2: b)
        let zero = [UInt8](repeating: 0, count: 16)
        var ra = zero, rb = zero
        switch method {
        case .passkeyEntry:
            ra = passkey128(passkey ?? 0)
            rb = ra
        case .outOfBand:
            // r of each side, as far as the other side received it out of band.
            let peerHasOurs = (role == .initiator ? responseFeatures : requestFeatures)?.oobDataPresent ?? false
            let ours = peerHasOurs ? configuration.localOOB.map { Array($0.random.reversed()) } ?? zero : zero
            let theirs = configuration.peerOOB.map { Array($0.random.reversed()) } ?? zero
            (ra, rb) = role == .initiator ? (ours, theirs) : (theirs, ours)
        default:
            break
        }
        let ea = try SMPCrypto.f6(w: macKey, n1: na, n2: nb, r: rb, ioCap: ioCapField(preq), a1: a, a2: b)
        let eb = try SMPCrypto.f6(w: macKey, n1: nb, n2: na, r: ra, ioCap: ioCapField(pres), a1: b, a2: a)
        return (ea, eb)
    }

    private func sendInitiatorDHKeyCheck() throws -> [Action] {
        let (ea, _) = try checkValues()
        return [.send(SMPPDU.pairingDHKeyCheck(ea.reversed()).encode())]
    }

    private func afterNumberConfirmed() throws -> [Action] {
        switch role {
        case .initiator: return try sendInitiatorDHKeyCheck()
        case .responder:
            guard let ea = peerDHKeyCheck else { return [] }
            return try answerDHKeyCheck(ea)
        }
    }

    private func handleDHKeyCheck(_ value: [UInt8]) throws -> [Action] {
        switch role {
        case .responder:
            peerDHKeyCheck = value
            guard numberConfirmed else { return [] }   // the user has not compared the numbers yet
            return try answerDHKeyCheck(value)
        case .initiator:
            let (_, eb) = try checkValues()
            guard value == eb else { throw Failure(reason: .dhKeyCheckFailed) }
            let key = mask(ltk)
            encryptionKey = key.reversed()
            phase = .waitEncryption
            return [.startEncryption(key: key.reversed(), ediv: 0, rand: 0)]
        }
    }

    private func answerDHKeyCheck(_ ea: [UInt8]) throws -> [Action] {
        let (expected, eb) = try checkValues()
        guard ea == expected else { throw Failure(reason: .dhKeyCheckFailed) }
        encryptionKey = mask(ltk).reversed()
        phase = .waitEncryption
        return [.send(SMPPDU.pairingDHKeyCheck(eb.reversed()).encode())]
    }

    // MARK: Phase 3: key distribution (§3.6)

    private func negotiated(_ k: KeyDistribution) -> KeyDistribution {
        // Under Secure Connections the LTK is derived, not sent; BR/EDR link keys are not ours to give.
        var k = k.intersection(.le)
        if secureConnections { k.remove(.encryptionKey) }
        return k
    }

    private var responderKeys: KeyDistribution { negotiated(responseFeatures?.responderKeys ?? []) }
    private var initiatorKeys: KeyDistribution { negotiated(responseFeatures?.initiatorKeys ?? []) }

    private func codes(for k: KeyDistribution) -> [SMPCode] {
        var c: [SMPCode] = []
        if k.contains(.encryptionKey) { c += [.encryptionInformation, .centralIdentification] }
        if k.contains(.identityKey) { c += [.identityInformation, .identityAddressInformation] }
        if k.contains(.signingKey) { c.append(.signingInformation) }
        return c
    }

    private func startKeyDistribution() throws -> [Action] {
        if secureConnections { keys.secureConnectionsLTK = .init(key: mask(ltk).reversed(), ediv: 0, rand: 0) }
        phase = .keyDistribution
        switch role {
        case .responder:
            let out = ourKeys(responderKeys)
            expectedKeys = codes(for: initiatorKeys)
            return out + (expectedKeys.isEmpty ? finish() : [])
        case .initiator:
            expectedKeys = codes(for: responderKeys)
            return expectedKeys.isEmpty ? ourKeys(initiatorKeys) + finish() : []
        }
    }

    private func ourKeys(_ k: KeyDistribution) -> [Action] {
        var pdus: [SMPPDU] = []
        if k.contains(.encryptionKey) {
            let key = Array(mask(random(16)).reversed())
            let r = random(10)
            let ediv = UInt16(r[0]) | UInt16(r[1]) << 8
            let rand = r[2...].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            keys.localLTK = .init(key: key, ediv: ediv, rand: rand)
            pdus += [.encryptionInformation(ltk: key), .centralIdentification(ediv: ediv, rand: rand)]
        }
        if k.contains(.identityKey) {
            let id = identity ?? SMPLocalIdentity(irk: [UInt8](repeating: 0, count: 16), address: role == .initiator ? initiatorAddress : responderAddress)
            pdus += [.identityInformation(irk: id.irk), .identityAddressInformation(id.address)]
        }
        if k.contains(.signingKey) {
            let csrk = random(16)
            keys.localCSRK = csrk
            pdus.append(.signingInformation(csrk: csrk))
        }
        return pdus.map { .send($0.encode()) }
    }

    private func handleKey(_ pdu: SMPPDU) throws -> [Action] {
        guard let next = expectedKeys.first, next == pdu.code else { throw Failure(reason: .unspecifiedReason) }
        expectedKeys.removeFirst()
        switch pdu {
        case let .encryptionInformation(ltk): keys.peerLTK = .init(key: ltk, ediv: 0, rand: 0)
        case let .centralIdentification(ediv, rand): keys.peerLTK?.ediv = ediv; keys.peerLTK?.rand = rand
        case let .identityInformation(irk): keys.peerIRK = irk
        case let .identityAddressInformation(a):
            // An identity address must be public or static random (Vol 3 Part H §3.6.5).
            if a.type.isRandom && a.bytes[5] >> 6 != 0b11 { throw Failure(reason: .invalidParameters) }
            keys.peerIdentityAddress = a
        case let .signingInformation(csrk): keys.peerCSRK = csrk
        default: break
        }
        guard expectedKeys.isEmpty else { return [] }
        if role == .initiator { return ourKeys(initiatorKeys) + finish() }
        return finish()
    }

    private func finish() -> [Action] {
        phase = .complete
        let bonded = (requestFeatures?.authRequirements.wantsBonding ?? false) && (responseFeatures?.authRequirements.wantsBonding ?? false)
        return [
            .stopTimer,
            .completed(
                PairingResult(
                    method: method, secureConnections: secureConnections, authenticated: method.isAuthenticated,
                    keySize: keySize, bonded: bonded, keys: keys)),
        ]
    }
}
