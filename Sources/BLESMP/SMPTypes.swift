// What pairing is configured with, what it asks of the user, and what it produces.
import BLEWire

/// The association model chosen from both devices' features (Vol 3 Part H §2.3.5.1).
public enum PairingMethod: String, Sendable, Hashable, Codable {
    case justWorks, passkeyEntry, numericComparison, outOfBand
    /// Methods that protect against a man in the middle.
    public var isAuthenticated: Bool { self != .justWorks }
}

/// LE Secure Connections out-of-band data for one device (Vol 3 Part H §2.3.5.6.4): the random value r and
/// the confirm value C = f4(PKx, PKx, r, 0), both 16 octets least significant first, as an NFC tag carries them.
public struct SecureConnectionsOOBData: Sendable, Hashable, Codable {
    public var random: [UInt8]
    public var confirm: [UInt8]
    public init(random: [UInt8], confirm: [UInt8]) { self.random = random; self.confirm = confirm }
}

/// A security manager's settings for one pairing.
public struct SMPConfiguration: Sendable {
    public var ioCapability: IOCapability
    public var bondable: Bool
    /// Ask for man-in-the-middle protection (the MITM flag; iOS always sets it).
    public var mitm: Bool
    /// Fail pairing (Authentication Requirements) when the method chosen cannot give MITM protection.
    public var requireMITM: Bool
    public var secureConnections: Bool
    /// Refuse LE legacy pairing (Secure Connections Only mode, Vol 3 Part C §10.2.4).
    public var secureConnectionsOnly: Bool
    public var maximumKeySize: UInt8
    public var minimumKeySize: UInt8
    /// Keys we are willing to send and to receive.
    public var keysToDistribute: KeyDistribution
    public var keysToRequest: KeyDistribution
    /// Legacy OOB temporary key (16 octets, least significant first) received from the peer.
    public var legacyOOBKey: [UInt8]?
    /// Our own Secure Connections OOB data (made with `SMPKeyPair.oobData`) and what we received from the peer.
    public var localOOB: SecureConnectionsOOBData?
    public var peerOOB: SecureConnectionsOOBData?

    public init(
        ioCapability: IOCapability = .noInputNoOutput, bondable: Bool = true, mitm: Bool = true, requireMITM: Bool = false,
        secureConnections: Bool = true, secureConnectionsOnly: Bool = false,
        maximumKeySize: UInt8 = 16, minimumKeySize: UInt8 = 7,
        keysToDistribute: KeyDistribution = .le, keysToRequest: KeyDistribution = .le,
        legacyOOBKey: [UInt8]? = nil, localOOB: SecureConnectionsOOBData? = nil, peerOOB: SecureConnectionsOOBData? = nil
    ) {
        self.ioCapability = ioCapability
        self.bondable = bondable
        self.mitm = mitm
        self.requireMITM = requireMITM
        self.secureConnections = secureConnections
        self.secureConnectionsOnly = secureConnectionsOnly
        self.maximumKeySize = maximumKeySize
        self.minimumKeySize = minimumKeySize
        self.keysToDistribute = keysToDistribute
        self.keysToRequest = keysToRequest
        self.legacyOOBKey = legacyOOBKey
        self.localOOB = localOOB
        self.peerOOB = peerOOB
    }

    /// The AuthReq of our Pairing Request or Response (Vol 3 Part H §3.5.1).
    ///
    /// The MITM flag asks for protection that only the IO capabilities (or OOB data) can give. A device with
    /// no input and no output cannot give it, and saying it wants it makes strict responders refuse: Linux
    /// (net/bluetooth/smp.c, smp_cmd_pairing_req) raises the pairing's required level to "high" when the flag
    /// is set and, when its own agent has any IO and the methods come out as Just Works, fails the pairing with
    /// Authentication Requirements. So, as an iPhone does (it sets MITM because it has a display and yes/no,
    /// and can compare numbers), we set it only when we can take part in an authenticated method, when OOB
    /// data is at hand, or when the caller insists on MITM (`requireMITM`).
    public var authRequirements: AuthRequirements {
        var a: AuthRequirements = []
        if bondable { a.insert(.bonding) }
        let canAuthenticate = ioCapability != .noInputNoOutput || legacyOOBKey != nil || localOOB != nil || peerOOB != nil
        if mitm && (canAuthenticate || requireMITM) { a.insert(.mitm) }
        if secureConnections { a.insert(.secureConnections) }
        return a
    }
}

/// Our identity: what we distribute in Identity Information / Identity Address Information.
public struct SMPLocalIdentity: Sendable, Hashable {
    /// Identity Resolving Key, 16 octets least significant first.
    public var irk: [UInt8]
    public var address: BluetoothAddress
    public init(irk: [UInt8], address: BluetoothAddress) { self.irk = irk; self.address = address }
}

/// What the user (through a pairing agent) is asked during pairing.
public enum PairingPrompt: Sendable, Hashable {
    /// Just Works: accept pairing with this device? (answer with `accept(_:)`)
    case acceptPairing
    /// Show this passkey; the peer types it. Needs no answer.
    case displayPasskey(UInt32)
    /// Type the passkey that the peer shows. Answer with `enterPasskey(_:)` (nil cancels).
    case enterPasskey
    /// Do both devices show this number? Answer with `accept(_:)`.
    case confirmNumber(UInt32)
}

/// Keys from one pairing, least significant octet first throughout (as HCI and SMP carry them).
public struct PairingKeys: Sendable, Hashable {
    public struct LongTermKey: Sendable, Hashable, Codable {
        public var key: [UInt8]
        public var ediv: UInt16
        public var rand: UInt64
        public init(key: [UInt8], ediv: UInt16, rand: UInt64) { self.key = key; self.ediv = ediv; self.rand = rand }
    }
    /// LE Secure Connections: the one key both sides derived (EDIV and Rand are zero).
    public var secureConnectionsLTK: LongTermKey?
    /// Legacy: the key the peer gave us (we use it to encrypt as central) and the key we gave the peer
    /// (it asks for it by EDIV and Rand when it is central).
    public var peerLTK: LongTermKey?
    public var localLTK: LongTermKey?
    public var peerIRK: [UInt8]?
    public var peerIdentityAddress: BluetoothAddress?
    public var peerCSRK: [UInt8]?
    public var localCSRK: [UInt8]?

    public init() {}
}

/// The outcome of a successful pairing.
public struct PairingResult: Sendable, Hashable {
    public var method: PairingMethod
    public var secureConnections: Bool
    /// Whether the keys are MITM-protected (an authenticated method was used).
    public var authenticated: Bool
    public var keySize: UInt8
    /// Both sides asked to bond: the keys are to be stored.
    public var bonded: Bool
    public var keys: PairingKeys
}

/// Why pairing ended without keys.
public enum PairingError: Error, Sendable, Hashable, CustomStringConvertible {
    /// We sent Pairing Failed with this reason.
    case local(PairingFailureReason)
    /// The peer sent Pairing Failed with this reason.
    case remote(PairingFailureReason)
    /// No SMP command for 30 seconds (Vol 3 Part H §3.4); no further SMP on this link.
    case timeout
    /// The link went away during pairing.
    case disconnected
    /// Encryption with the new key did not come up.
    case encryptionFailed(UInt8)

    public var description: String {
        switch self {
        case let .local(r): return "pairing failed: \(r)"
        case let .remote(r): return "pairing failed by the peer: \(r)"
        case .timeout: return "pairing timed out (30 s without a Security Manager command)"
        case .disconnected: return "the link was lost during pairing"
        case .encryptionFailed(0x06):
            return "encryption failed: the peer has no key for our bond (it removed its pairing information); forget the bond to pair again"
        case let .encryptionFailed(s): return "encryption failed (HCI status 0x\(String(s, radix: 16)))"
        }
    }

    public var reason: PairingFailureReason? {
        switch self {
        case let .local(r), let .remote(r): return r
        default: return nil
        }
    }
}
