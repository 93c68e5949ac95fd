// CBPeripheral (CBPeripheral.h): a remote peripheral as a central sees it.
//
// App-facing state (services, values, state, name) is changed on the delegate queue right before the
// callback that announces it. GATT work runs on the host loop through the connection's GATT client.
import Foundation
import BLEWire
import BLEATT
import BLEGATT
import BLEHost
import BLETransport
import Synchronization

open class CBPeripheral: CBPeer, @unchecked Sendable {
    package weak var manager: CBCentralManager?
    /// The address to connect to: the latest one seen (a bonded device's private address changes).
    package var deviceAddress: BluetoothAddress {
        get { lock.withLock { storedDeviceAddress } }
        set { lock.withLock { storedDeviceAddress = newValue } }
    }
    private var storedDeviceAddress: BluetoothAddress
    private let lock = CBLock()

    // Under `lock`.
    private weak var storedDelegate: (any CBPeripheralDelegate)?
    private var storedState: CBPeripheralState = .disconnected
    private var storedName: String?
    private var gapName: String?
    private var storedServices: [CBService]?
    private var mtu: UInt16 = 23
    private var writesPending = 0
    private var readySignalScheduled = false
    private var storedRSSI: NSNumber?
    package private(set) var advertisedServiceUUIDs: Set<CBUUID> = []
    /// The primary services the stack found on the current link by itself (iOS's system discovery).
    package private(set) var linkServiceUUIDs: Set<CBUUID> = []
    private var connectAttempt: UInt64 = 0

    // Loop-confined.
    package var connection: HostConnection? {
        didSet { if connection !== oldValue { heldWrites.removeAll() } }
    }
    /// Write Commands the app was allowed to send that found the host's queue full (CBPeripheral+GATT.swift).
    var heldWrites: [(handle: UInt16, value: [UInt8])] = []
    package var localCancel = false
    /// didConnect was scheduled for the current link (a link lost before that is a failed connection).
    package var announcedConnected = false
    /// Connected with CBConnectPeripheralOptionEnableAutoReconnect.
    package var autoReconnect: Bool {
        get { lock.withLock { storedAutoReconnect } }
        set { lock.withLock { storedAutoReconnect = newValue } }
    }
    private var storedAutoReconnect = false
    /// The peer's Service Changed value handle, once found (loop-confined; kept by `valueInbox`).
    package var serviceChangedHandle: UInt16 {
        get { valueInbox.serviceChangedHandle }
        set { valueInbox.serviceChangedHandle = newValue }
    }
    /// This peripheral's place among the users of its link (SharedLink).
    package var linkUserID: UInt64 = 0
    /// Async listeners of notifications and indications.
    var valueListeners: ValueListeners { valueInbox.listeners }
    /// Where notifications and indications arrive on the host loop (CBPeripheral+GATT.swift).
    let valueInbox: ValueInbox
    /// Notifications and indications waiting for the delegate queue.
    let inbound = InboundValues()

    package init(manager: CBCentralManager, address: BluetoothAddress, identifier: UUID) {
        self.manager = manager
        self.valueInbox = ValueInbox(loop: manager.leHost?.loop)
        self.storedDeviceAddress = address
        super.init(identifier: identifier)
        valueInbox.peripheral = self
    }

    /// Releasing a peripheral cancels its connection, pending or made, unless another manager's peripheral
    /// still uses the link. CBCentralManager.h says "Pending attempts are cancelled automatically upon
    /// deallocation of peripheral", and Apple's page for connect(_:options:) "Deallocating peripheral also
    /// implicitly calls cancelPeripheralConnection(_:)", which disconnects a connected one: iOS logs this
    /// warning, then bluetoothd disconnects the device (device logs show "Disconnecting device" right after
    /// it, for peripherals apps forgot to keep after didConnect). This stack then calls no delegate method
    /// for it: the app no longer has the object it would name.
    deinit {
        let s = lock.withLock { storedState }
        guard s != .disconnected, let m = manager else { return }
        CBLog.misuse("Cancelling connection for unused peripheral <CBPeripheral: identifier = \(identifier.uuidString), state = \(s)>, Did you forget to keep a reference to it?")
        m.peripheralReleased()
    }

    /// A new connect (or a cancel) supersedes the previous attempt; returns the new attempt's number.
    @discardableResult
    package func beginConnectAttempt() -> UInt64 {
        lock.withLock {
            connectAttempt += 1; return connectAttempt
        }
    }
    package func isCurrentConnectAttempt(_ n: UInt64) -> Bool { lock.withLock { connectAttempt == n } }

    open weak var delegate: (any CBPeripheralDelegate)? {
        get { lock.withLock { storedDelegate } }
        set {
            lock.withLock { storedDelegate = newValue }
            delegateChanges.add(1, ordering: .releasing)
        }
    }
    /// Counts the delegate's changes, so that a burst of values read it once and still see one set meanwhile.
    let delegateChanges = Atomic<UInt64>(0)

    /// The GAP device name once read, else the advertised local name.
    open var name: String? { lock.withLock { gapName ?? storedName } }
    open var state: CBPeripheralState { lock.withLock { storedState } }
    open var services: [CBService]? { lock.withLock { storedServices } }
    open var canSendWriteWithoutResponse: Bool { lock.withLock { storedState == .connected && writesPending == 0 } }
    open var ancsAuthorized: Bool { false }
    @available(*, deprecated, message: "Use peripheral(_:didReadRSSI:error:)")
    open var rssi: NSNumber? { lock.withLock { storedRSSI } }

    package func setState(_ s: CBPeripheralState) { lock.withLock { storedState = s } }
    package func setAdvertisedName(_ n: String) { lock.withLock { storedName = n } }
    package func addAdvertisedServices(_ uuids: [CBUUID]) { lock.withLock { advertisedServiceUUIDs.formUnion(uuids) } }
    package func setMTU(_ m: UInt16) { lock.withLock { mtu = m } }
    /// The link's ATT_MTU as the stack (or bluetoothd) reports it (`ble gatt` prints it).
    package var attMTU: UInt16 { lock.withLock { mtu } }
    package func setServices(_ s: [CBService]?) { lock.withLock { storedServices = s } }
    package func updateWritesPending(_ body: (inout Int) -> Void) { lock.withLock { body(&writesPending) } }

    /// Delegate-queue: the link is up; `m` and `services` were handed over from the host loop.
    package func didConnect(mtu m: UInt16, linkServices services: Set<CBUUID> = []) {
        lock.withLock {
            storedState = .connected
            mtu = m
            writesPending = 0
            linkServiceUUIDs = services
        }
        readGAPName()
    }

    /// Delegate-queue: the link is gone; every attribute is invalidated (C6).
    package func resetAfterDisconnect() {
        // The state first: a task that wakes when its value stream ends (below) and looks at the peripheral sees it
        // disconnected, as an iOS app does by the time it learns of the disconnection.
        lock.withLock {
            storedState = .disconnected
            storedServices = nil
            linkServiceUUIDs = []
            mtu = 23
            writesPending = 0
            storedRSSI = nil
        }
        valueListeners.finishAll()
    }

    // MARK: Helpers

    var queue: DispatchQueue { manager?.queue ?? .main }

    /// The BlueZ backend this peripheral's manager runs on, if any.
    var bluez: BlueZCentral? { manager?.bluez }

    /// Runs `body` on the host loop with the live connection, or drops the call (with Apple's warning).
    func withConnection(_ what: String, _ body: @escaping @Sendable (HostConnection) -> Void) {
        guard let host = manager?.leHost else { return }
        guard state == .connected else {
            CBLog.misuse("\(self) can only accept commands while in the connected state (\(what))")
            return
        }
        host.loop.execute { [self] in
            guard let c = connection, c.isOpen else { return }
            body(c)
        }
    }

    /// Delivers on the delegate queue, unless the link went away in between (no callbacks after didDisconnect).
    func deliver(_ body: @escaping @Sendable (any CBPeripheralDelegate) -> Void, prepare: @escaping @Sendable () -> Void = {}) {
        queue.async { [self] in
            guard state == .connected else { return }
            prepare()
            if let d = delegate { body(d) }
        }
    }

    func owns(_ service: CBService) -> Bool { service.peripheralRef === self }

    // MARK: Name

    private func readGAPName() {
        withConnection("read name") { [self] c in
            c.gatt(.readUsingCharacteristicUUID(start: 0x0001, end: 0xFFFF, uuid: .deviceName)) { [self] r in
                guard case let .success(.handleValues(values)) = r, let v = values.first,
                    let n = String(bytes: v.value, encoding: .utf8)
                else { return }
                queue.async { [self] in
                    let changed = lock.withLock { () -> Bool in
                        let before = gapName ?? storedName
                        gapName = n
                        return before != n
                    }
                    manager?.deviceCache?.setName(n, for: identifier)
                    if changed, state == .connected { delegate?.peripheralDidUpdateName(self) }
                }
            }
        }
    }

    // MARK: RSSI

    open func readRSSI() {
        if let b = bluez { return b.readRSSI(self) }
        withConnection("readRSSI") { [self] c in
            c.readRSSI { [self] r in
                switch r {
                case let .success(v):
                    let n = NSNumber(value: Int(v))
                    deliver({ $0.peripheral(self, didReadRSSI: n, error: nil) }, prepare: { [self] in lock.withLock { storedRSSI = n } })
                case .failure:
                    deliver { $0.peripheral(self, didReadRSSI: NSNumber(value: 127), error: CBError(.unknown)) }
                }
            }
        }
    }

    @discardableResult
    open func maximumWriteValueLength(for type: CBCharacteristicWriteType) -> Int {
        switch type {
        case .withResponse: return 512
        case .withoutResponse: return min(Int(lock.withLock { mtu }) - 3, 512)
        @unknown default: return 20
        }
    }

    open override var description: String {
        let (n, s, m) = lock.withLock { (gapName ?? storedName, storedState, mtu) }
        return "<CBPeripheral: \(address(of: self)), identifier = \(identifier.uuidString), name = \(n ?? "(null)"), mtu = \(m), state = \(s)>"
    }
}

extension CBService {
    /// The peripheral this service belongs to (weak, as on iOS); nil for a local `CBMutableService`.
    public var peripheral: CBPeripheral? { peripheralRef as? CBPeripheral }
}

/// The receiving end of a peripheral's notifications and indications on the host loop. The peripheral's link
/// (SharedLink) holds it strongly, beside its weak reference to the peripheral, so a value received takes no
/// weak load and no retain of the peripheral: CBPeripheral is held weakly by its manager and its link, as
/// Core Bluetooth's API requires, so its reference counts live in a side table, where every retain and
/// release takes the runtime's slow path. The peripheral is looked up once per burst, when the burst crosses
/// to the delegate queue.
///
/// Loop-confined (the peripheral reads `serviceChangedHandle` and `listeners` on the loop too; `listeners`
/// is thread-safe).
final class ValueInbox: @unchecked Sendable {
    weak var peripheral: CBPeripheral?
    /// The manager's host loop; nil on BlueZ, whose values do not come this way.
    let loop: EventLoop?
    /// Async listeners of notifications and indications.
    let listeners = ValueListeners()
    /// The peer's Service Changed value handle, once found.
    var serviceChangedHandle: UInt16 = 0
    /// Values received during the loop's work at hand, not yet handed to the peripheral's `inbound`.
    private var staged: [(UInt16, Data)] = []

    init(loop: EventLoop?) { self.loop = loop }

    func received(value: [UInt8], handle: UInt16) {
        received(value: value[...], handle: handle)
    }

    /// A value as it lies in the packet that carried it (or in an array): it is copied once, into its Data.
    func received(value: ArraySlice<UInt8>, handle: UInt16) {
        if handle != 0, handle == serviceChangedHandle {
            peripheral?.serviceChanged(Array(value))
            return
        }
        let data = Data(value)
        listeners.yield(data, handle: handle)
        // Values that arrive while earlier ones wait for the delegate queue join them: one queue hop carries
        // a burst, and the delegate still gets one callback per value, in order.
        // The hop is taken when the loop has finished what it is doing, so a burst that arrives in one
        // loop turn crosses together. Until then the burst gathers on the loop without a lock, and crosses
        // to the delegate queue's side (`inbound`) with one.
        staged.append((handle, data))
        guard staged.count == 1 else { return }
        if let loop { loop.whenIdle { [self] in handOver() } } else { handOver() }
    }

    /// Loop: moves the values gathered on the loop to the delegate queue's side, and schedules a delivery
    /// unless one is pending already. A peripheral that is gone, or whose manager is (its link not yet swept
    /// on the loop), delivers nothing more.
    private func handOver() {
        guard !staged.isEmpty else { return }
        guard let p = peripheral, let m = p.manager else { return staged.removeAll() }
        guard p.inbound.append(contentsOf: &staged) else { return }
        m.queue.async { p.deliverInbound() }
    }
}

/// Values received on the host loop, waiting to be delivered on the delegate queue.
final class InboundValues: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [(UInt16, Data)] = []

    /// Adds a value; returns true when the queue was empty (the caller schedules a delivery).
    func append(_ handle: UInt16, _ data: Data) -> Bool {
        lock.withLock {
            items.append((handle, data))
            return items.count == 1
        }
    }

    /// Adds the values of `values` (emptied, its storage possibly exchanged); returns true when the queue
    /// was empty (the caller schedules a delivery).
    func append(contentsOf values: inout [(UInt16, Data)]) -> Bool {
        lock.withLock {
            if items.isEmpty {
                swap(&items, &values)
                return true
            }
            items.append(contentsOf: values)
            values.removeAll(keepingCapacity: true)
            return false
        }
    }

    func take() -> [(UInt16, Data)] {
        lock.withLock {
            let out = items
            items.removeAll(keepingCapacity: true)
            return out
        }
    }
}

/// A dictionary whose values are held weakly; entries whose object is gone are swept as the table grows.
/// Not thread-safe: its owner guards it.
struct WeakTable<Key: Hashable, Value: AnyObject> {
    private struct Ref { weak var value: Value? }
    private var storage: [Key: Ref] = [:]
    private var sweepAt = 64

    subscript(key: Key) -> Value? {
        get { storage[key]?.value }
        set {
            storage[key] = newValue.map { Ref(value: $0) }
            if storage.count >= sweepAt {
                storage = storage.filter { $0.value.value != nil }
                sweepAt = max(64, storage.count * 2)
            }
        }
    }

    /// The live values.
    var values: [Value] { storage.values.compactMap(\.value) }
    /// How many entries are stored, live or not yet swept.
    var storedCount: Int { storage.count }
}
