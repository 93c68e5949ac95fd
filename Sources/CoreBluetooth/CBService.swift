// CBService (CBService.h): a GATT service of a remote peripheral (or, as CBMutableService, a local one).
//
// `characteristics` and `includedServices` are nil until discovered, and later discoveries merge into
// them. Two instances of the same service UUID are distinct objects, told apart by their handle range.
import Foundation

open class CBService: CBAttribute, @unchecked Sendable {
    private let _isPrimary: Bool
    private var storedIncludedServices: [CBService]?
    private var storedCharacteristics: [CBCharacteristic]?
    private weak var storedPeripheral: AnyObject?
    private var storedHandle: UInt16
    private var storedEndHandle: UInt16

    /// A discovered (or local) service. `handle` is the service declaration, `endHandle` the last handle
    /// of its group (Core Spec Vol 3 Part G §3.1).
    package init(uuid: CBUUID, isPrimary: Bool, handle: UInt16 = 0, endHandle: UInt16 = 0, peripheral: AnyObject? = nil) {
        _isPrimary = isPrimary
        storedHandle = handle
        storedEndHandle = endHandle
        super.init(uuid: uuid)
        storedPeripheral = peripheral
    }

    /// Whether this is a primary service (false: secondary).
    open var isPrimary: Bool { _isPrimary }

    /// Discovered included services; nil until discovered.
    open var includedServices: [CBService]? { lock.withLock { storedIncludedServices } }

    /// Discovered characteristics; nil until discovered.
    open var characteristics: [CBCharacteristic]? { lock.withLock { storedCharacteristics } }

    // MARK: For the host and the managers

    /// The owning CBPeripheral (weak). The typed `peripheral` property is declared by CBPeripheral's file.
    package var peripheralRef: AnyObject? {
        get { lock.withLock { storedPeripheral } }
        set { lock.withLock { storedPeripheral = newValue } }
    }

    package var _includedServices: [CBService]? {
        get { lock.withLock { storedIncludedServices } }
        set { lock.withLock { storedIncludedServices = newValue } }
    }

    package var _characteristics: [CBCharacteristic]? {
        get { lock.withLock { storedCharacteristics } }
        set { lock.withLock { storedCharacteristics = newValue } }
    }

    /// The handle of the service declaration.
    package var handle: UInt16 {
        get { lock.withLock { storedHandle } }
        set { lock.withLock { storedHandle = newValue } }
    }

    /// The last handle of the service's group.
    package var endHandle: UInt16 {
        get { lock.withLock { storedEndHandle } }
        set { lock.withLock { storedEndHandle = newValue } }
    }

    open override var description: String {
        "<\(type(of: self)): \(address(of: self)), isPrimary = \(isPrimary ? "YES" : "NO"), UUID = \(uuid)>"
    }
}

/// "0x…" address of an object, as in Objective-C descriptions.
func address(of object: AnyObject) -> String {
    "0x" + String(UInt(bitPattern: ObjectIdentifier(object).hashValue), radix: 16)
}
