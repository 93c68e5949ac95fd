// One LE link as the host sees it: the L2CAP recombiner, the signalling state, the GATT client bearer with
// its transaction timer, and the operations the layers above start on it.
//
// Loop-confined like the host; the properties the packet path touches are `@exclusivity(unchecked)` for the
// reason given in LEHost.swift.
import BLEWire
import BLEHCI
import BLEL2CAP
import BLEATT
import BLEGATT
import BLETransport
import BLESMP

public final class HostConnection: @unchecked Sendable, CustomStringConvertible {
    public enum Role: Sendable, Equatable { case central, peripheral }

    public let handle: UInt16
    public let role: Role
    public let peerAddress: BluetoothAddress
    public internal(set) var interval: UInt16
    public internal(set) var latency: UInt16
    public internal(set) var supervisionTimeout: UInt16
    /// ATT_MTU in force on this link (Vol 3 Part F §3.2.8).
    @exclusivity(unchecked) public internal(set) var attMTU: UInt16 = 23
    /// The largest LL data PDU payloads in force (Vol 6 Part B §4.5.10), from LE Data Length Change.
    public internal(set) var maxTxOctets: UInt16 = 27
    /// ACL packets of this link the host has finished with and not yet reported (controller-to-host flow
    /// control, LEHost+FlowControl.swift). Loop only.
    @exclusivity(unchecked) var unreportedPackets = 0
    public internal(set) var maxRxOctets: UInt16 = 27
    /// The PHYs in use (1 LE 1M, 2 LE 2M, 3 LE Coded), from LE PHY Update Complete.
    public internal(set) var txPHY: UInt8 = 1
    public internal(set) var rxPHY: UInt8 = 1
    public var isEncrypted: Bool { security.encrypted }
    /// Encryption, authentication and key size of the link now.
    public internal(set) var security = LinkSecurity()
    /// The peer's identity: its identity address once known (bond or key distribution), else its link address.
    public internal(set) var identityAddress: BluetoothAddress
    /// The address we use on this link.
    public internal(set) var localLinkAddress: BluetoothAddress
    @exclusivity(unchecked) public internal(set) var isOpen = true
    /// Free-form slot for the layer above (the façade keeps its peer object here).
    @exclusivity(unchecked) public var context: AnyObject?

    public internal(set) weak var host: LEHost?
    @exclusivity(unchecked) var recombiner: L2CAPRecombiner
    @exclusivity(unchecked) var signaling: L2CAPSignalingState
    var gattClient = GATTClient()
    var gattCompletions: [GATTClient.ProcedureID: (Result<GATTClient.Outcome, GATTClient.Failure>) -> Void] = [:]
    var attTimer: LoopTimer?
    var confirmationTimer: LoopTimer?
    /// This link's identity in the GATT server.
    var clientID: GATTClientID { GATTClientID(UInt64(handle)) }
    var mtuExchangeStarted = false
    var rssiWaiters: [(Result<Int8, HostError>) -> Void] = []
    /// The reason reported upward when the link closes, when the host itself ended it for a cause (an ATT
    /// transaction timeout reads as connection timeout).
    var closeReasonOverride: HCIStatus?
    /// Set when a Write Command was refused for lack of buffers; cleared when the delegate is told.
    @exclusivity(unchecked) var wantsWriteReady = false

    // L2CAP credit-based channels (LEHost+Channels.swift), by our CID.
    @exclusivity(unchecked) var channels: [UInt16: HostL2CAPChannel] = [:]
    var nextChannelToken: UInt64 = 0
    var channelCompletions: [UInt64: (Result<[HostL2CAPChannel], L2CAPOpenError>) -> Void] = [:]
    /// What the actions of one signalling step did to each `open` in flight.
    var channelOpens: [UInt64: (failure: L2CAPCreditChannels.OpenFailure?, opened: [HostL2CAPChannel])] = [:]
    /// RTX timers of our signalling requests, by identifier.
    var signalTimers: [UInt8: LoopTimer] = [:]

    // Security state (LEHost+Security.swift).
    var smp: SMPSession?
    var smpTimer: LoopTimer?
    var smpTimedOut = false
    var securityWaiters: [(Result<LinkSecurity, PairingError>) -> Void] = []
    var encryptingWithBond = false
    var bondSecurity: LinkSecurity?
    var mitmRequested = false
    /// Why the last pairing on this link failed (cleared when one succeeds).
    public internal(set) var lastPairingError: PairingError?

    init(handle: UInt16, role: Role, peerAddress: BluetoothAddress, localAddress: BluetoothAddress, interval: UInt16, latency: UInt16, timeout: UInt16, host: LEHost) {
        self.handle = handle
        self.identityAddress = peerAddress
        self.localLinkAddress = localAddress
        self.role = role
        self.peerAddress = peerAddress
        self.interval = interval
        self.latency = latency
        self.supervisionTimeout = timeout
        self.host = host
        self.recombiner = L2CAPRecombiner(maximumFrameLength: 65_535)
        self.signaling = L2CAPSignalingState(role: role == .central ? .central : .peripheral)
    }

    public var description: String { "connection 0x\(String(handle, radix: 16)) to \(peerAddress) as \(role)" }

    // MARK: GATT client operations (call on the host's loop)

    /// Runs a GATT client procedure; `completion` runs on the loop. A procedure refused for insufficient
    /// authentication or encryption secures the link (bond or pairing) and runs once more, as iOS does; the
    /// caller sees only the final result.
    public func gatt(
        _ procedure: GATTClient.Procedure,
        completion: @escaping (Result<GATTClient.Outcome, GATTClient.Failure>) -> Void
    ) {
        guard isOpen, let host else { return completion(.failure(.disconnected)) }
        guard host.pairsOnInsufficientSecurity, role == .central else { return runGATT(procedure, completion: completion) }
        runGATT(procedure) { [weak self] result in
            guard let self, let host = self.host, case let .failure(.att(code, _)) = result,
                code == .insufficientAuthentication || code == .insufficientEncryption || code == .encryptionKeySizeTooShort
            else {
                return completion(result)
            }
            // Authentication on an encrypted link means a stronger (MITM-protected) key is needed.
            let mitm = code == .insufficientAuthentication && self.security.encrypted
            host.secure(self, mitm: mitm) { [weak self] secured in
                guard let self, case .success = secured else { return completion(result) }
                self.runGATT(procedure, completion: completion)
            }
        }
    }

    func runGATT(
        _ procedure: GATTClient.Procedure,
        completion: @escaping (Result<GATTClient.Outcome, GATTClient.Failure>) -> Void
    ) {
        guard isOpen, let host else { return completion(.failure(.disconnected)) }
        let (id, actions) = gattClient.start(procedure)
        gattCompletions[id] = completion
        host.perform(actions, on: self)
    }

    /// Exchanges the ATT MTU once per link (Vol 3 Part G §4.3.1).
    public func exchangeMTU(_ mtu: UInt16 = 517, completion: @escaping (UInt16) -> Void = { _ in }) {
        guard !mtuExchangeStarted else { return completion(attMTU) }
        mtuExchangeStarted = true
        gatt(.exchangeMTU(clientRxMTU: mtu)) { [weak self] r in
            guard let self else { return }
            if case let .success(.mtu(m)) = r { self.mtuDidChange(m) }
            completion(self.attMTU)
        }
    }

    /// The bearer's ATT_MTU changed, through either role's exchange: both roles use it from now on.
    func mtuDidChange(_ m: UInt16) {
        gattClient.bearerMTUChanged(to: m)
        guard m != attMTU else { return }
        attMTU = m
        host?.mtuChanged(on: self)
    }

    /// True while the controller has a free buffer for a Write Command.
    public var canSendWriteWithoutResponse: Bool {
        guard isOpen, let host else { return false }
        return host.hasRoomForUnacknowledgedData
    }

    /// Sends a Write Command. Returns false (and later tells the delegate when room frees) when buffers are full.
    @discardableResult
    public func writeWithoutResponse(handle attributeHandle: UInt16, value: [UInt8]) -> Bool {
        guard isOpen, let host else { return false }
        guard host.hasRoomForUnacknowledgedData else {
            wantsWriteReady = true
            return false
        }
        host.perform(gattClient.writeWithoutResponse(handle: attributeHandle, value: value), on: self)
        return true
    }

    /// Reads the link's RSSI from the controller.
    public func readRSSI(completion: @escaping (Result<Int8, HostError>) -> Void) {
        guard isOpen, let host else { return completion(.failure(.invalidState("not connected"))) }
        host.command(.readRSSI(handle: handle)) { r in
            switch r {
            case let .success(.complete(p)):
                if let v = try? ReadRSSIReturn(decoding: p), v.status == .success {
                    completion(.success(v.rssi))
                } else {
                    completion(.failure(.commandFailed(opcode: HCIOpcode.readRSSI, status: HCIStatus(rawValue: p.first ?? 0x1F))))
                }
            case let .success(.status(s)): completion(.failure(.commandFailed(opcode: HCIOpcode.readRSSI, status: s)))
            case let .failure(e): completion(.failure(e))
            }
        }
    }

    /// Disconnects with Remote User Terminated.
    public func disconnect(reason: HCIStatus = .remoteUserTerminated) {
        host?.disconnect(handle: handle, reason: reason)
    }
}
