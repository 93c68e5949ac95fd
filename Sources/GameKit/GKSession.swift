// GKSession (GKSession.h) on the Multipeer engine: one engine, two façades. The session ID becomes the
// service type (only sessions with the same ID see each other); a server advertises, a client browses, a
// peer does both; connect = invite, a connection request = an incoming invitation, accept/deny answer it.
// Peer IDs are strings: the decimal form of the peer's 64-bit token. As GKSession documents, traffic is not
// encrypted. Delegate calls and received data arrive on the main queue, as on iOS (a command-line program
// must run it: dispatchMain() or RunLoop.main.run()); `delegateQueue` may name another.
import Foundation
import MultipeerConnectivity

open class GKSession: NSObject, @unchecked Sendable {
    public let sessionID: String
    public let displayName: String
    public let sessionMode: GKSessionMode
    open weak var delegate: (any GKSessionDelegate)?
    /// Where delegate calls and received data are delivered (the main queue, as on iOS).
    public var delegateQueue: DispatchQueue = .main
    /// How long a silent peer stays connected: 20 s by default.
    open var disconnectTimeout: TimeInterval = 20 {
        didSet { mc.livenessTimeout = disconnectTimeout }
    }

    /// Reliable messages up to 10 MB, unreliable ones up to 64 KB (iOS documents a limit without a figure;
    /// beyond these, sendData throws dataTooBig).
    public static let maximumReliableData = 10 * 1024 * 1024
    public static let maximumUnreliableData = 64 * 1024

    let mc: MCSession
    let me: MCPeerID
    let engine: GKEngine

    /// `sessionID` nil uses the program's name (iOS: the bundle identifier); `name` nil the host name.
    public init(sessionID: String?, displayName name: String?, sessionMode mode: GKSessionMode) {
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
    open var peerID: String { String(me.token) }

    /// Turns advertising (server, peer) and browsing (client, peer) on or off.
    open var isAvailable: Bool {
        get { engine.available }
        set { engine.setAvailable(newValue, mode: sessionMode) }
    }
    @available(*, unavailable, renamed: "isAvailable")
    open var available: Bool { isAvailable }

    open func displayName(forPeer peerID: String) -> String? {
        peerID == self.peerID ? displayName : engine.peer(peerID)?.displayName
    }

    // MARK: Connecting

    /// Asks a peer found while browsing to connect; its delegate decides. Failures arrive in
    /// `session(_:connectionWithPeerFailed:withError:)`.
    open func connect(toPeer peerID: String, withTimeout timeout: TimeInterval) {
        guard let peer = engine.peer(peerID) else {
            return report { $0.session(self, connectionWithPeerFailed: peerID, withError: GKSessionError(.peerNotFound)) }
        }
        engine.connect(peer, session: mc, timeout: timeout)
    }

    open func cancelConnect(toPeer peerID: String) {
        guard let peer = engine.peer(peerID) else { return }
        engine.cancelConnect(peer, session: mc)
    }

    /// Accepts a connection request; throws when there is none from this peer (answered, cancelled, timed out).
    open func acceptConnection(fromPeer peerID: String) throws {
        guard engine.answer(peerID, accept: true, session: mc) else { throw GKSessionError(.cancelled) }
    }

    open func denyConnection(fromPeer peerID: String) {
        _ = engine.answer(peerID, accept: false, session: mc)
    }

    // MARK: Data

    open func sendData(_ data: Data, toPeers peers: [String], with mode: GKSendDataMode) throws {
        guard !peers.isEmpty else { throw GKSessionError(.invalidParameter) }
        let limit = mode == .reliable ? Self.maximumReliableData : Self.maximumUnreliableData
        guard data.count <= limit else { throw GKSessionError(.dataTooBig) }
        let targets = try peers.map { id -> MCPeerID in
            guard let p = engine.peer(id), mc.connectedPeers.contains(p) else { throw GKSessionError(.notConnected) }
            return p
        }
        do { try mc.send(data, toPeers: targets, with: mode == .reliable ? .reliable : .unreliable) } catch { throw GKSessionError(.notConnected) }
    }

    open func sendDataToAllPeers(_ data: Data, with mode: GKSendDataMode) throws {
        let all = mc.connectedPeers.map { String($0.token) }
        guard !all.isEmpty else { throw GKSessionError(.notConnected) }
        try sendData(data, toPeers: all, with: mode)
    }

    /// The handler's `receiveData(_:fromPeer:inSession:context:)` gets every message, with `context`.
    open func setDataReceiveHandler(_ handler: Any?, withContext context: UnsafeMutableRawPointer?) {
        engine.setHandler(handler as? GKSessionDataReceiveHandler, closure: nil, context: context)
    }

    /// The closure form of the data-receive handler.
    public func setDataReceiveHandler(withContext context: UnsafeMutableRawPointer? = nil,
                                      _ handler: @escaping (Data, String, GKSession, UnsafeMutableRawPointer?) -> Void) {
        engine.setHandler(nil, closure: handler, context: context)
    }

    // MARK: Leaving

    /// Disconnects `peerID` from every peer of the session (a kick).
    open func disconnectPeerFromAllPeers(_ peerID: String) {
        if peerID == self.peerID { return disconnectFromAllPeers() }
        guard let p = engine.peer(peerID) else { return }
        mc.evict(p)
    }

    /// The local peer leaves.
    open func disconnectFromAllPeers() { mc.disconnect() }

    open func peers(with state: GKPeerConnectionState) -> [String] {
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
