// MCNearbyServiceAdvertiser (MCNearbyServiceAdvertiser.h): advertises the local peer over mDNS
// (`_<serviceType>._tcp`, instance = base36 of the peer's token, TXT = discoveryInfo + `_d` display name +
// `_lx` protocol marker) and hands invitations to its delegate.
import Foundation
import DNSSDNIO
import PeerSession
import PeerTransport
import PeerBluetooth

public protocol MCNearbyServiceAdvertiserDelegate: NSObjectProtocol {
    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID, withContext context: Data?,
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
    /// Where it advertises (Linux addition): read when advertising starts.
    public var transports: MCTransports = .default
    private var bluetooth: (any PeerBluetoothNode)?
    private var bluetoothPSM: UInt16 = 0
    private var bluetoothAdvert: UInt64?
    private var advertising = false

    /// Why advertising cannot start (what iOS refuses: a service type or discoveryInfo that breaks DNS-SD's
    /// rules); reported to the delegate by `startAdvertisingPeer`, as iOS reports it, instead of a crash.
    private let refusal: NSError?

    /// A service type that breaks RFC 6335's rules, or discoveryInfo that breaks RFC 6763's, is accepted here
    /// and reported by `startAdvertisingPeer()` through `advertiser(_:didNotStartAdvertisingPeer:)` (an
    /// NSError of NSNetServicesErrorDomain, -72008). Upper-case letters are valid (see `MCServiceType`).
    public init(peer myPeerID: MCPeerID, discoveryInfo info: [String: String]?, serviceType: String) {
        refusal =
            MCServiceType.refusal(serviceType)
            ?? MCServiceType.discoveryInfoFailure(info).map { MCServiceType.badArgument("Invalid discoveryInfo: \($0) (RFC 6763 §6)") }
        self.myPeerID = myPeerID
        self.discoveryInfo = info
        self.serviceType = serviceType
        super.init()
    }

    deinit {
        registration?.cancel()
        listener?.close()
        if let bluetooth {
            if let bluetoothAdvert { bluetooth.removeAdvert(bluetoothAdvert) }
            if bluetoothPSM != 0 { bluetooth.unlisten(bluetoothPSM) }
            bluetooth.release()
        }
    }

    open func startAdvertisingPeer() {
        lock.lock()
        defer { lock.unlock() }
        guard !advertising else { return }
        if let refusal {
            PeerLog.warning("MCNearbyServiceAdvertiser: not advertising: \(refusal.localizedFailureReason ?? "")")
            return queue.async { [self] in delegate?.advertiser(self, didNotStartAdvertisingPeer: refusal) }
        }
        advertising = true
        if transports.contains(.bluetooth) { startBluetooth() }
        guard transports.contains(.network) else { return }
        do {
            let l = try listener ?? PeerTransport.shared.listen(tls: TLSIdentities.identity(for: myPeerID)) { [weak self] link in self?.accepted(link) }
            listener = l
            var txt = discoveryInfo ?? [:]
            txt["_d"] = myPeerID.displayName
            txt["_lx"] = String(PeerMessage.version)
            registration = mdns.register(serviceType: "_\(MCServiceType.canonical(serviceType))._tcp", instanceName: myPeerID.instanceName, port: l.port, txt: txt) {
                [weak self] e in
                guard let self, case let .failed(error) = e else { return }
                queue.async { [self] in delegate?.advertiser(self, didNotStartAdvertisingPeer: MCError(.unavailable, userInfo: [NSLocalizedFailureReasonErrorKey: "\(error)"])) }
            }
        } catch {
            queue.async { [self] in delegate?.advertiser(self, didNotStartAdvertisingPeer: MCError(.unavailable, userInfo: [NSLocalizedFailureReasonErrorKey: "\(error)"])) }
        }
    }

    /// Stops advertising (peers see us go at once: mDNS goodbyes; over Bluetooth when our adverts stop
    /// being heard); pending invitations stay answerable.
    open func stopAdvertisingPeer() {
        let (r, advert) = lock.withLock { () -> (MDNSRegistration?, UInt64?) in
            defer { registration = nil; bluetoothAdvert = nil; advertising = false }
            return (registration, bluetoothAdvert)
        }
        r?.cancel()
        if let advert { bluetooth?.removeAdvert(advert) }
    }

    /// Over Bluetooth: an SPSM where invitations (and info requests) arrive, announced in our advert.
    /// Called with the lock held.
    private func startBluetooth() {
        if bluetooth == nil { bluetooth = PeerBluetoothNodes.acquire(forPeer: myPeerID.token) }
        guard let node = bluetooth else {
            let e = MCError(.unavailable, userInfo: [NSLocalizedFailureReasonErrorKey: PeerBluetoothNodes.unavailableReason])
            if !transports.contains(.network) { queue.async { [self] in delegate?.advertiser(self, didNotStartAdvertisingPeer: e) } }
            return
        }
        let advertise: @Sendable (UInt16) -> Void = { [weak self] psm in
            guard let self else { return }
            let advert = PeerAdvert(service: PeerAdvert.serviceUUID(forServiceType: MCServiceType.canonical(serviceType)), token: myPeerID.token, psm: psm)
            lock.withLock {
                guard advertising, bluetoothAdvert == nil else { return }
                bluetoothAdvert = node.addAdvert(advert, name: myPeerID.displayName) { [weak self] why in
                    // The device cannot put us on the air (BlueZ: every advertising slot taken, an adapter without LE).
                    guard let self else { return }
                    let e = MCError(.unavailable, userInfo: [NSLocalizedFailureReasonErrorKey: why])
                    queue.async { [self] in delegate?.advertiser(self, didNotStartAdvertisingPeer: e) }
                }
            }
        }
        if bluetoothPSM != 0 { return advertise(bluetoothPSM) }
        node.listen(tls: TLSIdentities.identity(for: myPeerID), onLink: { [weak self] link in self?.accepted(link) }) { [weak self] psm in
            guard let self else { return }
            guard let psm else {
                let e = MCError(.unavailable, userInfo: [NSLocalizedFailureReasonErrorKey: "no L2CAP SPSM free"])
                return queue.async { [self] in delegate?.advertiser(self, didNotStartAdvertisingPeer: e) }
            }
            lock.withLock { bluetoothPSM = psm }
            advertise(psm)
        }
    }

    private func accepted(_ link: PeerLink) {
        var hello: (MCPeerID, UInt16, PeerBluetoothEndpoint?)?
        link.send(.hello(version: PeerMessage.version, identity: PeerIdentity(token: myPeerID.token, displayName: myPeerID.displayName), port: 0))
        link.onMessage = { [weak self] m in
            guard let self else { return link.close() }
            switch m {
            case let .hello(_, id, port, bt):
                hello = (MCPeerID(token: id.token, displayName: id.displayName), port, bt)
            case .infoRequest:
                // A browser that found us over Bluetooth: what our TXT record says over mDNS.
                link.send(.info(discoveryInfo ?? [:]))
            case let .invite(inviteID, mesh, context):
                guard let (peer, port, bt) = hello else { return link.close() }
                let answered = Unchecked(NSLock())
                var done = false
                let ctx = context.map { Data($0) }
                let handler: (Bool, MCSession?) -> Void = { accept, session in
                    guard
                        answered.value.withLock({ () -> Bool in
                            defer { done = true }; return !done
                        })
                    else { return }
                    guard accept, let session else {
                        link.send(.inviteReply(id: inviteID, accepted: false))
                        return link.close()
                    }
                    session.acceptInvitation(link: link, peer: peer, inviteID: inviteID, mesh: mesh, memberPort: link.isBluetooth ? 0 : port, bluetooth: bt)
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
