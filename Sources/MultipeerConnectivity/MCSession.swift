// MCSession (MCSession.h): the peers we are connected with, and messages, resources and streams to them.
//
// Each session has a TCP listener (TLS-capable) where other members of its mesh connect; invitations
// arrive at advertisers and are handed to the session that accepts them. The protocol is ours
// (docs/multipeer-protocol.md). Delegate calls run on a private serial queue, as on iOS.
import Foundation
import PeerSession
import PeerTransport
import BoundStreams

open class MCSession: NSObject, @unchecked Sendable {
    public let myPeerID: MCPeerID
    public let securityIdentity: [Any]?
    public let encryptionPreference: MCEncryptionPreference
    private weak var storedDelegate: (any MCSessionDelegate)?
    open weak var delegate: (any MCSessionDelegate)? {
        get { lock.withLock { storedDelegate } }
        set { lock.withLock { storedDelegate = newValue } }
    }

    let lock = NSRecursiveLock()
    /// Delegate calls, in order, off every caller's thread.
    let delegateQueue: DispatchQueue
    /// The mesh this session belongs to: adopted from the inviter when we accept an invitation.
    var mesh: UInt64
    var peers: [UInt64: PeerConnection] = [:]
    /// Our invitations in flight: the link once connected (nil while connecting).
    var pendingInvites: [UInt64: PeerLink?] = [:]
    /// Peers the app asked to connect with custom discovery data (they may connect to us).
    var expectedPeers: Set<UInt64> = []
    let tls: PeerTLSIdentity?
    private var listener: PeerListener?
    private var keepAlive: DispatchSourceTimer?
    /// How long a silent peer stays connected (keep-alive pings go every third of it).
    package var livenessTimeout: TimeInterval = 10

    public convenience init(peer myPeerID: MCPeerID) {
        self.init(peer: myPeerID, securityIdentity: nil, encryptionPreference: .required)
    }

    /// `identity`: on Linux a `PeerTLSIdentity` as its first element (Apple's SecIdentity does not exist
    /// here); nil makes a self-signed one.
    public init(peer myPeerID: MCPeerID, securityIdentity identity: [Any]?, encryptionPreference: MCEncryptionPreference) {
        self.myPeerID = myPeerID
        self.securityIdentity = identity
        self.encryptionPreference = encryptionPreference
        self.delegateQueue = DispatchQueue(label: "MCSession \(myPeerID.displayName)")
        var m: UInt64 = 0
        while m == 0 { m = UInt64.random(in: 1...UInt64.max) }
        self.mesh = m
        if let given = identity?.first as? PeerTLSIdentity {
            tls = given
        } else {
            tls = encryptionPreference == .none ? nil : TLSIdentities.identity(for: myPeerID)
        }
        super.init()
        openListener()
    }

    deinit {
        keepAlive?.cancel()
        listener?.close()
        for (_, c) in peers { c.link.close() }
    }

    /// The peers connected now.
    open var connectedPeers: [MCPeerID] {
        lock.withLock { peers.values.filter(\.connected).map(\.peer).sorted { $0.token < $1.token } }
    }

    /// Opens our listener for mesh members (at init: it waits for the socket, so never on an event loop).
    private func openListener() {
        do {
            let l = try PeerTransport.shared.listen(tls: tls) { [weak self] link in self?.acceptMember(link) }
            lock.withLock { listener = l }
            startKeepAlive()
        } catch {
            PeerLog.warning("session of \(myPeerID.displayName) cannot accept members: \(error)")
        }
    }

    /// The port mesh members connect to (0 when the listener could not open).
    func memberPort() -> UInt16 { lock.withLock { listener?.port ?? 0 } }

    // MARK: Sending

    /// Sends a message to connected peers: reliable (in order, never dropped) or unreliable (sent at once
    /// if the link can take it, else dropped). Throws MCError.notConnected for a peer not connected.
    open func send(_ data: Data, toPeers peerIDs: [MCPeerID], with mode: MCSessionSendDataMode) throws {
        guard !peerIDs.isEmpty else { throw MCError(.invalidParameter, userInfo: [NSLocalizedDescriptionKey: "No peers given"]) }
        let targets = try lock.withLock { () throws -> [PeerConnection] in
            try peerIDs.map { p in
                guard let c = peers[p.token], c.connected else {
                    throw MCError(.notConnected, userInfo: [NSLocalizedDescriptionKey: "Peers (\(p.displayName)) not connected"])
                }
                return c
            }
        }
        let bytes = [UInt8](data)
        for c in targets {
            if mode == .unreliable && bytes.count <= PeerFrame.maximumPayload - 8 {
                // Unreliable: never queued behind a busy link.
                guard c.link.isWritable else { continue }
                let id = lock.withLock { () -> UInt32 in defer { c.nextMessageID &+= 1 }; return c.nextMessageID }
                c.link.send(.data(id: id, final: true, unreliable: true, chunk: bytes))
            } else {
                let id = lock.withLock { () -> UInt32 in defer { c.nextMessageID &+= 1 }; return c.nextMessageID }
                c.link.send(MessageAssembler.split(bytes, id: id))
            }
        }
    }

    /// Ends the session with every peer.
    open func disconnect() {
        let all = lock.withLock { () -> [PeerConnection] in defer { peers.removeAll() }; return Array(peers.values) }
        for c in all {
            c.link.send(.bye)
            c.link.close()
            failTransfers(of: c)
            if c.connected { notify(c.peer, .notConnected) }
        }
    }

    /// Asks every member to drop `peer`, and drops it ourselves (GameKit's disconnectPeerFromAllPeers).
    package func evict(_ peer: MCPeerID) {
        let (others, victim) = lock.withLock { (peers.values.filter { $0.connected && $0.peer != peer }, peers[peer.token]) }
        for c in others { c.link.send(.evict(token: peer.token)) }
        victim?.link.send(.evict(token: peer.token))
        victim?.link.close()
    }

    // MARK: Peers joining and leaving

    /// Adopts a link whose hello named `peer` (an accepted invitation, or a mesh member).
    func adopt(_ link: PeerLink, peer: MCPeerID, memberPort port: UInt16) -> PeerConnection? {
        lock.withLock {
            guard peers[peer.token] == nil, peers.count + 1 < kMCSessionMaximumNumberOfPeers else { return nil }
            let c = PeerConnection(peer: peer, link: link)
            c.memberPort = port
            peers[peer.token] = c
            link.onMessage = { [weak self, weak c] m in if let self, let c { self.received(m, on: c) } }
            link.onClose = { [weak self, weak c] e in if let self, let c { self.linkClosed(c, error: e) } }
            link.onWritable = { [weak self, weak c] in if let self, let c { self.pump(c) } }
            return c
        }
    }

    /// The peer is in: report it and tell it about the other members.
    func becameConnected(_ c: PeerConnection, sendMembers: Bool) {
        let others = lock.withLock { () -> [PeerMember]? in
            guard !c.connected, peers[c.peer.token] === c else { return nil }
            c.connected = true
            c.lastHeard = Date()
            return peers.values.filter { $0 !== c && $0.connected && $0.memberPort != 0 }.map {
                PeerMember(identity: PeerIdentity(token: $0.peer.token, displayName: $0.peer.displayName), host: $0.link.remoteHost, port: $0.memberPort)
            }
        }
        guard let others else { return }
        _ = memberPort()
        notify(c.peer, .connected)
        if sendMembers, !others.isEmpty { c.link.send(.members(mesh: lock.withLock { mesh }, others)) }
    }

    /// A connection from another member of our mesh (or a stray one).
    func acceptMember(_ link: PeerLink) {
        var hello: (MCPeerID, UInt16)?
        link.onMessage = { [weak self] m in
            guard let self else { return link.close() }
            switch m {
            case let .hello(_, id, port):
                hello = (MCPeerID(token: id.token, displayName: id.displayName), port)
            case let .join(mesh):
                let ok = lock.withLock { () -> Bool in
                    guard let (peer, _) = hello else { return false }
                    if expectedPeers.contains(peer.token) {
                        if peers.isEmpty { self.mesh = mesh }
                        return true
                    }
                    return mesh == self.mesh
                }
                guard ok, let (peer, port) = hello else {
                    link.send(.joinReply(accepted: false))
                    return link.close()
                }
                admit(link, peer: peer) { [self] admitted in
                    guard admitted, let c = adopt(link, peer: peer, memberPort: port) else {
                        link.send(.joinReply(accepted: false))
                        return link.close()
                    }
                    link.send([.hello(version: PeerMessage.version, identity: identity, port: memberPort()), .joinReply(accepted: true)])
                    becameConnected(c, sendMembers: false)
                }
            default:
                PeerLog.warning("\(link.remoteHost) sent \(m) before joining; closing")
                link.close()
            }
        }
    }

    /// Connects to members the inviter told us about.
    func join(_ members: [PeerMember]) {
        for m in members where m.identity.token != myPeerID.token {
            let known = lock.withLock { peers[m.identity.token] != nil }
            guard !known else { continue }
            let peer = MCPeerID(token: m.identity.token, displayName: m.identity.displayName)
            notify(peer, .connecting)
            PeerTransport.shared.connect(host: m.host, port: m.port, tls: tls) { [weak self] r in
                guard let self else { return }
                guard case let .success(link) = r, let c = adopt(link, peer: peer, memberPort: m.port) else {
                    if case let .success(link) = r { link.close() }
                    return notify(peer, .notConnected)
                }
                link.send([.hello(version: PeerMessage.version, identity: identity, port: memberPort()), .join(mesh: lock.withLock { mesh })])
                c.awaitingJoinReply = true
            }
        }
    }

    var identity: PeerIdentity { PeerIdentity(token: myPeerID.token, displayName: myPeerID.displayName) }

    /// Asks the app about the peer's certificate (TLS links), then whether the encryption preference fits.
    func admit(_ link: PeerLink, peer: MCPeerID, _ decide: @escaping (Bool) -> Void) {
        switch (encryptionPreference, link.isEncrypted) {
        case (.required, false), (.none, true):
            PeerLog.warning("refusing \(peer.displayName): encryption \(link.isEncrypted ? "on" : "off") does not fit the session's preference")
            return decide(false)
        default:
            break
        }
        let chain = Unchecked<[Any]?>(link.isEncrypted ? link.peerCertificates.map { Data($0) } : nil)
        let decision = Unchecked(decide)
        delegateQueue.async { [self] in
            guard let d = delegate else { return decision.value(true) }
            let answered = Unchecked(NSLock())
            var done = false
            d.session(self, didReceiveCertificate: chain.value, fromPeer: peer) { ok in
                let first = answered.value.withLock { () -> Bool in defer { done = true }; return !done }
                if first { decision.value(ok) }
            }
        }
    }

    func linkClosed(_ c: PeerConnection, error: (any Error)?) {
        let was = lock.withLock { () -> Bool? in
            guard peers[c.peer.token] === c else { return nil }
            peers[c.peer.token] = nil
            return c.connected
        }
        guard let was else { return }
        failTransfers(of: c)
        if was || c.awaitingJoinReply { notify(c.peer, .notConnected) }
    }

    func notify(_ peer: MCPeerID, _ state: MCSessionState) {
        delegateQueue.async { [self] in delegate?.session(self, peer: peer, didChange: state) }
    }

    // MARK: Keep-alive

    private func startKeepAlive() {
        guard keepAlive == nil else { return }
        let t = DispatchSource.makeTimerSource(queue: DispatchQueue.global())
        let period = max(0.2, livenessTimeout / 3)
        t.schedule(deadline: .now() + period, repeating: period)
        t.setEventHandler { [weak self] in self?.checkLiveness() }
        t.resume()
        keepAlive = t
    }

    private func checkLiveness() {
        let now = Date()
        let (quiet, dead) = lock.withLock { () -> ([PeerConnection], [PeerConnection]) in
            let connected = peers.values.filter(\.connected)
            return (connected, connected.filter { now.timeIntervalSince($0.lastHeard) > livenessTimeout })
        }
        for c in dead {
            PeerLog.write("\(c.peer.displayName) silent for \(livenessTimeout) s: disconnected")
            c.link.close()
        }
        for c in quiet where !dead.contains(where: { $0 === c }) { c.link.send(.ping) }
    }
}

/// Carries a value the compiler cannot prove Sendable across a queue hop; the code using it serialises
/// access itself (delegate queue, locks).
package struct Unchecked<T>: @unchecked Sendable {
    package let value: T
    package init(_ value: T) { self.value = value }
}

/// Self-signed identities for peers that bring none, one per peer ID (made once: P-256 key generation).
enum TLSIdentities {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var cache: [UInt64: PeerTLSIdentity] = [:]

    static func identity(for peer: MCPeerID) -> PeerTLSIdentity? {
        lock.withLock {
            if let i = cache[peer.token] { return i }
            let made = try? PeerTLSIdentity.selfSigned(commonName: peer.displayName)
            cache[peer.token] = made
            return made
        }
    }
}
