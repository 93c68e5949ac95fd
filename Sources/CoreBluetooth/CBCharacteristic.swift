// CBCharacteristic (CBCharacteristic.h): a characteristic of a remote service (or, as
// CBMutableCharacteristic, of a local one). `value` and `isNotifying` are updated by the host before
// the matching delegate callback runs.
import Foundation

open class CBCharacteristic: CBAttribute, @unchecked Sendable {
    private weak var storedService: CBService?
    private var storedProperties: CBCharacteristicProperties
    private var storedValue: Data?
    private var storedDescriptors: [CBDescriptor]?
    private var storedIsNotifying = false
    private var storedIsBroadcasted = false
    private var storedHandle: UInt16
    private var storedValueHandle: UInt16
    private var storedEndHandle: UInt16

    /// A discovered (or local) characteristic. `handle` is the characteristic declaration, `valueHandle`
    /// the value attribute and `endHandle` the last handle before the next characteristic or the end of
    /// the service (Core Spec Vol 3 Part G §3.3).
    package init(
        uuid: CBUUID, properties: CBCharacteristicProperties, value: Data? = nil, service: CBService? = nil,
        handle: UInt16 = 0, valueHandle: UInt16 = 0, endHandle: UInt16 = 0
    ) {
        storedProperties = properties
        storedValue = value
        storedHandle = handle
        storedValueHandle = valueHandle
        storedEndHandle = endHandle
        super.init(uuid: uuid)
        storedService = service
    }

    /// The service this characteristic belongs to (weak).
    open var service: CBService? { lock.withLock { storedService } }

    open var properties: CBCharacteristicProperties { lock.withLock { storedProperties } }

    /// The last value read or notified; nil until then.
    open var value: Data? { lock.withLock { storedValue } }

    /// Discovered descriptors; nil until discovered.
    open var descriptors: [CBDescriptor]? { lock.withLock { storedDescriptors } }

    @available(*, deprecated, message: "Broadcasting is not supported")
    open var isBroadcasted: Bool { lock.withLock { storedIsBroadcasted } }

    /// Whether notifications or indications are enabled for this characteristic.
    open var isNotifying: Bool { lock.withLock { storedIsNotifying } }

    // MARK: For the host and the managers

    package var _service: CBService? {
        get { lock.withLock { storedService } }
        set { lock.withLock { storedService = newValue } }
    }

    package var _properties: CBCharacteristicProperties {
        get { lock.withLock { storedProperties } }
        set { lock.withLock { storedProperties = newValue } }
    }

    package var _value: Data? {
        get { lock.withLock { storedValue } }
        set { lock.withLock { storedValue = newValue } }
    }

    package var _descriptors: [CBDescriptor]? {
        get { lock.withLock { storedDescriptors } }
        set { lock.withLock { storedDescriptors = newValue } }
    }

    package var _isNotifying: Bool {
        get { lock.withLock { storedIsNotifying } }
        set { lock.withLock { storedIsNotifying = newValue } }
    }

    package var _isBroadcasted: Bool {
        get { lock.withLock { storedIsBroadcasted } }
        set { lock.withLock { storedIsBroadcasted = newValue } }
    }

    /// The handle of the characteristic declaration.
    package var handle: UInt16 {
        get { lock.withLock { storedHandle } }
        set { lock.withLock { storedHandle = newValue } }
    }

    /// The handle of the characteristic value.
    package var valueHandle: UInt16 {
        get { lock.withLock { storedValueHandle } }
        set { lock.withLock { storedValueHandle = newValue } }
    }

    /// The last handle of the characteristic definition (its descriptors end here).
    package var endHandle: UInt16 {
        get { lock.withLock { storedEndHandle } }
        set { lock.withLock { storedEndHandle = newValue } }
    }

    open override var description: String {
        let v = value.map { "{length = \($0.count), bytes = 0x\([UInt8]($0).map { hex2($0) }.joined())}" } ?? "(null)"
        return
            "<\(type(of: self)): \(address(of: self)), UUID = \(uuid), properties = 0x\(String(properties.rawValue, radix: 16, uppercase: true)), value = \(v), notifying = \(isNotifying ? "YES" : "NO")>"
    }
}

func hex2(_ b: UInt8) -> String {
    let digits = Array("0123456789abcdef")
    return String([digits[Int(b >> 4)], digits[Int(b & 0x0F)]])
}
