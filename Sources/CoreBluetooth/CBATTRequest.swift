// CBATTRequest (CBATTRequest.h): a read or write request from a central to a local characteristic.
// For a read, `value` is nil and the app sets it (from `offset` on) before responding; for a write it
// holds the data to write at `offset`. Offsets are non-zero for long reads and prepared writes.
import Foundation

open class CBATTRequest: NSObject, @unchecked Sendable {
    private let lock = CBLock()
    private let _central: CBCentral
    private let _characteristic: CBCharacteristic
    private let _offset: Int
    private var storedValue: Data?

    package init(central: CBCentral, characteristic: CBCharacteristic, offset: Int, value: Data?) {
        _central = central
        _characteristic = characteristic
        _offset = offset
        storedValue = value
        super.init()
    }

    /// Requests are made by the framework, never with `init()`.
    @available(*, unavailable)
    public override init() { fatalError("CBATTRequest cannot be created with init()") }

    open var central: CBCentral { _central }
    open var characteristic: CBCharacteristic { _characteristic }
    open var offset: Int { _offset }

    /// The data read (set by the app) or written (set by the central).
    open var value: Data? {
        get { lock.withLock { storedValue } }
        set { lock.withLock { storedValue = newValue } }
    }
}
