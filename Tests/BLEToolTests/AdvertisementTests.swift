// `ble scan` decodes what a device advertises: a host in this test process advertises chosen AD
// structures (flags, a 128-bit service, manufacturer data of a known and an unknown company, service data,
// TX power, appearance, a name in the scan response) on the air that `ble scan` listens to.
import Foundation
import Testing
import BLEWire
import BLEHost
import BLEVirtualRadio

@Suite(.serialized, .timeLimit(.minutes(2))) struct AdvertisementTests {
    func advertiser(_ bench: Bench, data: [UInt8], scanResponse: [UInt8], connectable: Bool = true) throws -> LEHost {
        let host = try HostFactory.makeHost(on: bench.air, name: "advertiser")
        let up = DispatchSemaphore(value: 0)
        host.loop.execute {
            host.addPowerObserver { s in
                guard s == .on else { return }
                host.startAdvertising(AdvertisingConfiguration(data: data, scanResponse: scanResponse, connectable: connectable)) { _ in up.signal() }
            }
            host.powerOn()
        }
        guard up.wait(timeout: .now() + 10) == .success else { throw ToolFailure("the advertiser did not start") }
        return host
    }

    @Test func scanDecodesEveryField() throws {
        let bench = try Bench()
        defer { bench.stop() }
        let data: [UInt8] =
            [
                2, 0x01, 0x06,   // flags
                17, 0x07,
            ] + BluetoothUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!.littleEndianBytes   // 128-bit service
            + [7, 0xFF, 0x4C, 0x00, 0x02, 0x15, 0xAA, 0xBB]   // manufacturer data, Apple
        let response: [UInt8] =
            [8, 0x09] + Array("Beacon1".utf8)
            + [5, 0x16, 0x0F, 0x18, 0x55, 0x66]   // service data, Battery
            + [2, 0x0A, 0xF4]   // TX power −12 dBm
            + [3, 0x19, 0xC1, 0x03]   // appearance: keyboard
            + [5, 0xFF, 0x34, 0x12, 0x01, 0x02]   // manufacturer data, unknown company
        let a = try advertiser(bench, data: data, scanResponse: response)
        defer { a.loop.sync { a.powerOff() } }
        let other = try advertiser(bench, data: [2, 0x01, 0x04, 4, 0x09, 0x4E, 0x43, 0x31], scanResponse: [], connectable: false)
        defer { other.loop.sync { other.powerOff() } }
        let r = try bench.run(["scan", "--duration", "2"])
        #expect(r.status == 0, "\(r)")
        let lines = r.stdout.split(separator: "\n").map(String.init).sorted()
        try expectGolden(normalized(lines.joined(separator: "\n") + "\n"), "scan-fields.txt")
        let j = try bench.run(["scan", "--duration", "2", "--json", "--name", "beacon"])
        #expect(j.stdout.split(separator: "\n").count == 1, "\(j.stdout)")
        try expectGolden(normalized(j.stdout), "scan-fields.jsonl")
        // Passive: no scan requests, so neither the name nor what else the scan response carries.
        let p = try bench.run(["scan", "--duration", "1.5", "--passive", "--service", "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"])
        #expect(p.stdout.contains("manufacturer 0x004c (Apple): 02 15 aa bb") && !p.stdout.contains("Beacon1"), "\(p.stdout)")
    }
}
