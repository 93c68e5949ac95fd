// CBMutableService (CBService.h): a local service to publish with CBPeripheralManager.add(_:).
// "Once a service is published, it is cached and can no longer be changed."
import Foundation

open class CBMutableService: CBService, @unchecked Sendable {
    private var published = false

    /// A local primary or secondary service of the given type.
    public init(type UUID: CBUUID, primary isPrimary: Bool) {
        super.init(uuid: UUID, isPrimary: isPrimary)
    }

    /// Services this service includes; they must be published first.
    open override var includedServices: [CBService]? {
        get { _includedServices }
        set { if !refusesChangeAfterPublication() { _includedServices = newValue } }
    }

    /// The service's characteristics (normally CBMutableCharacteristic).
    open override var characteristics: [CBCharacteristic]? {
        get { _characteristics }
        set { if !refusesChangeAfterPublication() { _characteristics = newValue } }
    }

    /// Set by the peripheral manager once the service is in the local database.
    package var isPublished: Bool {
        get { lock.withLock { published } }
        set { lock.withLock { published = newValue } }
    }

    /// "Once a service is published, it is cached and can no longer be changed": changes are ignored with a warning.
    package func refusesChangeAfterPublication() -> Bool {
        guard isPublished else { return false }
        CBLog.warning("\(self) is published and can no longer be changed")
        return true
    }
}
