// A GameKit session whose peer falls silent (issue 25): the peer is reported disconnected within the
// session's disconnectTimeout, a healthy link is never dropped however short the timeout, and the peer can
// be joined again. The silence is made in the process: the silent side stops reading its link (it answers
// no keep-alive) and sends nothing of its own, which is what the other side sees of a link that broke.
// Real broken links (a veth taken down between two namespaces) are in MultipeerLinkChangeTests.
import Foundation
import Testing
@testable import GameKit
@testable import MultipeerConnectivity

@Suite(.serialized, .enabled(if: isolated, "needs a private network namespace: run scripts/test"), .timeLimit(.minutes(2)))
struct GKLinkLossTests {
    init() { _ = mainQueueKey }
    let id = "gl" + String(UInt32.random(in: 0...UInt32.max), radix: 36)

    @Test func silentPeerIsDisconnectedWithinTheTimeoutAndCanBeJoinedAgain() throws {
        let ra = GKRecorder(), rb = GKRecorder()
        let a = makeSession(id, "A", .peer, ra), b = makeSession(id, "B", .peer, rb)
        a.disconnectTimeout = 1
        b.disconnectTimeout = 600   // B pings rarely: when it stops reading, A hears nothing from it
        for s in [a, b] { s.isAvailable = true }
        defer { for s in [a, b] { s.disconnectFromAllPeers(); s.isAvailable = false } }
        try until("found") { ra.has(b.peerID, .available) }
        a.connect(toPeer: b.peerID, withTimeout: 10)
        try until("connected") { ra.has(b.peerID, .connected) && rb.has(a.peerID, .connected) }
        // A healthy link outlives a short timeout many times over (keep-alives go every third of it).
        Thread.sleep(forTimeInterval: 3)
        #expect(!ra.has(b.peerID, .disconnected) && a.peers(with: .connected) == [b.peerID], "a healthy link was dropped")

        // B falls silent.
        let link = try #require(b.mc.lock.withLock { b.mc.peers[UInt64(a.peerID)!]?.link })
        let silent = Date()
        link.pauseReading()
        try until("A reports B disconnected", 5) { ra.has(b.peerID, .disconnected) }
        let after = Date().timeIntervalSince(silent)
        print("MEASURED silent peer reported disconnected after \(Int(after * 1000)) ms (timeout 1000 ms)")
        #expect(after <= 1.25 + 0.5, "reported after \(after) s with a 1 s timeout")
        #expect(a.peers(with: .connected).isEmpty)
        // B hears the close once it reads again; then A joins it again.
        link.resumeReading()
        try until("B sees A gone") { rb.has(a.peerID, .disconnected) }
        let before = ra.lock.withLock { ra.states.count }
        a.connect(toPeer: b.peerID, withTimeout: 10)
        try until("connected again") { ra.lock.withLock { ra.states.dropFirst(before).contains { $0.0 == b.peerID && $0.1 == .connected } } }
        try a.sendData(Data("again".utf8), toPeers: [b.peerID], with: .reliable)
        try until("data after rejoining") { rb.lock.withLock { rb.data.contains { $0.0 == Data("again".utf8) } } }
    }
}
