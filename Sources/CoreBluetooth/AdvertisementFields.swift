// The advertisement dictionary of centralManager(_:didDiscover:advertisementData:rssi:), built from an
// advertising packet merged with its scan response, with Apple's keys and Foundation value types.
import Foundation
import BLEWire
import BLEGAP

struct AdvertisementFields {
    var localName: String?
    var serviceUUIDs: [BluetoothUUID] = []
    var overflowServiceUUIDs: [BluetoothUUID] = []
    var solicitedServiceUUIDs: [BluetoothUUID] = []
    var serviceData: [ServiceDataEntry] = []
    var manufacturerData: [UInt8]?
    var txPowerLevel: Int8?

    init(advertisingData: [UInt8], scanResponse: [UInt8]?) {
        let adv = AdvertisingData(lenient: advertisingData)
        let rsp = scanResponse.map { AdvertisingData(lenient: $0) } ?? AdvertisingData()
        // A complete name wins over a shortened one, wherever each came from.
        if adv.isLocalNameComplete { localName = adv.localName } else if rsp.isLocalNameComplete { localName = rsp.localName } else { localName = adv.localName ?? rsp.localName }
        for u in adv.serviceUUIDs + rsp.serviceUUIDs where !serviceUUIDs.contains(u) { serviceUUIDs.append(u) }
        for u in adv.solicitedServiceUUIDs + rsp.solicitedServiceUUIDs where !solicitedServiceUUIDs.contains(u) { solicitedServiceUUIDs.append(u) }
        serviceData = adv.serviceData + rsp.serviceData.filter { e in !adv.serviceData.contains { $0.uuid == e.uuid } }
        manufacturerData = adv.manufacturerData ?? rsp.manufacturerData
        txPowerLevel = adv.txPowerLevel ?? rsp.txPowerLevel
    }

    /// Apple's dictionary (C10): String, NSNumber, Data, [CBUUID], [CBUUID: Data].
    func dictionary(connectable: Bool) -> [String: Any] {
        var d: [String: Any] = [CBAdvertisementDataIsConnectable: NSNumber(value: connectable)]
        if let localName { d[CBAdvertisementDataLocalNameKey] = localName }
        if !serviceUUIDs.isEmpty { d[CBAdvertisementDataServiceUUIDsKey] = serviceUUIDs.map { CBUUID($0) } }
        if !overflowServiceUUIDs.isEmpty { d[CBAdvertisementDataOverflowServiceUUIDsKey] = overflowServiceUUIDs.map { CBUUID($0) } }
        if !solicitedServiceUUIDs.isEmpty { d[CBAdvertisementDataSolicitedServiceUUIDsKey] = solicitedServiceUUIDs.map { CBUUID($0) } }
        if !serviceData.isEmpty {
            var m: [CBUUID: Data] = [:]
            for e in serviceData { m[CBUUID(e.uuid)] = Data(e.data) }
            d[CBAdvertisementDataServiceDataKey] = m
        }
        if let manufacturerData { d[CBAdvertisementDataManufacturerDataKey] = Data(manufacturerData) }
        if let txPowerLevel { d[CBAdvertisementDataTxPowerLevelKey] = NSNumber(value: Int(txPowerLevel)) }
        d["kCBAdvDataRxPrimaryPHY"] = NSNumber(value: 1)
        d["kCBAdvDataRxSecondaryPHY"] = NSNumber(value: 0)
        d["kCBAdvDataTimestamp"] = NSNumber(value: CFAbsoluteTimeGetCurrent())
        return d
    }
}

/// Carries a non-Sendable value across a queue hop whose ownership transfer is clear.
public struct UncheckedBox<T>: @unchecked Sendable {
    public let value: T
    init(_ value: T) { self.value = value }
}
