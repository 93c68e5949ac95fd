// Multipeer Connectivity as an iOS app calls it, written only from Apple's Swift declarations
// (../shared/conformance/api-audit-mc-gk.md §1; each line names its audit row). Compiling this file is the
// check: a renamed or missing symbol, a different label or type fails the build. The functions run in
// SourceCompatRuntimeTests where they need no network.
import MultipeerConnectivity

// Rows 24–30: a session delegate implementing every requirement with Apple's spelling.
final class AppSessionDelegate: NSObject, MCSessionDelegate {
    var states: [MCSessionState] = []
    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {   // 25
        states.append(state)
        switch state {   // 31–34
        case .notConnected: break
        case .connecting: break
        case .connected: break
        @unknown default: break
        }
    }
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {}   // 26
    func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}   // 27
    func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        with progress: Progress
    ) {}   // 28
    func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        at localURL: URL?, withError error: Error?
    ) {}   // 29
    func session(
        _ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID,
        certificateHandler: @escaping (Bool) -> Void
    ) { certificateHandler(true) }   // 30
}

// Rows 70–72.
final class AppAdvertiserDelegate: NSObject, MCNearbyServiceAdvertiserDelegate {
    var session: MCSession?
    private let lock = NSLock()
    private var error: Error?
    var notStarted: Error? { lock.withLock { error } }
    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID, withContext context: Data?,
        invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        invitationHandler(true, session)
    }
    func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: Error) { lock.withLock { self.error = error } }
}

// Rows 81–84.
final class AppBrowserDelegate: NSObject, MCNearbyServiceBrowserDelegate {
    private let lock = NSLock()
    private var error: Error?
    var notStarted: Error? { lock.withLock { error } }
    func browser(_ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?) {}
    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {}
    func browser(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: Error) { lock.withLock { self.error = error } }
}

// Rows 93–95.
final class AppAssistantDelegate: NSObject, MCAdvertiserAssistantDelegate {
    func advertiserAssistantWillPresentInvitation(_ advertiserAssistant: MCAdvertiserAssistant) {}
    func advertiserAssistantDidDismissInvitation(_ advertiserAssistant: MCAdvertiserAssistant) {}
}

// Rows 104–107.
final class AppBrowserViewControllerDelegate: NSObject, MCBrowserViewControllerDelegate {
    func browserViewControllerDidFinish(_ browserViewController: MCBrowserViewController) {}
    func browserViewControllerWasCancelled(_ browserViewController: MCBrowserViewController) {}
    func browserViewController(
        _ browserViewController: MCBrowserViewController, shouldPresentNearbyPeer peerID: MCPeerID,
        withDiscoveryInfo info: [String: String]?
    ) -> Bool { true }
}

enum MultipeerSurface {
    /// Rows 1–7: MCPeerID, its coding and copying.
    static func peerID() throws -> MCPeerID {
        let me = MCPeerID(displayName: "KenshinCui")   // 1, 2
        let name: String = me.displayName   // 3
        precondition(!name.isEmpty)
        let archived = try NSKeyedArchiver.archivedData(withRootObject: me, requiringSecureCoding: MCPeerID.supportsSecureCoding)   // 5, 6
        let back = try NSKeyedUnarchiver.unarchivedObject(ofClass: MCPeerID.self, from: archived)   // 4
        let copy = me.copy() as! MCPeerID   // 7
        precondition(back == me && copy == me)
        return me
    }

    /// Rows 8–23 (the calls that need no network), 35–61.
    static func session(_ me: MCPeerID, delegate: AppSessionDelegate) -> MCSession {
        let session = MCSession(peer: me)   // 8, 9
        let secured = MCSession(peer: me, securityIdentity: nil, encryptionPreference: .required)   // 10
        session.delegate = delegate   // 11
        let _: MCPeerID = session.myPeerID   // 12
        let _: [Any]? = secured.securityIdentity   // 13
        let preference: MCEncryptionPreference = secured.encryptionPreference   // 14, 38
        switch preference {   // 39–41
        case .optional, .required, .none: break
        @unknown default: break
        }
        let peers: [MCPeerID] = session.connectedPeers   // 15
        do {
            try session.send(Data("hi".utf8), toPeers: peers, with: .reliable)   // 16, 35–37
            try session.send(Data(), toPeers: peers, with: .unreliable)
        } catch let error as MCError {   // 45
            let code: MCError.Code = error.code   // 46
            _ = code == .invalidParameter
        } catch {}
        let _: Int = kMCSessionMinimumNumberOfPeers + kMCSessionMaximumNumberOfPeers   // 42, 43
        let _: String = MCErrorDomain + MCError.errorDomain   // 44, 61
        let codes: [MCError.Code] = [.unknown, .notConnected, .invalidParameter, .unsupported, .timedOut, .cancelled, .unavailable]   // 47–53
        let shorthands: [MCError.Code] = [
            MCError.unknown, MCError.notConnected, MCError.invalidParameter, MCError.unsupported,
            MCError.timedOut, MCError.cancelled, MCError.unavailable,
        ]   // 54–60
        precondition(codes == shorthands)
        return session
    }

    /// Rows 17–23 as an app calls them once a peer exists (compiled; run against a real peer elsewhere).
    static func transfers(_ session: MCSession, to peer: MCPeerID, file: URL) throws {
        let progress: Progress? = session.sendResource(at: file, withName: "photo.png", toPeer: peer) { error in   // 17
            _ = error?.localizedDescription
        }
        progress?.cancel()
        session.sendResource(at: file, withName: "again", toPeer: peer, withCompletionHandler: nil)
        let stream: OutputStream = try session.startStream(withName: "live", toPeer: peer)   // 18
        stream.close()
        session.nearbyConnectionData(forPeer: peer) { data, error in   // 20
            guard let data = data, error == nil else { return }
            session.connectPeer(peer, withNearbyConnectionData: data)   // 22
        }
        session.cancelConnectPeer(peer)   // 23
        session.disconnect()   // 19
    }

    /// Row 21: the async form.
    static func connectionData(_ session: MCSession, for peer: MCPeerID) async throws -> Data {
        try await session.nearbyConnectionData(forPeer: peer)
    }

    /// Rows 62–69, 73–80, 85–92, 97–103.
    static func discovery(
        _ session: MCSession, advertiserDelegate: AppAdvertiserDelegate, browserDelegate: AppBrowserDelegate,
        serviceType: String
    ) -> (MCNearbyServiceAdvertiser, MCNearbyServiceBrowser, MCAdvertiserAssistant, MCBrowserViewController) {
        let advertiser = MCNearbyServiceAdvertiser(peer: session.myPeerID, discoveryInfo: ["room": "1"], serviceType: serviceType)   // 62, 63
        advertiser.delegate = advertiserDelegate   // 64
        let _: MCPeerID = advertiser.myPeerID   // 65
        let _: [String: String]? = advertiser.discoveryInfo   // 66
        let _: String = advertiser.serviceType   // 67
        advertiser.startAdvertisingPeer()   // 68
        advertiser.stopAdvertisingPeer()   // 69

        let browser = MCNearbyServiceBrowser(peer: session.myPeerID, serviceType: serviceType)   // 73, 74
        browser.delegate = browserDelegate   // 75
        let _: MCPeerID = browser.myPeerID   // 76
        let _: String = browser.serviceType   // 77
        browser.startBrowsingForPeers()   // 78
        browser.stopBrowsingForPeers()   // 79

        let assistant = MCAdvertiserAssistant(serviceType: serviceType, discoveryInfo: nil, session: session)   // 85, 86
        let assistantDelegate = AppAssistantDelegate()
        assistant.delegate = assistantDelegate   // 87
        let _: MCSession = assistant.session   // 88
        let _: [String: String]? = assistant.discoveryInfo   // 89
        let _: String = assistant.serviceType   // 90
        assistant.start()   // 91
        assistant.stop()   // 92

        let picker = MCBrowserViewController(serviceType: serviceType, session: session)   // 97
        let other = MCBrowserViewController(browser: browser, session: session)   // 98
        let pickerDelegate = AppBrowserViewControllerDelegate()
        picker.delegate = pickerDelegate   // 99
        let _: MCNearbyServiceBrowser? = other.browser   // 100
        let _: MCSession = picker.session   // 101
        picker.minimumNumberOfPeers = kMCSessionMinimumNumberOfPeers   // 102
        picker.maximumNumberOfPeers = kMCSessionMaximumNumberOfPeers   // 103
        return (advertiser, browser, assistant, picker)
    }

    /// Row 80, as an app calls it from `browser(_:foundPeer:withDiscoveryInfo:)`.
    static func invite(_ browser: MCNearbyServiceBrowser, _ peer: MCPeerID, into session: MCSession) {
        browser.invitePeer(peer, to: session, withContext: Data("game 1".utf8), timeout: 30)
    }

    /// Row 45: the patterns Foundation's bridged errors give on Apple platforms.
    static func matches(_ error: Error) -> String {
        do { throw error } catch MCError.notConnected {
            return "notConnected"
        } catch MCError.timedOut {
            return "timedOut"
        } catch let e as MCError where e.code == .cancelled {
            return "cancelled"
        } catch {
            return "other"
        }
    }
}

// A common tutorial pattern: the app gives the state its own description (the package adds none to clash).
extension MCSessionState: CustomStringConvertible {
    public var description: String {
        switch self {
        case .notConnected: return "Not Connected"
        case .connecting: return "Connecting"
        case .connected: return "Connected"
        @unknown default: return "Unknown"
        }
    }
}

/// Row 10: a subclass's designated initializer calls Apple's designated initializer.
final class AppSession: MCSession, @unchecked Sendable {   // restated: this package's MCSession is Sendable
    let tag: String
    init(tag: String, peer: MCPeerID) {
        self.tag = tag
        super.init(peer: peer, securityIdentity: nil, encryptionPreference: .optional)
    }
}
