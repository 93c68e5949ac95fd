// CBMutableCharacteristic (CBCharacteristic.h): a characteristic of a local service.
//
// A non-nil `value` is cached: the stack answers reads itself and the characteristic must be read-only.
// A nil `value` is dynamic: reads and writes reach the delegate (`didReceiveRead` / `didReceiveWrite`).
// The rules are checked when the service is published (`publicationProblem`), as Core Bluetooth does.
import Foundation

open class CBMutableCharacteristic: CBCharacteristic, @unchecked Sendable {
    private var storedPermissions: CBAttributePermissions
    private var storedSubscribedCentrals: [CBCentral]?

    /// A local characteristic. `value` non-nil means cached (read-only); nil means dynamic.
    public init(
        type UUID: CBUUID, properties: CBCharacteristicProperties, value: Data?,
        permissions: CBAttributePermissions
    ) {
        storedPermissions = permissions
        super.init(uuid: UUID, properties: properties, value: value)
    }

    /// Read, write and encryption permissions of the value.
    open var permissions: CBAttributePermissions {
        get { lock.withLock { storedPermissions } }
        set { if !isFrozen { lock.withLock { storedPermissions = newValue } } }
    }

    /// The centrals subscribed to this characteristic (nil before publication).
    open var subscribedCentrals: [CBCentral]? { lock.withLock { storedSubscribedCentrals } }

    open override var properties: CBCharacteristicProperties {
        get { _properties }
        set { if !isFrozen { _properties = newValue } }
    }

    /// The cached value (copied: `Data` is a value type).
    open override var value: Data? {
        get { _value }
        set { _value = newValue }
    }

    open override var descriptors: [CBDescriptor]? {
        get { _descriptors }
        set { if !isFrozen { _descriptors = newValue } }
    }

    // MARK: For the peripheral manager

    package var _subscribedCentrals: [CBCentral]? {
        get { lock.withLock { storedSubscribedCentrals } }
        set { lock.withLock { storedSubscribedCentrals = newValue } }
    }

    /// Why this characteristic cannot be published, or nil if it can. Core Bluetooth refuses
    /// `.broadcast` and `.extendedProperties` on local characteristics, and a cached value on a
    /// characteristic that is not read-only ("Characteristics with cached values must be read-only").
    package var publicationProblem: String? {
        let props = properties
        if props.contains(.broadcast) || props.contains(.extendedProperties) {
            return "Local characteristics cannot have the broadcast or extended properties"
        }
        if value != nil {
            let readOnlyProperties: CBCharacteristicProperties = [.read]
            let readOnlyPermissions: CBAttributePermissions = [.readable, .readEncryptionRequired]
            if !readOnlyProperties.isSuperset(of: props) || !readOnlyPermissions.isSuperset(of: permissions) {
                return "Characteristics with cached values must be read-only"
            }
        }
        return nil
    }

    /// True (with a warning) once the owning service is published; the cached value is also frozen then.
    var isFrozen: Bool { (_service as? CBMutableService)?.refusesChangeAfterPublication() ?? false }
}
