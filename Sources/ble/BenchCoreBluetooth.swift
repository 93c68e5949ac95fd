// `ble bench --api corebluetooth --mode notify`: the same notification stream measured end to end through
// the Core Bluetooth API — CBPeripheralManager.updateValue on one side, the CBPeripheralDelegate's
// didUpdateValueFor on the other — on the virtual radio in one process.
import Foundation
import CoreBluetooth
import BLEHost
import BLETransport
import BLEVirtualRadio

final class CoreBluetoothNotifyBench: NSObject, CBPeripheralManagerDelegate, CBCentralManagerDelegate, CBPeripheralDelegate, @unchecked Sendable {
    let size: Int, count: Int
    let air = VirtualAir(loop: EventLoop(label: "bench.cb", clock: .real))
    let pq = DispatchQueue(label: "bench.peripheral"), cq = DispatchQueue(label: "bench.central")
    var pm: CBPeripheralManager!, cm: CBCentralManager!
    var characteristic: CBMutableCharacteristic!
    var peripheral: CBPeripheral?
    var sent = 0, received = 0, bytes = 0
    var start = 0.0, end = 0.0, cpuStart = 0.0
    let done = DispatchSemaphore(value: 0)
    let payload: Data
    let meter = BenchMeter()
    var startSnapshot: BenchMeter.Snapshot?, endSnapshot: BenchMeter.Snapshot?
    let uuid = CBUUID(string: "016A2CC7-E14B-4819-935F-1F56EAE4098D")   // bumble-bench's RX (notify) characteristic

    init(size: Int, count: Int) {
        self.size = size; self.count = count
        payload = Data((0..<size).map { UInt8($0 & 0xFF) })
    }

    func run() throws -> BenchResult {
        pm = CBPeripheralManager(delegate: self, queue: pq, options: nil, host: try HostFactory.makeHost(on: air, name: "p"))
        cm = CBCentralManager(delegate: self, queue: cq, options: nil, host: try HostFactory.makeHost(on: air, name: "c"))
        done.wait()
        let cost = cq.sync { startSnapshot.flatMap { a in endSnapshot.map { BenchMeter.cost(from: a, to: $0) } } }
        return BenchResult(
            mode: "notify (Core Bluetooth)", bytes: bytes, packets: received, seconds: end - start,
            cpuSeconds: cost?.cpu ?? 0, rtts: [], cost: cost)
    }

    func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    func peripheralManagerDidUpdateState(_ p: CBPeripheralManager) {
        guard p.state == .poweredOn else { return }
        characteristic = CBMutableCharacteristic(type: uuid, properties: [.notify], value: nil, permissions: [])
        let s = CBMutableService(type: CBUUID(string: "50DB505C-8AC4-4738-8448-3B1D9CC09CC5"), primary: true)
        s.characteristics = [characteristic]
        p.add(s)
        p.startAdvertising([CBAdvertisementDataLocalNameKey: "bench"])
    }

    func peripheralManager(_ p: CBPeripheralManager, central: CBCentral, didSubscribeTo c: CBCharacteristic) {
        start = now(); cpuStart = cpuSeconds()
        let snapshot = meter.snapshot()
        cq.sync { startSnapshot = snapshot }
        pump()
    }

    func peripheralManagerIsReady(toUpdateSubscribers p: CBPeripheralManager) { pump() }

    func pump() {
        while sent < count {
            guard pm.updateValue(payload, for: characteristic, onSubscribedCentrals: nil) else { return }
            sent += 1
        }
    }

    func centralManagerDidUpdateState(_ c: CBCentralManager) { if c.state == .poweredOn { c.scanForPeripherals(withServices: nil) } }
    func centralManager(_ c: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
        guard peripheral == nil, advertisementData[CBAdvertisementDataLocalNameKey] as? String == "bench" else { return }
        peripheral = p
        c.stopScan()
        c.connect(p)
    }
    func centralManager(_ c: CBCentralManager, didConnect p: CBPeripheral) { p.delegate = self; p.discoverServices(nil) }
    func peripheral(_ p: CBPeripheral, didDiscoverServices error: Error?) {
        for s in p.services ?? [] where s.uuid == CBUUID(string: "50DB505C-8AC4-4738-8448-3B1D9CC09CC5") { p.discoverCharacteristics(nil, for: s) }
    }
    func peripheral(_ p: CBPeripheral, didDiscoverCharacteristicsFor s: CBService, error: Error?) {
        if let c = s.characteristics?.first(where: { $0.uuid == uuid }) { p.setNotifyValue(true, for: c) }
    }
    func peripheral(_ p: CBPeripheral, didUpdateValueFor c: CBCharacteristic, error: Error?) {
        received += 1
        bytes += c.value?.count ?? 0
        if received == count { end = now(); endSnapshot = meter.snapshot(); done.signal() }
    }
}
