// MCBrowserViewController (MCBrowserViewController.h) without UIKit: the same class, delegate and peer
// limits, with the list of nearby peers handed to a presenter — a closure, or `MCTerminalPrompt` which
// prints the list and reads choices on the terminal. `present()` starts browsing (what presenting the view
// controller does on iOS), `invite(_:)` is a tap on a peer, `done()` and `cancel()` are the buttons.
import Foundation

public protocol MCBrowserViewControllerDelegate: NSObjectProtocol {
    func browserViewControllerDidFinish(_ browserViewController: MCBrowserViewController)
    func browserViewControllerWasCancelled(_ browserViewController: MCBrowserViewController)
    func browserViewController(
        _ browserViewController: MCBrowserViewController, shouldPresentNearbyPeer peerID: MCPeerID,
        withDiscoveryInfo info: [String: String]?
    ) -> Bool
}

public extension MCBrowserViewControllerDelegate {
    func browserViewController(
        _ browserViewController: MCBrowserViewController, shouldPresentNearbyPeer peerID: MCPeerID,
        withDiscoveryInfo info: [String: String]?
    ) -> Bool { true }
}

open class MCBrowserViewController: NSObject, MCNearbyServiceBrowserDelegate, @unchecked Sendable {
    public let browser: MCNearbyServiceBrowser?
    public let session: MCSession
    open weak var delegate: (any MCBrowserViewControllerDelegate)?
    /// At most 8 (the default), counting the local peer.
    open var maximumNumberOfPeers: Int = kMCSessionMaximumNumberOfPeers {
        didSet { maximumNumberOfPeers = min(max(maximumNumberOfPeers, kMCSessionMinimumNumberOfPeers), kMCSessionMaximumNumberOfPeers) }
    }
    open var minimumNumberOfPeers: Int = kMCSessionMinimumNumberOfPeers {
        didSet { minimumNumberOfPeers = min(max(minimumNumberOfPeers, kMCSessionMinimumNumberOfPeers), maximumNumberOfPeers) }
    }
    /// Called on a private queue whenever the list of nearby peers changes (what the view shows).
    public var presenter: (MCBrowserViewController, [MCPeerID]) -> Void = { _, _ in }
    private let lock = NSLock()
    private var peers: [MCPeerID] = []
    private var invited: Set<UInt64> = []

    public convenience init(serviceType: String, session: MCSession) {
        self.init(browser: MCNearbyServiceBrowser(peer: session.myPeerID, serviceType: serviceType), session: session)
    }

    public init(browser: MCNearbyServiceBrowser, session: MCSession) {
        self.browser = browser
        self.session = session
        super.init()
        if browser.delegate == nil { browser.delegate = self }
        // A peer whose invitation failed (declined, timed out, the link lost) or whose session ended is offered
        // again, as iOS's browser shows it available to tap again: it leaves `invited`, and the presenter is
        // shown the list once more if the peer is still nearby.
        session.lock.withLock {
            session.stateObservers.append { [weak self] peer, state in
                guard let self, state == .notConnected else { return }
                let list = lock.withLock { () -> [MCPeerID]? in
                    guard invited.remove(peer.token) != nil, peers.contains(peer) else { return nil }
                    return peers
                }
                if let list { presenter(self, list) }
            }
        }
    }

    /// The peers shown now.
    public var nearbyPeers: [MCPeerID] { lock.withLock { peers } }

    /// Shows the browser: starts browsing.
    open func present() { browser?.startBrowsingForPeers() }

    /// A tap on a peer: invites it (30 s), within the maximum number of peers.
    open func invite(_ peer: MCPeerID) {
        let ok = lock.withLock { () -> Bool in
            guard session.connectedPeers.count + invited.count + 1 < maximumNumberOfPeers, !invited.contains(peer.token) else { return false }
            invited.insert(peer.token)
            return true
        }
        guard ok else { return }
        browser?.invitePeer(peer, to: session, withContext: nil, timeout: 30)
    }

    /// The Done button: enabled once the minimum number of peers (counting us) is connected.
    public var isDoneEnabled: Bool { session.connectedPeers.count + 1 >= minimumNumberOfPeers }

    /// Done: tells the delegate, stops browsing. Ignored while `isDoneEnabled` is false.
    open func done() {
        guard isDoneEnabled else { return }
        browser?.stopBrowsingForPeers()
        delegate?.browserViewControllerDidFinish(self)
    }

    /// Cancel: tells the delegate, stops browsing.
    open func cancel() {
        browser?.stopBrowsingForPeers()
        delegate?.browserViewControllerWasCancelled(self)
    }

    public func browser(_ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?) {
        guard delegate?.browserViewController(self, shouldPresentNearbyPeer: peerID, withDiscoveryInfo: info) ?? true else { return }
        let list = lock.withLock { () -> [MCPeerID] in
            if !peers.contains(peerID) { peers.append(peerID) }
            return peers
        }
        presenter(self, list)
    }

    public func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {
        let list = lock.withLock { () -> [MCPeerID] in
            peers.removeAll { $0 == peerID }
            invited.remove(peerID.token)
            return peers
        }
        presenter(self, list)
    }
}

/// Terminal presenters for the headless controllers.
public enum MCTerminalPrompt {
    /// Prints an invitation and reads y/n from standard input.
    public static func invitation(_ peer: MCPeerID, _ context: Data?, _ answer: @escaping (Bool) -> Void) {
        print("Invitation from \"\(peer.displayName)\". Accept? [y/n] ", terminator: "")
        fflush(nil)
        let line = readLine()?.lowercased() ?? "n"
        answer(line.hasPrefix("y"))
    }
}
