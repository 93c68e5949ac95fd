// What a GKSession keeps about peers, mapped from Multipeer events: found peers (available/unavailable),
// connection requests waiting for accept/deny, connections in progress, and the data handler.
import Foundation
import Logging
import MultipeerConnectivity
import StackLog

final class GKEngine: NSObject, MCSessionDelegate, MCNearbyServiceAdvertiserDelegate, MCNearbyServiceBrowserDelegate, @unchecked Sendable {
    let serviceType: String
    private let lock = NSLock()
    private weak var owner: GKSession?
    private var advertiser: MCNearbyServiceAdvertiser?
    private var browser: MCNearbyServiceBrowser?
    private(set) var available = false
    private var known: [UInt64: MCPeerID] = [:]
    private var nearby: Set<UInt64> = []
    private var connecting: [UInt64: Date] = [:]
    private var connected: Set<UInt64> = []
    private var requests: [UInt64: (Bool, MCSession?) -> Void] = [:]
    /// The data-receive target: an object adopting GKSessionDataReceiveHandler, or a closure.
    private final class Receiver: @unchecked Sendable {
        let object: (any GKSessionDataReceiveHandler)?
        let closure: ((Data, String, GKSession, UnsafeMutableRawPointer?) -> Void)?
        let context: UnsafeMutableRawPointer?
        init(object: (any GKSessionDataReceiveHandler)?, closure: ((Data, String, GKSession, UnsafeMutableRawPointer?) -> Void)?, context: UnsafeMutableRawPointer?) {
            self.object = object
            self.closure = closure
            self.context = context
        }
    }
    private var receiver: Receiver?
    /// Observers inside GameKit (the peer picker): state changes and connection requests.
    var observers: [(String, GKPeerConnectionState?) -> Void] = []

    init(serviceType: String) {
        self.serviceType = serviceType
    }

    func attach(_ s: GKSession) {
        owner = s
        s.mc.delegate = self
    }

    func stop() {
        advertiser?.stopAdvertisingPeer()
        browser?.stopBrowsingForPeers()
    }

    func setAvailable(_ on: Bool, mode: GKSessionMode) {
        guard let s = owner else { return }
        lock.withLock { available = on }
        if on {
            if mode != .client, advertiser == nil {
                let a = MCNearbyServiceAdvertiser(peer: s.me, discoveryInfo: nil, serviceType: serviceType)
                a.delegate = self
                advertiser = a
            }
            if mode != .server, browser == nil {
                let b = MCNearbyServiceBrowser(peer: s.me, serviceType: serviceType)
                b.delegate = self
                browser = b
            }
            advertiser?.startAdvertisingPeer()
            browser?.startBrowsingForPeers()
        } else {
            advertiser?.stopAdvertisingPeer()
            browser?.stopBrowsingForPeers()
            let lost = lock.withLock { () -> [MCPeerID] in
                defer { nearby.removeAll() }; return nearby.compactMap { known[$0] }
            }
            for p in lost { changed(p, .stateUnavailable) }
        }
    }

    func peer(_ id: String) -> MCPeerID? {
        guard let t = UInt64(id) else { return nil }
        return lock.withLock { known[t] }
    }

    func connect(_ p: MCPeerID, session: MCSession, timeout: TimeInterval) {
        lock.withLock { connecting[p.token] = Date() }
        browser?.invitePeer(p, to: session, withContext: nil, timeout: timeout)
    }

    func cancelConnect(_ p: MCPeerID, session: MCSession) {
        lock.withLock { _ = connecting.removeValue(forKey: p.token) }
        session.cancelConnectPeer(p)
    }

    func answer(_ id: String, accept: Bool, session: MCSession) -> Bool {
        guard let t = UInt64(id), let h = lock.withLock({ requests.removeValue(forKey: t) }) else { return false }
        if accept { lock.withLock { connecting[t] = Date() } }
        h(accept, accept ? session : nil)
        return true
    }

    func setHandler(
        _ h: GKSessionDataReceiveHandler?, closure c: ((Data, String, GKSession, UnsafeMutableRawPointer?) -> Void)?,
        context ctx: UnsafeMutableRawPointer?
    ) {
        let r = Receiver(object: h, closure: c, context: ctx)
        lock.withLock { receiver = r }
    }

    func peers(in state: GKPeerConnectionState, connected now: [MCPeerID]) -> [MCPeerID] {
        lock.withLock {
            switch state {
            case .stateAvailable: return nearby.subtracting(now.map(\.token)).subtracting(connecting.keys).compactMap { known[$0] }.sorted { $0.token < $1.token }
            case .stateConnected: return now
            case .stateConnecting: return connecting.keys.compactMap { known[$0] }.sorted { $0.token < $1.token }
            default: return []
            }
        }
    }

    private func changed(_ p: MCPeerID, _ state: GKPeerConnectionState) {
        guard let s = owner else { return }
        let id = String(p.token)
        Logger(.gameKit).debug("peer state changed", metadata: ["session": "\(serviceType)", "peer": "\(id)", "state": "\(state)"])
        let obs = Unchecked(observers)
        s.delegateQueue.async {
            s.delegate?.session(s, peer: id, didChange: state)
            for o in obs.value { o(id, state) }
        }
    }

    // MARK: Multipeer events

    func browser(_ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?) {
        let new = lock.withLock { () -> Bool in
            known[peerID.token] = peerID; return nearby.insert(peerID.token).inserted
        }
        if new { changed(peerID, .stateAvailable) }
    }

    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {
        let was = lock.withLock { nearby.remove(peerID.token) != nil }
        if was { changed(peerID, .stateUnavailable) }
    }

    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID, withContext context: Data?,
        invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        guard let s = owner else { return invitationHandler(false, nil) }
        lock.withLock {
            known[peerID.token] = peerID
            requests[peerID.token] = invitationHandler
        }
        let id = String(peerID.token)
        let obs = Unchecked(observers)
        s.delegateQueue.async {
            s.delegate?.session(s, didReceiveConnectionRequestFromPeer: id)
            for o in obs.value { o(id, nil) }
        }
    }

    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        guard let s = owner else { return }
        lock.withLock { known[peerID.token] = peerID }
        switch state {
        case .connecting:
            lock.withLock { if connecting[peerID.token] == nil { connecting[peerID.token] = Date() } }
            changed(peerID, .stateConnecting)
        case .connected:
            lock.withLock {
                connecting[peerID.token] = nil
                connected.insert(peerID.token)
            }
            changed(peerID, .stateConnected)
        case .notConnected:
            let (wasConnected, wasConnecting) = lock.withLock { () -> (Bool, Bool) in
                (connected.remove(peerID.token) != nil, connecting.removeValue(forKey: peerID.token) != nil)
            }
            if wasConnected {
                changed(peerID, .stateDisconnected)
            } else if wasConnecting {
                let id = String(peerID.token)
                Logger(.gameKit).debug("connection failed", metadata: ["session": "\(serviceType)", "peer": "\(id)"])
                s.delegateQueue.async { s.delegate?.session(s, connectionWithPeerFailed: id, withError: GKSessionError(.connectionFailedError)) }
            }
        @unknown default:
            break
        }
    }

    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        guard let s = owner else { return }
        let id = String(peerID.token)
        // The handler is read where the data is delivered, after the state changes queued before it: an app
        // that sets it when it hears of the connection (the seed does, in didConnectPeer) gets the first message.
        s.delegateQueue.async { [self] in
            guard let r = lock.withLock({ receiver }) else { return }
            r.object?.receiveData(data, fromPeer: id, inSession: s, context: r.context)
            r.closure?(data, id, s, r.context)
        }
    }

    func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}
    func session(_ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, with progress: Progress) {}
    func session(_ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, at localURL: URL?, withError error: (any Error)?) {}
}
