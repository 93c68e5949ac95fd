// Two SMP sessions talking to each other directly (no radio): every association model under LE legacy
// pairing and LE Secure Connections, the keys they agree on, and the failure paths with their reasons.
import Testing
import BLEWire
@testable import BLESMP
@testable import BLECrypto

/// Scripted user for one side.
struct ScriptedUser {
    var accept = true
    var confirm = true
    /// Passkey to type; nil types what the other side displayed; `cancel` cancels.
    var typed: UInt32? = nil
    var cancel = false
}

struct PairingRun {
    var initiator: SMPSession
    var responder: SMPSession
    var resultI: Result<PairingResult, PairingError>?
    var resultR: Result<PairingResult, PairingError>?
    var prompts: [(SMPSession.Role, PairingPrompt)] = []
    var sent: [(SMPSession.Role, SMPPDU)] = []
    var encryptionKeys: [[UInt8]] = []
}

let addrI = BluetoothAddress(string: "C0:11:22:33:44:55", type: .random)!
let addrR = BluetoothAddress(string: "00:1B:DC:07:32:EF", type: .public)!

/// Deterministic randomness so that runs are repeatable.
func counterRandom(seed: UInt8) -> (Int) -> [UInt8] {
    var n = seed
    return { count in
        (0..<count).map { _ in
            n &+= 37; return n
        }
    }
}

func runPairing(
    _ ci: SMPConfiguration, _ cr: SMPConfiguration, userI: ScriptedUser = .init(), userR: ScriptedUser = .init(),
    keyPairI: SMPKeyPair = SMPKeyPair.generate(), keyPairR: SMPKeyPair = SMPKeyPair.generate(),
    tamper: ((SMPSession.Role, [UInt8]) -> [UInt8]?)? = nil, encryptionWorks: Bool = true
) -> PairingRun {
    let i = SMPSession(
        role: .initiator, configuration: ci,
        identity: SMPLocalIdentity(irk: [UInt8](repeating: 0xA1, count: 16), address: BluetoothAddress(string: "C0:AA:AA:AA:AA:AA", type: .random)!),
        keyPair: keyPairI, initiatorAddress: addrI, responderAddress: addrR, random: counterRandom(seed: 1))
    let r = SMPSession(
        role: .responder, configuration: cr, identity: SMPLocalIdentity(irk: [UInt8](repeating: 0xB2, count: 16), address: addrR),
        keyPair: keyPairR, initiatorAddress: addrI, responderAddress: addrR, random: counterRandom(seed: 99))
    var run = PairingRun(initiator: i, responder: r)
    var queue: [(SMPSession.Role, SMPSession.Action)] = i.start().map { (.initiator, $0) }
    var displayed: UInt32?
    var deferredTyping: [(SMPSession.Role)] = []
    var steps = 0
    while steps < 10_000 {
        steps += 1
        if queue.isEmpty {
            // Typing waits until the other side has shown its passkey.
            guard let who = deferredTyping.first else { break }
            deferredTyping.removeFirst()
            let user = who == .initiator ? userI : userR
            let s = who == .initiator ? i : r
            let value: UInt32? = user.cancel ? nil : (user.typed ?? displayed ?? 123_456)
            queue += s.enterPasskey(value).map { (who, $0) }
            continue
        }
        let (from, action) = queue.removeFirst()
        let me = from == .initiator ? i : r
        let other = from == .initiator ? r : i
        let otherRole: SMPSession.Role = from == .initiator ? .responder : .initiator
        switch action {
        case let .send(bytes):
            if let pdu = try? SMPPDU.decode(bytes) { run.sent.append((from, pdu)) }
            guard let delivered = tamper.map({ $0(from, bytes) }) ?? bytes else { continue }
            queue += other.receive(delivered).map { (otherRole, $0) }
        case let .prompt(p):
            run.prompts.append((from, p))
            let user = from == .initiator ? userI : userR
            switch p {
            case .acceptPairing: queue += me.accept(user.accept).map { (from, $0) }
            case .confirmNumber: queue += me.accept(user.confirm).map { (from, $0) }
            case let .displayPasskey(v): displayed = v
            case .enterPasskey: deferredTyping.append(from)
            }
        case let .startEncryption(key, ediv, rand):
            #expect(from == .initiator && ediv == 0 && rand == 0)
            run.encryptionKeys.append(key)
            // The controller asks the responder's host for the key; both sides see the Encryption Change.
            let ok = encryptionWorks && r.encryptionKey == key
            queue += r.encryptionChanged(success: ok, status: ok ? 0 : 0x3D).map { (.responder, $0) }
            queue += i.encryptionChanged(success: ok, status: ok ? 0 : 0x3D).map { (.initiator, $0) }
        case let .completed(result):
            if from == .initiator { run.resultI = .success(result) } else { run.resultR = .success(result) }
        case let .failed(e):
            if from == .initiator { run.resultI = .failure(e) } else { run.resultR = .failure(e) }
        case .restartTimer, .stopTimer:
            break
        }
    }
    return run
}

func success(_ r: Result<PairingResult, PairingError>?) -> PairingResult? {
    if case let .success(v) = r { return v }
    return nil
}

func failure(_ r: Result<PairingResult, PairingError>?) -> PairingError? {
    if case let .failure(e) = r { return e }
    return nil
}

@Suite struct SMPSessionTests {
    @Test(arguments: [true, false])
    func justWorksBothModes(sc: Bool) throws {
        let c = SMPConfiguration(ioCapability: .noInputNoOutput, secureConnections: sc)
        let run = runPairing(c, c)
        let ri = try #require(success(run.resultI)), rr = try #require(success(run.resultR))
        #expect(ri.method == .justWorks && rr.method == .justWorks)
        #expect(ri.secureConnections == sc && !ri.authenticated && ri.bonded && ri.keySize == 16)
        // The responder was asked to accept; the initiator (the app that asked) was not.
        #expect(run.prompts.map(\.0) == [.responder])
        // Identity keys crossed over both ways.
        #expect(ri.keys.peerIRK == [UInt8](repeating: 0xB2, count: 16) && ri.keys.peerIdentityAddress == addrR)
        #expect(rr.keys.peerIRK == [UInt8](repeating: 0xA1, count: 16))
        #expect(ri.keys.peerCSRK == rr.keys.localCSRK && rr.keys.peerCSRK == ri.keys.localCSRK && ri.keys.peerCSRK != nil)
        if sc {
            #expect(ri.keys.secureConnectionsLTK == rr.keys.secureConnectionsLTK && ri.keys.secureConnectionsLTK != nil)
            #expect(ri.keys.peerLTK == nil && !run.sent.contains { $0.1.code == .encryptionInformation })
        } else {
            // Legacy: each side distributes its own LTK; the central keeps the peripheral's.
            #expect(ri.keys.peerLTK == rr.keys.localLTK && rr.keys.peerLTK == ri.keys.localLTK && ri.keys.peerLTK != nil)
            #expect(run.encryptionKeys.count == 1)
        }
    }

    @Test(arguments: [true, false])
    func passkeyEntryResponderDisplays(sc: Bool) throws {
        let run = runPairing(
            SMPConfiguration(ioCapability: .keyboardDisplay, mitm: true, secureConnections: sc),
            SMPConfiguration(ioCapability: .displayOnly, mitm: true, secureConnections: sc))
        let ri = try #require(success(run.resultI)), rr = try #require(success(run.resultR))
        #expect(ri.method == .passkeyEntry && ri.authenticated && rr.authenticated)
        #expect(
            run.prompts.contains {
                $0.0 == .responder
                    && {
                        if case .displayPasskey = $0 { return true }; return false
                    }($0.1)
            })
        #expect(run.prompts.contains { $0.0 == .initiator && $0.1 == .enterPasskey })
        if sc {
            // Twenty rounds of commitments from each side.
            #expect(run.sent.filter { $0.0 == .initiator && $0.1.code == .pairingConfirm }.count == 20)
            #expect(run.sent.filter { $0.0 == .responder && $0.1.code == .pairingConfirm }.count == 20)
        }
    }

    @Test(arguments: [true, false])
    func passkeyEntryInitiatorDisplaysAndBothTyping(sc: Bool) throws {
        let run = runPairing(
            SMPConfiguration(ioCapability: .displayOnly, mitm: true, secureConnections: sc),
            SMPConfiguration(ioCapability: .keyboardOnly, mitm: true, secureConnections: sc))
        #expect(success(run.resultI)?.method == .passkeyEntry && success(run.resultR) != nil)
        let both = runPairing(
            SMPConfiguration(ioCapability: .keyboardOnly, mitm: true, secureConnections: sc),
            SMPConfiguration(ioCapability: .keyboardOnly, mitm: true, secureConnections: sc),
            userI: ScriptedUser(typed: 4242), userR: ScriptedUser(typed: 4242))
        #expect(success(both.resultI)?.authenticated == true && success(both.resultR) != nil)
    }

    @Test(arguments: [true, false])
    func wrongPasskeyFailsWithConfirmValueFailed(sc: Bool) throws {
        let run = runPairing(
            SMPConfiguration(ioCapability: .keyboardOnly, mitm: true, secureConnections: sc),
            SMPConfiguration(ioCapability: .keyboardOnly, mitm: true, secureConnections: sc),
            userI: ScriptedUser(typed: 111_111), userR: ScriptedUser(typed: 222_222))
        // Whoever checks a commitment first finds the mismatch and sends Pairing Failed; the other hears it.
        let errors = [failure(run.resultI), failure(run.resultR)]
        #expect(errors.contains(.local(.confirmValueFailed)) && errors.contains(.remote(.confirmValueFailed)))
        #expect(run.sent.contains { $0.1 == .pairingFailed(.confirmValueFailed) })
        #expect(run.encryptionKeys.isEmpty)
    }

    @Test func cancelledPasskeyEntryFailsWithPasskeyEntryFailed() throws {
        let run = runPairing(
            SMPConfiguration(ioCapability: .keyboardOnly, mitm: true),
            SMPConfiguration(ioCapability: .displayOnly, mitm: true), userI: ScriptedUser(cancel: true))
        #expect(failure(run.resultI) == .local(.passkeyEntryFailed) && failure(run.resultR) == .remote(.passkeyEntryFailed))
    }

    @Test func numericComparisonShowsTheSameNumberOnBothSides() throws {
        let c = SMPConfiguration(ioCapability: .displayYesNo, mitm: true)
        let run = runPairing(c, c)
        let ri = try #require(success(run.resultI))
        #expect(ri.method == .numericComparison && ri.authenticated && success(run.resultR)?.authenticated == true)
        let numbers = run.prompts.compactMap { p -> UInt32? in
            if case let .confirmNumber(n) = p.1 { return n }; return nil
        }
        #expect(numbers.count == 2 && numbers[0] == numbers[1] && numbers[0] < 1_000_000)
        // Under legacy pairing the same IO capabilities fall back to Just Works (Table 2.8).
        let legacy = SMPConfiguration(ioCapability: .displayYesNo, secureConnections: false)
        #expect(success(runPairing(legacy, legacy).resultI)?.method == .justWorks)
    }

    @Test(arguments: [SMPSession.Role.initiator, .responder])
    func rejectedComparisonFailsWithNumericComparisonFailed(rejecter: SMPSession.Role) throws {
        let c = SMPConfiguration(ioCapability: .displayYesNo, mitm: true)
        let no = ScriptedUser(confirm: false)
        let run = runPairing(c, c, userI: rejecter == .initiator ? no : .init(), userR: rejecter == .responder ? no : .init())
        let (mine, theirs) = rejecter == .initiator ? (run.resultI, run.resultR) : (run.resultR, run.resultI)
        #expect(failure(mine) == .local(.numericComparisonFailed))
        #expect(failure(theirs) == .remote(.numericComparisonFailed))
    }

    @Test func secureConnectionsOutOfBand() throws {
        let kI = SMPKeyPair.generate(), kR = SMPKeyPair.generate()
        let oobI = try kI.oobData(random: [UInt8](repeating: 7, count: 16))
        let oobR = try kR.oobData(random: [UInt8](repeating: 9, count: 16))
        // Both directions of OOB data, then only the responder's data reaching the initiator (one NFC tag).
        let both = runPairing(
            SMPConfiguration(localOOB: oobI, peerOOB: oobR), SMPConfiguration(localOOB: oobR, peerOOB: oobI),
            keyPairI: kI, keyPairR: kR)
        #expect(success(both.resultI)?.method == .outOfBand && success(both.resultI)?.authenticated == true && success(both.resultR) != nil)
        let oneWay = runPairing(SMPConfiguration(peerOOB: oobR), SMPConfiguration(localOOB: oobR), keyPairI: kI, keyPairR: kR)
        #expect(success(oneWay.resultI)?.method == .outOfBand && success(oneWay.resultR) != nil)
        // OOB data that does not belong to the peer's key: Confirm Value Failed.
        let wrong = try SMPKeyPair.generate().oobData(random: [UInt8](repeating: 9, count: 16))
        let bad = runPairing(SMPConfiguration(peerOOB: wrong), SMPConfiguration(localOOB: oobR), keyPairI: kI, keyPairR: kR)
        #expect(failure(bad.resultI) == .local(.confirmValueFailed))
    }

    @Test func legacyOutOfBand() throws {
        let tk = [UInt8](repeating: 0x5A, count: 16)
        let run = runPairing(SMPConfiguration(secureConnections: false, legacyOOBKey: tk), SMPConfiguration(secureConnections: false, legacyOOBKey: tk))
        #expect(success(run.resultI)?.method == .outOfBand && success(run.resultR) != nil)
        let other = runPairing(
            SMPConfiguration(secureConnections: false, legacyOOBKey: tk),
            SMPConfiguration(secureConnections: false, legacyOOBKey: [UInt8](repeating: 0x5B, count: 16)))
        #expect(failure(other.resultR) == .local(.confirmValueFailed))
    }

    @Test func withoutMITMFlagsEvenCapableDevicesUseJustWorks() throws {
        let c = SMPConfiguration(ioCapability: .keyboardDisplay, mitm: false)
        let run = runPairing(c, c)
        #expect(success(run.resultI)?.method == .justWorks && success(run.resultI)?.authenticated == false)
    }

    @Test func unsupportedFeaturesEndWithTheirReasons() throws {
        // The responder refuses Just Works (the default agent's "no").
        let refused = runPairing(SMPConfiguration(), SMPConfiguration(), userR: ScriptedUser(accept: false))
        #expect(failure(refused.resultI) == .remote(.pairingNotSupported) && failure(refused.resultR) == .local(.pairingNotSupported))
        // MITM required but neither side can display or type.
        let mitm = runPairing(SMPConfiguration(), SMPConfiguration(requireMITM: true))
        #expect(failure(mitm.resultR) == .local(.authenticationRequirements) && failure(mitm.resultI) == .remote(.authenticationRequirements))
        // Secure Connections Only against a legacy-only initiator.
        let scOnly = runPairing(SMPConfiguration(secureConnections: false), SMPConfiguration(secureConnectionsOnly: true))
        #expect(failure(scOnly.resultI) == .remote(.authenticationRequirements))
        // Key too short for the responder's minimum.
        let short = runPairing(SMPConfiguration(maximumKeySize: 7), SMPConfiguration(minimumKeySize: 16))
        #expect(failure(short.resultI) == .remote(.encryptionKeySize))
        // Legacy OOB flag set on both sides but the key is missing on one.
        let keyed = SMPConfiguration(secureConnections: false, legacyOOBKey: [UInt8](repeating: 1, count: 16))
        let noOOB = runPairing(keyed, keyed)
        #expect(success(noOOB.resultI) != nil)
    }

    @Test func shorterKeysAreMaskedToTheNegotiatedSize() throws {
        let run = runPairing(SMPConfiguration(maximumKeySize: 10), SMPConfiguration())
        let r = try #require(success(run.resultI))
        #expect(r.keySize == 10)
        let key = try #require(r.keys.secureConnectionsLTK?.key)
        #expect(key[10...].allSatisfy { $0 == 0 } && key[..<10].contains { $0 != 0 })
        let legacy = runPairing(SMPConfiguration(secureConnections: false, maximumKeySize: 7), SMPConfiguration(secureConnections: false))
        #expect(legacy.encryptionKeys.first.map { $0[7...].allSatisfy { $0 == 0 } } == true)
        #expect(success(legacy.resultI)?.keys.peerLTK?.key[7...].allSatisfy { $0 == 0 } == true)
    }

    @Test func tamperedDHKeyCheckAndInvalidPublicKeyFail() throws {
        // Flip a bit of the initiator's DHKey check: the responder answers DHKey Check Failed.
        let tampered = runPairing(
            SMPConfiguration(), SMPConfiguration(),
            tamper: { from, bytes in
                guard from == .initiator, bytes.first == SMPCode.pairingDHKeyCheck.rawValue else { return bytes }
                var b = bytes; b[5] ^= 1; return b
            })
        #expect(failure(tampered.resultR) == .local(.dhKeyCheckFailed) && failure(tampered.resultI) == .remote(.dhKeyCheckFailed))
        // A public key that is not on the curve (the invalid-curve attack): refused.
        let offCurve = runPairing(
            SMPConfiguration(), SMPConfiguration(),
            tamper: { from, bytes in
                guard from == .initiator, bytes.first == SMPCode.pairingPublicKey.rawValue else { return bytes }
                var b = bytes; b[40] ^= 0x55; return b
            })
        #expect(failure(offCurve.resultR) == .local(.dhKeyCheckFailed))
        // A confirm value changed in flight under legacy pairing.
        let legacy = SMPConfiguration(secureConnections: false)
        let badConfirm = runPairing(
            legacy, legacy,
            tamper: { from, bytes in
                guard from == .responder, bytes.first == SMPCode.pairingConfirm.rawValue else { return bytes }
                var b = bytes; b[1] ^= 1; return b
            })
        #expect(failure(badConfirm.resultI) == .local(.confirmValueFailed))
    }

    @Test func malformedAndUnexpectedCommands() throws {
        let r = SMPSession(
            role: .responder, configuration: SMPConfiguration(), identity: nil, keyPair: .generate(),
            initiatorAddress: addrI, responderAddress: addrR)
        #expect(r.receive([0x01, 0x03, 0x00]) == [.send([0x05, 0x0A]), .stopTimer, .failed(.local(.invalidParameters))])
        let r2 = SMPSession(
            role: .responder, configuration: SMPConfiguration(), identity: nil, keyPair: .generate(),
            initiatorAddress: addrI, responderAddress: addrR)
        #expect(r2.receive([0x3F]) == [.send([0x05, 0x07]), .stopTimer, .failed(.local(.commandNotSupported))])
        let r3 = SMPSession(
            role: .responder, configuration: SMPConfiguration(), identity: nil, keyPair: .generate(),
            initiatorAddress: addrI, responderAddress: addrR)
        // A Pairing Random before any request.
        #expect(r3.receive([0x04] + [UInt8](repeating: 0, count: 16)) == [.send([0x05, 0x08]), .stopTimer, .failed(.local(.unspecifiedReason))])
        // IO capability out of range.
        let r4 = SMPSession(
            role: .responder, configuration: SMPConfiguration(), identity: nil, keyPair: .generate(),
            initiatorAddress: addrI, responderAddress: addrR)
        #expect(r4.receive([0x01, 0x09, 0, 0x01, 16, 7, 7]).last == .failed(.local(.invalidParameters)))
        // After a failure the session is silent.
        #expect(r4.receive([0x01, 0x03, 0, 0x01, 16, 7, 7]).isEmpty)
    }

    @Test func timeoutEndsPairingWithoutPairingFailed() throws {
        let i = SMPSession(
            role: .initiator, configuration: SMPConfiguration(), identity: nil, keyPair: .generate(),
            initiatorAddress: addrI, responderAddress: addrR)
        _ = i.start()
        #expect(i.timedOut() == [.failed(.timeout)])
        #expect(i.receive([0x02, 0x03, 0, 0x09, 16, 7, 7]).isEmpty)
    }

    @Test func pduRoundTripsAndTruncation() throws {
        let pdus: [SMPPDU] = [
            .pairingRequest(
                PairingFeatures(
                    ioCapability: .keyboardDisplay, oobDataPresent: true, authRequirements: [.bonding, .mitm, .secureConnections],
                    maximumKeySize: 16, initiatorKeys: .le, responderKeys: [.encryptionKey])),
            .pairingConfirm([UInt8](repeating: 3, count: 16)), .pairingFailed(.repeatedAttempts),
            .centralIdentification(ediv: 0x1234, rand: 0x0102_0304_0506_0708), .identityAddressInformation(addrI),
            .securityRequest([.bonding, .mitm]), .pairingPublicKey(x: [UInt8](repeating: 1, count: 32), y: [UInt8](repeating: 2, count: 32)),
            .keypressNotification(4),
        ]
        for p in pdus {
            let b = p.encode()
            #expect(try SMPPDU.decode(b) == p)
            for n in 0..<b.count { #expect(throws: SMPPDU.DecodeError.self) { try SMPPDU.decode(Array(b[..<n])) } }
        }
        // Central Identification travels EDIV then Rand, little-endian.
        #expect(SMPPDU.centralIdentification(ediv: 0x1234, rand: 1).encode() == [0x07, 0x34, 0x12, 1, 0, 0, 0, 0, 0, 0, 0])
    }

    @Test func methodSelectionTable() {
        typealias M = PairingMethodSelection
        #expect(M.ioMethod(initiator: .displayYesNo, responder: .keyboardDisplay, secureConnections: true) == .numericComparison)
        #expect(M.ioMethod(initiator: .displayYesNo, responder: .keyboardDisplay, secureConnections: false) == .passkeyEntry)
        #expect(M.ioMethod(initiator: .keyboardOnly, responder: .noInputNoOutput, secureConnections: true) == .justWorks)
        #expect(M.ioMethod(initiator: .displayOnly, responder: .displayYesNo, secureConnections: true) == .justWorks)
        #expect(M.passkeyInput(initiator: .keyboardDisplay, responder: .keyboardOnly) == (false, true))
        #expect(M.passkeyInput(initiator: .keyboardDisplay, responder: .keyboardDisplay) == (true, false))
        #expect(M.passkeyInput(initiator: .displayYesNo, responder: .keyboardDisplay) == (false, true))
    }
}

@Suite struct SMPRobustnessTests {
    /// Random PDUs (right codes, random lengths and contents) thrown at sessions in every early phase:
    /// each is decoded or refused with Pairing Failed, and nothing traps.
    @Test func randomInputNeverCrashes() {
        var rng = SystemRandomNumberGenerator()
        let keys = SMPKeyPair.generate()
        for round in 0..<4000 {
            let role: SMPSession.Role = round % 2 == 0 ? .initiator : .responder
            let s = SMPSession(
                role: role,
                configuration: SMPConfiguration(
                    ioCapability: IOCapability(rawValue: UInt8(round % 5))!,
                    secureConnections: round % 3 != 0),
                identity: nil, keyPair: keys, initiatorAddress: addrI, responderAddress: addrR)
            if role == .initiator { _ = s.start() }
            for _ in 0..<3 {
                let code = UInt8.random(in: 0...16, using: &rng)
                let length = Int.random(in: 0...70, using: &rng)
                let pdu = [code] + (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
                let actions = s.receive(pdu)
                // A refused PDU ends pairing with Pairing Failed sent (or silence once finished).
                if case .failed(.local)? = actions.last {
                    #expect(
                        actions.contains {
                            if case let .send(b) = $0 { return b.first == 0x05 }; return false
                        })
                }
            }
            _ = s.accept(true); _ = s.enterPasskey(123_456); _ = s.encryptionChanged(success: true); _ = s.timedOut()
        }
    }
}
