// MCNearbyServiceAdvertiser (MCNearbyServiceAdvertiser.h): advertises the local peer over mDNS
// (`_<serviceType>._tcp`, instance = base36 of the peer's token, TXT = discoveryInfo + `_d` display name +
// `_lx` protocol marker) and hands invitations to its delegate.
import Foundation
import DNSSDNIO
import PeerSession
import PeerTransport

public protocol MCNearbyServiceAdvertiserDelegate: AnyObject {
    func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID, withContext context: Data?,
                    invitationHandler: @escaping (Bool, MCSession?) -> Void)
    func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: any Error)
}

public extension MCNearbyServiceAdvertiserDelegate {
    func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: any Error) {}
}

open class MCNearbyServiceAdvertiser: NSObject, @unchecked Sendable {
    public let myPeerID: MCPeerID
    public let discoveryInfo: [String: String]?
    public let serviceType: String
    open weak var delegate: (any MCNearbyServiceAdvertiserDelegate)? {
        get { lock.withLock { storedDelegate } }
        set { lock.withLock { storedDelegate = newValue } }
    }
    private weak var storedDelegate: (any MCNearbyServiceAdvertiserDelegate)?
    private let lock = NSLock()
    private var listener: PeerListener?
    private var registration: MDNSRegistration?
    private let queue = DispatchQueue(label: "MCNearbyServiceAdvertiser")
    /// The mDNS service it registers with (the process-wide one unless a test gives another).
    package var mdns: MDNSService = .shared

    /// Traps, as iOS raises an exception, on an invalid service type or discoveryInfo.
    public init(peer myPeerID: MCPeerID, discoveryInfo info: [String: String]?, serviceType: String) {
        MCServiceType.require(serviceType)
        if let why = MCServiceType.discoveryInfoFailure(info) { preconditionFailure("Invalid discoveryInfo passed to MCNearbyServiceAdvertiser: \(why)") }
        self.myPeerID = myPeerID
        self.discoveryInfo = info
        self.serviceType = serviceType
        super.init()
    }

    deinit {
        registration?.cancel()
        listener?.close()
    }

    open func startAdvertisingPeer() {
        lock.lock()
        defer { lock.unlock() }
        guard registration == nil else { return }
        do {
            let l = try listener ?? PeerTransport.shared.listen(tls: TLSIdentities.identity(for: myPeerID)) { [weak self] link in self?.accepted(link) }
            listener = l
            var txt = discoveryInfo ?? [:]
            txt["_d"] = myPeerID.displayName
            txt["_lx"] = String(PeerMessage.version)
            registration = mdns.register(serviceType: "_\(serviceType)._tcp", instanceName: myPeerID.instanceName, port: l.port, txt: txt) { [weak self] e in
                guard let self, case let .failed(error) = e else { return }
                queue.async { [self] in delegate?.advertiser(self, didNotStartAdvertisingPeer: MCError(.unavailable, userInfo: [NSLocalizedFailureReasonErrorKey: "\(error)"])) }
            }
        } catch {
            queue.async { [self] in delegate?.advertiser(self, didNotStartAdvertisingPeer: MCError(.unavailable, userInfo: [NSLocalizedFailureReasonErrorKey: "\(error)"])) }
        }
    }

    /// Stops advertising (peers see us go at once: mDNS goodbyes); pending invitations stay answerable.
    open func stopAdvertisingPeer() {
        let r = lock.withLock { () -> MDNSRegistration? in defer { registration = nil }; return registration }
        r?.cancel()
    }

    private func accepted(_ link: PeerLink) {
        var hello: (MCPeerID, UInt16)?
        link.send(.hello(version: PeerMessage.version, identity: PeerIdentity(token: myPeerID.token, displayName: myPeerID.displayName), port: 0))
        link.onMessage = { [weak self] m in
            guard let self else { return link.close() }
            switch m {
            case let .hello(_, id, port):
                hello = (MCPeerID(token: id.token, displayName: id.displayName), port)
            case let .invite(inviteID, mesh, context):
                guard let (peer, port) = hello else { return link.close() }
                let answered = Unchecked(NSLock())
                var done = false
                let ctx = context.map { Data($0) }
                let handler: (Bool, MCSession?) -> Void = { accept, session in
                    guard answered.value.withLock({ () -> Bool in defer { done = true }; return !done }) else { return }
                    guard accept, let session else {
                        link.send(.inviteReply(id: inviteID, accepted: false))
                        return link.close()
                    }
                    session.acceptInvitation(link: link, peer: peer, inviteID: inviteID, mesh: mesh, memberPort: port)
                }
                let h = Unchecked(handler)
                queue.async { [self] in
                    guard let d = delegate else { return h.value(false, nil) }
                    d.advertiser(self, didReceiveInvitationFromPeer: peer, withContext: ctx, invitationHandler: h.value)
                }
            default:
                PeerLog.warning("\(link.remoteHost) sent \(m) to an advertiser; closing")
                link.close()
            }
        }
    }
}
