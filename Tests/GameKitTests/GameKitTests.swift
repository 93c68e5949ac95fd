// GKSession and GKPeerPickerController on the Multipeer engine, inside the test's private network namespace
// (see Tests/MultipeerConnectivityTests/Support.swift): modes, connect/accept/deny/time out, data with the
// receive handler (protocol and closure, context pointer passed through), kicks, availability, the picker's
// delegate sequence, and bad input answered with GKSessionError.
import Foundation
import Testing
@testable import GameKit
import MultipeerConnectivity

/// Marks the main queue, to tell "on the main queue" from "on the main thread" (the test runner may drain
/// the main queue from another thread).
let mainQueueKey: DispatchSpecificKey<Bool> = {
    let k = DispatchSpecificKey<Bool>()
    DispatchQueue.main.setSpecific(key: k, value: true)
    return k
}()

let isolated: Bool = {
    guard let text = try? String(contentsOfFile: "/proc/self/net/dev", encoding: .utf8) else { return false }
    return text.split(separator: "\n").dropFirst(2).compactMap { $0.split(separator: ":").first?.trimmingCharacters(in: .whitespaces) } == ["lo"]
}()

final class GKRecorder: NSObject, GKSessionDelegate, GKSessionDataReceiveHandler, @unchecked Sendable {
    let lock = NSLock()
    var states: [(String, GKPeerConnectionState)] = []
    var requests: [String] = []
    var failures: [(String, Error)] = []
    var data: [(Data, String, UnsafeMutableRawPointer?)] = []
    var offMain = false
    var accept: Bool? = true
    func session(_ session: GKSession, peer peerID: String, didChange state: GKPeerConnectionState) {
        lock.withLock {
            states.append((peerID, state)); if DispatchQueue.getSpecific(key: mainQueueKey) != true { offMain = true }
        }
    }
    func session(_ session: GKSession, didReceiveConnectionRequestFromPeer peerID: String) {
        lock.withLock { requests.append(peerID) }
        switch lock.withLock({ accept }) {
        case true?: try? session.acceptConnection(fromPeer: peerID)
        case false?: session.denyConnection(fromPeer: peerID)
        case nil: break
        }
    }
    func session(_ session: GKSession, connectionWithPeerFailed peerID: String, withError error: Error) { lock.withLock { failures.append((peerID, error)) } }
    func receiveData(_ data: Data, fromPeer peer: String, inSession session: GKSession, context: UnsafeMutableRawPointer?) {
        lock.withLock { self.data.append((data, peer, context)) }
    }
    func has(_ peer: String, _ s: GKPeerConnectionState) -> Bool { lock.withLock { states.contains { $0.0 == peer && $0.1 == s } } }
}

func until(_ what: String, _ seconds: Double = 10, _ cond: () -> Bool) throws {
    let end = Date().addingTimeInterval(seconds)
    while !cond() {
        if Date() > end { throw GKTestFailure(description: "timed out waiting for \(what)") }
        usleep(5000)
    }
}
struct GKTestFailure: Error, CustomStringConvertible { let description: String }

func makeSession(_ id: String, _ name: String, _ mode: GKSessionMode, _ r: GKRecorder) -> GKSession {
    let s: GKSession = GKSession(sessionID: id, displayName: name, sessionMode: mode)
    s.delegate = r
    s.setDataReceiveHandler(r, withContext: nil)
    return s
}

@Suite struct GKAPITests {
    init() { _ = mainQueueKey }
    @Test func sessionIDsMapToServiceTypesAndDefaults() {
        #expect(GKSession.serviceType(for: "cmj-photo") == "cmj-photo")
        let odd = GKSession.serviceType(for: "com.example.Game!")
        #expect(MCServiceType.isValid(odd) && odd == GKSession.serviceType(for: "com.example.Game!") && odd != GKSession.serviceType(for: "com.example.Other"))
        let s: GKSession = GKSession(sessionID: nil, displayName: nil, sessionMode: .peer)
        #expect(s.disconnectTimeout == 20 && !s.isAvailable && UInt64(s.peerID) != nil && s.displayName(forPeer: s.peerID) == s.displayName)
        #expect(GKSessionError(.dataTooBigError).errorCode == 30507 && GKPeerConnectionState.stateConnectedRelay.rawValue == 5)
        // Bad input: unknown peers, empty lists, oversized data.
        #expect(throws: GKSessionError(.notConnectedError)) { try s.send(Data([1]), toPeers: ["12345"], with: .reliable) }
        #expect(throws: GKSessionError(.invalidParameterError)) { try s.send(Data([1]), toPeers: [], with: .reliable) }
        #expect(throws: GKSessionError(.dataTooBigError)) { try s.send(Data(count: GKSession.maximumUnreliableData + 1), toPeers: ["1"], with: .unreliable) }
        #expect(throws: GKSessionError(.notConnectedError)) { try s.sendData(toAllPeers: Data([1]), with: .reliable) }
        #expect(throws: GKSessionError.self) { try s.acceptConnection(fromPeer: "nobody") }
    }

    /// An object that does not adopt GKSessionDataReceiveHandler cannot be called on Linux: the call stops
    /// the program with a message that names the class and the way out, instead of dropping it silently.
    @Test func aHandlerWithoutTheProtocolIsRefusedLoudly() async throws {
        #expect(GKSession.refusedHandlerMessage(for: NSObject()).contains("extension NSObject: GKSessionDataReceiveHandler {}"))
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            final class SeedViewController: NSObject {
                func receiveData(_ data: Data, fromPeer peer: String, inSession session: GKSession, context: UnsafeMutableRawPointer?) {}
            }
            let session: GKSession = GKSession(sessionID: "refuse", displayName: "x", sessionMode: .peer)
            session.setDataReceiveHandler(SeedViewController(), withContext: nil)
        }
        let text = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(text.contains("SeedViewController does not adopt GKSessionDataReceiveHandler"), "\(text)")
        #expect(text.contains("setDataReceiveHandler(withContext:_:)"), "\(text)")
        // nil removes the handler; an adopting object is taken.
        let s: GKSession = GKSession(sessionID: "refuse", displayName: "y", sessionMode: .peer)
        s.setDataReceiveHandler(GKRecorder(), withContext: nil)
        s.setDataReceiveHandler(nil, withContext: nil)
    }
}

@Suite(.serialized, .enabled(if: isolated, "needs a private network namespace: run scripts/test"), .timeLimit(.minutes(3)))
struct GKSessionNetworkTests {
    init() { _ = mainQueueKey }
    let id = "gk" + String(UInt32.random(in: 0...UInt32.max), radix: 36)

    @Test func serverIsFoundByClientsAndClientsAreNot() throws {
        let rs = GKRecorder(), rc = GKRecorder(), rc2 = GKRecorder()
        let server = makeSession(id, "Server", .server, rs), client = makeSession(id, "Client", .client, rc), other = makeSession(id, "Client2", .client, rc2)
        server.isAvailable = true; client.isAvailable = true; other.isAvailable = true
        defer { server.isAvailable = false; client.isAvailable = false; other.isAvailable = false }
        try until("server available") { rc.has(server.peerID, .stateAvailable) && rc2.has(server.peerID, .stateAvailable) }
        Thread.sleep(forTimeInterval: 1.5)
        #expect(!rc.has(other.peerID, .stateAvailable) && !rc2.has(client.peerID, .stateAvailable))   // clients are not advertised
        #expect(client.peers(with: .stateAvailable) as? [String] == [server.peerID!])
        // A different session ID is never seen.
        let stranger = GKRecorder()
        let elsewhere = makeSession(id + "x", "Elsewhere", .peer, stranger)
        elsewhere.isAvailable = true
        defer { elsewhere.isAvailable = false }
        Thread.sleep(forTimeInterval: 1.5)
        #expect(stranger.lock.withLock { stranger.states.isEmpty } && !rc.has(elsewhere.peerID, .stateAvailable))
        // The server turns availability off: clients see it unavailable.
        server.isAvailable = false
        try until("unavailable") { rc.has(server.peerID, .stateUnavailable) }
        #expect(!rc.offMain, "delegate calls arrive on the main queue")
    }

    @Test func connectAcceptSendKickAndLeave() throws {
        let ra = GKRecorder(), rb = GKRecorder(), rc = GKRecorder()
        let a = makeSession(id, "A", .peer, ra), b = makeSession(id, "B", .peer, rb), c = makeSession(id, "C", .peer, rc)
        for s in [a, b, c] { s.isAvailable = true }
        defer { for s in [a, b, c] { s.disconnectFromAllPeers(); s.isAvailable = false } }
        try until("found") { ra.has(b.peerID, .stateAvailable) && ra.has(c.peerID, .stateAvailable) }
        a.connect(toPeer: b.peerID, withTimeout: 10)
        a.connect(toPeer: c.peerID, withTimeout: 10)
        try until("connected") { ra.has(b.peerID, .stateConnected) && ra.has(c.peerID, .stateConnected) && rb.has(a.peerID, .stateConnected) }
        #expect(rb.lock.withLock { rb.requests } == [a.peerID])
        #expect(Set(a.peers(with: .stateConnected) as! [String]) == [b.peerID!, c.peerID!])
        // Reliable, in order, with the handler's context pointer passed through.
        let ctx = UnsafeMutableRawPointer(bitPattern: 0xC0FFEE)
        b.setDataReceiveHandler(rb, withContext: ctx)
        for i in 0..<200 { try a.send(Data([UInt8(i)]), toPeers: [b.peerID!], with: .reliable) }
        try until("200 messages") { rb.lock.withLock { rb.data.count } == 200 }
        #expect(rb.lock.withLock { rb.data.map { $0.0[0] } } == (0..<200).map(UInt8.init))
        #expect(rb.lock.withLock { rb.data.allSatisfy { $0.1 == a.peerID && $0.2 == ctx } })
        // The closure form.
        let got = NSLock()
        var closureData: [Data] = []
        c.setDataReceiveHandler { d, _, _, _ in got.withLock { closureData.append(d) } }
        try a.sendData(toAllPeers: Data("all".utf8), with: .unreliable)
        try until("closure") { got.withLock { closureData == [Data("all".utf8)] } }
        // Kick C: it leaves everyone.
        a.disconnectPeer(fromAllPeers: c.peerID)
        try until("C kicked") { ra.has(c.peerID, .stateDisconnected) && rc.has(a.peerID, .stateDisconnected) }
        #expect(a.peers(with: .stateConnected) as? [String] == [b.peerID!])
    }

    @Test func denyAndTimeOut() throws {
        let ra = GKRecorder(), rb = GKRecorder()
        let a = makeSession(id, "A", .peer, ra), b = makeSession(id, "B", .peer, rb)
        rb.accept = false
        a.isAvailable = true; b.isAvailable = true
        defer { a.isAvailable = false; b.isAvailable = false }
        try until("found") { ra.has(b.peerID, .stateAvailable) }
        a.connect(toPeer: b.peerID, withTimeout: 5)
        try until("denied") { ra.lock.withLock { ra.failures.count } == 1 }
        rb.accept = nil   // never answers
        a.connect(toPeer: b.peerID, withTimeout: 1)
        try until("timed out", 5) { ra.lock.withLock { ra.failures.count } == 2 }
        #expect(a.peers(with: .stateConnected).isEmpty)
        // Connecting to a peer nobody found fails at once.
        a.connect(toPeer: "42", withTimeout: 1)
        try until("not found") { ra.lock.withLock { ra.failures.contains { ($0.1 as? GKSessionError)?.code == .peerNotFoundError } } }
    }

    @Test func pickerFlowEndToEnd() throws {
        // Two pickers, as the seed's two phones: each shows, the first peer found is chosen, the other side
        // accepts; both delegates get didConnectPeer with the session; the photo goes through.
        final class PickerDelegate: NSObject, GKPeerPickerControllerDelegate, GKSessionDataReceiveHandler, @unchecked Sendable {
            let id: String, name: String
            let lock = NSLock()
            var session: GKSession?
            var connectedPeer: String?
            var received: [Data] = []
            init(id: String, name: String) { self.id = id; self.name = name }
            func peerPickerController(_ picker: GKPeerPickerController, sessionFor type: GKPeerPickerConnectionType) -> GKSession {
                GKSession(sessionID: id, displayName: name, sessionMode: .peer)
            }
            func peerPickerController(_ picker: GKPeerPickerController, didConnectPeer peerID: String, to session: GKSession) {
                lock.withLock {
                    self.session = session; connectedPeer = peerID
                }
                session.setDataReceiveHandler(self, withContext: nil)
                picker.dismiss()
            }
            func receiveData(_ data: Data, fromPeer peer: String, inSession session: GKSession, context: UnsafeMutableRawPointer?) {
                lock.withLock { received.append(data) }
            }
        }
        let da = PickerDelegate(id: id, name: "Simulator"), db = PickerDelegate(id: id, name: "iPhone")
        let pa = GKPeerPickerController(), pb = GKPeerPickerController()
        pa.delegate = da; pb.delegate = db
        pa.show(); pb.show()
        defer { da.session?.disconnectFromAllPeers(); db.session?.disconnectFromAllPeers() }
        try until("both connected", 15) { da.lock.withLock { da.connectedPeer != nil } && db.lock.withLock { db.connectedPeer != nil } }
        #expect(!pa.isVisible && !pb.isVisible)
        let photo = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0) })
        try da.lock.withLock { da.session! }.sendData(toAllPeers: photo, with: .reliable)
        try until("photo") { db.lock.withLock { db.received.first } == photo }
        // Cancel tells the delegate.
        final class CancelWatcher: NSObject, GKPeerPickerControllerDelegate, @unchecked Sendable {
            var cancelled = false
            func peerPickerControllerDidCancel(_ picker: GKPeerPickerController) { cancelled = true }
        }
        let w = CancelWatcher()
        let pc = GKPeerPickerController()
        pc.delegate = w
        pc.chooser = { _ in nil }
        pc.show()
        pc.cancel()
        #expect(w.cancelled && !pc.isVisible)
    }
}
