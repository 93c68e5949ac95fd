// Keys of the advertisement-data dictionary (CBAdvertisementData.h), with the string values the framework
// exports. Values are Foundation types: String, NSNumber, Data, [CBUUID], [CBUUID: Data].

/// The local name (AD types 0x08 shortened, 0x09 complete), a String.
public let CBAdvertisementDataLocalNameKey: String = "kCBAdvDataLocalName"
/// The transmit power level (AD type 0x0A), an NSNumber.
public let CBAdvertisementDataTxPowerLevelKey: String = "kCBAdvDataTxPowerLevel"
/// Service UUIDs (AD types 0x02–0x07), an array of CBUUID.
public let CBAdvertisementDataServiceUUIDsKey: String = "kCBAdvDataServiceUUIDs"
/// Service data (AD types 0x16, 0x20, 0x21), a dictionary from CBUUID to Data.
public let CBAdvertisementDataServiceDataKey: String = "kCBAdvDataServiceData"
/// Manufacturer-specific data (AD type 0xFF), Data starting with the little-endian company identifier.
public let CBAdvertisementDataManufacturerDataKey: String = "kCBAdvDataManufacturerData"
/// Service UUIDs found in Apple's "overflow" area, an array of CBUUID (best effort).
public let CBAdvertisementDataOverflowServiceUUIDsKey: String = "kCBAdvDataOverflowServiceUUIDs"
/// Whether the advertising PDU is connectable, an NSNumber holding a Bool.
public let CBAdvertisementDataIsConnectable: String = "kCBAdvDataIsConnectable"
/// Solicited service UUIDs (AD types 0x14, 0x15, 0x1F), an array of CBUUID.
public let CBAdvertisementDataSolicitedServiceUUIDsKey: String = "kCBAdvDataSolicitedServiceUUIDs"
