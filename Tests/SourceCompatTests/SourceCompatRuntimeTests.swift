// What the surfaces compile to, run where it needs no network: errors matched as on Apple platforms, the
// submodule imports, the async connection data, shapes that iOS declares (IUO, failable, nil), L2CAP test
// doubles, and service types iOS accepts or refuses.
import Foundation
import Testing
import MultipeerConnectivity
import GameKit
import CoreBluetooth

@Suite struct SourceCompatRuntimeTests {
    @Test func multipeerErrorsMatchByCodeWhateverTheirForm() {
        #expect(MultipeerSurface.matches(MCError(.notConnected)) == "notConnected")
        #expect(MultipeerSurface.matches(NSError(domain: MCErrorDomain, code: MCError.Code.timedOut.rawValue)) == "timedOut")
        #expect(MultipeerSurface.matches(MCError(.cancelled)) == "cancelled")
        #expect(MultipeerSurface.matches(MCError(.unavailable)) == "other")
        // Same code, other domain: no match.
        #expect(MultipeerSurface.matches(NSError(domain: CBErrorDomain, code: MCError.Code.notConnected.rawValue)) == "other")
        let thrown: Error = MCError(.notConnected)
        #expect((thrown as? MCError)?.code == .notConnected)
    }

    @Test func gameKitErrorsMatchByCodeWithAppleNames() {
        #expect(GameKitSurface.matches(GKSessionError(.notConnectedError)) == "notConnected")
        #expect(GameKitSurface.matches(NSError(domain: GKSessionErrorDomain, code: 30507)) == "dataTooBig")
        #expect(GameKitSurface.matches(GKSessionError(.declinedError)) == "30502")
        #expect(GameKitSurface.matches(NSError(domain: MCErrorDomain, code: 30508)) == "other")
        #expect(Set(GameKitSurface.allShorthands).count == 16)
        #expect(
            GameKitSurface.allShorthands.map(\.rawValue) == [
                30500, 30501, 30502, 30503, 30504, 30505, 30506, 30507, 30508, 30509, 30510,
                30201, 30202, 30203, 30204, 30205,
            ])
        let thrown: Error = GKSessionError(.timedOutError)
        #expect((thrown as? GKSessionError)?.code == .timedOutError)
        #expect((thrown as NSError).domain == GKSessionErrorDomain && (thrown as NSError).code == 30503)
    }

    @Test func coreBluetoothErrorsMatchByCode() {
        #expect(CoreBluetoothSurface.matches(CBError(.peripheralDisconnected)) == "peripheralDisconnected")
        #expect(CoreBluetoothSurface.matches(NSError(domain: CBErrorDomain, code: CBError.Code.connectionTimeout.rawValue)) == "connectionTimeout")
        #expect(CoreBluetoothSurface.matches(CBATTError(.insufficientEncryption)) == "insufficientEncryption")
        #expect(CoreBluetoothSurface.matches(CBError(.unknownDevice)) == "CBError 12")
        #expect(CoreBluetoothSurface.matches(NSError(domain: "Other", code: 7)) == "other")
    }

    @Test func submoduleImportsReachTheSwiftAPI() {
        #expect(ThroughSubmodules.names() == ["MCPeerID", "GKSession", "CBUUID", "sub", "180D"])
    }

    @Test func multipeerCallsThatNeedNoPeer() async throws {
        let me = try MultipeerSurface.peerID()
        let delegate = AppSessionDelegate()
        let session = MultipeerSurface.session(me, delegate: delegate)
        #expect(session.delegate === delegate && session.connectedPeers.isEmpty)
        let sub = AppSession(tag: "t", peer: me)
        #expect(sub.encryptionPreference == .optional && sub.myPeerID == me && sub.tag == "t")
        // The delegate protocols refine NSObjectProtocol, as Apple's do.
        let existential: MCSessionDelegate? = session.delegate
        #expect(existential?.isEqual(delegate) == true)
        // Row 21: the async form gives what the completion handler gives.
        let other = MCPeerID(displayName: "other")
        let data = try await MultipeerSurface.connectionData(session, for: other)
        let fields = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(fields["token"] as? String != nil && fields["name"] as? String == me.displayName)
    }

    @Test func gameKitShapesAsIOSDeclaresThem() {
        let delegate = AppGameSessionDelegate()
        let session = GameKitSurface.session(delegate: delegate)
        #expect(session.delegate === delegate)
        #expect(session.displayName(forPeer: "no such peer") == nil)
        #expect((session.peers(with: .stateConnected) as? [String]) == [])
        // GKPeerPickerConnectionType is an enumeration: its init(rawValue:) is failable.
        #expect(GKPeerPickerConnectionType(rawValue: 2) == .nearby && GKPeerPickerConnectionType(rawValue: 1) == .online)
        #expect(GKPeerPickerConnectionType(rawValue: 3) == nil)
        #expect(GKPeerConnectionState.stateConnectedRelay.rawValue == 5 && GKPeerConnectionState(rawValue: 0) == .stateAvailable)
        // Sending without a connection throws Apple's codes.
        #expect(throws: GKSessionError(.notConnectedError)) { try session.sendData(toAllPeers: Data([1]), with: .reliable) }
        #expect(throws: GKSessionError(.invalidParameterError)) { try session.send(nil, toPeers: [session.peerID!], with: .reliable) }
        #expect(throws: GKSessionError(.invalidParameterError)) { try session.send(Data([1]), toPeers: [42], with: .reliable) }
    }

    @Test func l2capChannelDoubles() {
        let blank = CoreBluetoothSurface.blankChannel()
        #expect(blank.peer == nil && blank.inputStream == nil && blank.outputStream == nil && blank.psm == 0)
        #expect(FakeChannel().psm == 0x0080)
    }

    @Test func serviceTypesIOSAcceptsAndRefuses() throws {
        // Upper-case letters: accepted, as iOS does (no crash, nothing reported).
        let me = MCPeerID(displayName: "types")
        let upper = MCNearbyServiceAdvertiser(peer: me, discoveryInfo: nil, serviceType: "MKSVC")
        #expect(upper.serviceType == "MKSVC")
        _ = MCNearbyServiceBrowser(peer: me, serviceType: "Game-Room2")
        // What iOS refuses is reported to the delegate when advertising or browsing starts, never a crash.
        // (Refused before anything is sent: these tests run outside a network namespace.)
        for bad in ["", "a_b", "-ab", "1234", "a--b", "sixteen-letters-"] {
            let a = MCNearbyServiceAdvertiser(peer: me, discoveryInfo: nil, serviceType: bad)
            let ad = AppAdvertiserDelegate()
            a.delegate = ad
            a.startAdvertisingPeer()
            let b = MCNearbyServiceBrowser(peer: me, serviceType: bad)
            let bd = AppBrowserDelegate()
            b.delegate = bd
            b.startBrowsingForPeers()
            try waitUntil("\(bad) refused") { ad.notStarted != nil && bd.notStarted != nil }
            for e in [ad.notStarted, bd.notStarted] {
                let ns = try #require(e) as NSError
                #expect(ns.domain == "NSNetServicesErrorDomain" && ns.code == -72008, "\(bad)")
                #expect(ns.localizedFailureReason?.contains("serviceType") == true, "\(bad)")
            }
        }
        let tooMuch = MCNearbyServiceAdvertiser(peer: me, discoveryInfo: ["a=b": "x"], serviceType: "fine")
        let td = AppAdvertiserDelegate()
        tooMuch.delegate = td
        tooMuch.startAdvertisingPeer()
        try waitUntil("discoveryInfo refused") { td.notStarted != nil }
        #expect((td.notStarted as NSError?)?.localizedFailureReason?.contains("discoveryInfo") == true)
    }
}

struct WaitFailure: Error, CustomStringConvertible { let description: String }

func waitUntil(_ what: String, seconds: Double = 5, _ condition: () -> Bool) throws {
    let end = Date().addingTimeInterval(seconds)
    while !condition() {
        if Date() > end { throw WaitFailure(description: "timed out waiting for \(what)") }
        usleep(5_000)
    }
}
