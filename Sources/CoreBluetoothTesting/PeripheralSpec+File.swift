// A simulated peripheral from a `ble serve` JSON file (Sources/BLEGATT/GATTDatabaseFile.swift documents the
// format): the same advertising and the same database, handles, included services and descriptors as
// `ble serve FILE.json` serves.
import Foundation
import BLEWire
import BLEGATT
import BLEGAP

extension PeripheralSpec {
    /// Reads a `ble serve` database file; errors name their place in the file.
    public init(contentsOfFile path: String, proximity: Proximity = .immediate) throws {
        try self.init(file: try GATTDatabaseFile(path: path), proximity: proximity)
    }

    /// The same from the file's JSON text.
    public init(json: Data, proximity: Proximity = .immediate) throws {
        try self.init(file: try GATTDatabaseFile(json: json), proximity: proximity)
    }

    init(file: GATTDatabaseFile, proximity: Proximity) throws {
        self.init()
        let name = file.advertise.name
        let db = try file.makeDatabase(deviceName: name ?? "OpenCoreBluetooth")
        self.name = name
        self.proximity = proximity
        self.isConnectable = true
        self.includesDefaultServices = false
        self.services = try AttributeTable(db).serviceDefinitions()
        let packed = AdvertisingPacker.pack(localName: name, serviceUUIDs: file.advertise.serviceUUIDs)
        advertising = Advertising(
            data: packed.advertisingData, scanResponse: packed.scanResponseData, interval: 0.1, delay: 0,
            alsoWhenConnected: false, isConnectable: true)
    }
}
