// GKSession (GKSession.h) on the Multipeer engine: one engine, two façades. The session ID becomes the
// service type (only sessions with the same ID see each other); a server advertises, a client browses, a
// peer does both; connect = invite, a connection request = an incoming invitation, accept/deny answer it.
// Peer IDs are strings: the decimal form of the peer's 64-bit token. As GKSession documents, traffic is not
// encrypted. Delegate calls and received data arrive on the main queue, as on iOS (a command-line program
// must run it: dispatchMain() or RunLoop.main.run()); `delegateQueue` may name another.
import Foundation
import MultipeerConnectivity

open class GKSession: NSObject, @unchecked Sendable {
    public let sessionID: String!
    public let displayName: String!
    public let sessionMode: GKSessionMode
    open weak var delegate: (any GKSessionDelegate)!
    /// Where delegate calls and received data are delivered (the main queue, as on iOS).
    public var delegateQueue: DispatchQueue = .main
    /// How long a silent peer stays connected: 20 s by default.
    open var disconnectTimeout: TimeInterval = 20 {
        didSet { mc.livenessTimeout = disconnectTimeout }
    }

    /// Reliable messages up to 10 MB, unreliable ones up to 64 KB (iOS documents a limit without a figure;
    /// beyond these, sending throws `dataTooBigError`).
    public static let maximumReliableData = 10 * 1024 * 1024
    public static let maximumUnreliableData = 64 * 1024

    let mc: MCSession
    let me: MCPeerID
    let engine: GKEngine

    /// `sessionID` nil uses the program's name (iOS: the bundle identifier); `name` nil the host name.
    /// Apple declares this initializer `init!`, so `let s = GKSession(…)` is a `GKSession?` here as there;
    /// it never fails.
    public init!(sessionID: String!, displayName name: String!, sessionMode mode: GKSessionMode) {
        let id = sessionID ?? ProcessInfo.processInfo.processName
        self.sessionID = id
        var display = name ?? ProcessInfo.processInfo.hostName
        while display.utf8.count > 63 { display.removeLast() }
        if display.isEmpty { display = "GameKit peer" }
        self.displayName = display
        self.sessionMode = mode
        me = MCPeerID(displayName: display)
        mc = MCSession(peer: me, securityIdentity: nil, encryptionPreference: .none)
        engine = GKEngine(serviceType: GKSession.serviceType(for: id))
        super.init()
        mc.livenessTimeout = disconnectTimeout
        engine.attach(self)
    }

    deinit {
        engine.stop()
        mc.disconnect()
    }

    /// This peer's ID.
    open var peerID: String! { String(me.token) }

    /// Turns advertising (server, peer) and browsing (client, peer) on or off.
    open var isAvailable: Bool {
        get { engine.available }
        set { engine.setAvailable(newValue, mode: sessionMode) }
    }
    @available(*, unavailable, renamed: "isAvailable")
    open var available: Bool { isAvailable }

    /// The peer's display name; nil for a peer this session never saw (Apple returns `String!` too).
    open func displayName(forPeer peerID: String!) -> String! {
        guard let peerID else { return nil }
        return peerID == String(me.token) ? displayName : engine.peer(peerID)?.displayName
    }

    // MARK: Connecting

    /// Asks a peer found while browsing to connect; its delegate decides. Failures arrive in
    /// `session(_:connectionWithPeerFailed:withError:)`.
    open func connect(toPeer peerID: String!, withTimeout timeout: TimeInterval) {
        guard let peerID, let peer = engine.peer(peerID) else {
            let id = peerID ?? ""
            return report { $0.session(self, connectionWithPeerFailed: id, withError: GKSessionError(.peerNotFoundError)) }
        }
        engine.connect(peer, session: mc, timeout: timeout)
    }

    open func cancelConnect(toPeer peerID: String!) {
        guard let peerID, let peer = engine.peer(peerID) else { return }
        engine.cancelConnect(peer, session: mc)
    }

    /// Accepts a connection request; throws when there is none from this peer (answered, cancelled, timed out).
    open func acceptConnection(fromPeer peerID: String!) throws {
        guard let peerID, engine.answer(peerID, accept: true, session: mc) else { throw GKSessionError(.cancelledError) }
    }

    open func denyConnection(fromPeer peerID: String!) {
        guard let peerID else { return }
        _ = engine.answer(peerID, accept: false, session: mc)
    }

    // MARK: Data

    /// Sends to the given peers (peer ID strings, as `peers(with:)` returns them). Throws
    /// `invalidParameterError` for nil data, no peers or an element that is not a peer ID, `dataTooBigError`
    /// beyond the mode's limit, `notConnectedError` for a peer not connected.
    open func send(_ data: Data!, toPeers peers: [Any]!, with mode: GKSendDataMode) throws {
        guard let data, let peers, !peers.isEmpty else { throw GKSessionError(.invalidParameterError) }
        let ids = try peers.map { p -> String in
            guard let id = p as? String else { throw GKSessionError(.invalidParameterError, userInfo: [NSLocalizedDescriptionKey: "\(p) is not a peer ID"]) }
            return id
        }
        let limit = mode == .reliable ? Self.maximumReliableData : Self.maximumUnreliableData
        guard data.count <= limit else { throw GKSessionError(.dataTooBigError) }
        let targets = try ids.map { id -> MCPeerID in
            guard let p = engine.peer(id), mc.connectedPeers.contains(p) else { throw GKSessionError(.notConnectedError) }
            return p
        }
        do { try mc.send(data, toPeers: targets, with: mode == .reliable ? .reliable : .unreliable) } catch { throw GKSessionError(.notConnectedError) }
    }

    open func sendData(toAllPeers data: Data!, with mode: GKSendDataMode) throws {
        let all = mc.connectedPeers.map { String($0.token) }
        guard !all.isEmpty else { throw GKSessionError(.notConnectedError) }
        try send(data, toPeers: all, with: mode)
    }

    /// The handler's `receiveData(_:fromPeer:inSession:context:)` gets every message, with `context`.
    ///
    /// iOS finds that method by its selector on any object; Swift on Linux cannot look a method up by name,
    /// so the handler must adopt `GKSessionDataReceiveHandler` (the method keeps its name: add the conformance,
    /// drop `@objc`), or the app passes a closure to `setDataReceiveHandler(withContext:_:)`. Any other object
    /// is refused at this call — the process stops with a message saying so — rather than being dropped so
    /// that data would silently never arrive. nil removes the handler, as on iOS.
    open func setDataReceiveHandler(_ handler: Any!, withContext context: UnsafeMutableRawPointer!) {
        guard let handler else { return engine.setHandler(nil, closure: nil, context: context) }
        guard let h = handler as? GKSessionDataReceiveHandler else {
            preconditionFailure(GKSession.refusedHandlerMessage(for: handler))
        }
        engine.setHandler(h, closure: nil, context: context)
    }

    /// Why `setDataReceiveHandler(_:withContext:)` refuses a handler, and what to write instead.
    static func refusedHandlerMessage(for handler: Any) -> String {
        "GKSession.setDataReceiveHandler: \(type(of: handler)) does not adopt GKSessionDataReceiveHandler, so its "
            + "receiveData(_:fromPeer:inSession:context:) cannot be called on Linux (no Objective-C selectors). "
            + "Add `extension \(type(of: handler)): GKSessionDataReceiveHandler {}` (the method keeps its name; drop @objc), "
            + "or pass a closure to setDataReceiveHandler(withContext:_:)."
    }

    /// The closure form of the data-receive handler (Linux addition).
    public func setDataReceiveHandler(
        withContext context: UnsafeMutableRawPointer? = nil,
        _ handler: @escaping (Data, String, GKSession, UnsafeMutableRawPointer?) -> Void
    ) {
        engine.setHandler(nil, closure: handler, context: context)
    }

    // MARK: Leaving

    /// Disconnects `peerID` from every peer of the session (a kick); our own ID leaves the session.
    open func disconnectPeer(fromAllPeers peerID: String!) {
        guard let peerID else { return }
        if peerID == String(me.token) { return disconnectFromAllPeers() }
        guard let p = engine.peer(peerID) else { return }
        mc.evict(p)
    }

    /// The local peer leaves.
    open func disconnectFromAllPeers() { mc.disconnect() }

    /// The IDs (strings) of the peers in `state`. Apple's type is `[Any]!`; this one is never nil (an empty
    /// array when there are none), so code written for either answer works.
    open func peers(with state: GKPeerConnectionState) -> [Any]! {
        peerIDs(with: state)
    }

    /// `peers(with:)` as strings, never nil (for our own callers).
    func peerIDs(with state: GKPeerConnectionState) -> [String] {
        engine.peers(in: state, connected: mc.connectedPeers).map { String($0.token) }
    }

    func report(_ body: @escaping (any GKSessionDelegate) -> Void) {
        let b = Unchecked(body)
        delegateQueue.async { [self] in if let d = delegate { b.value(d) } }
    }

    /// A session ID that is a valid service type is used as is; any other maps to `gk` + base36 of its
    /// FNV-1a hash (the same on every peer).
    static func serviceType(for id: String) -> String {
        if MCServiceType.isValid(id) { return id }
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in id.utf8 { h = (h ^ UInt64(b)) &* 0x0000_0100_0000_01B3 }
        return "gk" + String(String(h, radix: 36).prefix(13))
    }
}
