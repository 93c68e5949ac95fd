// MCNearbyServiceBrowser (MCNearbyServiceBrowser.h): finds advertisers of a service type over mDNS and
// invites them. Records without our protocol marker (`_lx`) — real Apple devices, whose protocol is
// private — are ignored rather than shown and then failing; so is our own peer.
import Foundation
import DNSSDNIO
import PeerTransport

public protocol MCNearbyServiceBrowserDelegate: AnyObject {
    func browser(_ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?)
    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID)
    func browser(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: any Error)
}

public extension MCNearbyServiceBrowserDelegate {
    func browser(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: any Error) {}
}

open class MCNearbyServiceBrowser: NSObject, @unchecked Sendable {
    public let myPeerID: MCPeerID
    public let serviceType: String
    open weak var delegate: (any MCNearbyServiceBrowserDelegate)? {
        get { lock.withLock { storedDelegate } }
        set { lock.withLock { storedDelegate = newValue } }
    }
    private weak var storedDelegate: (any MCNearbyServiceBrowserDelegate)?
    private let lock = NSLock()
    private var browse: MDNSBrowse?
    private var found: [UInt64: (peer: MCPeerID, addresses: [(host: String, port: UInt16)])] = [:]
    private let queue = DispatchQueue(label: "MCNearbyServiceBrowser")
    package var mdns: MDNSService = .shared

    public init(peer myPeerID: MCPeerID, serviceType: String) {
        MCServiceType.require(serviceType)
        self.myPeerID = myPeerID
        self.serviceType = serviceType
        super.init()
    }

    deinit { browse?.cancel() }

    open func startBrowsingForPeers() {
        lock.lock()
        defer { lock.unlock() }
        guard browse == nil else { return }
        browse = mdns.browse(serviceType: "_\(serviceType)._tcp") { [weak self] e in self?.event(e) }
    }

    open func stopBrowsingForPeers() {
        let b = lock.withLock { () -> MDNSBrowse? in defer { browse = nil; found.removeAll() }; return browse }
        b?.cancel()
    }

    /// Invites a found peer into `session`; a timeout of 0 or less means 30 s, as on iOS.
    open func invitePeer(_ peerID: MCPeerID, to session: MCSession, withContext context: Data?, timeout: TimeInterval) {
        guard let entry = lock.withLock({ found[peerID.token] }) else {
            PeerLog.warning("invitePeer: \(peerID.displayName) was not found by this browser")
            session.notify(peerID, .notConnected)
            return
        }
        session.invite(entry.peer, at: entry.addresses, context: context, timeout: timeout)
    }

    private func event(_ e: BrowseEvent) {
        switch e {
        case let .found(s), let .updated(s):
            guard s.txt["_lx"] != nil, let token = MCPeerID.token(fromInstance: s.instanceName), token != myPeerID.token,
                  let name = s.txt["_d"], MCPeerID.isValidDisplayName(name) else { return }
            // IPv4 first, then IPv6 (link-local ones carry their interface).
            let addrs = (s.addresses.filter { !$0.contains(":") } + s.addresses.filter { $0.contains(":") }).map { (host: $0, port: s.port) }
            var info = s.txt
            info["_d"] = nil
            info["_lx"] = nil
            let (peer, isNew) = lock.withLock { () -> (MCPeerID, Bool) in
                let p = found[token]?.peer ?? MCPeerID(token: token, displayName: name)
                let new = found[token] == nil
                found[token] = (p, addrs)
                return (p, new)
            }
            guard isNew else { return }
            let shown = info.isEmpty ? nil : info
            queue.async { [self] in delegate?.browser(self, foundPeer: peer, withDiscoveryInfo: shown) }
        case let .lost(instance):
            guard let token = MCPeerID.token(fromInstance: instance), let p = lock.withLock({ found.removeValue(forKey: token) }) else { return }
            queue.async { [self] in delegate?.browser(self, lostPeer: p.peer) }
        case let .failed(error):
            queue.async { [self] in delegate?.browser(self, didNotStartBrowsingForPeers: MCError(.unavailable, userInfo: [NSLocalizedFailureReasonErrorKey: "\(error)"])) }
        }
    }
}
