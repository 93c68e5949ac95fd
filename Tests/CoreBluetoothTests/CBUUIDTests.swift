// CBUUID: the three forms, parsing rules, equality across forms, data, descriptions and traps.
import BLEWire
import CoreBluetooth
import Foundation
import Testing

@Suite struct CBUUIDTests {
    @Test func sixteenBitForm() {
        let u = CBUUID(string: "180D")
        #expect(u.uuidString == "180D")
        #expect(u.data == Data([0x18, 0x0D]))
        #expect(CBUUID(string: "180d").uuidString == "180D")
        #expect(CBUUID(string: "0x180D").uuidString == "180D")
        #expect(CBUUID(string: "0X2a37").uuidString == "2A37")
    }

    @Test func thirtyTwoBitForm() {
        let u = CBUUID(string: "1234ABCD")
        #expect(u.uuidString == "1234ABCD")
        #expect(u.data == Data([0x12, 0x34, 0xAB, 0xCD]))
        #expect(CBUUID(string: "0000180D").uuidString == "0000180D")
    }

    @Test func oneTwentyEightBitForm() {
        let s = "e20a39f4-73f5-4bc4-a12f-17d1ad07a961"
        let u = CBUUID(string: s)
        #expect(u.uuidString == s.uppercased())
        #expect(
            u.data
                == Data([
                    0xE2, 0x0A, 0x39, 0xF4, 0x73, 0xF5, 0x4B, 0xC4,
                    0xA1, 0x2F, 0x17, 0xD1, 0xAD, 0x07, 0xA9, 0x61,
                ]))
    }

    @Test func baseUUIDStringKeepsItsLongFormButEqualsShortForms() {
        let long = CBUUID(string: "0000180D-0000-1000-8000-00805F9B34FB")
        let short = CBUUID(string: "180D")
        let mid = CBUUID(string: "0000180D")
        #expect(long.uuidString == "0000180D-0000-1000-8000-00805F9B34FB")
        #expect(long.data.count == 16)
        #expect(long == short)
        #expect(short == mid)
        #expect(long.isEqual(short))
        #expect(long.hash == short.hash && mid.hash == short.hash)
        let table: [CBUUID: Int] = [short: 1]
        #expect(table[long] == 1)
        #expect(Set([long, short, mid]).count == 1)
        #expect(short != CBUUID(string: "180F"))
        #expect(!short.isEqual("180D"))
    }

    @Test func dataInitializer() {
        #expect(CBUUID(data: Data([0x29, 0x02])).uuidString == "2902")
        #expect(CBUUID(data: Data([0x29, 0x02])) == CBUUID(string: CBUUIDClientCharacteristicConfigurationString))
        #expect(CBUUID(data: Data([0x00, 0x00, 0x18, 0x0D])) == CBUUID(string: "180D"))
        let bytes: [UInt8] = [0xAB, 0xDD, 0x30, 0x56, 0x28, 0xFA, 0x44, 0x1D, 0xA4, 0x70, 0x55, 0xA7, 0x5A, 0x52, 0x55, 0x3A]
        #expect(CBUUID(data: Data(bytes)).uuidString == CBUUIDL2CAPPSMCharacteristicString)
        // data round-trips through init(data:) in every form.
        for s in ["2901", "ABCD0123", "ABDD3056-28FA-441D-A470-55A75A52553A"] {
            let u = CBUUID(string: s)
            #expect(CBUUID(data: u.data).uuidString == s)
        }
    }

    @Test func nsuuidInitializer() {
        let id = UUID(uuidString: "ABDD3056-28FA-441D-A470-55A75A52553A")!
        let u = CBUUID(nsuuid: id)
        #expect(u.uuidString == "ABDD3056-28FA-441D-A470-55A75A52553A")
        #expect(u == CBUUID(string: CBUUIDL2CAPPSMCharacteristicString))
        let base = CBUUID(nsuuid: UUID(uuidString: "00002902-0000-1000-8000-00805F9B34FB")!)
        #expect(base == CBUUID(string: "2902"))
        #expect(base.uuidString.count == 36)
    }

    @Test func descriptionsOfWellKnownUUIDs() {
        #expect(CBUUID(string: "180D").description == "Heart Rate")
        #expect(CBUUID(string: "180A").description == "Device Information")
        #expect(CBUUID(string: "180F").description == "Battery")
        #expect(CBUUID(string: "2A19").description == "Battery Level")
        #expect(CBUUID(string: "1800").description == "Generic Access Profile")
        #expect(CBUUID(string: "1801").description == "Generic Attribute Profile")
        #expect(CBUUID(string: "2A00").description == "Device Name")
        #expect(CBUUID(string: "2A05").description == "Service Changed")
        #expect(CBUUID(string: CBUUIDClientCharacteristicConfigurationString).description == "Client Characteristic Configuration")
        #expect(CBUUID(string: CBUUIDCharacteristicUserDescriptionString).description == "Characteristic User Description")
        #expect(CBUUID(string: "2a29").description == "Manufacturer Name String")
        #expect("\(CBUUID(string: "1812"))" == "Human Interface Device")
    }

    @Test func descriptionsOfOtherUUIDsAreTheirString() {
        #expect(CBUUID(string: "FFF0").description == "FFF0")
        #expect(CBUUID(string: "e20a39f4-73f5-4bc4-a12f-17d1ad07a961").description == "E20A39F4-73F5-4BC4-A12F-17D1AD07A961")
        // Names are keyed by uuidString: the long form of a named 16-bit UUID is not named, as on iOS.
        #expect(CBUUID(string: "0000180D-0000-1000-8000-00805F9B34FB").description == "0000180D-0000-1000-8000-00805F9B34FB")
    }

    @Test func copyIsEqual() {
        let u = CBUUID(string: "2A37")
        let c = u.copy() as? CBUUID
        #expect(c == u)
    }

    @Test func parserAcceptsWhatInitAccepts() throws {
        let cases: [(String, String)] = [
            ("180D", "180D"), ("0x180d", "180D"), ("0000180D", "0000180D"), ("0x0000180D", "0000180D"),
            ("0000180D-0000-1000-8000-00805F9B34FB", "0000180D-0000-1000-8000-00805F9B34FB"),
            ("0xabdd3056-28fa-441d-a470-55a75a52553a", "ABDD3056-28FA-441D-A470-55A75A52553A"),
        ]
        for (input, string) in cases {
            let uuid = try #require(CBUUID.bluetoothUUID(parsing: input))
            #expect(uuid.uuidString == string)
        }
    }

    @Test func parserRejectsInvalidStrings() {
        let invalid = [
            "", "1", "18D", "180DA", "XYZW", "180G", "0x", "0x18", "0y180D", "00180D",
            "0000180D0000100080000080 5F9B34FB", "0000180D00001000800000805F9B34FB",   // 32 digits, no dashes
            "0000180D-0000-1000-8000-00805F9B34F", "0000180D-0000-1000-8000-00805F9B34FBA",
            "0000180D0-000-1000-8000-00805F9B34FB", "0000180D-0000-1000-8000-00805F9B34FG",
            "18 D", "-180D", "18-D", "é80D",
        ]
        for s in invalid {
            #expect(CBUUID.bluetoothUUID(parsing: s) == nil, "\(s) should be rejected")
        }
    }

    @Test func dataParserRejectsOtherLengths() {
        for n in [0, 1, 3, 5, 8, 15, 17] {
            #expect(CBUUID.bluetoothUUID(data: Data(repeating: 0x11, count: n)) == nil)
        }
        #expect(CBUUID.bluetoothUUID(data: Data([0x18, 0x0D])) == BluetoothUUID(0x180D))
    }

    @Test func bridgesToBluetoothUUID() {
        let u = CBUUID(string: "2A37")
        #expect(u.bluetoothUUID == BluetoothUUID(0x2A37))
        #expect(u.bluetoothUUID.wireSize == 2)
        #expect(CBUUID(BluetoothUUID(0x2902)) == CBUUID(string: "2902"))
    }

    @Test func invalidStringTraps() async {
        await #expect(processExitsWith: .failure) {
            _ = CBUUID(string: "not a uuid")
        }
    }

    @Test func invalidDataTraps() async {
        await #expect(processExitsWith: .failure) {
            _ = CBUUID(data: Data([1, 2, 3]))
        }
    }
}
