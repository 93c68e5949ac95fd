// A peripheral with a huge database must not make the central hold unbounded state or stall: discovery
// merges in linear time, and past the caps it fails with CBError.outOfSpace the app sees.
import Foundation
import Testing
import CoreBluetooth
import BLEWire
import BLEGATT
import BLEHost

final class LargeDBCentral: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate, @unchecked Sendable {
    var air: TestAir?
    let queue = DispatchQueue(label: "large.db")
    var manager: CBCentralManager!
    var peripheral: CBPeripheral?
    var servicesResult: (count: Int, error: Error?)?
    var characteristicsResult: (count: Int, error: Error?)?
    func centralManagerDidUpdateState(_ c: CBCentralManager) { if c.state == .poweredOn { c.scanForPeripherals(withServices: nil) } }
    func centralManager(_ c: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
        guard peripheral == nil, advertisementData[CBAdvertisementDataLocalNameKey] as? String == "BIG" else { return }
        peripheral = p
        c.stopScan()
        c.connect(p)
    }
    func centralManager(_ c: CBCentralManager, didConnect p: CBPeripheral) { p.delegate = self; p.discoverServices(nil) }
    func peripheral(_ p: CBPeripheral, didDiscoverServices error: Error?) {
        servicesResult = (p.services?.count ?? 0, error)
        if let s = p.services?.last { p.discoverCharacteristics(nil, for: s) }
    }
    func peripheral(_ p: CBPeripheral, didDiscoverCharacteristicsFor s: CBService, error: Error?) {
        characteristicsResult = (s.characteristics?.count ?? 0, error)
    }
}

@Suite(.serialized) struct LargeDatabaseTests {
    func run(services: Int, characteristicsInLast: Int) async throws -> LargeDBCentral {
        let air = TestAir()
        let big = try advertiser(air, name: "big", data: ad("BIG"))
        try big.loop.sync {
            for i in 0..<services - 1 {
                _ = try big.addService(GATTServiceDefinition(uuid: BluetoothUUID(UInt16(0x2000 + i % 0x1000)), characteristics: []))
            }
            let chars = (0..<characteristicsInLast).map { i in
                GATTCharacteristicDefinition(uuid: BluetoothUUID(UInt16(0x3000 + i % 0x1000)), properties: [.read], permissions: .readable, value: [1])
            }
            _ = try big.addService(GATTServiceDefinition(uuid: BluetoothUUID(0xABCD), characteristics: chars))
            big.startAdvertising(AdvertisingConfiguration(data: ad("BIG"), interval: 0x20))
        }
        let c = LargeDBCentral()
        c.air = air
        c.manager = CBCentralManager(delegate: c, queue: c.queue, options: nil, host: try air.host("c"))
        return c
    }

    @Test func aThousandServicesAreFineAndMore() async throws {
        // 1,000 services plus the two default ones: discovered, merged once each.
        let c = try await run(services: 1000, characteristicsInLast: 10)
        try await waitUntil("characteristics", seconds: 30) { c.queue.sync { c.characteristicsResult != nil } }
        #expect(c.queue.sync { c.servicesResult?.count } == 1002)
        #expect(c.queue.sync { c.servicesResult?.error == nil && c.characteristicsResult?.count == 10 })
    }

    @Test func tooManyServicesFailWithOutOfSpace() async throws {
        let c = try await run(services: 3000, characteristicsInLast: 1)
        try await waitUntil("services", seconds: 30) { c.queue.sync { c.servicesResult != nil } }
        let e = try #require(c.queue.sync { c.servicesResult?.error })
        #expect((e as? CBError)?.code == .outOfSpace)
        #expect(c.queue.sync { c.servicesResult?.count } == 0)
    }

    @Test func tooManyCharacteristicsFailWithOutOfSpace() async throws {
        let c = try await run(services: 1, characteristicsInLast: 5000)
        try await waitUntil("characteristics", seconds: 30) { c.queue.sync { c.characteristicsResult != nil } }
        let e = try #require(c.queue.sync { c.characteristicsResult?.error })
        #expect((e as? CBError)?.code == .outOfSpace)
    }
}
