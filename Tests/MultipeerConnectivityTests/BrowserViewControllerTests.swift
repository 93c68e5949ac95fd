// MCBrowserViewController offers a peer again once its invitation failed or its session ended, as iOS's browser
// shows the peer available to tap again: before, a peer stayed "invited" until the browser lost it, so a declined
// invitation, or a session whose link broke while the peer stayed in view, could never be retried (sat12: `ble mc
// browse` after a link came back up, its first invitation failed and it never invited again).
// Part of MultipeerNetworkTests (a private network namespace; see Support.swift).
import Foundation
import Testing
@testable import MultipeerConnectivity

/// Declines the first invitation, accepts every later one.
final class DeclineFirst: NSObject, MCNearbyServiceAdvertiserDelegate, @unchecked Sendable {
    let session: MCSession
    let lock = NSLock()
    var invitations = 0
    init(session: MCSession) { self.session = session }
    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID, withContext context: Data?,
        invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        let n = lock.withLock {
            invitations += 1; return invitations
        }
        invitationHandler(n > 1, n > 1 ? session : nil)
    }
}

extension MultipeerNetworkTests {
    @Test func theBrowserViewControllerOffersAPeerAgainAfterADeclineAndAfterTheSessionEnded() throws {
        let service = "bv" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let a = MCSession(peer: MCPeerID(displayName: "A"))
        let ra = SessionRecorder()
        a.delegate = ra
        let answers = DeclineFirst(session: a)
        let advertiser = MCNearbyServiceAdvertiser(peer: a.myPeerID, discoveryInfo: nil, serviceType: service)
        advertiser.delegate = answers
        advertiser.startAdvertisingPeer()
        let b = MCSession(peer: MCPeerID(displayName: "B"))
        let rb = SessionRecorder()
        b.delegate = rb
        let vc = MCBrowserViewController(serviceType: service, session: b)
        let shown = NSLock()
        var lists: [[String]] = []
        // The app taps A each time the list is shown (what `ble mc browse` does).
        vc.presenter = { vc, peers in
            shown.withLock { lists.append(peers.map(\.displayName)) }
            if let p = peers.first(where: { $0.displayName == "A" }) { vc.invite(p) }
        }
        vc.present()
        defer { vc.cancel(); advertiser.stopAdvertisingPeer(); a.disconnect(); b.disconnect() }
        // Declined, then offered again and tapped again: connected.
        try waitFor("connected after the decline", seconds: 30) { rb.connected("A") && ra.connected("B") }
        #expect(answers.lock.withLock { answers.invitations } == 2)
        #expect(rb.lock.withLock { rb.states.map(\.1) } == [.connecting, .notConnected, .connecting, .connected])
        let shownBefore = shown.withLock { lists.count }
        #expect(shownBefore >= 2, "\(shown.withLock { lists })")
        // A ends the session while it stays in view: B hears it, A is offered again, and the tap joins again.
        a.disconnect()
        func count(_ state: MCSessionState) -> Int { rb.lock.withLock { rb.states.filter { $0.1 == state }.count } }
        try waitFor("B hears the end") { count(.notConnected) == 2 }
        try waitFor("joined again", seconds: 30) { count(.connected) == 2 && rb.connected("A") && ra.connected("B") }
        #expect(answers.lock.withLock { answers.invitations } == 3)
        #expect(shown.withLock { lists.count } > shownBefore)
        #expect(vc.nearbyPeers.map(\.displayName) == ["A"])
    }
}
