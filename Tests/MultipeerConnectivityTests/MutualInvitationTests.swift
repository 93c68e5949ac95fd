// Mutual invitations (issue 21): two peers that advertise, browse and invite each other at once, each app
// answering the other's invitation its own way. An invitation an app accepted must lead to a connection,
// whatever the other app does with its own, and whichever of the two has the lower token (the tie-break);
// the pair ends on one connection, each app hearing `.connected` once and nothing after it.
// Part of MultipeerNetworkTests (a private network namespace; see Support.swift).
import Foundation
import Testing
@testable import MultipeerConnectivity

/// One side: a session, an advertiser whose app answers invitations as told, and a browser.
final class MutualSide {
    let session: MCSession
    let recorder = SessionRecorder()
    let answer = AdvertiserAnswer()
    let found = BrowserRecorder()
    let advertiser: MCNearbyServiceAdvertiser
    let browser: MCNearbyServiceBrowser

    init(_ name: String, service: String) {
        session = MCSession(peer: MCPeerID(displayName: name))
        session.delegate = recorder
        answer.session = session
        advertiser = MCNearbyServiceAdvertiser(peer: session.myPeerID, discoveryInfo: nil, serviceType: service)
        advertiser.delegate = answer
        browser = MCNearbyServiceBrowser(peer: session.myPeerID, serviceType: service)
        browser.delegate = found
    }

    func stop() {
        advertiser.stopAdvertisingPeer()
        browser.stopBrowsingForPeers()
        session.disconnect()
    }

    func states(of other: MutualSide) -> [MCSessionState] {
        recorder.lock.withLock { recorder.states.filter { $0.0 == other.session.myPeerID.displayName }.map(\.1) }
    }
}

extension MultipeerNetworkTests {
    /// The other app: accepts our invitation too, declines it, or never answers it.
    enum OtherAnswer: String, CaseIterable, Sendable { case accepts, declines, ignores }

    @Test(arguments: OtherAnswer.allCases, [true, false])
    func mutualInvitationAcceptedOnOneSideConnects(other answer: OtherAnswer, acceptorHasLowerToken: Bool) throws {
        let service = "mi" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let x = MutualSide("X", service: service), y = MutualSide("Y", service: service)
        defer { x.stop(); y.stop() }
        let xLower = x.session.myPeerID.token < y.session.myPeerID.token
        let (acceptor, other) = xLower == acceptorHasLowerToken ? (x, y) : (y, x)
        acceptor.answer.answer = true
        other.answer.answer = answer == .accepts ? true : answer == .declines ? false : nil
        for s in [x, y] {
            s.advertiser.startAdvertisingPeer()
            s.browser.startBrowsingForPeers()
        }
        try waitFor("each found the other") { x.found.peer(named: "Y") != nil && y.found.peer(named: "X") != nil }
        // Both invitations leave at once; each times out after 8 s if its app never answers. (With 2 s, the TLS
        // handshake under ThreadSanitizer on a saturated machine outlasted the invitations: the accepted one timed
        // out before the acceptance reached it, and no connection formed, as it should not.)
        let timeout: TimeInterval = 8
        let invited = Date()
        acceptor.browser.invitePeer(acceptor.found.peer(named: other.session.myPeerID.displayName)!, to: acceptor.session, withContext: nil, timeout: timeout)
        other.browser.invitePeer(other.found.peer(named: acceptor.session.myPeerID.displayName)!, to: other.session, withContext: nil, timeout: timeout)
        try waitFor("connected both ways", seconds: 30) {
            acceptor.session.connectedPeers.count == 1 && other.session.connectedPeers.count == 1
                && acceptor.states(of: other).last == .connected && other.states(of: acceptor).last == .connected
        }
        let connectedAfter = Date().timeIntervalSince(invited)
        if connectedAfter > timeout / 2 { print("SLOW: mutual invitation connected \(connectedAfter) s after the invitations") }
        // Past both invitations' timeouts: still one connection, and the apps heard nothing more.
        Thread.sleep(forTimeInterval: max(0, timeout + 0.5 - Date().timeIntervalSince(invited)))
        // The acceptor's own invitation, declined, may end (`.notConnected`) before its app accepts the other's.
        let acceptorStates = acceptor.states(of: other)
        let expected: [[MCSessionState]] = answer == .declines ? [[.connecting, .connected], [.connecting, .notConnected, .connected]] : [[.connecting, .connected]]
        #expect(expected.contains(acceptorStates), "\(answer), acceptor lower: \(acceptorHasLowerToken): \(acceptorStates)")
        #expect(other.states(of: acceptor) == [.connecting, .connected], "\(answer), acceptor lower: \(acceptorHasLowerToken)")
        #expect(acceptor.session.connectedPeers == [other.session.myPeerID] && other.session.connectedPeers == [acceptor.session.myPeerID])
        #expect(
            acceptor.session.lock.withLock {
                acceptor.session.pendingInvites.isEmpty && acceptor.session.accepting.isEmpty
                    && acceptor.session.movingToOurInvitation.isEmpty && acceptor.session.meshBeforeAccepting.isEmpty
            })
        #expect(
            other.session.lock.withLock {
                other.session.pendingInvites.isEmpty && other.session.accepting.isEmpty
                    && other.session.movingToOurInvitation.isEmpty
            })
        // Both ends share a mesh (a third member could join either) and talk on the one link.
        #expect(acceptor.session.lock.withLock { acceptor.session.mesh } == other.session.lock.withLock { other.session.mesh })
        try acceptor.session.send(Data("from acceptor".utf8), toPeers: acceptor.session.connectedPeers, with: .reliable)
        try other.session.send(Data("from other".utf8), toPeers: other.session.connectedPeers, with: .reliable)
        try waitFor("messages both ways") {
            other.recorder.lock.withLock { other.recorder.messages.map(\.1) } == [Data("from acceptor".utf8)]
                && acceptor.recorder.lock.withLock { acceptor.recorder.messages.map(\.1) } == [Data("from other".utf8)]
        }
    }
}

extension MultipeerNetworkTests {
    /// Service types with upper-case letters ("MKSVC"), which apps ship with on iOS: accepted, and the same
    /// service as their lowercase spelling (DNS-SD compares names without case).
    @Test func upperCaseServiceTypesAreTheLowercaseService() throws {
        let base = "up" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let a = MCSession(peer: MCPeerID(displayName: "Upper"))
        let ra = SessionRecorder()
        a.delegate = ra
        let answer = AdvertiserAnswer()
        answer.session = a
        let advertiser = MCNearbyServiceAdvertiser(peer: a.myPeerID, discoveryInfo: ["k": "v"], serviceType: base.uppercased())
        advertiser.delegate = answer
        advertiser.startAdvertisingPeer()
        defer { advertiser.stopAdvertisingPeer(); a.disconnect() }
        for spelling in [base, String(base.prefix(3)).uppercased() + base.dropFirst(3)] {
            let b = MCSession(peer: MCPeerID(displayName: "Lower"))
            let rb = SessionRecorder()
            b.delegate = rb
            let browser = MCNearbyServiceBrowser(peer: b.myPeerID, serviceType: spelling)
            let found = BrowserRecorder()
            browser.delegate = found
            browser.startBrowsingForPeers()
            defer { browser.stopBrowsingForPeers(); b.disconnect() }
            try waitFor("\(base.uppercased()) found as \(spelling)") { found.peer(named: "Upper") != nil }
            #expect(found.lock.withLock { found.found.first?.1 } == ["k": "v"])
            browser.invitePeer(found.peer(named: "Upper")!, to: b, withContext: nil, timeout: 10)
            try waitFor("connected") { rb.connected("Upper") && ra.connected("Lower") }
        }
    }
}
