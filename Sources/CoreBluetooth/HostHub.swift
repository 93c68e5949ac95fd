// One controller, many managers: every CBCentralManager and CBPeripheralManager on one host shares it, as
// every manager of an iPhone app shares the phone's controller. The hub is the host's central and
// peripheral delegate (held strongly by the host; the hub holds the host and the managers weakly) and hands
// each event to the manager it belongs to:
// - advertising reports go to every central (each applies its own scan filters); the controller scans
//   while any central wants it;
// - a new central link goes to every manager that asked for it, and a connect to a device another manager
//   is linked to joins that link (SharedLink, in the connection's context): the link's events go to every
//   manager using it, each to its own CBPeripheral; a link nobody wants any more is closed;
// - links made to us as peripheral go to every peripheral manager (each has its CBCentral for it); reads,
//   writes and subscriptions go to the manager that published the attribute (the GATT database is shared);
// - when the last manager goes away, the host is powered off.
//
// Threading: loop-confined, like the host.
import Foundation
import BLEWire
import BLEHCI
import BLEHost

final class HostHub: HostCentralDelegate, HostPeripheralDelegate, @unchecked Sendable {
    private struct WeakCentral { weak var value: CBCentralManager? }
    private struct WeakPeripheral { weak var value: CBPeripheralManager? }

    private weak var host: LEHost?
    private var centralManagers: [WeakCentral] = []
    private var peripheralManagers: [WeakPeripheral] = []
    /// The centrals that want the controller scanning, held weakly and told apart by identity: a central that
    /// is gone counts for nothing, even before `managerGone` runs, and a newer one at its address is not it.
    private var scanners: [WeakCentral] = []
    /// The central managers, readable from any thread (retrieveConnectedPeripherals looks at every link).
    private let centralsSnapshot = CBMutex([WeakCentral]())

    private init(host: LEHost) { self.host = host }

    private var centrals: [CBCentralManager] { centralManagers.compactMap(\.value) }
    private var peripherals: [CBPeripheralManager] { peripheralManagers.compactMap(\.value) }

    // MARK: Registration

    func add(_ m: CBCentralManager) {
        centralManagers.append(WeakCentral(value: m))
        centralsSnapshot.withLock { $0 = centralManagers }
        host?.hold(centralDelegate: self)
    }

    func add(_ m: CBPeripheralManager) {
        peripheralManagers.append(WeakPeripheral(value: m))
        host?.hold(peripheralDelegate: self)
    }

    /// Forgets managers that are gone; powers the host off when none is left.
    func managerGone() {
        centralManagers.removeAll { $0.value == nil }
        peripheralManagers.removeAll { $0.value == nil }
        centralsSnapshot.withLock { $0 = centralManagers }
        // The links of a manager that is gone are let go of (the others' stay).
        for c in (host?.connections ?? [:]).values where c.role == .central {
            if let link = SharedLink.existing(c), link.sweep() { SharedLink.close(c) }
        }
        scanners.removeAll { $0.value == nil }
        if scanners.isEmpty, host?.isScanning == true { host?.stopScanning() }
        if centralManagers.isEmpty && peripheralManagers.isEmpty { host?.powerOff() }
    }

    var managerCount: Int { centrals.count + peripherals.count }

    /// The queues the delegates of this host's managers run on (CoreBluetoothTesting waits on them to tell
    /// when the app has finished reacting).
    var delegateQueues: [DispatchQueue] { centrals.map(\.queue) + peripherals.map(\.queue) }

    /// The central managers on this host. Any thread.
    var centralManagersOnHost: [CBCentralManager] { centralsSnapshot.withLock { $0.compactMap(\.value) } }

    // MARK: Scanning

    /// Scanning on the controller while any central wants it.
    func startScanning(for m: CBCentralManager, completion: @escaping (HostError?) -> Void) {
        guard let host else { return completion(.notPoweredOn) }
        if !scanners.contains(where: { $0.value === m }) { scanners.append(WeakCentral(value: m)) }
        if host.isScanning { return completion(nil) }
        host.startScanning(active: true, filterDuplicates: false, completion: completion)
    }

    func stopScanning(for m: CBCentralManager) {
        scanners.removeAll { $0.value == nil || $0.value === m }
        if scanners.isEmpty { host?.stopScanning() }
    }

    // MARK: Central role

    func host(_ host: LEHost, didReceive report: AdvertisingReport) {
        for c in centrals { c.host(host, didReceive: report) }
    }

    func host(_ host: LEHost, didConnect connection: HostConnection) {
        if connection.role == .peripheral {
            for p in peripherals { p.host(host, didConnect: connection) }
            return
        }
        // Every manager that asked for the device shares the link; those that cancelled meanwhile hear
        // didDisconnect, and the link closes only when nobody keeps it.
        var claimed = false
        var cancelled: [(CBCentralManager, CBPeripheral)] = []
        for c in centrals {
            switch c.claim(connection) {
            case .claimed: claimed = true
            case let .cancelled(p): cancelled.append((c, p))
            case .notMine: break
            }
        }
        if claimed {
            for (c, p) in cancelled { c.dropCancelled(p) }
        } else if !cancelled.isEmpty {
            for (c, p) in cancelled { c.closeCancelled(p, on: connection) }
        } else {
            // Asked for by a manager or a peripheral that is gone since.
            SharedLink.close(connection)
        }
    }

    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {
        for c in centrals { c.host(host, didFailToConnectTo: address, status: status) }
    }

    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {
        if connection.role == .peripheral {
            for p in peripherals { p.host(host, didDisconnect: connection, reason: reason) }
        } else {
            for c in centrals { c.host(host, didDisconnect: connection, reason: reason) }
            // A connect made while the link was closing waited for it to go: it starts now.
            for c in centrals { c.resumeConnects(afterClosing: connection) }
        }
    }

    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {
        // Every value received passes here. It goes straight to the link's users that take it (one CBPeripheral
        // per manager on the link), not through each manager in turn: no weak load of every manager or
        // peripheral for every value. A user whose peripheral or manager is gone and not yet swept drops it
        // (ValueInbox.handOver).
        SharedLink.existing(connection)?.forEachInbox(of: handle) { $0.received(value: value, handle: handle) }
    }

    /// The host's hot path: a notification's value still in its packet becomes each user's Data directly.
    func host(_ host: LEHost, connection: HostConnection, didReceiveNotification value: ArraySlice<UInt8>, forHandle handle: UInt16) {
        SharedLink.existing(connection)?.forEachInbox(of: handle) { $0.received(value: value, handle: handle) }
    }

    func host(_ host: LEHost, connectionIsReadyToSendWriteWithoutResponse connection: HostConnection) {
        for c in centrals { c.host(host, connectionIsReadyToSendWriteWithoutResponse: connection) }
    }

    func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {
        if connection.role == .peripheral {
            for p in peripherals { p.host(host, connection: connection, didChangeMTU: mtu) }
        } else {
            for c in centrals { c.host(host, connection: connection, didChangeMTU: mtu) }
        }
    }

    /// An open central link to the device at `address` (its link address or identity), for a manager that
    /// connects to a device another one is linked to.
    func centralLink(to address: BluetoothAddress) -> HostConnection? {
        guard let host else { return nil }
        let identity = host.identity(of: address)
        return host.connections.values.first { c in
            c.role == .central && c.isOpen && (c.peerAddress == address || c.identityAddress == identity)
        }
    }

    /// Whether a central manager other than `m` waits for a connection to `address`.
    func isConnecting(to address: BluetoothAddress, besides m: CBCentralManager) -> Bool {
        centrals.contains { $0 !== m && $0.isConnecting(to: address) }
    }

    // MARK: Peripheral role (the LEHost calls these for links where we are the peripheral)

    // `host(_:didConnect:)` and `host(_:didDisconnect:reason:)` are shared with the central role above:
    // the host calls the delegate of the link's role, so the role tells them apart.

    func host(_ host: LEHost, didReceiveRead request: HostReadRequest) {
        guard let m = peripherals.first(where: { $0.publishes(request.attributeHandle) }) ?? peripherals.first else {
            return host.respondToRead(id: request.id, result: .failure(.readNotPermitted))
        }
        m.host(host, didReceiveRead: request)
    }

    func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) {
        let handle = request.items.first?.attributeHandle ?? 0
        guard let m = peripherals.first(where: { $0.publishes(handle) }) ?? peripherals.first else {
            return host.respondToWrite(id: request.id, error: request.needsResponse ? .writeNotPermitted : nil)
        }
        m.host(host, didReceiveWrite: request)
    }

    func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {
        peripherals.first { $0.publishes(valueHandle) }?
            .host(host, connection: connection, didChangeSubscriptionOf: valueHandle, notify: notify, indicate: indicate)
    }

    func hostIsReadyToUpdateSubscribers(_ host: LEHost) {
        for p in peripherals { p.hostIsReadyToUpdateSubscribers(host) }
    }

    // MARK: One hub per host

    private struct Registered { weak var host: LEHost?; let hub: HostHub }
    private static let registry = CBMutex([ObjectIdentifier: Registered]())

    /// The hub of `host`, made on first use.
    static func of(_ host: LEHost) -> HostHub {
        registry.withLock { registry in
            registry = registry.filter { $0.value.host != nil }
            if let r = registry[ObjectIdentifier(host)], r.host === host { return r.hub }
            let hub = HostHub(host: host)
            registry[ObjectIdentifier(host)] = Registered(host: host, hub: hub)
            return hub
        }
    }
}
