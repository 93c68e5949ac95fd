// The Bluetooth device under Multipeer's Bluetooth transport, whatever drives it: our own host (BluetoothPeerNode,
// on LEHost: the virtual radio, serial, hci-socket, tcp-client) or bluetoothd (BlueZPeerNode, BLE_TRANSPORT=bluez,
// where the system keeps the adapter). MCSession, MCNearbyServiceAdvertiser and MCNearbyServiceBrowser (and GameKit
// through them) see only this protocol, so sessions, invitations and transfers are the same on both; the advert
// format (PeerAdvert) is the same too, so a peer on one backend finds and joins a peer on the other.
import BLETransport
import BLEWire
import PeerSession
import PeerTransport
import CoreBluetooth

/// What a browse reports: an advert of a peer (every one, the caller deduplicates) or a peer that fell silent.
public enum PeerBrowseEvent: Sendable {
    case seen(token: UInt64, endpoint: PeerBluetoothEndpoint)
    case lost(token: UInt64)
}

/// One Bluetooth LE device that advertises peers, browses for them and carries their links over L2CAP
/// credit-based channels. Every method may be called from any thread; completions run on the node's own queue.
public protocol PeerBluetoothNode: AnyObject, Sendable {
    /// This device's address as peers connect to it (nil until the adapter is on).
    var address: BluetoothAddress? { get }
    /// Announces `advert` (connectable), with `name` for ordinary scanners, until `removeAdvert`; `onFailure` gets
    /// the reason when the device cannot put it on the air.
    func addAdvert(_ advert: PeerAdvert, name: String, onFailure: @escaping @Sendable (String) -> Void) -> UInt64
    func removeAdvert(_ id: UInt64)
    /// Reports adverts of `service` (a `PeerAdvert.serviceUUID`) until `cancelBrowse`.
    func browse(service: [UInt8], _ handler: @escaping @Sendable (PeerBrowseEvent) -> Void) -> UInt64
    func cancelBrowse(_ id: UInt64)
    /// Publishes an SPSM whose channels become links; `completion` gets it, or nil when none can be had.
    func listen(tls: PeerTLSIdentity?, onLink: @escaping @Sendable (PeerLink) -> Void, completion: @escaping @Sendable (UInt16?) -> Void)
    func unlisten(_ psm: UInt16)
    /// Opens a link to a peer's SPSM.
    func connect(
        to endpoint: PeerBluetoothEndpoint, tls: PeerTLSIdentity?,
        completion: @escaping @Sendable (Result<PeerLink, PeerTransportError>) -> Void)
    /// One user less (every `PeerBluetoothNodes.acquire` is paired with one); the last one closes the node.
    func release()
}

/// Where Multipeer gets its Bluetooth node: bluetoothd's adapter for `BLE_TRANSPORT=bluez[:hciN]`, our own host for
/// every other transport (and whenever a test configured a host factory).
public enum PeerBluetoothNodes {
    /// The node for peer `token`, nil when there is no Bluetooth to be had (the reason is logged, and kept in
    /// `unavailableReason`).
    public static func acquire(forPeer token: UInt64) -> (any PeerBluetoothNode)? {
        if let factory = state.withLock({ $0.factory }), let node = factory(token) { return node }
        if !BluetoothPeerNode.hasFactory, let options = BlueZOptions.fromEnvironment() { return BlueZPeerNode.acquire(options: options) }
        return BluetoothPeerNode.acquire(forPeer: token)
    }

    struct State {
        var reason: String?
        var factory: (@Sendable (UInt64) -> (any PeerBluetoothNode)?)?
    }
    private static let state = Locked(State())

    /// Why the last node could not be had (for MCError's failure reason).
    public static var unavailableReason: String { state.withLock { $0.reason } ?? "no Bluetooth controller" }

    static func unavailable(_ why: String) {
        let first = state.withLock { s -> Bool in
            defer { s.reason = why }
            return s.reason != why
        }
        if first { PeerLog.warning(why) }
    }

    /// Makes nodes with `factory` first (tests: nodes of their own on a fake bluetoothd, for the tokens of their
    /// peers; a nil answer falls through to the usual choice); nil restores the default.
    package static func configure(factory: (@Sendable (UInt64) -> (any PeerBluetoothNode)?)?) {
        state.withLock { $0.factory = factory }
    }
}
