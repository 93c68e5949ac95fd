// The JSON database description of `ble serve`: the example file, fixed handles, and errors that name
// their place in the file.
import Foundation
import Testing
import BLEWire
@testable import BLEGATT

@Suite struct GATTDatabaseFileTests {
    static let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("examples/heart-rate.json").path

    @Test func exampleFileBuildsWithItsFixedHandles() throws {
        let f = try GATTDatabaseFile(path: Self.example)
        #expect(f.advertise.name == "Served HR")
        #expect(f.advertise.serviceUUIDs == [BluetoothUUID(0x180D)])
        let db = try f.makeDatabase()
        #expect(db.services.map(\.uuid.uuidString) == ["1800", "1801", "180F", "180D", "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"])
        let hr = try #require(db.services.first { $0.uuid == BluetoothUUID(0x180D) })
        #expect(hr.range == 48...80)   // endHandle reserves unused handles
        #expect(db.services.first { $0.uuid == BluetoothUUID(0x180F) }?.range == 32...39)
        #expect(db.characteristic(valueHandle: 51)?.uuid == BluetoothUUID(0x2A37))
        // The include declaration follows the service declaration and points at 0x0020–0x0027.
        #expect(db.attribute(at: 49)?.type == .include)
        // The stack added the CCCD; the file's user description follows it.
        #expect(db.attribute(at: 52)?.type == .clientCharacteristicConfiguration)
        #expect(db.attribute(at: 53)?.type == .characteristicUserDescription)
        // Extended properties was requested: its descriptor is added.
        #expect(db.attributes.contains { $0.type == .characteristicExtendedProperties })
        let noDefaults = try GATTDatabaseFile(json: Data(#"{"defaultServices": false, "services": [{"uuid": "180D"}]}"#.utf8)).makeDatabase()
        #expect(noDefaults.services.map(\.uuid) == [BluetoothUUID(0x180D)])
    }

    func error(_ json: String) -> String? {
        do {
            _ = try GATTDatabaseFile(json: Data(json.utf8)).makeDatabase()
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test func errorsNameTheirPlace() {
        #expect(
            error(#"{"services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "properties": ["read", "reed"]}]}]}"#)?
                .hasPrefix("services[0].characteristics[0].properties[1]: unknown property \"reed\"") == true)
        #expect(
            error(#"{"services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "permissions": ["readible"]}]}]}"#)?
                .hasPrefix("services[0].characteristics[0].permissions[0]: unknown permission") == true)
        #expect(
            error(#"{"services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "value": "0x12"}]}]}"#)?
                .hasPrefix("services[0].characteristics[0].value: a value starts with") == true)
        #expect(
            error(#"{"services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "value": "hex:1"}]}]}"#)?
                .hasPrefix("services[0].characteristics[0].value: \"hex:1\" is not valid hex") == true)
        #expect(error(#"{"services": [{"uuid": "180Z"}]}"#)?.hasPrefix("services[0].uuid:") == true)
        #expect(error(#"{"services": [{"uuid": "180D", "colour": 1}]}"#)?.hasPrefix("services[0].colour: unknown key") == true)
        #expect(
            error(#"{"services": [{"uuid": "180D", "handle": 20}, {"uuid": "180F", "handle": 15}]}"#)?
                .hasPrefix("services[1].handle: handle 15 overlaps") == true)
        #expect(
            error(#"{"services": [{"uuid": "180D", "handle": 20, "characteristics": [{"uuid": "2A37", "handle": 30}, {"uuid": "2A38", "handle": 31}]}]}"#)?
                .hasPrefix("services[0].characteristics[1].handle: handle 31 overlaps") == true)
        #expect(
            error(#"{"services": [{"uuid": "180D", "characteristics": [{"uuid": "2A37", "handle": 30}]}]}"#)?
                .hasPrefix("services[0].characteristics[0].handle: a fixed characteristic handle needs a fixed service handle") == true)
        #expect(
            error(#"{"services": [{"uuid": "180D", "handle": 10, "endHandle": 11, "characteristics": [{"uuid": "2A37"}]}]}"#)?
                .hasPrefix("services[0]:") == true)
        #expect(
            error(#"{"services": [{"uuid": "180D", "includes": ["180F"]}, {"uuid": "180F"}]}"#)?
                .hasPrefix("services[0].includes[0]: service 180F is declared later without a fixed \"handle\"") == true)
        #expect(error(#"{"services": [{"uuid": "180D", "includes": ["1810"]}]}"#)?.hasPrefix("services[0].includes[0]: no service 1810 in the file") == true)
        #expect(error(#"{"services": [{"uuid": "180D", "handle": 10, "includes": [10]}]}"#)?.hasPrefix("services[0].includes[0]: a service cannot include itself") == true)
        #expect(
            error(#"{"services": [{"uuid": "180D", "handle": 10, "includes": [40]}, {"uuid": "180F", "handle": 40, "includes": [10]}]}"#)?
                .contains("cycle") == true)
        #expect(error(#"{"services": [{"uuid": "180D", "includes": [true]}]}"#)?.hasPrefix("services[0].includes[0]: expected a string") == true)
        #expect(error(#"{"services": [{"uuid": "180D", "primary": "yes"}]}"#)?.hasPrefix("services[0].primary: expected true or false") == true)
        #expect(error(#"{"services": "#)?.hasPrefix("line 1, column 14: not valid JSON") == true)
        #expect(error("{\n  \"services\": [\n    {\"uuid\": \"180D\",, }\n  ]\n}")?.hasPrefix("line 3, column ") == true)
        #expect(error(#"{"services": [{"uuid": "180D", "handle": 65536}]}"#)?.hasPrefix("services[0].handle: expected a handle") == true)
        #expect(error(#"{"defaultServices": false, "services": [{"uuid": "180D"}]}"#) == nil)
    }

    /// Handles in "includes" are numbers: 0 and 1 are not booleans (on Linux they also pass `is Bool`).
    @Test func includesByHandleAcceptSmallNumbers() throws {
        let db = try GATTDatabaseFile(json: Data(#"{"defaultServices": false, "services": [{"uuid": "180F", "handle": 1}, {"uuid": "180D", "includes": [1]}]}"#.utf8))
            .makeDatabase()
        let inc = try #require(db.attributes.first { $0.type == .include })
        #expect(db.services.first { $0.uuid == BluetoothUUID(0x180D) }?.range.contains(inc.handle) == true)
        if case let .stored(v) = inc.value { #expect(Array(v.prefix(2)) == [1, 0]) } else { Issue.record("include value not stored") }
    }

    /// A service at handle 1 that includes one declared later at 128, as real devices have.
    @Test func serviceMayIncludeOneDeclaredLater() throws {
        let json =
            #"{"defaultServices": false, "services": [{"uuid": "180D", "handle": 1, "includes": [128], "characteristics": [{"uuid": "2A37", "properties": ["notify"]}]}, {"uuid": "180F", "primary": false, "handle": 128, "characteristics": [{"uuid": "2A19", "properties": ["read"], "value": "hex:5a"}]}, {"uuid": "1805", "includes": ["180F"]}]}"#
        let db = try GATTDatabaseFile(json: Data(json.utf8)).makeDatabase()
        #expect(db.services.map(\.range.lowerBound) == [1, 128, 131])
        #expect(db.attribute(at: 2)?.type == .include)
        if case let .stored(v) = db.attribute(at: 2)!.value { #expect(v == [128, 0, 130, 0, 0x0F, 0x18]) } else { Issue.record("include value not stored") }
        // By UUID as well, to a later service with a fixed handle.
        let byUUID = #"{"defaultServices": false, "services": [{"uuid": "180D", "handle": 1, "includes": ["180F"]}, {"uuid": "180F", "handle": 128}]}"#
        #expect(try GATTDatabaseFile(json: Data(byUUID.utf8)).makeDatabase().services.map(\.range.lowerBound) == [1, 128])
    }

    /// A file that cannot be read says why, in the system's words.
    @Test func missingFileGivesTheSystemsReason() {
        let path = "/nonexistent-\(UUID().uuidString)/db.json"
        #expect(throws: GATTDatabaseFile.FileError.self) { try GATTDatabaseFile(path: path) }
        do { _ = try GATTDatabaseFile(path: path) } catch { #expect("\(error)" == "cannot read \(path): No such file or directory") }
        do { _ = try GATTDatabaseFile(path: "/tmp") } catch { #expect("\(error)" == "cannot read /tmp: Is a directory") }
    }
}
