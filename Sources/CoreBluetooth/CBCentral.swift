// CBCentral (CBCentral.h): a remote central connected to a local peripheral manager.
import Foundation

open class CBCentral: CBPeer, @unchecked Sendable {
    private let lock = CBLock()
    private var storedMaximumUpdateValueLength: Int

    /// `maximumUpdateValueLength` starts at ATT_MTU − 3 for the default MTU of 23.
    package init(identifier: UUID, maximumUpdateValueLength: Int = 20) {
        storedMaximumUpdateValueLength = maximumUpdateValueLength
        super.init(identifier: identifier)
    }

    /// The largest value the central receives in one notification or indication: ATT_MTU − 3.
    open var maximumUpdateValueLength: Int { lock.withLock { storedMaximumUpdateValueLength } }

    /// Updated by the host when the ATT MTU changes.
    package var _maximumUpdateValueLength: Int {
        get { lock.withLock { storedMaximumUpdateValueLength } }
        set { lock.withLock { storedMaximumUpdateValueLength = newValue } }
    }

    open override var description: String {
        "<CBCentral: \(address(of: self)), identifier = \(identifier.uuidString), MTU = \(maximumUpdateValueLength + 3)>"
    }
}
