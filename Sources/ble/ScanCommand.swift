// `ble scan`: lists advertisers with their decoded advertisement data, through the Core Bluetooth API.
import ArgumentParser
import Foundation
import CoreBluetooth

struct ScanCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "scan", abstract: "Scan and print advertisers.")

    @Option(help: "Seconds to scan.")
    var duration: Double = 5

    @Option(help: "Only devices advertising this service UUID.")
    var service: String?

    @Flag(help: "Report every advertisement, not just the first per device.")
    var duplicates = false

    func run() throws {
        var filter: [CBUUID]?
        if let service {
            guard CBUUID.bluetoothUUID(parsing: service) != nil else { throw ValidationError("not a UUID: \(service)") }
            filter = [CBUUID(string: service)]
        }
        let scanner = Scanner(filter: filter, duplicates: duplicates)
        scanner.start()
        DispatchQueue.main.asyncAfter(deadline: .now() + duration) {
            print("\(scanner.count) advertisement(s) from \(scanner.devices.count) device(s)")
            Foundation.exit(0)
        }
        dispatchMain()
    }
}

private final class Scanner: NSObject, CBCentralManagerDelegate, @unchecked Sendable {
    let filter: [CBUUID]?
    let duplicates: Bool
    var manager: CBCentralManager!
    var devices = Set<UUID>()
    var count = 0

    init(filter: [CBUUID]?, duplicates: Bool) {
        self.filter = filter
        self.duplicates = duplicates
    }

    func start() { manager = CBCentralManager(delegate: self, queue: nil) }

    func centralManagerDidUpdateState(_ central: CBCentralManager) {
        print("state \(central.state.name)")
        guard central.state == .poweredOn else { return }
        central.scanForPeripherals(withServices: filter, options: [CBCentralManagerScanOptionAllowDuplicatesKey: duplicates])
    }

    func centralManager(_ central: CBCentralManager, didDiscover peripheral: CBPeripheral,
                        advertisementData: [String: Any], rssi RSSI: NSNumber) {
        count += 1
        devices.insert(peripheral.identifier)
        let fields = advertisementData.keys.sorted().map { "\($0)=\(describe(advertisementData[$0]!))" }.joined(separator: " ")
        print("\(peripheral.identifier.uuidString) \(peripheral.name ?? "-") rssi=\(RSSI) \(fields)")
        fflush(nil)
    }
}
