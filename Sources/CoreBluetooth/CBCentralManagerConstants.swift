// Option and restored-state keys of CBCentralManager (CBCentralManagerConstants.h), with the string
// values the framework exports.

// MARK: Initialization options (init(delegate:queue:options:))

/// NSNumber(Bool), default true: warn the user when Bluetooth is off.
public let CBCentralManagerOptionShowPowerAlertKey: String = "kCBInitOptionShowPowerAlert"
/// String: the identifier under which the manager's state is restored.
public let CBCentralManagerOptionRestoreIdentifierKey: String = "kCBInitOptionRestoreIdentifier"
/// NSNumber(Bool), default false (iOS 16). The value follows the framework's naming pattern (unverified).
public let CBCentralManagerOptionDeviceAccessForMedia: String = "kCBInitOptionDeviceAccessForMedia"

// MARK: Scan options (scanForPeripherals(withServices:options:))

/// NSNumber(Bool), default false: report every advertisement instead of coalescing.
public let CBCentralManagerScanOptionAllowDuplicatesKey: String = "kCBScanOptionAllowDuplicates"
/// [CBUUID]: also report peripherals soliciting any of these services.
public let CBCentralManagerScanOptionSolicitedServiceUUIDsKey: String = "kCBScanOptionSolicitedServiceUUIDs"

// MARK: Connect options (connect(_:options:))

public let CBConnectPeripheralOptionNotifyOnConnectionKey: String = "kCBConnectOptionNotifyOnConnection"
public let CBConnectPeripheralOptionNotifyOnDisconnectionKey: String = "kCBConnectOptionNotifyOnDisconnection"
public let CBConnectPeripheralOptionNotifyOnNotificationKey: String = "kCBConnectOptionNotifyOnNotification"
/// NSNumber: seconds to wait before connecting.
public let CBConnectPeripheralOptionStartDelayKey: String = "kCBConnectOptionStartDelay"
public let CBConnectPeripheralOptionEnableTransportBridgingKey: String = "kCBConnectOptionEnableTransportBridging"
public let CBConnectPeripheralOptionRequiresANCS: String = "kCBConnectOptionRequiresANCS"
/// NSNumber(Bool): reconnect automatically after a link loss (iOS 17).
public let CBConnectPeripheralOptionEnableAutoReconnect: String = "kCBConnectOptionEnableAutoReconnect"

// MARK: Restored state (centralManager(_:willRestoreState:))

/// [CBPeripheral] that were connected or pending.
public let CBCentralManagerRestoredStatePeripheralsKey: String = "kCBRestoredPeripherals"
/// [CBUUID] of the scan in progress.
public let CBCentralManagerRestoredStateScanServicesKey: String = "kCBRestoredScanServices"
/// [String: Any], the options of the scan in progress.
public let CBCentralManagerRestoredStateScanOptionsKey: String = "kCBRestoredScanOptions"
