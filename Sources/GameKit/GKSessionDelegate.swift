// GKSessionDelegate (all optional on iOS: here protocol extension defaults) and the data-receive handler.
//
// iOS calls the informal selector `receiveData:fromPeer:inSession:context:` on any object given to
// setDataReceiveHandler; Linux Swift cannot dispatch a selector by name. The closest source-compatible form:
// the handler class adopts `GKSessionDataReceiveHandler`, whose one method has exactly that Swift name —
// the seed's handler compiles with only its `@objc` removed and the conformance added. A closure form exists too.
import Foundation

public protocol GKSessionDelegate: NSObjectProtocol {
    func session(_ session: GKSession, peer peerID: String, didChange state: GKPeerConnectionState)
    func session(_ session: GKSession, didReceiveConnectionRequestFromPeer peerID: String)
    func session(_ session: GKSession, connectionWithPeerFailed peerID: String, withError error: any Error)
    func session(_ session: GKSession, didFailWithError error: any Error)
}

public extension GKSessionDelegate {
    func session(_ session: GKSession, peer peerID: String, didChange state: GKPeerConnectionState) {}
    func session(_ session: GKSession, didReceiveConnectionRequestFromPeer peerID: String) {}
    func session(_ session: GKSession, connectionWithPeerFailed peerID: String, withError error: any Error) {}
    func session(_ session: GKSession, didFailWithError error: any Error) {}
}

/// What `setDataReceiveHandler(_:withContext:)` calls for each message, on the main queue.
public protocol GKSessionDataReceiveHandler: AnyObject {
    /// One message from `peer`, with the context pointer given to `setDataReceiveHandler(_:withContext:)` passed through untouched.
    func receiveData(_ data: Data, fromPeer peer: String, inSession session: GKSession, context: UnsafeMutableRawPointer?)
}
