// One Bluetooth LE device under the Multipeer transport: it advertises peers (rotating when a process has
// several to announce), scans for them, keeps ACL links to the devices it talks to, publishes an L2CAP
// SPSM per listener and opens credit-based channels, each bridged into a PeerLink (PeerLink's framing, TLS
// and back-pressure then work unchanged over Bluetooth).
//
// A process has one node on a real controller (serial, hci-socket, tcp-client: one radio, as on a phone);
// on the in-process virtual radio every peer has its own node, so peers of one process are distinct devices
// that can find each other (as Core Bluetooth managers are there).
//
// Threading contract: node state lives on its host's loop; the public methods may be called from any thread.
import Foundation
import BLEWire
import BLEHCI
import BLEL2CAP
import BLETransport
import BLEHost
import PeerSession
import PeerTransport

public final class BluetoothPeerNode: PeerBluetoothNode, HostCentralDelegate, HostPeripheralDelegate, @unchecked Sendable {
    public let host: LEHost
    let key: UInt64
    var loop: EventLoop { host.loop }

    // MARK: Making nodes

    /// How nodes are shared: one per process (a real controller) or one per peer (the in-process radio).
    public enum Sharing: Sendable { case perProcess, perPeer }

    struct Registry {
        var nodes: [UInt64: (node: BluetoothPeerNode, users: Int)] = [:]
        /// Nodes released for the last time whose links are still being disconnected.
        var closing: [ObjectIdentifier: BluetoothPeerNode] = [:]
        var factory: (@Sendable (String) throws -> LEHost)?
        var sharing: Sharing?
    }
    private static let registry = Locked(Registry())

    /// Replaces how hosts are made (tests give hosts on an air of their own) and how nodes are shared;
    /// nil restores `BLE_TRANSPORT`.
    package static func configure(factory: (@Sendable (String) throws -> LEHost)?, sharing: Sharing?) {
        registry.withLock {
            $0.factory = factory; $0.sharing = sharing
        }
    }

    /// Whether a test configured how hosts are made (then no other backend is chosen).
    static var hasFactory: Bool { registry.withLock { $0.factory != nil } }

    /// The node for peer `token` (made and powered on when it is the first user); nil when no controller
    /// can be made (the reason is logged once). Every `acquire` is paired with a `release`.
    public static func acquire(forPeer token: UInt64) -> BluetoothPeerNode? {
        let made: BluetoothPeerNode? = registry.withLock { r in
            let sharing = r.sharing ?? ((try? TransportSpec.fromEnvironment()) == .virtual ? .perPeer : .perProcess)
            let key = sharing == .perPeer ? token : 0
            if let e = r.nodes[key] {
                r.nodes[key] = (e.node, e.users + 1)
                return e.node
            }
            do {
                let name = "mc-\(String(token, radix: 36))"
                let host = try r.factory.map { try $0(name) } ?? HostFactory.makeHostFromEnvironment(name: name)
                let node = BluetoothPeerNode(host: host, key: key)
                r.nodes[key] = (node, 1)
                _ = Self.closeAtExit
                return node
            } catch {
                PeerBluetoothNodes.unavailable("Bluetooth transport unavailable: \(error)")
                return nil
            }
        }
        made?.start()
        return made
    }

    /// One user less; the last one closes the node (`close`) and forgets it.
    public func release() {
        let last = Self.registry.withLock { r -> Bool in
            guard let e = r.nodes[key], e.node === self else { return false }
            if e.users > 1 { r.nodes[key] = (self, e.users - 1); return false }
            r.nodes[key] = nil
            r.closing[ObjectIdentifier(self)] = self
            return true
        }
        guard last else { return }
        loop.execute { [self] in close(nil) }
    }

    /// How long closing waits for the links' Disconnection Complete before the controller is let go.
    package var releaseWait: LoopTime = .seconds(5)
    private var closing: (timer: LoopTimer?, done: [() -> Void])?
    private var closed = false

    /// Stops advertising, browsing and listening, disconnects every link and powers the host off once they are
    /// gone (or after `releaseWait`); `done` runs then. Powering off at once lost the disconnections: closing the
    /// HCI user channel drops the commands the kernel has not passed to the controller yet, and the controller
    /// keeps its links with no host behind them. The peer then held a link that no one answered on, and once the
    /// next process had reset the controller, the peer's kernel (Linux 6.1) ignored the new link to the same
    /// address as a duplicate ("Ignoring HCI_Connection_Complete for existing connection"), so the channel
    /// requests sent on it were never answered (gk-bluez after mc-bluez in the kernel guest).
    func close(_ done: (() -> Void)?) {
        loop.assertInLoop()
        if closed { done?(); return }
        if closing != nil { if let done { closing?.done.append(done) }; return }
        closing = (nil, done.map { [$0] } ?? [])
        advertTimer.map { loop.cancel($0) }
        sweepTimer.map { loop.cancel($0) }
        advertTimer = nil
        sweepTimer = nil
        adverts.removeAll()
        browses.removeAll()
        for psm in listeners.keys { host.unpublishL2CAP(psm: psm) }
        listeners.removeAll()
        guard isOn, !host.connections.isEmpty else { return finishClosing() }
        // The disconnections first: the host sends its commands in order, one at a time, and in the guest the
        // advertising commands already queued (a rotation's five) took most of the time there was.
        for (_, c) in host.connections { c.disconnect(reason: .remotePowerOff) }
        // No new link while the old ones end.
        host.stopAdvertising()
        if host.isScanning { host.stopScanning() }
        closing?.timer = loop.schedule(after: releaseWait) { [weak self] in
            guard let self, let open = closing.map({ _ in host.connections.count }) else { return }
            PeerLog.write("Bluetooth: \(open) link(s) still up \(Double(releaseWait) / 1e9) s after their disconnection; closing the controller anyway")
            finishClosing()
        }
    }

    private func finishClosing() {
        guard let c = closing else { return }
        closing = nil
        closed = true
        c.timer.map { loop.cancel($0) }
        host.powerOff()
        Self.registry.withLock { _ = $0.closing.removeValue(forKey: ObjectIdentifier(self)) }
        for d in c.done { d() }
    }

    /// A process that ends with nodes open (`ble mc` and `ble gk` exit once their work is done, as apps do) closes
    /// them first, each as `release` closes it, waiting (up to `releaseWait` and a little more) for the links to
    /// end: on the HCI user channel no one else would end them (the kernel lets the controller go as it is).
    private static let closeAtExit: Void = { atexit { BluetoothPeerNode.closeAll() } }()

    package static func closeAll() {
        let nodes = registry.withLock { r -> [BluetoothPeerNode] in
            let all = r.nodes.values.map(\.node) + r.closing.values
            r.nodes.removeAll()
            return all
        }
        let group = DispatchGroup()
        var longest: LoopTime = 0
        // (A node whose loop is this thread cannot be waited for: its loop would never run the close.)
        for node in nodes where !node.loop.isInLoop {
            group.enter()
            longest = max(longest, node.releaseWait)
            node.loop.execute { node.close { group.leave() } }
        }
        _ = group.wait(timeout: .now() + .nanoseconds(Int(clamping: longest)) + .milliseconds(500))
    }

    init(host: LEHost, key: UInt64) {
        self.host = host
        self.key = key
    }

    private func start() {
        loop.execute { [self] in
            guard host.centralDelegate == nil else { return }
            host.centralDelegate = self
            host.peripheralDelegate = self
            powerObserver = host.addPowerObserver { [weak self] state in self?.powerChanged(state) }
            host.powerOn()
        }
    }

    // MARK: Power

    private var powerObserver: UInt64?
    private var whenOn: [() -> Void] = []
    var isOn: Bool { host.powerState == .on }

    /// Runs `work` on the loop once the controller is on.
    func onLoopWhenOn(_ work: @escaping () -> Void) {
        let w = UncheckedBox(work)
        loop.execute { [self] in
            if isOn { w.value() } else { whenOn.append(w.value) }
        }
    }

    private func powerChanged(_ state: HostPowerState) {
        guard state == .on else { return }
        let a = host.localAddress
        knownAddress.withLock { $0 = a }
        let pending = whenOn
        whenOn.removeAll()
        for w in pending { w() }
        refreshAdvertising()
        refreshScanning()
        scheduleSweep()
    }

    private let knownAddress = Locked<BluetoothAddress?>(nil)
    /// This device's address as peers connect to it (nil until the controller is on).
    public var address: BluetoothAddress? { knownAddress.withLock { $0 } }

    private let ids = Locked<UInt64>(0)
    private func makeID() -> UInt64 {
        ids.withLock {
            $0 += 1; return $0
        }
    }

    // MARK: Advertising

    struct Advert {
        var data: [UInt8]
        var scanResponse: [UInt8]
    }
    private var adverts: [UInt64: Advert] = [:]
    private var advertTimer: LoopTimer?
    private var advertTurn = 0
    /// Advertising interval: 100 ms (0x00A0 × 0.625 ms).
    package var advertisingInterval: UInt16 = 0x00A0
    /// How long each of several adverts of the process is on the air before the next.
    static let rotation: LoopTime = .milliseconds(300)
    /// How soon advertising or scanning that the controller refused is tried again.
    static let retry: LoopTime = .seconds(1)

    /// Announces `advert` (connectable) until `removeAdvert` with the returned id (a controller that refuses
    /// to advertise is logged: LEHost's adverts rotate, one refusal is not the advert's end).
    public func addAdvert(_ advert: PeerAdvert, name: String, onFailure: @escaping @Sendable (String) -> Void) -> UInt64 {
        addAdvert(advert, name: name)
    }

    public func addAdvert(_ advert: PeerAdvert, name: String) -> UInt64 {
        let entry = Advert(data: advert.advertisingData, scanResponse: PeerAdvert.scanResponse(name: name))
        let id = makeID()
        loop.execute { [self] in
            // (A closing node takes nothing new: at exit the sessions still react to their peers leaving.)
            guard closing == nil, !closed else { return }
            adverts[id] = entry
            refreshAdvertising()
        }
        return id
    }

    public func removeAdvert(_ id: UInt64) {
        loop.execute { [self] in
            guard adverts.removeValue(forKey: id) != nil else { return }
            refreshAdvertising()
        }
    }

    private func refreshAdvertising() {
        guard isOn else { return }
        advertTimer.map { loop.cancel($0) }
        advertTimer = nil
        let list = adverts.sorted { $0.key < $1.key }.map(\.value)
        guard !list.isEmpty else { return host.stopAdvertising() }
        let a = list[advertTurn % list.count]
        host.startAdvertising(AdvertisingConfiguration(data: a.data, scanResponse: a.scanResponse, connectable: true, interval: advertisingInterval)) {
            [weak self] e in
            guard let self, let e else { return }
            // A refusal is not the advert's end (a command that timed out on a busy machine, a controller
            // briefly busy): try again in a second while something is to be advertised.
            PeerLog.write("advertising: \(e); trying again in a second")
            guard isOn, !adverts.isEmpty, advertTimer == nil else { return }
            advertTimer = loop.schedule(after: Self.retry) { [weak self] in self?.refreshAdvertising() }
        }
        if list.count > 1 {
            advertTimer = loop.schedule(after: Self.rotation) { [weak self] in
                guard let self else { return }
                advertTurn &+= 1
                refreshAdvertising()
            }
        }
    }

    // MARK: Scanning

    public typealias BrowseEvent = PeerBrowseEvent
    struct Browse {
        var service: [UInt8]
        var handler: (BrowseEvent) -> Void
        var lastSeen: [UInt64: LoopTime] = [:]
    }
    private var browses: [UInt64: Browse] = [:]
    private var sweepTimer: LoopTimer?
    /// A peer whose adverts stopped this long ago is lost.
    package var lostAfter: LoopTime = .seconds(4)
    static let maximumTracked = 1024

    /// Reports adverts of `service` (a `PeerAdvert.serviceUUID`): `seen` for every advert (the caller
    /// deduplicates), `lost` when a token fell silent. The handler runs on the node's loop.
    public func browse(service: [UInt8], _ handler: @escaping @Sendable (BrowseEvent) -> Void) -> UInt64 {
        let id = makeID()
        loop.execute { [self] in
            guard closing == nil, !closed else { return }
            browses[id] = Browse(service: service, handler: handler)
            refreshScanning()
            scheduleSweep()
        }
        return id
    }

    public func cancelBrowse(_ id: UInt64) {
        loop.execute { [self] in
            guard browses.removeValue(forKey: id) != nil else { return }
            refreshScanning()
        }
    }

    private func refreshScanning() {
        guard isOn else { return }
        if browses.isEmpty {
            if host.isScanning { host.stopScanning() }
        } else if !host.isScanning {
            // Continuous scanning (window = interval), reports not filtered: each advert tells us it is alive.
            host.startScanning(active: false, filterDuplicates: false, interval: 0x0030, window: 0x0030) { e in
                // Tried again by the sweep (every half second while browsing) until it takes.
                if let e { PeerLog.write("scanning: \(e); trying again") }
            }
        }
    }

    private func scheduleSweep() {
        guard sweepTimer == nil, isOn else { return }
        sweepTimer = loop.schedule(after: .milliseconds(500)) { [weak self] in
            guard let self else { return }
            sweepTimer = nil
            sweep()
            if !browses.isEmpty && !host.isScanning { refreshScanning() }
            if !browses.isEmpty || !host.connections.isEmpty { scheduleSweep() }
        }
    }

    private func sweep() {
        let now = loop.now
        for (id, b) in browses {
            for (token, seen) in b.lastSeen where now - seen > lostAfter {
                browses[id]?.lastSeen[token] = nil
                b.handler(.lost(token: token))
            }
        }
        closeIdleLinks(now: now)
    }

    public func host(_ host: LEHost, didReceive report: AdvertisingReport) {
        guard report.isConnectable, let advert = PeerAdvert(advertisingData: report.data) else { return }
        let endpoint = PeerBluetoothEndpoint(address: report.address.bytes, isRandom: report.address.type.isRandom, psm: advert.psm)
        let now = loop.now
        for (id, b) in browses where b.service == advert.service {
            // Bounded: a flood of made-up tokens cannot grow the table past this.
            guard b.lastSeen[advert.token] != nil || b.lastSeen.count < Self.maximumTracked else { continue }
            browses[id]?.lastSeen[advert.token] = now
            b.handler(.seen(token: advert.token, endpoint: endpoint))
        }
    }

    // MARK: Links

    private var pendingConnects: [BluetoothAddress: [(HostConnection?) -> Void]] = [:]
    /// When each link we opened last had no channel (idle links are closed after `idleTimeout`).
    private var idleSince: [UInt16: LoopTime] = [:]
    package var idleTimeout: LoopTime = .seconds(10)
    package var connectTimeout: LoopTime = .seconds(10)

    private func existing(_ address: BluetoothAddress) -> HostConnection? {
        host.connections.values.first { $0.isOpen && ($0.peerAddress.bytes == address.bytes || $0.identityAddress.bytes == address.bytes) }
    }

    /// A link to `address`: the one we have (in either role), or a new one as central.
    func link(to address: BluetoothAddress, _ done: @escaping (HostConnection?) -> Void) {
        loop.assertInLoop()
        if let c = existing(address) { return done(c) }
        if pendingConnects[address] != nil { pendingConnects[address]!.append(done); return }
        pendingConnects[address] = [done]
        host.connect(to: address)
        _ = loop.schedule(after: connectTimeout) { [weak self] in
            guard let self, pendingConnects[address] != nil else { return }
            host.cancelConnect(to: address)
            finishConnect(address, nil)
        }
    }

    private func finishConnect(_ address: BluetoothAddress, _ c: HostConnection?) {
        guard let waiting = pendingConnects.removeValue(forKey: address) else { return }
        for w in waiting { w(c) }
    }

    public func host(_ host: LEHost, didConnect connection: HostConnection) {
        idleSince[connection.handle] = loop.now
        scheduleSweep()
        if connection.role == .central {
            // As iOS does after connecting: the longest data length and LE 2M where the controller has them.
            host.setDataLength(handle: connection.handle, octets: 251) { _ in }
            host.setPHY(handle: connection.handle, phys: 0x02) { _ in }
            let address = pendingConnects.keys.first { $0.bytes == connection.peerAddress.bytes } ?? connection.peerAddress
            finishConnect(address, connection)
        }
    }

    public func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {
        PeerLog.write("Bluetooth: could not connect to \(address): \(status)")
        finishConnect(pendingConnects.keys.first { $0.bytes == address.bytes } ?? address, nil)
    }

    public func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {
        idleSince[connection.handle] = nil
        if closing != nil, host.connections.isEmpty { finishClosing() }
    }

    /// Closes links we opened that carried no channel for `idleTimeout`.
    private func closeIdleLinks(now: LoopTime) {
        for (handle, c) in host.connections where c.role == .central {
            if !c.l2capChannels.isEmpty {
                idleSince[handle] = nil
            } else if let since = idleSince[handle] {
                if now - since > idleTimeout { c.disconnect() }
            } else {
                idleSince[handle] = now
            }
        }
    }

    public func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {}
    public func host(_ host: LEHost, didReceiveRead request: HostReadRequest) {
        host.respondToRead(id: request.id, result: .failure(.attributeNotFound))
    }
    public func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) {
        host.respondToWrite(id: request.id, error: .attributeNotFound)
    }
    public func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {}
    public func hostIsReadyToUpdateSubscribers(_ host: LEHost) {}
    public func host(_ host: LEHost, connectionIsReadyToSendWriteWithoutResponse connection: HostConnection) {}
    public func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {}

    // MARK: Channels

    /// Receive parameters of our channels: K-frames that fill one LL PDU at the longest data length, 8 KB
    /// SDUs, a 128 KB window (what a peer may have in flight to us).
    var channelParameters: L2CAPChannelParameters {
        L2CAPChannelParameters(mtu: 8192, mps: UInt16(clamping: max(23, min(host.aclBufferSize - 4, 247))), window: 128 * 1024)
    }
    private var listeners: [UInt16: Bool] = [:]

    /// Publishes an SPSM whose channels become links (served as a TCP listener serves: TLS or plaintext,
    /// by the first octet). `completion` gets the SPSM, or nil when the controller is off or none is free.
    public func listen(tls: PeerTLSIdentity?, onLink: @escaping @Sendable (PeerLink) -> Void, completion: @escaping @Sendable (UInt16?) -> Void) {
        onLoopWhenOn { [self] in
            let psm = host.publishL2CAP(parameters: channelParameters) { [weak self] channel in
                guard let self, let c = channel.connection else { return channel.close() }
                let remote = PeerBluetoothEndpoint(address: c.peerAddress.bytes, isRandom: c.peerAddress.type.isRandom, psm: 0).host
                L2CAPBridge.start(channel: channel, loop: loop, remoteHost: remote, asClient: false, tls: tls) { r in
                    if case let .success(link) = r { onLink(link) }
                }
            }
            if let psm { listeners[psm] = true }
            completion(psm)
        }
    }

    /// Stops accepting channels on `psm` (links made stay up).
    public func unlisten(_ psm: UInt16) {
        loop.execute { [self] in
            guard listeners.removeValue(forKey: psm) != nil else { return }
            host.unpublishL2CAP(psm: psm)
        }
    }

    /// Opens a link to a peer's SPSM: an ACL link (reused when we have one), then a credit-based channel.
    public func connect(
        to endpoint: PeerBluetoothEndpoint, tls: PeerTLSIdentity?,
        completion: @escaping @Sendable (Result<PeerLink, PeerTransportError>) -> Void
    ) {
        guard endpoint.address.count == 6 else { return completion(.failure(.cannotConnect("\(endpoint): not an address"))) }
        let address = BluetoothAddress(bytes: endpoint.address, type: endpoint.isRandom ? .random : .public)
        onLoopWhenOn { [self] in
            link(to: address) { [self] c in
                guard let c else { return completion(.failure(.cannotConnect("\(endpoint.host): no Bluetooth link"))) }
                idleSince[c.handle] = nil
                c.openL2CAPChannel(psm: endpoint.psm, parameters: channelParameters) { [self] r in
                    switch r {
                    case let .success(channels):
                        L2CAPBridge.start(channel: channels[0], loop: loop, remoteHost: endpoint.host, asClient: true, tls: tls, completion: completion)
                    case let .failure(e):
                        idleSince[c.handle] = loop.now
                        completion(.failure(.cannotConnect("\(endpoint.host) PSM 0x\(String(endpoint.psm, radix: 16)): \(e)")))
                    }
                }
            }
        }
    }
}

/// Carries a closure across a loop hop; the loop serialises its use.
struct UncheckedBox<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
