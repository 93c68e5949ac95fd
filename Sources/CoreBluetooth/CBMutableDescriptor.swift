// CBMutableDescriptor (CBDescriptor.h): a descriptor of a local characteristic.
//
// "Only the Characteristic User Description (0x2901, a String) and Characteristic Presentation Format
// (0x2904, Data) descriptors are currently supported." Core Bluetooth raises an exception for any other
// type, including the Client Characteristic Configuration and Extended Properties descriptors, which it
// creates itself on publication; here the initializer traps. The value cannot change after publication.
import Foundation

open class CBMutableDescriptor: CBDescriptor, @unchecked Sendable {
    /// A local descriptor: `UUID` must be `CBUUIDCharacteristicUserDescriptionString` (value: String) or
    /// `CBUUIDCharacteristicFormatString` (value: Data). Traps on any other UUID.
    public init(type UUID: CBUUID, value: Any?) {
        if let problem = CBMutableDescriptor.unsupportedTypeProblem(UUID) {
            preconditionFailure("CBMutableDescriptor(type:value:): \(problem)")
        }
        super.init(uuid: UUID, value: value)
    }

    /// Why `init(type:value:)` would trap for this UUID, or nil if the type is supported.
    package static func unsupportedTypeProblem(_ uuid: CBUUID) -> String? {
        if uuid == CBUUID(string: CBUUIDCharacteristicUserDescriptionString)
            || uuid == CBUUID(string: CBUUIDCharacteristicFormatString)
        {
            return nil
        }
        return "descriptor type \(uuid.uuidString) is not supported; only "
            + "\(CBUUIDCharacteristicUserDescriptionString) (user description) and "
            + "\(CBUUIDCharacteristicFormatString) (presentation format) can be created"
    }

    /// Why this descriptor cannot be published, or nil if it can: the value must be non-nil, a String
    /// for 0x2901 and Data for 0x2904.
    package var publicationProblem: String? {
        guard let v = value else { return "a local descriptor needs a value" }
        if uuid == CBUUID(string: CBUUIDCharacteristicUserDescriptionString), !(v is String) {
            return "the user description descriptor's value must be a String"
        }
        if uuid == CBUUID(string: CBUUIDCharacteristicFormatString), !(v is Data) {
            return "the presentation format descriptor's value must be Data"
        }
        return nil
    }
}
