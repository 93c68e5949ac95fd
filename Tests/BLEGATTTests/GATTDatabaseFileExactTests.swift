// Issue 21: a file that fixes every service's handles and end handles is served exactly as it lays the
// database out, warts included (a notifying characteristic without a Client Characteristic Configuration
// descriptor, extended properties without their descriptor, gaps between handles), with a warning for each
// departure from the specification; files without fixed handles keep the helpful layout.
import Foundation
import Testing
import BLEATT
import BLEWire
@testable import BLEGATT

@Suite struct GATTDatabaseFileExactTests {
    /// A copy of a device in the manner of BlueZ's PTS databases: GAP at 1–5, a service at 0x10–0x20 whose
    /// notifying and indicating characteristics have no CCCD, a hole at 0x11 and 0x16, room up to 0x20.
    static let device = #"""
        { "services": [
            { "uuid": "1800", "handle": 1, "endHandle": 5, "characteristics": [
                { "uuid": "2A00", "properties": ["read"], "permissions": ["readable"], "value": "utf8:PTS", "handle": 2 },
                { "uuid": "2A01", "properties": ["read"], "permissions": ["readable"], "value": "hex:0000", "handle": 4 } ] },
            { "uuid": "180D", "handle": 16, "endHandle": 32, "characteristics": [
                { "uuid": "2A37", "properties": ["notify"], "permissions": [], "value": "hex:0048", "handle": 18 },
                { "uuid": "2A38", "properties": ["read", "indicate", "extendedProperties"], "permissions": ["readable"],
                  "value": "hex:01", "handle": 20, "descriptors": [ { "uuid": "2901", "value": "utf8:x", "handle": 23 } ] } ] } ] }
        """#

    func server(_ json: String) throws -> GATTServer {
        var s = GATTServer(database: try GATTDatabaseFile(json: Data(json.utf8)).makeDatabase())
        s.clientConnected(alice)
        return s
    }

    @Test func fixedHandlesAreServedAsWrittenWithWarnings() throws {
        let file = try GATTDatabaseFile(json: Data(Self.device.utf8))
        #expect(file.isExact)
        #expect(!file.defaultServices)
        let db = try file.makeDatabase()
        // Every attribute where the file put it, and nothing else: no CCCD, no Extended Properties, no GATT service.
        #expect(db.attributes.map(\.handle) == [1, 2, 3, 4, 5, 16, 18, 19, 20, 21, 23])
        #expect(db.services.map(\.range) == [1...5, 16...32])
        #expect(!db.attributes.contains { $0.type == .clientCharacteristicConfiguration || $0.type == .characteristicExtendedProperties })
        #expect(db.characteristic(valueHandle: 19)?.clientConfigurationHandle == nil)
        #expect(file.warnings.map(\.path) == ["", "services[1].characteristics[0]", "services[1].characteristics[1]", "services[1].characteristics[1]"])
        #expect(file.warnings[0].message.contains("served exactly as written"))
        #expect(
            file.warnings[1].description
                == "services[1].characteristics[0]: notifies without a Client Characteristic Configuration descriptor (0x2902); none added, so no client can subscribe")
        #expect(file.warnings[2].message.hasPrefix("indicates without a Client Characteristic Configuration descriptor"))
        #expect(file.warnings[3].message.hasPrefix("has extended properties without their descriptor (0x2900)"))
    }

    /// What a client discovers, PDU by PDU, is what the file says.
    @Test func discoveryAtTheATTLevelMatchesTheFile() throws {
        var s = try server(Self.device)
        // Primary services with their end handles as written (0x20, not the last attribute 0x17).
        #expect(s.exchange("10 0100 ffff 0028".filter { $0 != " " }) == "1106" + "0100" + "0500" + "0018" + "1000" + "2000" + "0d18")
        #expect(s.exchange("10 0600 ffff 0028".filter { $0 != " " }) == "1106" + "1000" + "2000" + "0d18")
        #expect(s.exchange("06 0100 ffff 0028 0d18".filter { $0 != " " }) == "07" + "1000" + "2000")
        // Characteristics: notify (0x10) at 0x12 → 0x13; read|indicate|extended (0xA2) at 0x14 → 0x15.
        #expect(s.exchange("08 1000 2000 0328".filter { $0 != " " }) == "0907" + "1200" + "10" + "1300" + "372a" + "1400" + "a2" + "1500" + "382a")
        #expect(s.exchange("08 1600 2000 0328".filter { $0 != " " }) == err(0x08, 0x0016, 0x0A))
        // Descriptors of the first characteristic (0x14 is the next declaration): none at all.
        #expect(s.exchange("04 1400 1400".filter { $0 != " " }) == "05" + "01" + "1400" + "0328")
        // The value and descriptor handles from 0x13: values, then the user description at 0x17 after the hole.
        #expect(s.exchange("04 1300 2000".filter { $0 != " " }) == "05" + "01" + "1300" + "372a" + "1400" + "0328" + "1500" + "382a" + "1700" + "0129")
        #expect(s.exchange("04 1600 1600".filter { $0 != " " }) == err(0x04, 0x0016, 0x0A))
        #expect(s.exchange("04 1800 2000".filter { $0 != " " }) == err(0x04, 0x0018, 0x0A))
        // Nothing between the services, nothing after the last.
        #expect(s.exchange("04 0600 0f00".filter { $0 != " " }) == err(0x04, 0x0006, 0x0A))
        #expect(s.exchange("10 2100 ffff 0028".filter { $0 != " " }) == err(0x10, 0x0021, 0x0A))
        // No CCCD to write: the handle after the notifying value is the next declaration, not configuration.
        #expect(s.exchange("12 1400 0100".filter { $0 != " " }) == err(0x12, 0x0014, 0x03))
        #expect(s.exchange("0a 1300".filter { $0 != " " }) == err(0x0A, 0x0013, 0x02))
        #expect(s.exchange("0a 1500".filter { $0 != " " }) == "0b01")
    }

    /// The layout is the file's choice: "exact" overrides what the handles suggest, and "defaultServices"
    /// still adds the GAP and GATT services when asked.
    @Test func theLayoutCanBeChosen() throws {
        let loose = #"{"exact": true, "services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "properties": ["notify"]}]}]}"#
        let f = try GATTDatabaseFile(json: Data(loose.utf8))
        #expect(f.isExact && !f.defaultServices)
        #expect(try f.makeDatabase().attributes.map(\.type) == [.primaryService, .characteristic, BluetoothUUID(0x2A37)])
        #expect(f.warnings.first?.message.hasPrefix("\"exact\": true") == true)
        #expect(f.warnings.contains { $0.path == "services" && $0.message.hasPrefix("no GAP service") })
        let helpful = Self.device.replacingOccurrences(of: "{ \"services\"", with: "{ \"exact\": false, \"defaultServices\": false, \"services\"")
        let h = try GATTDatabaseFile(json: Data(helpful.utf8))
        #expect(!h.isExact && h.warnings.isEmpty)
        // The helpful layout adds the CCCD after 0x13, which collides with the declaration the file fixed at 0x14.
        #expect(throws: GATTDatabaseFile.FileError.self) { try h.makeDatabase() }
        let withDefaults = #"{"defaultServices": true, "services": [{"uuid": "180D", "handle": 32, "endHandle": 40}]}"#
        let d = try GATTDatabaseFile(json: Data(withDefaults.utf8))
        #expect(d.isExact && d.defaultServices)
        #expect(try d.makeDatabase().services.map(\.uuid) == [.gapService, .gattService, BluetoothUUID(0x180D)])
        #expect(throws: GATTDatabaseFile.FileError.self) { try GATTDatabaseFile(json: Data(#"{"exact": 1, "services": []}"#.utf8)) }
    }

    /// Without fixed handles (or with only some fixed) the stack stays helpful: default services, a CCCD
    /// for each notifying characteristic, no warnings.
    @Test func filesWithoutFixedHandlesKeepTheHelpfulLayout() throws {
        let json = #"{"services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "properties": ["notify"]}]}, {"uuid": "180F", "handle": 64, "endHandle": 70}]}"#
        let f = try GATTDatabaseFile(json: Data(json.utf8))
        #expect(!f.isExact && f.defaultServices && f.warnings.isEmpty)
        let db = try f.makeDatabase()
        #expect(db.services.map(\.uuid) == [.gapService, .gattService, BluetoothUUID(0x180D), BluetoothUUID(0x180F)])
        let hr = try #require(db.characteristics.first { $0.uuid == BluetoothUUID(0x2A37) })
        #expect(hr.clientConfigurationHandle == hr.valueHandle + 1)
    }
}
