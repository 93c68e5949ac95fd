// CBUUID strings of the GATT descriptors Core Bluetooth knows (CBUUID.h), and the L2CAP PSM characteristic.

/// Characteristic Extended Properties descriptor (0x2900); its value is an NSNumber.
public let CBUUIDCharacteristicExtendedPropertiesString: String = "2900"
/// Characteristic User Description descriptor (0x2901); its value is a String.
public let CBUUIDCharacteristicUserDescriptionString: String = "2901"
/// Client Characteristic Configuration descriptor (0x2902); its value is an NSNumber.
public let CBUUIDClientCharacteristicConfigurationString: String = "2902"
/// Server Characteristic Configuration descriptor (0x2903); its value is an NSNumber.
public let CBUUIDServerCharacteristicConfigurationString: String = "2903"
/// Characteristic Presentation Format descriptor (0x2904); its value is Data.
public let CBUUIDCharacteristicFormatString: String = "2904"
/// Characteristic Aggregate Format descriptor (0x2905).
public let CBUUIDCharacteristicAggregateFormatString: String = "2905"
/// Valid Range descriptor (0x2906); its value is Data.
public let CBUUIDCharacteristicValidRangeString: String = "2906"
/// Observation Schedule descriptor (iOS 18). Apple's exported value is not verified; this is the
/// SIG-assigned number of the Observation Schedule descriptor (0x2910).
public let CBUUIDCharacteristicObservationScheduleString: String = "2910"
/// The characteristic through which a peripheral publishes an L2CAP PSM (a little-endian UInt16).
public let CBUUIDL2CAPPSMCharacteristicString: String = "ABDD3056-28FA-441D-A470-55A75A52553A"
