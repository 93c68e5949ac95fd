// CBDescriptor (CBDescriptor.h): a descriptor of a remote characteristic (or, as CBMutableDescriptor,
// of a local one). The value's type depends on the UUID: 0x2900, 0x2902, 0x2903 → NSNumber;
// 0x2901 → String; 0x2904 and others → Data.
import Foundation

open class CBDescriptor: CBAttribute, @unchecked Sendable {
    private weak var storedCharacteristic: CBCharacteristic?
    private var storedValue: Any?
    private var storedHandle: UInt16

    package init(uuid: CBUUID, value: Any? = nil, characteristic: CBCharacteristic? = nil, handle: UInt16 = 0) {
        storedValue = value
        storedHandle = handle
        super.init(uuid: uuid)
        storedCharacteristic = characteristic
    }

    /// The characteristic this descriptor belongs to (weak).
    open var characteristic: CBCharacteristic? { lock.withLock { storedCharacteristic } }

    /// The last value read; nil until then.
    open var value: Any? { lock.withLock { storedValue } }

    // MARK: For the host and the managers

    package var _characteristic: CBCharacteristic? {
        get { lock.withLock { storedCharacteristic } }
        set { lock.withLock { storedCharacteristic = newValue } }
    }

    package var _value: Any? {
        get { lock.withLock { storedValue } }
        set { lock.withLock { storedValue = newValue } }
    }

    /// The descriptor's handle.
    package var handle: UInt16 {
        get { lock.withLock { storedHandle } }
        set { lock.withLock { storedHandle = newValue } }
    }

    open override var description: String {
        "<\(type(of: self)): \(address(of: self)), UUID = \(uuid), value = \(value.map { "\($0)" } ?? "(null)")>"
    }
}
