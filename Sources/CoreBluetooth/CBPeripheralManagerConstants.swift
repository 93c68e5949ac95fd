// Option and restored-state keys of CBPeripheralManager (CBPeripheralManagerConstants.h).

/// NSNumber(Bool), default false: warn the user when Bluetooth is off.
public let CBPeripheralManagerOptionShowPowerAlertKey: String = "kCBPeripheralManagerOptionShowPowerAlert"
/// String: the identifier under which the manager's state is restored.
public let CBPeripheralManagerOptionRestoreIdentifierKey: String = "kCBPeripheralManagerOptionRestoreIdentifier"
/// [CBMutableService] that were published.
public let CBPeripheralManagerRestoredStateServicesKey: String = "kCBRestoredServices"
/// [String: Any], the advertisement data in use.
public let CBPeripheralManagerRestoredStateAdvertisementDataKey: String = "kCBRestoredAdvertisementData"
