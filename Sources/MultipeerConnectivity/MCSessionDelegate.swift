// MCSessionDelegate (MCSession.h). Linux Swift has no Objective-C optional requirements: the optional
// certificate callback has a default (accept, as Apple's framework does when the delegate does not
// implement it).
import Foundation

public protocol MCSessionDelegate: NSObjectProtocol {
    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState)
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID)
    func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID)
    func session(_ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, with progress: Progress)
    func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        at localURL: URL?, withError error: (any Error)?)
    /// The peer's certificate chain (DER `Data` of each certificate, leaf first; nil without TLS). Call the
    /// handler with true to admit the peer. Nothing validates the chain for you, as on iOS.
    func session(
        _ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID,
        certificateHandler: @escaping (Bool) -> Void)
}

public extension MCSessionDelegate {
    func session(
        _ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID,
        certificateHandler: @escaping (Bool) -> Void
    ) {
        certificateHandler(true)
    }
}
