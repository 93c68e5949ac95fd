// GKPeerPickerController without UIKit: the same delegate sequence — sessionFor (a session in .peer mode; the picker makes one when the delegate does
// not) → a peer is chosen → the other side accepts → didConnectPeer; or peerPickerControllerDidCancel.
// `chooser` stands in for the user's tap (default: the first peer found; `GKTerminalPicker.choose` asks
// on the terminal), `requestPresenter` for the other side's "accept?" alert (default: accept).
// `peerPickerController(_:didSelect:)` is never called: it answers a choice between several connection types,
// and Apple's Swift `GKPeerPickerConnectionType` is an enumeration whose mask can only name one (`.nearby`).
import Foundation

public protocol GKPeerPickerControllerDelegate: NSObjectProtocol {
    func peerPickerController(_ picker: GKPeerPickerController, didSelect type: GKPeerPickerConnectionType)
    /// Return a session in .peer mode; without this method the picker makes its own.
    func peerPickerController(_ picker: GKPeerPickerController, sessionFor type: GKPeerPickerConnectionType) -> GKSession
    func peerPickerController(_ picker: GKPeerPickerController, didConnectPeer peerID: String, to session: GKSession)
    func peerPickerControllerDidCancel(_ picker: GKPeerPickerController)
}

public extension GKPeerPickerControllerDelegate {
    func peerPickerController(_ picker: GKPeerPickerController, didSelect type: GKPeerPickerConnectionType) {}
    func peerPickerController(_ picker: GKPeerPickerController, sessionFor type: GKPeerPickerConnectionType) -> GKSession {
        GKSession(sessionID: nil, displayName: nil, sessionMode: .peer)
    }
    func peerPickerController(_ picker: GKPeerPickerController, didConnectPeer peerID: String, to session: GKSession) {}
    func peerPickerControllerDidCancel(_ picker: GKPeerPickerController) {}
}

open class GKPeerPickerController: NSObject, @unchecked Sendable {
    /// The allowed connection type: `.nearby` (the default), the one iOS requires and the one Linux has.
    open var connectionTypesMask: GKPeerPickerConnectionType = .nearby
    open weak var delegate: (any GKPeerPickerControllerDelegate)?
    /// Read from any thread (the delegate's calls come on the main queue): behind a lock.
    open private(set) var isVisible: Bool {
        get { visibleLock.withLock { visible } }
        set { visibleLock.withLock { visible = newValue } }
    }
    private let visibleLock = NSLock()
    private var visible = false
    /// Picks a peer among those shown (ID → display name); nil waits for more. Runs on the session's queue.
    public var chooser: ([String: String]) -> String? = { $0.keys.sorted().first }
    /// Answers a connection request from the peer with this display name (the remote side's alert).
    public var requestPresenter: (String, @escaping (Bool) -> Void) -> Void = { _, answer in answer(true) }
    public private(set) var session: GKSession?
    private var chosen: String?
    private var connectedReported = false

    public override init() { super.init() }

    /// Shows the picker: asks the delegate for the session, makes it available, and waits for a peer.
    open func show() {
        guard !isVisible else { return }
        isVisible = true
        // iOS requires the Bluetooth (nearby) type among the allowed ones and raises otherwise.
        precondition(connectionTypesMask == .nearby, "GKPeerPickerController: connectionTypesMask must include GKPeerPickerConnectionType.nearby")
        let s: GKSession = delegate?.peerPickerController(self, sessionFor: .nearby) ?? GKSession(sessionID: nil, displayName: nil, sessionMode: .peer)
        precondition(s.sessionMode == .peer, "the session a GKPeerPickerController uses must be in GKSessionModePeer")
        session = s
        s.engine.observers.append { [weak self, weak s] peer, state in
            guard let self, let s, isVisible else { return }
            if let state { stateChanged(peer, state, in: s) } else { requested(peer, in: s) }
        }
        s.isAvailable = true
    }

    /// Hides the picker. The session stays with the app.
    open func dismiss() { isVisible = false }

    /// The Cancel button.
    open func cancel() {
        guard isVisible else { return }
        isVisible = false
        session?.isAvailable = false
        delegate?.peerPickerControllerDidCancel(self)
    }

    private func stateChanged(_ peer: String, _ state: GKPeerConnectionState, in s: GKSession) {
        switch state {
        case .stateAvailable where chosen == nil:
            var shown: [String: String] = [:]
            for id in s.peerIDs(with: .stateAvailable) { shown[id] = s.displayName(forPeer: id) ?? id }
            guard let pick = chooser(shown) else { return }
            chosen = pick
            s.connect(toPeer: pick, withTimeout: 30)
        case .stateConnected where !connectedReported:
            connectedReported = true
            delegate?.peerPickerController(self, didConnectPeer: peer, to: s)
        case .stateDisconnected, .stateUnavailable:
            if peer == chosen, !connectedReported { chosen = nil }
        default:
            break
        }
    }

    private func requested(_ peer: String, in s: GKSession) {
        requestPresenter(s.displayName(forPeer: peer) ?? peer) { ok in
            if ok { try? s.acceptConnection(fromPeer: peer) } else { s.denyConnection(fromPeer: peer) }
        }
    }
}

/// A terminal stand-in for the picker's list.
public enum GKTerminalPicker {
    /// Prints the peers and reads a number; nil (wait) on an empty line.
    public static func choose(_ peers: [String: String]) -> String? {
        let ids = peers.keys.sorted()
        for (i, id) in ids.enumerated() { print("  \(i + 1). \(peers[id]!)") }
        print("Connect to which peer? ", terminator: "")
        fflush(nil)
        guard let line = readLine(), let n = Int(line), (1...ids.count).contains(n) else { return nil }
        return ids[n - 1]
    }
}
