// CBPeripheral (CBPeripheral.h): a remote peripheral as a central sees it.
//
// App-facing state (services, values, state, name) is changed on the delegate queue right before the
// callback that announces it. GATT work runs on the host loop through the connection's GATT client.
import Foundation
import BLEWire
import BLEATT
import BLEGATT
import BLEHost

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

    // Loop-confined.
    package var connection: HostConnection?
    package var localCancel = false
    /// Connected with CBConnectPeripheralOptionEnableAutoReconnect.
    package var autoReconnect: Bool {
        get { lock.withLock { storedAutoReconnect } }
        set { lock.withLock { storedAutoReconnect = newValue } }
    }
    private var storedAutoReconnect = false
    /// The peer's Service Changed value handle, once found.
    package var serviceChangedHandle: UInt16 = 0
    /// Async listeners of notifications and indications.
    let valueListeners = ValueListeners()
    /// Notifications and indications waiting for the delegate queue.
    let inbound = InboundValues()

    package init(manager: CBCentralManager, address: BluetoothAddress, identifier: UUID) {
        self.manager = manager
        self.storedDeviceAddress = address
        super.init(identifier: identifier)
    }

    /// A stable identifier derived from the device address: the same device gets the same UUID in every run.
    package static func identifier(for address: BluetoothAddress) -> UUID {
        var bytes = [UInt8](repeating: 0, count: 16)
        var h1: UInt64 = 0xcbf2_9ce4_8422_2325, h2: UInt64 = 0x8422_2325_cbf2_9ce4
        for b in address.bytes + [address.type.isRandom ? 1 : 0] + Array("OpenCoreBluetooth".utf8) {
            h1 = (h1 ^ UInt64(b)) &* 0x0000_0100_0000_01B3
            h2 = (h2 ^ UInt64(b) ^ 0x5A) &* 0x0000_0100_0000_01B3
        }
        for i in 0..<8 { bytes[i] = UInt8(truncatingIfNeeded: h1 >> (8 * UInt64(i))) }
        for i in 0..<8 { bytes[8 + i] = UInt8(truncatingIfNeeded: h2 >> (8 * UInt64(i))) }
        bytes[6] = (bytes[6] & 0x0F) | 0x50   // version 5 layout (name-based)
        bytes[8] = (bytes[8] & 0x3F) | 0x80   // RFC 4122 variant
        return UUID(uuid: (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                           bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
    }

    open weak var delegate: (any CBPeripheralDelegate)? {
        get { lock.withLock { storedDelegate } }
        set { lock.withLock { storedDelegate = newValue } }
    }

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
    package func setServices(_ s: [CBService]?) { lock.withLock { storedServices = s } }
    package func updateWritesPending(_ body: (inout Int) -> Void) { lock.withLock { body(&writesPending) } }

    /// Delegate-queue: the link is up.
    package func didConnect(mtu m: UInt16) {
        lock.withLock {
            storedState = .connected
            mtu = m
            writesPending = 0
        }
        readGAPName()
    }

    /// Delegate-queue: the link is gone; every attribute is invalidated (C6).
    package func resetAfterDisconnect() {
        valueListeners.finishAll()
        lock.withLock {
            storedState = .disconnected
            storedServices = nil
            mtu = 23
            writesPending = 0
            storedRSSI = nil
        }
    }

    // MARK: Helpers

    var queue: DispatchQueue { manager?.queue ?? .main }

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
                      let n = String(bytes: v.value, encoding: .utf8) else { return }
                queue.async { [self] in
                    let changed = lock.withLock { () -> Bool in
                        let before = gapName ?? storedName
                        gapName = n
                        return before != n
                    }
                    if changed, state == .connected { delegate?.peripheralDidUpdateName(self) }
                }
            }
        }
    }

    // MARK: RSSI

    open func readRSSI() {
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

    func take() -> [(UInt16, Data)] {
        lock.withLock {
            let out = items
            items.removeAll(keepingCapacity: true)
            return out
        }
    }
}
