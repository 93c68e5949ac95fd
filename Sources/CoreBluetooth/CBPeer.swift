// CBPeer (CBPeer.h): the common base of remote devices (CBPeripheral, CBCentral).
import Foundation

open class CBPeer: NSObject, NSCopying, @unchecked Sendable {
    private let _identifier: UUID

    package init(identifier: UUID) {
        _identifier = identifier
        super.init()
    }

    /// Peers are made by the framework, never with `init()`.
    @available(*, unavailable)
    public override init() { fatalError("CBPeer cannot be created with init()") }

    /// "The unique, persistent identifier associated with the peer." Never the Bluetooth address.
    open var identifier: UUID { _identifier }

    /// A peer is immutable in identity: a copy is the same object.
    @discardableResult
    open func copy(with zone: NSZone? = nil) -> Any { self }
}
