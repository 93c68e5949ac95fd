// The exported string values of every global constant (checklist §5).
import CoreBluetooth
import Testing

@Suite struct ConstantsTests {
    @Test func advertisementDataKeys() {
        #expect(CBAdvertisementDataLocalNameKey == "kCBAdvDataLocalName")
        #expect(CBAdvertisementDataTxPowerLevelKey == "kCBAdvDataTxPowerLevel")
        #expect(CBAdvertisementDataServiceUUIDsKey == "kCBAdvDataServiceUUIDs")
        #expect(CBAdvertisementDataServiceDataKey == "kCBAdvDataServiceData")
        #expect(CBAdvertisementDataManufacturerDataKey == "kCBAdvDataManufacturerData")
        #expect(CBAdvertisementDataOverflowServiceUUIDsKey == "kCBAdvDataOverflowServiceUUIDs")
        #expect(CBAdvertisementDataIsConnectable == "kCBAdvDataIsConnectable")
        #expect(CBAdvertisementDataSolicitedServiceUUIDsKey == "kCBAdvDataSolicitedServiceUUIDs")
    }

    @Test func centralManagerOptions() {
        #expect(CBCentralManagerOptionShowPowerAlertKey == "kCBInitOptionShowPowerAlert")
        #expect(CBCentralManagerOptionRestoreIdentifierKey == "kCBInitOptionRestoreIdentifier")
        #expect(CBCentralManagerOptionDeviceAccessForMedia == "kCBInitOptionDeviceAccessForMedia")
        #expect(CBCentralManagerScanOptionAllowDuplicatesKey == "kCBScanOptionAllowDuplicates")
        #expect(CBCentralManagerScanOptionSolicitedServiceUUIDsKey == "kCBScanOptionSolicitedServiceUUIDs")
    }

    @Test func connectOptions() {
        #expect(CBConnectPeripheralOptionNotifyOnConnectionKey == "kCBConnectOptionNotifyOnConnection")
        #expect(CBConnectPeripheralOptionNotifyOnDisconnectionKey == "kCBConnectOptionNotifyOnDisconnection")
        #expect(CBConnectPeripheralOptionNotifyOnNotificationKey == "kCBConnectOptionNotifyOnNotification")
        #expect(CBConnectPeripheralOptionStartDelayKey == "kCBConnectOptionStartDelay")
        #expect(CBConnectPeripheralOptionEnableTransportBridgingKey == "kCBConnectOptionEnableTransportBridging")
        #expect(CBConnectPeripheralOptionRequiresANCS == "kCBConnectOptionRequiresANCS")
        #expect(CBConnectPeripheralOptionEnableAutoReconnect == "kCBConnectOptionEnableAutoReconnect")
    }

    @Test func restoredStateKeys() {
        // "kCBRestoredStatePeripherals" (seen in a third-party shim) is wrong.
        #expect(CBCentralManagerRestoredStatePeripheralsKey == "kCBRestoredPeripherals")
        #expect(CBCentralManagerRestoredStateScanServicesKey == "kCBRestoredScanServices")
        #expect(CBCentralManagerRestoredStateScanOptionsKey == "kCBRestoredScanOptions")
        #expect(CBPeripheralManagerRestoredStateServicesKey == "kCBRestoredServices")
        #expect(CBPeripheralManagerRestoredStateAdvertisementDataKey == "kCBRestoredAdvertisementData")
    }

    @Test func peripheralManagerOptions() {
        #expect(CBPeripheralManagerOptionShowPowerAlertKey == "kCBPeripheralManagerOptionShowPowerAlert")
        #expect(CBPeripheralManagerOptionRestoreIdentifierKey == "kCBPeripheralManagerOptionRestoreIdentifier")
    }

    @Test func connectionEventMatchingOptions() {
        #expect(CBConnectionEventMatchingOption.serviceUUIDs.rawValue == "kCBConnectionEventMatchingOptionServiceUUIDs")
        #expect(CBConnectionEventMatchingOption.peripheralUUIDs.rawValue == "kCBConnectionEventMatchingOptionPeripheralUUIDs")
        let options: [CBConnectionEventMatchingOption: Any] = [.serviceUUIDs: [CBUUID(string: "180D")]]
        #expect(options[.serviceUUIDs] != nil && options[.peripheralUUIDs] == nil)
    }

    @Test func uuidStrings() {
        #expect(CBUUIDCharacteristicExtendedPropertiesString == "2900")
        #expect(CBUUIDCharacteristicUserDescriptionString == "2901")
        #expect(CBUUIDClientCharacteristicConfigurationString == "2902")
        #expect(CBUUIDServerCharacteristicConfigurationString == "2903")
        #expect(CBUUIDCharacteristicFormatString == "2904")
        #expect(CBUUIDCharacteristicAggregateFormatString == "2905")
        #expect(CBUUIDCharacteristicValidRangeString == "2906")
        #expect(!CBUUIDCharacteristicObservationScheduleString.isEmpty)
        #expect(CBUUIDL2CAPPSMCharacteristicString == "ABDD3056-28FA-441D-A470-55A75A52553A")
        // Every constant is a valid CBUUID string.
        for s in [
            CBUUIDCharacteristicExtendedPropertiesString, CBUUIDCharacteristicObservationScheduleString,
            CBUUIDL2CAPPSMCharacteristicString,
        ] {
            #expect(CBUUID(string: s).uuidString == s)
        }
    }

    @Test func errorDomains() {
        #expect(CBErrorDomain == "CBErrorDomain")
        #expect(CBATTErrorDomain == "CBATTErrorDomain")
    }
}
