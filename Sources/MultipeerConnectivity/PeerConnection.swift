// One remote peer of a session: its link, and what flows on it — message reassembly, resources both ways,
// streams both ways with credits, keep-alive. The session owns these; they call back into it.
//
// Threading contract: link callbacks arrive on the link's event loop; state here is guarded by the
// session's lock; delegate calls go through the session's private serial queue.
import Foundation
import PeerSession
import PeerTransport
import BoundStreams
import PeerBluetooth

final class PeerConnection: @unchecked Sendable {
    let peer: MCPeerID
    let link: PeerLink
    /// Where this peer accepts other mesh members (its session listener).
    var memberPort: UInt16 = 0
    /// Where this peer accepts members over Bluetooth (from its hello).
    var bluetooth: PeerBluetoothEndpoint?
    var connected = false
    /// Its link is gone and `failTransfers` has failed what was under way: a resource or stream the app starts on it
    /// from now on fails at once (a send that looked this connection up just before the disconnect would otherwise
    /// add one that nothing ever completes or ends).
    var transfersEnded = false
    /// We joined this member's session and wait for its answer.
    var awaitingJoinReply = false
    var lastHeard = Date()
    var assembler = MessageAssembler()
    var nextMessageID: UInt32 = 1
    var nextResourceID: UInt32 = 1
    var nextStreamID: UInt32 = 1

    struct OutgoingResource {
        var file: FileHandle
        var progress: Progress
        var completion: ((any Error)?) -> Void
        var sent: UInt64
        var size: UInt64
        var finishedSending = false
    }
    struct IncomingResource {
        var name: String
        var url: URL
        var writer: ResourceWriter
        var progress: Progress
        var size: UInt64
        var received: UInt64
    }
    struct OutgoingStream {
        var output: PipeOutputStream
        var credits: Int
        var closing = false
    }
    var outgoingResources: [UInt32: OutgoingResource] = [:]
    var incomingResources: [UInt32: IncomingResource] = [:]
    var outgoingStreams: [UInt32: OutgoingStream] = [:]
    var incomingStreams: [UInt32: PipeInputStream] = [:]
    /// Files of outgoing resources that are done with (read to the end, or taken out of `outgoingResources`
    /// before), each put here once, for the pump to close between two of its reads (see `MCSession.pump`).
    var filesToClose: [FileHandle] = []
    /// The session's pump runs for this peer / was asked to run meanwhile (event loop only).
    var pumping = false
    var pumpAgain = false
    /// Credits for incoming streams not yet sent back (batched).
    var pendingCredits: [UInt32: Int] = [:]

    /// The receive window of each incoming stream: the sender may have this much unread here.
    static let streamWindow = 256 * 1024
    static let chunk = 64 * 1024
    /// Resource pieces on TCP links: large, so that per-frame costs (and TLS's) spread over many octets.
    /// Bluetooth links keep `chunk`: a piece there occupies the link for a long time.
    static let networkResourceChunk = 1 << 20

    init(peer: MCPeerID, link: PeerLink) {
        self.peer = peer
        self.link = link
    }
}
