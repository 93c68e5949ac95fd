// MCNearbyServiceBrowser (MCNearbyServiceBrowser.h): finds advertisers of a service type over mDNS and
// invites them. Records without our protocol marker (`_lx`) — real Apple devices, whose protocol is
// private — are ignored rather than shown and then failing; so is our own peer.
import Foundation
import DNSSDNIO
import PeerTransport
import PeerSession
import PeerBluetooth

public protocol MCNearbyServiceBrowserDelegate: NSObjectProtocol {
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
    /// A peer found over mDNS, Bluetooth or both: it is reported once, and lost when gone from both.
    struct Found {
        var peer: MCPeerID
        var network: [(host: String, port: UInt16)] = []
        var bluetooth: PeerBluetoothEndpoint?
        var addresses: [(host: String, port: UInt16)] { network + (bluetooth.map { [($0.host, $0.psm)] } ?? []) }
    }
    private var found: [UInt64: Found] = [:]
    /// Where a found peer can be reached: its TCP addresses first, then its Bluetooth endpoint.
    func addresses(of peer: MCPeerID) -> [(host: String, port: UInt16)] { lock.withLock { found[peer.token]?.addresses ?? [] } }
    private let queue = DispatchQueue(label: "MCNearbyServiceBrowser")
    package var mdns: MDNSService = .shared
    /// Where it looks (Linux addition): read when browsing starts.
    public var transports: MCTransports = .default
    private var bluetooth: (any PeerBluetoothNode)?
    private var bluetoothBrowse: UInt64?
    private var browsing = false
    /// Bluetooth peers whose info we are fetching, and when a failed fetch may be tried again.
    private var fetching: Set<UInt64> = []
    private var retryAfter: [UInt64: Date] = [:]
    static let concurrentFetches = 4
    static let maximumFound = 256

    /// Why browsing cannot start (a service type iOS refuses); reported by `startBrowsingForPeers()`.
    private let refusal: NSError?

    /// A service type that breaks RFC 6335's rules is accepted here and reported by `startBrowsingForPeers()`
    /// through `browser(_:didNotStartBrowsingForPeers:)` (NSNetServicesErrorDomain, -72008), as iOS does.
    /// Upper-case letters are valid and find the same peers as the lowercase type (see `MCServiceType`).
    public init(peer myPeerID: MCPeerID, serviceType: String) {
        refusal = MCServiceType.refusal(serviceType)
        self.myPeerID = myPeerID
        self.serviceType = serviceType
        super.init()
    }

    deinit {
        browse?.cancel()
        if let bluetooth {
            if let bluetoothBrowse { bluetooth.cancelBrowse(bluetoothBrowse) }
            bluetooth.release()
        }
    }

    open func startBrowsingForPeers() {
        lock.lock()
        defer { lock.unlock() }
        guard !browsing else { return }
        if let refusal {
            PeerLog.warning("MCNearbyServiceBrowser: not browsing: \(refusal.localizedFailureReason ?? "")")
            return queue.async { [self] in delegate?.browser(self, didNotStartBrowsingForPeers: refusal) }
        }
        browsing = true
        if transports.contains(.network) {
            browse = mdns.browse(serviceType: "_\(MCServiceType.canonical(serviceType))._tcp") { [weak self] e in self?.event(e) }
        }
        if transports.contains(.bluetooth) {
            if bluetooth == nil { bluetooth = PeerBluetoothNodes.acquire(forPeer: myPeerID.token) }
            if let node = bluetooth {
                bluetoothBrowse = node.browse(service: PeerAdvert.serviceUUID(forServiceType: MCServiceType.canonical(serviceType))) { [weak self] e in self?.bluetoothEvent(e) }
            } else if !transports.contains(.network) {
                let e = MCError(.unavailable, userInfo: [NSLocalizedFailureReasonErrorKey: PeerBluetoothNodes.unavailableReason])
                queue.async { [self] in delegate?.browser(self, didNotStartBrowsingForPeers: e) }
            }
        }
    }

    open func stopBrowsingForPeers() {
        let (b, bt) = lock.withLock { () -> (MDNSBrowse?, UInt64?) in
            defer { browse = nil; bluetoothBrowse = nil; browsing = false; found.removeAll(); fetching.removeAll(); retryAfter.removeAll() }
            return (browse, bluetoothBrowse)
        }
        b?.cancel()
        if let bt { bluetooth?.cancelBrowse(bt) }
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
                let name = s.txt["_d"], MCPeerID.isValidDisplayName(name)
            else { return }
            // IPv4 first, then IPv6 (link-local ones carry their interface).
            let addrs = (s.addresses.filter { !$0.contains(":") } + s.addresses.filter { $0.contains(":") }).map { (host: $0, port: s.port) }
            var info = s.txt
            info["_d"] = nil
            info["_lx"] = nil
            report(token: token, name: name, info: info) { $0.network = addrs }
        case let .lost(instance):
            guard let token = MCPeerID.token(fromInstance: instance) else { return }
            forget(token: token) { $0.network = [] }
        case let .failed(error):
            queue.async { [self] in delegate?.browser(self, didNotStartBrowsingForPeers: MCError(.unavailable, userInfo: [NSLocalizedFailureReasonErrorKey: "\(error)"])) }
        }
    }

    /// Records where a peer was found; reports it when it is new.
    private func report(token: UInt64, name: String, info: [String: String], _ update: (inout Found) -> Void) {
        let (peer, isNew) = lock.withLock { () -> (MCPeerID, Bool) in
            let new = found[token] == nil
            var f = found[token] ?? Found(peer: MCPeerID(token: token, displayName: name))
            update(&f)
            found[token] = f
            return (f.peer, new && browsing)
        }
        guard isNew else { return }
        let shown = info.isEmpty ? nil : info
        queue.async { [self] in delegate?.browser(self, foundPeer: peer, withDiscoveryInfo: shown) }
    }

    /// A transport lost the peer; it is lost once no transport has it.
    private func forget(token: UInt64, _ update: (inout Found) -> Void) {
        let gone = lock.withLock { () -> MCPeerID? in
            guard var f = found[token] else { return nil }
            update(&f)
            if f.network.isEmpty && f.bluetooth == nil {
                found[token] = nil
                return f.peer
            }
            found[token] = f
            return nil
        }
        guard let gone else { return }
        queue.async { [self] in delegate?.browser(self, lostPeer: gone) }
    }

    // MARK: Bluetooth

    private func bluetoothEvent(_ e: PeerBrowseEvent) {
        switch e {
        case let .seen(token, endpoint):
            guard token != myPeerID.token else { return }
            let fetch = lock.withLock { () -> Bool in
                guard browsing, !fetching.contains(token) else { return false }
                if let f = found[token], f.bluetooth == endpoint { return false }
                let now = Date()
                if let t = retryAfter[token], t > now { return false }
                // A crowd (or a flood of made-up tokens) is taken a few at a time, within a bounded table.
                guard fetching.count < Self.concurrentFetches, found.count < Self.maximumFound else { return false }
                if retryAfter.count > Self.maximumFound { retryAfter = retryAfter.filter { $0.value > now } }
                fetching.insert(token)
                return true
            }
            if fetch { fetchInfo(token: token, at: endpoint) }
        case let .lost(token):
            forget(token: token) { $0.bluetooth = nil }
        }
    }

    /// Asks a peer seen over Bluetooth for its display name and discoveryInfo (one short channel), then
    /// reports it.
    private func fetchInfo(token: UInt64, at endpoint: PeerBluetoothEndpoint) {
        guard let node = bluetooth else { return }
        let me = PeerIdentity(token: myPeerID.token, displayName: myPeerID.displayName)
        node.connect(to: endpoint, tls: nil) { [weak self] r in
            guard let self else { return }
            guard case let .success(link) = r else { return fetchFailed(token) }
            let state = FetchState()
            link.onMessage = { [weak self] m in
                guard let self else { return link.close() }
                switch m {
                case let .hello(_, id, _, _):
                    guard id.token == token, MCPeerID.isValidDisplayName(id.displayName) else {
                        PeerLog.warning("\(endpoint.host) announced token \(token) but said hello as \(id.token); ignored")
                        return link.close()
                    }
                    state.name = id.displayName
                case let .info(txt):
                    guard let name = state.name, !state.done else { return link.close() }
                    if let why = MCServiceType.discoveryInfoFailure(txt) {
                        PeerLog.warning("\(endpoint.host) sent discoveryInfo that no advertiser may have (\(why)); ignored")
                        return link.close()
                    }
                    state.done = true
                    link.send(.bye)
                    link.close()
                    lock.withLock { _ = fetching.remove(token) }
                    report(token: token, name: name, info: txt) { $0.bluetooth = endpoint }
                default:
                    link.close()
                }
            }
            link.onClose = { [weak self] _ in if !state.done { self?.fetchFailed(token) } }
            link.send([.hello(version: PeerMessage.version, identity: me, port: 0), .infoRequest])
            DispatchQueue.global().asyncAfter(deadline: .now() + 5) { if !state.done { link.close() } }
        }
    }

    private func fetchFailed(_ token: UInt64) {
        lock.withLock {
            fetching.remove(token)
            retryAfter[token] = Date().addingTimeInterval(2)
        }
    }
}

/// One info exchange (on its link's loop).
private final class FetchState: @unchecked Sendable {
    private let lock = NSLock()
    private var _name: String?
    private var _done = false
    var name: String? {
        get { lock.withLock { _name } }
        set { lock.withLock { _name = newValue } }
    }
    var done: Bool {
        get { lock.withLock { _done } }
        set { lock.withLock { _done = newValue } }
    }
}
