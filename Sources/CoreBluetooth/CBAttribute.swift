// CBAttribute (CBAttribute.h): the abstract base of services, characteristics and descriptors.
//
// Threading: an attribute is created and updated by the host (on its queue) and read by the app (on the
// delegate queue). Each object guards its mutable state with its own `CBLock`; the `package` setters
// (`_value`, `_characteristics`, …) are for the host and the managers only.
import Foundation

open class CBAttribute: NSObject, @unchecked Sendable {
    private let _uuid: CBUUID
    /// Guards the mutable state of this attribute and of its subclasses.
    package let lock = CBLock()

    package init(uuid: CBUUID) {
        _uuid = uuid
        super.init()
    }

    /// Attributes are made by the framework (or by the `CBMutable…` initializers), never with `init()`.
    @available(*, unavailable)
    public override init() { fatalError("CBAttribute cannot be created with init()") }

    /// The attribute's type.
    open var uuid: CBUUID { _uuid }
}
