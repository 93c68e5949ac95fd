// MCSession (MCSession.h): the peers we are connected with, and messages, resources and streams to them.
//
// Each session has a TCP listener (TLS-capable) where other members of its mesh connect; invitations
// arrive at advertisers and are handed to the session that accepts them. The protocol is ours
// (docs/multipeer-protocol.md). Delegate calls run on a private serial queue, as on iOS.
import Foundation
import PeerSession
import PeerTransport
import BoundStreams
import PeerBluetooth

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
    /// Delegate calls go through here, to `delegateQueue` in order (batched when many come at once).
    let delegateCalls: DelegateCalls
    /// The mesh this session belongs to: adopted from the inviter when we accept an invitation.
    var mesh: UInt64
    var peers: [UInt64: PeerConnection] = [:]
    /// Our invitations in flight: the link once connected (nil while connecting).
    var pendingInvites: [UInt64: PeerLink?] = [:]
    /// Mutual invitations (MCSession+Invitations.swift): peers whose invitation our app accepted and that we
    /// are admitting; peers whose connection (through their invitation) moves to our own invitation's link,
    /// `.connected` already reported; and our mesh from before we took an inviter's while ours was pending.
    var accepting: Set<UInt64> = []
    var movingToOurInvitation: Set<UInt64> = []
    var meshBeforeAccepting: [UInt64: UInt64] = [:]
    /// Peers the app asked to connect with custom discovery data (they may connect to us).
    var expectedPeers: Set<UInt64> = []
    /// Joins from peers we did not expect (yet): held briefly for `connectPeer`.
    struct ParkedJoin {
        var link: PeerLink
        var port: UInt16
        var bluetooth: PeerBluetoothEndpoint?
        var mesh: UInt64
    }
    var parkedJoins: [UInt64: ParkedJoin] = [:]
    /// Who else in the framework follows the peers' states (MCBrowserViewController), called on the delegate
    /// queue just before the delegate, in order; guarded by `lock`.
    var stateObservers: [(MCPeerID, MCSessionState) -> Void] = []
    let tls: PeerTLSIdentity?
    private var listener: PeerListener?
    private var keepAlive: DispatchSourceTimer?   // guarded by `lock`
    /// How long a silent peer stays connected (GKSession's disconnectTimeout sets it). Keep-alive pings go
    /// every third of it, and silence is checked four times per timeout (at least once a second), so a peer
    /// whose link broke is reported disconnected within the timeout and a quarter of it at most (a second).
    package var livenessTimeout: TimeInterval {
        get { lock.withLock { storedLivenessTimeout } }
        set {
            lock.withLock { storedLivenessTimeout = max(0.2, newValue) }
            restartKeepAlive()
        }
    }
    private var storedLivenessTimeout: TimeInterval = 10   // guarded by `lock`
    private var lastPing = Date.distantPast   // guarded by `lock`

    /// The transports this session accepts and makes links on (Linux addition; `MCTransports.default`).
    public let transports: MCTransports
    /// The Bluetooth device of this peer, when `transports` has `.bluetooth` and a controller is there.
    package var bluetooth: (any PeerBluetoothNode)?
    /// The SPSM where members connect over Bluetooth (0 until published).
    var memberPSM: UInt16 = 0
    /// Our member advert (while connected to someone, so newcomers over Bluetooth can reach us).
    var memberAdvert: UInt64?

    public convenience init(peer myPeerID: MCPeerID) {
        self.init(peer: myPeerID, securityIdentity: nil, encryptionPreference: .required)
    }

    /// Apple's designated initializer (a subclass's init may call it); the transports are `MCTransports.default`.
    public init(peer myPeerID: MCPeerID, securityIdentity identity: [Any]?, encryptionPreference: MCEncryptionPreference) {
        let setup = Setup(peer: myPeerID, identity: identity, encryptionPreference: encryptionPreference)
        self.myPeerID = myPeerID
        self.transports = .default
        self.securityIdentity = identity
        self.encryptionPreference = encryptionPreference
        self.delegateQueue = setup.queue
        self.delegateCalls = DelegateCalls(queue: setup.queue)
        self.mesh = setup.mesh
        self.tls = setup.tls
        super.init()
        openTransports()
    }

    /// `identity`: on Linux a `PeerTLSIdentity` as its first element (Apple's SecIdentity does not exist
    /// here); nil makes a self-signed one. `transports` (Linux addition): where members are accepted and
    /// reached.
    public init(
        peer myPeerID: MCPeerID, securityIdentity identity: [Any]?, encryptionPreference: MCEncryptionPreference,
        transports: MCTransports
    ) {
        let setup = Setup(peer: myPeerID, identity: identity, encryptionPreference: encryptionPreference)
        self.myPeerID = myPeerID
        self.transports = transports
        self.securityIdentity = identity
        self.encryptionPreference = encryptionPreference
        self.delegateQueue = setup.queue
        self.delegateCalls = DelegateCalls(queue: setup.queue)
        self.mesh = setup.mesh
        self.tls = setup.tls
        super.init()
        openTransports()
    }

    /// What both designated initializers compute.
    private struct Setup {
        let queue: DispatchQueue
        let mesh: UInt64
        let tls: PeerTLSIdentity?
        init(peer: MCPeerID, identity: [Any]?, encryptionPreference: MCEncryptionPreference) {
            queue = DispatchQueue(label: "MCSession \(peer.displayName)")
            var m: UInt64 = 0
            while m == 0 { m = UInt64.random(in: 1...UInt64.max) }
            mesh = m
            if let given = identity?.first as? PeerTLSIdentity {
                tls = given
            } else {
                tls = encryptionPreference == .none ? nil : TLSIdentities.identity(for: peer)
            }
        }
    }

    private func openTransports() {
        if transports.contains(.network) { openListener() } else { startKeepAlive() }
        if transports.contains(.bluetooth) { openBluetoothListener() }
    }

    deinit {
        lock.withLock { keepAlive }?.cancel()
        listener?.close()
        for (_, c) in peers { c.link.close() }
        if let bluetooth {
            if let memberAdvert { bluetooth.removeAdvert(memberAdvert) }
            if memberPSM != 0 { bluetooth.unlisten(memberPSM) }
            bluetooth.release()
        }
    }

    /// Publishes our member SPSM on this peer's Bluetooth device.
    private func openBluetoothListener() {
        guard let node = PeerBluetoothNodes.acquire(forPeer: myPeerID.token) else { return }
        bluetooth = node
        node.listen(tls: tls, onLink: { [weak self] link in self?.acceptMember(link) }) { [weak self] psm in
            guard let self, let psm else { return }
            lock.withLock { memberPSM = psm }
            updateMemberAdvert()
        }
    }

    /// Where members reach us over Bluetooth (nil without it, or before the controller is on).
    var bluetoothEndpoint: PeerBluetoothEndpoint? {
        guard let node = bluetooth, let a = node.address else { return nil }
        let psm = lock.withLock { memberPSM }
        return psm == 0 ? nil : PeerBluetoothEndpoint(address: a.bytes, isRandom: a.type.isRandom, psm: psm)
    }

    /// Our hello: the member port and, with Bluetooth, the member endpoint there.
    func hello() -> PeerMessage {
        .hello(version: PeerMessage.version, identity: identity, port: memberPort(), bluetooth: bluetoothEndpoint)
    }

    /// Advertises the member endpoint while we have connected peers (members that join later connect to
    /// every member, and a Bluetooth device must advertise to be connected to).
    func updateMemberAdvert() {
        guard let node = bluetooth else { return }
        let (add, remove) = lock.withLock { () -> (PeerAdvert?, UInt64?) in
            let wanted = memberPSM != 0 && peers.values.contains(where: \.connected)
            if wanted && memberAdvert == nil {
                return (PeerAdvert(service: PeerAdvert.memberUUID, token: myPeerID.token, psm: memberPSM), nil)
            }
            if !wanted, let id = memberAdvert {
                memberAdvert = nil
                return (nil, id)
            }
            return (nil, nil)
        }
        if let remove { node.removeAdvert(remove) }
        if let add {
            let id = node.addAdvert(add, name: myPeerID.displayName)
            lock.withLock { memberAdvert = id }
        }
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
                let id = lock.withLock { () -> UInt32 in
                    defer { c.nextMessageID &+= 1 }; return c.nextMessageID
                }
                c.link.send(.data(id: id, final: true, unreliable: true, chunk: bytes))
            } else {
                let id = lock.withLock { () -> UInt32 in
                    defer { c.nextMessageID &+= 1 }; return c.nextMessageID
                }
                c.link.send(MessageAssembler.split(bytes, id: id))
            }
        }
    }

    /// Ends the session with every peer.
    open func disconnect() {
        let all = lock.withLock { () -> [PeerConnection] in
            defer { peers.removeAll() }; return Array(peers.values)
        }
        for c in all {
            c.link.send(.bye)
            c.link.close()
            failTransfers(of: c)
            if c.connected { notify(c.peer, .notConnected) }
        }
        updateMemberAdvert()
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
    func adopt(_ link: PeerLink, peer: MCPeerID, memberPort port: UInt16, bluetooth: PeerBluetoothEndpoint? = nil) -> PeerConnection? {
        lock.withLock {
            guard peers[peer.token] == nil, peers.count + 1 < kMCSessionMaximumNumberOfPeers else { return nil }
            let c = PeerConnection(peer: peer, link: link)
            c.memberPort = port
            c.bluetooth = bluetooth
            peers[peer.token] = c
            link.onMessage = { [weak self, weak c] m in if let self, let c { self.received(m, on: c) } }
            link.onResourceChunk = { [weak self, weak c] id, chunk in if let self, let c { self.resourceChunk(id: id, chunk: chunk, on: c) } }
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
            // Each member where it can be reached: its TCP listener as we see it, its Bluetooth endpoint.
            return peers.values.filter { $0 !== c && $0.connected }.flatMap { m -> [PeerMember] in
                let id = PeerIdentity(token: m.peer.token, displayName: m.peer.displayName)
                var out: [PeerMember] = []
                if m.memberPort != 0 && !m.link.isBluetooth { out.append(PeerMember(identity: id, host: m.link.remoteHost, port: m.memberPort)) }
                if let bt = m.bluetooth { out.append(PeerMember(identity: id, host: bt.host, port: bt.psm)) }
                return out
            }
        }
        guard let others else { return }
        _ = memberPort()
        notify(c.peer, .connected)
        updateMemberAdvert()
        if sendMembers, !others.isEmpty { c.link.send(.members(mesh: lock.withLock { mesh }, others)) }
    }

    /// A connection from another member of our mesh (or a stray one).
    func acceptMember(_ link: PeerLink) {
        var greeting: (MCPeerID, UInt16, PeerBluetoothEndpoint?)?
        link.onMessage = { [weak self] m in
            guard let self else { return link.close() }
            switch m {
            case let .hello(_, id, port, bt):
                greeting = (MCPeerID(token: id.token, displayName: id.displayName), port, bt)
            case let .join(mesh):
                guard let (peer, port, bt) = greeting else {
                    link.send(.joinReply(accepted: false))
                    return link.close()
                }
                let verdict = lock.withLock { () -> JoinVerdict in
                    if expectedPeers.contains(peer.token) {
                        if peers.isEmpty { self.mesh = mesh }
                        return .accept
                    }
                    if mesh == self.mesh { return .accept }
                    // Custom discovery: the peer may have our connection data before the app handed us
                    // theirs. Hold its join a while for `connectPeer` (a few at most).
                    guard parkedJoins.count < 8, parkedJoins[peer.token] == nil else { return .refuse }
                    parkedJoins[peer.token] = ParkedJoin(link: link, port: port, bluetooth: bt, mesh: mesh)
                    return .park
                }
                switch verdict {
                case .accept: acceptJoin(link, peer: peer, port: port, bluetooth: bt)
                case .refuse:
                    link.send(.joinReply(accepted: false))
                    link.close()
                case .park:
                    DispatchQueue.global().asyncAfter(deadline: .now() + 10) { [weak self] in
                        guard let self, let parked = lock.withLock({ parkedJoins.removeValue(forKey: peer.token) }) else { return }
                        parked.link.send(.joinReply(accepted: false))
                        parked.link.close()
                    }
                }
            default:
                PeerLog.warning("\(link.remoteHost) sent \(m) before joining; closing")
                link.close()
            }
        }
    }

    enum JoinVerdict { case accept, refuse, park }

    /// Admits a member whose join we accept (after the app's word on its certificate).
    func acceptJoin(_ link: PeerLink, peer: MCPeerID, port: UInt16, bluetooth bt: PeerBluetoothEndpoint?) {
        admit(link, peer: peer) { [self] admitted in
            guard admitted, let c = adopt(link, peer: peer, memberPort: port, bluetooth: bt) else {
                link.send(.joinReply(accepted: false))
                return link.close()
            }
            link.send([hello(), .joinReply(accepted: true)])
            becameConnected(c, sendMembers: false)
        }
    }

    /// Connects to members the inviter told us about (each at the first of its addresses that works).
    func join(_ members: [PeerMember]) {
        var order: [UInt64] = []
        var addresses: [UInt64: (PeerIdentity, [(host: String, port: UInt16)])] = [:]
        for m in members where m.identity.token != myPeerID.token {
            if addresses[m.identity.token] == nil { order.append(m.identity.token); addresses[m.identity.token] = (m.identity, []) }
            addresses[m.identity.token]!.1.append((m.host, m.port))
        }
        for token in order {
            guard let (identity, list) = addresses[token] else { continue }
            let known = lock.withLock { peers[token] != nil }
            guard !known else { continue }
            let peer = MCPeerID(token: token, displayName: identity.displayName)
            notify(peer, .connecting)
            connect(to: list, peer: peer, useTLS: true) { [weak self] link in
                guard let self else { link?.close(); return }
                let bt = link.flatMap { l in list.lazy.compactMap { PeerBluetoothEndpoint(host: $0.host, port: $0.port) }.first { $0.host == l.remoteHost } }
                let port = list.first { PeerBluetoothEndpoint(host: $0.host, port: $0.port) == nil }?.port ?? 0
                guard let link, let c = adopt(link, peer: peer, memberPort: link.isBluetooth ? 0 : port, bluetooth: bt) else {
                    link?.close()
                    return notify(peer, .notConnected)
                }
                link.send([hello(), .join(mesh: lock.withLock { mesh })])
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
        delegateCalls.async { [self] in
            guard let d = delegate else { return decision.value(true) }
            let answered = Unchecked(NSLock())
            var done = false
            d.session(self, didReceiveCertificate: chain.value, fromPeer: peer) { ok in
                let first = answered.value.withLock { () -> Bool in
                    defer { done = true }; return !done
                }
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
        updateMemberAdvert()
    }

    func notify(_ peer: MCPeerID, _ state: MCSessionState) {
        delegateCalls.async { [self] in
            for observe in lock.withLock({ stateObservers }) { observe(peer, state) }
            delegate?.session(self, peer: peer, didChange: state)
        }
    }

    // MARK: Keep-alive

    /// Where every session's keep-alive runs: a serial queue of its own (an overcommit queue, which gets a
    /// thread when the others are busy), not the global concurrent queue, whose few workers an application (or a
    /// test) blocking them holds up: a keep-alive that ran a second late sent its pings late and then judged
    /// the peer silent (GKLinkLossTests at a 1 s timeout on a saturated machine).
    private static let keepAliveQueue = DispatchQueue(label: "opencorebluetooth.multipeer.keepalive")

    private func startKeepAlive() {
        lock.withLock {
            guard keepAlive == nil else { return }
            let t = DispatchSource.makeTimerSource(queue: Self.keepAliveQueue)
            let period = min(1, storedLivenessTimeout / 4)
            t.schedule(deadline: .now() + period, repeating: period)
            t.setEventHandler { [weak self] in self?.checkLiveness() }
            t.resume()
            keepAlive = t
        }
    }

    /// The timeout changed: check at the new pace (a timer made for 10 s would notice a 1 s timeout late).
    private func restartKeepAlive() {
        let old = lock.withLock { () -> DispatchSourceTimer? in
            defer { keepAlive = nil }; return keepAlive
        }
        guard let old else { return }
        old.cancel()
        startKeepAlive()
    }

    private func checkLiveness() {
        let asked = DispatchTime.now().uptimeNanoseconds
        let (connected, ping) = lock.withLock { () -> ([PeerConnection], Bool) in
            let connected = peers.values.filter(\.connected)
            let now = Date()
            guard now.timeIntervalSince(lastPing) >= storedLivenessTimeout / 3 else { return (connected, false) }
            lastPing = now
            return (connected, true)
        }
        if ping { for c in connected { c.link.send(.ping) } }
        // Judged on each link's event loop, after what the loop still had to do (its tasks run in order).
        for c in connected { c.link.execute { [weak self] in self?.judgeSilence(of: c, askedAt: asked) } }
    }

    /// Drops a peer silent for the timeout: no whole message and no octets either (a large frame still arriving
    /// over a slow link is the peer talking; a link we stopped reading is not counted). A loop that ran this
    /// late had fallen behind (overloaded, or its process starved of processor time): the peer's octets may
    /// have waited unread meanwhile, so that silence was ours, and it counts again from now, as after a pause.
    /// (All of a test's sessions share one loop: under ThreadSanitizer on a saturated machine it fell over
    /// 10 s behind, and every peer of an eight-peer mesh dropped every other.)
    private func judgeSilence(of c: PeerConnection, askedAt asked: UInt64) {
        let timeout = livenessTimeout
        let late = TimeInterval(DispatchTime.now().uptimeNanoseconds &- asked) / 1e9
        if late > timeout / 2 { return c.link.restartSilence() }
        let silent = lock.withLock { peers[c.peer.token] === c && c.connected && Date().timeIntervalSince(c.lastHeard) > timeout }
        guard silent, c.link.silence > timeout else { return }
        PeerLog.write("\(c.peer.displayName) silent for \(timeout) s: disconnected")
        // Reported now: closing a TLS link waits up to 5 s for the peer's close_notify, which a peer that fell
        // silent never sends. On the link's loop, where its transfers run.
        linkClosed(c, error: nil)
        c.link.close()
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
