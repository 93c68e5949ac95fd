// A GameKit session whose peer falls silent (issue 25): the peer is reported disconnected within the
// session's disconnectTimeout, a healthy link is never dropped however short the timeout, and the peer can
// be joined again. The silence is made in the process: the silent side stops reading its link (it answers
// no keep-alive) and sends nothing of its own, which is what the other side sees of a link that broke.
// Real broken links (a veth taken down between two namespaces) are in MultipeerLinkChangeTests.
import Foundation
import Testing
@testable import GameKit
@testable import MultipeerConnectivity

/// GKPeerConnectionState by Apple's raw values (its Swift case names have changed over the API's life).
private let stateAvailable = GKPeerConnectionState(rawValue: 0)!
private let stateConnected = GKPeerConnectionState(rawValue: 2)!
private let stateDisconnected = GKPeerConnectionState(rawValue: 3)!

@Suite(.serialized, .enabled(if: isolated, "needs a private network namespace: run scripts/test"), .timeLimit(.minutes(2)))
struct GKLinkLossTests {
    init() { _ = mainQueueKey }
    let id = "gl" + String(UInt32.random(in: 0...UInt32.max), radix: 36)

    @Test func silentPeerIsDisconnectedWithinTheTimeoutAndCanBeJoinedAgain() throws {
        let ra = GKRecorder(), rb = GKRecorder()
        let a: GKSession = makeSession(id, "A", .peer, ra), b: GKSession = makeSession(id, "B", .peer, rb)
        let idA: String = a.peerID, idB: String = b.peerID
        a.disconnectTimeout = 1
        b.disconnectTimeout = 600   // B pings rarely: when it stops reading, A hears nothing from it
        for s in [a, b] { s.isAvailable = true }
        defer { for s in [a, b] { s.disconnectFromAllPeers(); s.isAvailable = false } }
        try until("found") { ra.has(idB, stateAvailable) }
        a.connect(toPeer: idB, withTimeout: 10)
        try until("connected") { ra.has(idB, stateConnected) && rb.has(idA, stateConnected) }
        // A healthy link outlives a short timeout many times over (keep-alives go every third of it).
        Thread.sleep(forTimeInterval: 3)
        #expect(!ra.has(idB, stateDisconnected) && a.mc.connectedPeers.count == 1, "a healthy link was dropped")

        // B falls silent.
        let link = try #require(b.mc.lock.withLock { b.mc.peers[UInt64(idA)!]?.link })
        let silent = Date()
        link.pauseReading()
        try until("A reports B disconnected", 5) { ra.has(idB, stateDisconnected) }
        let after = Date().timeIntervalSince(silent)
        print("MEASURED silent peer reported disconnected after \(Int(after * 1000)) ms (timeout 1000 ms)")
        #expect(after <= 1.25 + 0.5, "reported after \(after) s with a 1 s timeout")
        #expect(a.mc.connectedPeers.isEmpty)
        // B hears the close once it reads again; then A joins it again.
        link.resumeReading()
        try until("B sees A gone") { rb.has(idA, stateDisconnected) }
        let before = ra.lock.withLock { ra.states.count }
        a.connect(toPeer: idB, withTimeout: 10)
        try until("connected again") { ra.lock.withLock { ra.states.dropFirst(before).contains { $0.0 == idB && $0.1 == stateConnected } } }
        try a.mc.send(Data("again".utf8), toPeers: a.mc.connectedPeers, with: .reliable)
        try until("data after rejoining") { rb.lock.withLock { rb.data.contains { $0.0 == Data("again".utf8) } } }
    }
}
