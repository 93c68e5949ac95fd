import Testing
import PeerBluetooth
import PeerSession

@Suite struct PeerAdvertTests {
    @Test func advertFillsExactlyOneLegacyAdvertisementAndRoundTrips() {
        let uuid = PeerAdvert.serviceUUID(forServiceType: "photo-share")
        let a = PeerAdvert(service: uuid, token: 0x0123_4567_89AB_CDEF, psm: 0x0081)
        let data = a.advertisingData
        #expect(data.count == 31)
        #expect(PeerAdvert(advertisingData: data) == a)
        // Every truncation is refused, never misread.
        for n in 0..<data.count { #expect(PeerAdvert(advertisingData: Array(data.prefix(n))) == nil) }
    }

    @Test func serviceUUIDsDifferByServiceTypeAndCarryVersion8() {
        let a = PeerAdvert.serviceUUID(forServiceType: "photo-share")
        let b = PeerAdvert.serviceUUID(forServiceType: "photo-sharf")
        #expect(a != b)
        #expect(a.count == 16)
        #expect(a != PeerAdvert.memberUUID)
        let text = PeerAdvert.uuidString(a)
        #expect(text.count == 36)
        #expect(Array(text)[14] == "8")
    }

    @Test func otherDevicesAdvertsAreIgnored() {
        #expect(PeerAdvert(advertisingData: [2, 1, 6, 3, 3, 0x0D, 0x18]) == nil)
        #expect(PeerAdvert(advertisingData: [0]) == nil)
        #expect(PeerAdvert(advertisingData: [31, 0x21] + Array(repeating: 0, count: 30)) == nil)
        // A zero SPSM is not a place to connect to.
        var zero = PeerAdvert(service: PeerAdvert.memberUUID, token: 1, psm: 0x80).advertisingData
        zero[29] = 0; zero[30] = 0
        #expect(PeerAdvert(advertisingData: zero) == nil)
    }

    @Test func scanResponseShortensLongNamesAtCharacterBoundaries() {
        let short = PeerAdvert.scanResponse(name: "Kenshin")
        #expect(short == [8, 0x09] + Array("Kenshin".utf8))
        let long = PeerAdvert.scanResponse(name: String(repeating: "✓", count: 20))   // 60 octets
        #expect(long[1] == 0x08)
        #expect(long.count <= 31)
        #expect(String(decoding: long[2...], as: UTF8.self) == String(repeating: "✓", count: 9))
    }

    @Test func bluetoothEndpointHostStringsRoundTrip() {
        let e = PeerBluetoothEndpoint(address: [0x55, 0x44, 0x33, 0x22, 0x11, 0xC0], isRandom: true, psm: 0x0080)
        #expect(e.host == "ble:C0:11:22:33:44:55/random")
        #expect(PeerBluetoothEndpoint(host: e.host, port: 0x80) == e)
        #expect(PeerBluetoothEndpoint(host: "10.0.0.1", port: 80) == nil)
        #expect(PeerBluetoothEndpoint(host: "ble:C0:11:22:33:44/random", port: 80) == nil)
        #expect(PeerBluetoothEndpoint(host: "ble:C0:11:22:33:44:55/other", port: 80) == nil)
        #expect(PeerBluetoothEndpoint(host: e.host, port: 0) == nil)
    }
}
