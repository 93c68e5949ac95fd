// One central link as the central managers of a host share it. On iOS every app that connects to a device
// uses the system's one link to it, each through its own CBPeripheral object; here every central manager
// on the same controller does. The link (the HostConnection's context) keeps:
// - its users, one CBPeripheral per manager, held weakly: the app keeps the peripherals it uses, and one it
//   releases lets go of the link, as cancelPeripheralConnection does (CBCentralManager.sweepReleased). The
//   link drops when its last user lets go;
// - the Client Characteristic Configuration of each characteristic, which the peer keeps once per link, not
//   per app: the descriptor is written when the first user subscribes and cleared when the last one lets go,
//   and a notification or indication reaches only the users that subscribed to it (a value nobody
//   subscribed to reaches every user, as it reaches a link's only user);
// - the Service Changed watch, done once per link, whose indications reach every user;
// - the primary services the link's set-up found, so a later user's didConnect needs no second discovery.
//
// Threading: loop-confined, like the host.
import Foundation
import BLEWire
import BLEGATT
import BLEHost

final class SharedLink {
    private struct User {
        weak var peripheral: CBPeripheral?
        let id: UInt64
        /// The peripheral's inbox, held strongly: values go there without a weak load (ValueInbox).
        let inbox: ValueInbox
    }
    /// One characteristic's configuration on the link: what each user asked for, and what the peer holds.
    private struct Subscription {
        var descriptor: UInt16
        var wanted: [UInt64: [UInt8]] = [:]
        var written: [UInt8] = [0, 0]
    }

    private weak var connection: HostConnection?
    private var users: [User] = []
    private var nextUserID: UInt64 = 0
    private var subscriptions: [UInt16: Subscription] = [:]
    private var watchingServiceChanged = false
    private(set) var serviceChangedHandle: UInt16 = 0
    /// The last user let go and the link is being closed: a new connect waits for it to close, then connects anew.
    private(set) var isClosing = false
    /// The primary services found when the link was set up (nil until then).
    var systemServices: Set<CBUUID>?

    private init(connection: HostConnection) { self.connection = connection }

    /// The link of a central connection, made on first use.
    static func of(_ c: HostConnection) -> SharedLink {
        if let l = c.context as? SharedLink { return l }
        let l = SharedLink(connection: c)
        c.context = l
        return l
    }

    static func existing(_ c: HostConnection) -> SharedLink? { c.context as? SharedLink }

    // MARK: Users

    /// The peripherals using the link, in the order they joined.
    var peripherals: [CBPeripheral] { users.compactMap(\.peripheral) }

    func peripherals(of manager: CBCentralManager) -> [CBPeripheral] { peripherals.filter { $0.manager === manager } }

    func add(_ p: CBPeripheral) {
        guard !users.contains(where: { $0.peripheral === p }) else { return }
        nextUserID += 1
        p.linkUserID = nextUserID
        p.serviceChangedHandle = serviceChangedHandle
        users.append(User(peripheral: p, id: nextUserID, inbox: p.valueInbox))
    }

    /// Closes the link, which nobody uses any more.
    static func close(_ c: HostConnection) {
        of(c).isClosing = true
        c.disconnect()
    }

    /// Whether a user other than `p` still holds the link.
    func hasUser(besides p: CBPeripheral) -> Bool {
        users.contains { $0.peripheral != nil && $0.peripheral !== p && $0.peripheral?.manager != nil }
    }

    /// `p` leaves the link: its subscriptions are released (the descriptor cleared where nobody else wants it).
    func remove(_ p: CBPeripheral) {
        guard let i = users.firstIndex(where: { $0.peripheral === p }) else { return }
        release(users.remove(at: i).id)
    }

    /// Drops the users whose peripheral or manager is gone; returns true when that left the link unused.
    func sweep() -> Bool {
        let gone = users.filter { $0.peripheral?.manager == nil }
        guard !gone.isEmpty else { return false }
        users.removeAll { $0.peripheral?.manager == nil }
        for u in gone { release(u.id) }
        return users.isEmpty
    }

    // MARK: Client Characteristic Configuration

    /// Sets what user `id` wants of the characteristic at `valueHandle` (`value` nil: nothing) and writes the
    /// descriptor when the peer's configuration must change. A link with one user writes each time it is
    /// asked, as iOS does for a single app; with others subscribed, a request they already cover needs no
    /// write. `completion` gets nil on success.
    func configure(
        user id: UInt64, valueHandle: UInt16, descriptor: UInt16, value: [UInt8]?,
        completion: @escaping (GATTClient.Failure?) -> Void
    ) {
        guard let c = connection, c.isOpen else { return completion(.disconnected) }
        var sub = subscriptions[valueHandle] ?? Subscription(descriptor: descriptor)
        sub.descriptor = descriptor
        let before = sub.wanted[id]
        sub.wanted[id] = value
        let others = sub.wanted.filter { $0.key != id }
        let target = Self.combined(sub.wanted)
        subscriptions[valueHandle] = sub
        if !others.isEmpty && target == sub.written { return completion(nil) }
        c.gatt(.write(handle: descriptor, value: target)) { [self] r in
            switch r {
            case .success:
                subscriptions[valueHandle]?.written = target
                completion(nil)
            case let .failure(f):
                subscriptions[valueHandle]?.wanted[id] = before
                completion(f)
            }
        }
    }

    /// Releases everything user `id` subscribed to; the descriptor follows what the others still want.
    private func release(_ id: UInt64) {
        for (handle, var sub) in subscriptions where sub.wanted[id] != nil {
            sub.wanted[id] = nil
            let target = Self.combined(sub.wanted)
            subscriptions[handle] = sub
            guard target != sub.written, let c = connection, c.isOpen else { continue }
            c.gatt(.write(handle: sub.descriptor, value: target)) { [self] r in
                if case .success = r { subscriptions[handle]?.written = target }
            }
        }
    }

    /// The configuration that serves every user: the union of the bits they asked for.
    private static func combined(_ wanted: [UInt64: [UInt8]]) -> [UInt8] {
        var v: [UInt8] = [0, 0]
        for w in wanted.values { for i in 0..<min(2, w.count) { v[i] |= w[i] } }
        return v
    }

    // MARK: Values

    /// The users a notification or indication for `handle` goes to: those subscribed to it; every user when
    /// nobody is (a peer that sends unasked, or Service Changed).
    func recipients(of handle: UInt16) -> [CBPeripheral] {
        var found: [CBPeripheral] = []
        forEachRecipient(of: handle) { found.append($0) }
        return found
    }

    /// `recipients(of:)` one by one, in the same order, without building arrays: this runs for every value
    /// received.
    func forEachRecipient(of handle: UInt16, _ body: (CBPeripheral) -> Void) {
        // A link's only user gets every value: it is either subscribed or, with nobody subscribed, one of everyone.
        if users.count == 1 {
            if let p = users[0].peripheral { body(p) }
            return
        }
        let wanted = handle != serviceChangedHandle || handle == 0 ? subscriptions[handle]?.wanted : nil
        let everyone = wanted?.isEmpty ?? true
        for u in users where everyone || wanted?[u.id] != nil {
            if let p = u.peripheral { body(p) }
        }
    }

    /// `forEachRecipient(of:_:)` for every value received: the same users, their inboxes, without a weak
    /// load of each peripheral (a peripheral gone since drops what reaches its inbox).
    func forEachInbox(of handle: UInt16, _ body: (ValueInbox) -> Void) {
        if users.count == 1 { return body(users[0].inbox) }
        let wanted = handle != serviceChangedHandle || handle == 0 ? subscriptions[handle]?.wanted : nil
        let everyone = wanted?.isEmpty ?? true
        for i in users.indices where everyone || wanted?[users[i].id] != nil { body(users[i].inbox) }
    }

    // MARK: Service Changed (Vol 3 Part G §7.1)

    /// Once per link, quietly (no app callbacks): finds the peer's Service Changed characteristic and enables
    /// its indications, as iOS does for the apps.
    func watchServiceChanged() {
        guard !watchingServiceChanged, let c = connection else { return }
        watchingServiceChanged = true
        // The link is held strongly by these steps, as by `configure`'s: a weak reference to it anywhere would
        // move its reference counts to a side table, and it is looked up for every value received. It holds
        // its connection only weakly, and the connection fails its GATT procedures when it closes.
        c.gatt(.discoverPrimaryServices(uuid: .gattService)) { [self, weak c] r in
            guard let c, case let .success(.services(found)) = r, let gatt = found.first else { return }
            c.gatt(.discoverCharacteristics(start: gatt.handle, end: gatt.endHandle, uuid: nil)) { [self, weak c] r in
                guard let c, case let .success(.characteristics(chars)) = r,
                    let i = chars.firstIndex(where: { $0.uuid == .serviceChanged })
                else { return }
                let sc = chars[i]
                let end = i + 1 < chars.count ? chars[i + 1].declarationHandle - 1 : gatt.endHandle
                serviceChangedHandle = sc.valueHandle
                for p in peripherals { p.serviceChangedHandle = sc.valueHandle }
                guard sc.valueHandle < end else { return }
                c.gatt(.discoverDescriptors(start: sc.valueHandle + 1, end: end)) { [weak c] r in
                    guard let c, case let .success(.descriptors(ds)) = r,
                        let cccd = ds.first(where: { $0.uuid == .clientCharacteristicConfiguration })
                    else { return }
                    c.gatt(.write(handle: cccd.handle, value: [0x02, 0x00])) { _ in }
                }
            }
        }
    }
}

/// A peripheral held weakly (pending connections: the app keeps the peripheral it connects).
struct WeakPeripheral {
    weak var value: CBPeripheral?
    init(_ p: CBPeripheral) { value = p }
}
