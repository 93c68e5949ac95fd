// Descriptor values as Core Bluetooth types them: String for the user description (0x2901), NSNumber for
// the extended properties and the configuration descriptors (0x2900, 0x2902, 0x2903), Data otherwise.
import Foundation
import BLEWire

extension CBDescriptor {
    /// The app-facing value of a descriptor read from the wire.
    package static func typedValue(_ bytes: [UInt8], for uuid: CBUUID) -> Any {
        switch uuid.bluetoothUUID {
        case .characteristicUserDescription:
            return String(decoding: bytes, as: UTF8.self)
        case .characteristicExtendedProperties, .clientCharacteristicConfiguration, .serverCharacteristicConfiguration:
            var v: UInt16 = 0
            for (i, b) in bytes.prefix(2).enumerated() { v |= UInt16(b) << (8 * UInt16(i)) }
            return NSNumber(value: v)
        default:
            return Data(bytes)
        }
    }

    /// The wire bytes of a local descriptor's value (String as UTF-8, NSNumber as 16-bit little-endian, Data as is).
    package static func wireValue(of value: Any?) -> [UInt8] {
        switch value {
        case let s as String: return Array(s.utf8)
        case let d as Data: return [UInt8](d)
        case let n as NSNumber:
            let v = n.uint16Value
            return [UInt8(v & 0xFF), UInt8(v >> 8)]
        default: return []
        }
    }
}
