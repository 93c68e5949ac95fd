// Advertising data: real bytes decoded field by field, every AD type round-tripped, strict vs lenient
// decoding of every prefix, iOS-style packing, and connection parameter ranges.
import Testing
import BLEWire
@testable import BLEGAP

@Suite struct AdvertisingDataTests {
    let heartRate: [UInt8] = [0x02, 0x01, 0x06, 0x03, 0x03, 0x0D, 0x18, 0x0A, 0x09, 0x48, 0x52, 0x20, 0x53, 0x65, 0x6E, 0x73, 0x6F, 0x72]

    @Test func decodesARealAdvertisement() throws {
        let ad = try AdvertisingData(decoding: heartRate)
        #expect(ad.flags == [.leGeneralDiscoverable, .brEdrNotSupported])
        #expect(ad.serviceUUIDs == [BluetoothUUID(0x180D)])
        #expect(ad.localName == "HR Sensor")
        #expect(ad.isLocalNameComplete)
        #expect(ad.encode() == heartRate)
    }

    @Test func everyTypedField() throws {
        let u128 = BluetoothUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!
        let ad = AdvertisingData([
            ADStructure(type: .flags, data: [0x05]),
            ADStructure(type: .incompleteList16, data: [0x0F, 0x18]),
            ADStructure(type: .completeList32, data: [0x78, 0x56, 0x34, 0x12]),
            ADStructure(type: .completeList128, data: u128.littleEndianBytes),
            ADStructure(type: .shortenedLocalName, data: Array("Sens".utf8)),
            ADStructure(type: .txPowerLevel, data: [0xF8]),
            ADStructure(type: .peripheralConnectionIntervalRange, data: [0x06, 0x00, 0x0C, 0x00]),
            ADStructure(type: .solicited16, data: [0x0A, 0x18]),
            ADStructure(type: .solicited128, data: u128.littleEndianBytes),
            ADStructure(type: .serviceData16, data: [0x0F, 0x18, 0x64]),
            ADStructure(type: .serviceData32, data: [0x78, 0x56, 0x34, 0x12, 0x01]),
            ADStructure(type: .appearance, data: [0x41, 0x03]),
            ADStructure(type: .manufacturerSpecificData, data: [0x4C, 0x00, 0x02, 0x15]),
            ADStructure(type: ADType(0x99), data: [1, 2]),
        ])
        let decoded = try AdvertisingData(decoding: ad.encode())
        #expect(decoded == ad)
        #expect(decoded.serviceUUIDs == [BluetoothUUID(0x180F), BluetoothUUID(uint32: 0x12345678), u128])
        #expect(decoded.localName == "Sens" && !decoded.isLocalNameComplete)
        #expect(decoded.txPowerLevel == -8)
        #expect(decoded.connectionIntervalRange == 6...12)
        #expect(decoded.solicitedServiceUUIDs == [BluetoothUUID(0x180A), u128])
        #expect(
            decoded.serviceData == [
                ServiceDataEntry(uuid: BluetoothUUID(0x180F), data: [0x64]),
                ServiceDataEntry(uuid: BluetoothUUID(uint32: 0x12345678), data: [0x01]),
            ])
        #expect(decoded.appearance == 0x0341)
        #expect(decoded.manufacturerData == [0x4C, 0x00, 0x02, 0x15])
        #expect(decoded.flags == [.leLimitedDiscoverable, .brEdrNotSupported])
    }

    @Test func strictRejectsCutStructuresLenientKeepsCompleteOnes() throws {
        let whole = try AdvertisingData(decoding: heartRate).structures
        var boundaries = [0]
        for s in whole { boundaries.append(boundaries.last! + 2 + s.data.count) }
        for n in 0..<heartRate.count {
            let prefix = Array(heartRate.prefix(n))
            let complete = boundaries.filter { $0 <= n }.count - 1
            #expect(AdvertisingData(lenient: prefix).structures == Array(whole.prefix(complete)))
            if boundaries.contains(n) {
                #expect(try AdvertisingData(decoding: prefix).structures == Array(whole.prefix(complete)))
            } else {
                #expect(throws: AdvertisingDataError.self) { try AdvertisingData(decoding: prefix) }
            }
        }
    }

    @Test func paddingAndMalformedListsNeverCrash() throws {
        // A zero length octet ends the significant part (Vol 3 Part C §11).
        #expect(try AdvertisingData(decoding: [0x02, 0x01, 0x06, 0x00, 0xFF, 0xFF]).structures.count == 1)
        // A 16-bit list with an odd length is skipped by the typed accessor.
        let odd = AdvertisingData(lenient: [0x04, 0x03, 0x0D, 0x18, 0x0F])
        #expect(odd.serviceUUIDs.isEmpty)
        #expect(AdvertisingData(lenient: [0x01]).structures.isEmpty)
    }
}

@Suite struct PackerTests {
    @Test func shortNameAndUUIDFitInOnePacket() throws {
        let r = AdvertisingPacker.pack(localName: "HR", serviceUUIDs: [BluetoothUUID(0x180D)])
        let ad = try AdvertisingData(decoding: r.advertisingData)
        #expect(ad.serviceUUIDs == [BluetoothUUID(0x180D)])
        #expect(ad.localName == "HR" && ad.isLocalNameComplete)
        #expect(r.scanResponseData.isEmpty && r.overflowServiceUUIDs.isEmpty)
    }

    @Test func longNameMovesToTheScanResponse() throws {
        let u = BluetoothUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!
        let r = AdvertisingPacker.pack(localName: "A rather long device name", serviceUUIDs: [u])
        #expect(try AdvertisingData(decoding: r.advertisingData).serviceUUIDs == [u])
        let rsp = try AdvertisingData(decoding: r.scanResponseData)
        #expect(rsp.localName == "A rather long device name" && rsp.isLocalNameComplete)
        #expect(r.advertisingData.count <= 31 && r.scanResponseData.count <= 31)
    }

    @Test func uuidsThatDoNotFitOverflow() throws {
        let uuids = (1...3).map { BluetoothUUID(string: "6E40000\($0)-B5A3-F393-E0A9-E50E24DCCA9E")! }
        let r = AdvertisingPacker.pack(localName: "Über-Gerät mit sehr langem Namen ✓", serviceUUIDs: uuids)
        let adv = try AdvertisingData(decoding: r.advertisingData)
        let rsp = try AdvertisingData(decoding: r.scanResponseData)
        #expect(adv.serviceUUIDs == [uuids[0]])
        #expect(adv.structures.contains { $0.type == .incompleteList128 })
        #expect(rsp.serviceUUIDs == [uuids[1]])
        #expect(r.overflowServiceUUIDs == [uuids[2]])
        #expect(r.advertisingData.count <= 31 && r.scanResponseData.count <= 31)
    }

    @Test func shortenedNamesCutOnCharacterBoundaries() {
        let cut = AdvertisingPacker.utf8Prefix("aé✓", maxBytes: 5)
        #expect(String(decoding: cut, as: UTF8.self) == "aé")
    }
}

@Suite struct ConnectionParameterTests {
    @Test func ranges() {
        #expect(ConnectionParameters.isValid(minInterval: 6, maxInterval: 12, latency: 0, supervisionTimeout: 100))
        #expect(!ConnectionParameters.isValid(minInterval: 5, maxInterval: 12, latency: 0, supervisionTimeout: 100))
        #expect(!ConnectionParameters.isValid(minInterval: 12, maxInterval: 6, latency: 0, supervisionTimeout: 100))
        #expect(!ConnectionParameters.isValid(minInterval: 6, maxInterval: 12, latency: 500, supervisionTimeout: 100))
        // Timeout must exceed (1 + latency) × interval × 2: 3200 × 1.25 ms × 2 = 8 s > 3 s.
        #expect(!ConnectionParameters.isValid(minInterval: 3200, maxInterval: 3200, latency: 0, supervisionTimeout: 300))
        #expect(ConnectionParameters.isValid(minInterval: 3200, maxInterval: 3200, latency: 0, supervisionTimeout: 3200))
    }
}
