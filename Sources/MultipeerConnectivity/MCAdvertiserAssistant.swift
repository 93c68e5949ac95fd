// MCAdvertiserAssistant (MCAdvertiserAssistant.h): advertises and asks the user about each invitation.
// Linux has no system alert: `invitationPresenter` decides (default: accept, as a user tapping Accept
// would; `MCTerminalPrompt.invitation` asks on the terminal). The delegate hears will-present/did-dismiss
// around each decision, as on iOS.
import Foundation

public protocol MCAdvertiserAssistantDelegate: NSObjectProtocol {
    func advertiserAssistantWillPresentInvitation(_ advertiserAssistant: MCAdvertiserAssistant)
    func advertiserAssistantDidDismissInvitation(_ advertiserAssistant: MCAdvertiserAssistant)
}

public extension MCAdvertiserAssistantDelegate {
    func advertiserAssistantWillPresentInvitation(_ advertiserAssistant: MCAdvertiserAssistant) {}
    func advertiserAssistantDidDismissInvitation(_ advertiserAssistant: MCAdvertiserAssistant) {}
}

open class MCAdvertiserAssistant: NSObject, MCNearbyServiceAdvertiserDelegate, @unchecked Sendable {
    public let session: MCSession
    public let discoveryInfo: [String: String]?
    public let serviceType: String
    open weak var delegate: (any MCAdvertiserAssistantDelegate)?
    /// Decides an invitation (peer, context, answer). Called on a private queue; answer exactly once.
    public var invitationPresenter: (MCPeerID, Data?, @escaping (Bool) -> Void) -> Void = { _, _, answer in answer(true) }
    let advertiser: MCNearbyServiceAdvertiser

    public init(serviceType: String, discoveryInfo info: [String: String]?, session: MCSession) {
        self.serviceType = serviceType
        self.discoveryInfo = info
        self.session = session
        advertiser = MCNearbyServiceAdvertiser(peer: session.myPeerID, discoveryInfo: info, serviceType: serviceType)
        super.init()
        advertiser.delegate = self
    }

    open func start() { advertiser.startAdvertisingPeer() }
    open func stop() { advertiser.stopAdvertisingPeer() }

    /// Advertiser plumbing (Linux addition, not for apps): an invitation, answered through `invitationPresenter`.
    public func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID, withContext context: Data?,
        invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        delegate?.advertiserAssistantWillPresentInvitation(self)
        invitationPresenter(peerID, context) { [self] accept in
            delegate?.advertiserAssistantDidDismissInvitation(self)
            invitationHandler(accept, accept ? session : nil)
        }
    }
}
