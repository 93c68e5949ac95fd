// CBUUID (CBUUID.h): a 16-, 32- or 128-bit Bluetooth UUID as an immutable NSObject.
//
// Behaviour follows the framework:
// - `init(string:)` accepts an optional "0x" prefix (any case) followed by exactly 4 or 8 hex digits, or a
//   36-character 8-4-4-4-12 UUID. Anything else is a programming error: Apple raises
//   NSInternalInconsistencyException ("String … does not represent a valid UUID"); here it traps.
// - The form a UUID was created in is kept: `uuidString` and `data` give 4 hex digits / 2 bytes for a
//   16-bit UUID, 8 / 4 for 32-bit, the hyphenated upper-case string / 16 bytes for 128-bit — even when a
//   128-bit string lies on the Bluetooth Base UUID.
// - Equality and hashing compare the 128-bit value, so `CBUUID(string: "180D")` equals
//   `CBUUID(string: "0000180D-0000-1000-8000-00805F9B34FB")` and both find the same dictionary entry.
// - `description` is the SIG name of a well-known UUID ("Heart Rate"), otherwise `uuidString`.
import BLEWire
import Foundation

open class CBUUID: NSObject, NSCopying, @unchecked Sendable {
    /// The wire-level UUID (immutable).
    package let bluetoothUUID: BluetoothUUID

    package init(_ bluetoothUUID: BluetoothUUID) {
        self.bluetoothUUID = bluetoothUUID
        super.init()
    }

    /// A UUID from "180D", "0x180D", "0000180D" or "0000180D-0000-1000-8000-00805F9B34FB".
    /// Traps on any other string, as Core Bluetooth raises an exception.
    public convenience init(string theString: String) {
        guard let uuid = CBUUID.bluetoothUUID(parsing: theString) else {
            preconditionFailure("CBUUID(string:): String \(theString) does not represent a valid UUID")
        }
        self.init(uuid)
    }

    /// A UUID from 2, 4 or 16 big-endian bytes. Traps on any other length, as Core Bluetooth raises.
    public convenience init(data theData: Data) {
        guard let uuid = CBUUID.bluetoothUUID(data: theData) else {
            preconditionFailure("CBUUID(data:): Data of \(theData.count) bytes does not represent a valid UUID")
        }
        self.init(uuid)
    }

    /// A 128-bit UUID.
    public convenience init(nsuuid theUUID: UUID) {
        let u = theUUID.uuid
        self.init(
            BluetoothUUID(bigEndianBytes: [
                u.0, u.1, u.2, u.3, u.4, u.5, u.6, u.7,
                u.8, u.9, u.10, u.11, u.12, u.13, u.14, u.15,
            ]))
    }

    /// The UUID in its own form, big-endian: 2, 4 or 16 bytes.
    open var data: Data { Data(bluetoothUUID.bigEndianBytes) }

    /// "180D", "0000180D", or "0000180D-0000-1000-8000-00805F9B34FB" (upper case), by form.
    open var uuidString: String { bluetoothUUID.uuidString }

    open override var description: String {
        CBUUID.knownNames[uuidString] ?? uuidString
    }

    open override func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? CBUUID else { return false }
        return other.bluetoothUUID == bluetoothUUID
    }

    open override var hash: Int { bluetoothUUID.hashValue }

    /// CBUUID is immutable: a copy is the same object.
    @discardableResult
    open func copy(with zone: NSZone? = nil) -> Any { self }

    // MARK: Non-trapping parsers (what the initializers use)

    /// Parses a string the way `init(string:)` does, or returns nil where that initializer would trap.
    package static func bluetoothUUID(parsing string: String) -> BluetoothUUID? {
        var s = Substring(string)
        if s.utf8.count >= 2, s.prefix(2).lowercased() == "0x" { s = s.dropFirst(2) }
        let chars = Array(s.utf8)
        switch chars.count {
        case 4:
            guard let v = hexValue(chars[...]) else { return nil }
            return BluetoothUUID(UInt16(v))
        case 8:
            guard let v = hexValue(chars[...]) else { return nil }
            return BluetoothUUID(uint32: UInt32(v))
        case 36:
            let dashes = [8, 13, 18, 23]
            var bytes: [UInt8] = []
            bytes.reserveCapacity(16)
            var i = 0
            while i < 36 {
                if dashes.contains(i) {
                    guard chars[i] == UInt8(ascii: "-") else { return nil }
                    i += 1
                    continue
                }
                guard let v = hexValue(chars[i..<(i + 2)]) else { return nil }
                bytes.append(UInt8(v))
                i += 2
            }
            return BluetoothUUID(bigEndianBytes: bytes)
        default:
            return nil
        }
    }

    /// Reads big-endian bytes the way `init(data:)` does, or returns nil where that initializer would trap.
    package static func bluetoothUUID(data: Data) -> BluetoothUUID? {
        let b = [UInt8](data)
        switch b.count {
        case 2: return BluetoothUUID(UInt16(b[0]) << 8 | UInt16(b[1]))
        case 4: return BluetoothUUID(uint32: UInt32(b[0]) << 24 | UInt32(b[1]) << 16 | UInt32(b[2]) << 8 | UInt32(b[3]))
        case 16: return BluetoothUUID(bigEndianBytes: b)
        default: return nil
        }
    }

    /// The value of an all-hex ASCII run (at most 8 digits), or nil if a character is not a hex digit.
    private static func hexValue(_ chars: ArraySlice<UInt8>) -> UInt64? {
        var v: UInt64 = 0
        for c in chars {
            let d: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = c - UInt8(ascii: "A") + 10
            default: return nil
            }
            v = v << 4 | UInt64(d)
        }
        return v
    }
}
