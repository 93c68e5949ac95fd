// `ble bench --api corebluetooth --mode l2cap`: bytes written into a CBL2CAPChannel's output stream on the
// central and read from the peripheral's input stream, end to end through the Core Bluetooth API on the
// virtual radio in one process. The peripheral publishes a channel and its PSM characteristic
// (CBUUIDL2CAPPSMCharacteristicString), the central reads it and opens the channel, as apps do; both ends'
// streams are scheduled on run loops of their own threads. The clock starts when the central's channel
// opens and stops when the reader has read every byte.
//
// Threading: the managers' delegates run on their queues; the writer's stream events on one StreamThread,
// the reader's on another; the counters each belong to the thread that touches them, and `done` hands the
// end time over.
import Foundation
import CoreBluetooth
import BLEHost
import BLETransport
import BLEVirtualRadio

final class CoreBluetoothL2CAPBench: NSObject, CBPeripheralManagerDelegate, CBCentralManagerDelegate, CBPeripheralDelegate,
    StreamDelegate, @unchecked Sendable
{
    let writeSize: Int, count: Int, aclBuffer: Int
    var total: Int { writeSize * count }
    let air = VirtualAir(loop: EventLoop(label: "bench.cb.l2cap", clock: .real))
    let pq = DispatchQueue(label: "bench.peripheral"), cq = DispatchQueue(label: "bench.central")
    let writerThread = StreamThread.start(name: "bench.writer")
    let readerThread: StreamThread
    var pm: CBPeripheralManager!, cm: CBCentralManager!
    var peripheral: CBPeripheral?
    /// Both ends, held strongly: releasing a CBL2CAPChannel closes it.
    var sending: CBL2CAPChannel?, receiving: CBL2CAPChannel?
    var written = 0, read = 0, reads = 0
    var start = 0.0, end = 0.0, cpuStart = 0.0
    let done = DispatchSemaphore(value: 0)
    let payload: [UInt8]
    var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)
    var failure: String?
    let service = CBUUID(string: "0000FEED-0000-1000-8000-00805F9B34FB")
    let name = "bench-l2cap"

    /// `sharedThread`: both ends' streams on one run loop thread (fewer threads than cores) instead of two.
    init(writeSize: Int, count: Int, aclBuffer: Int, sharedThread: Bool = false) {
        self.writeSize = writeSize; self.count = count; self.aclBuffer = aclBuffer
        payload = (0..<writeSize).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        readerThread = sharedThread ? writerThread : StreamThread.start(name: "bench.reader")
    }

    func run() throws -> BenchResult {
        let p = try HostFactory.makeHost(on: air, name: "p"), c = try HostFactory.makeHost(on: air, name: "c")
        // Before power-on, which reads the controller's buffer size.
        for h in [p, c] { (h.transport as? VirtualController)?.aclBufferSize = UInt16(aclBuffer) }
        pm = CBPeripheralManager(delegate: self, queue: pq, options: nil, host: p)
        cm = CBCentralManager(delegate: self, queue: cq, options: nil, host: c)
        guard done.wait(timeout: .now() + 600) == .success else { throw BenchError("timed out after reading \(read) of \(total) bytes") }
        if let failure { throw BenchError(failure) }
        let cpu = cpuSeconds() - cpuStart
        return BenchResult(mode: "l2cap (Core Bluetooth streams)", bytes: read, packets: reads, seconds: end - start, cpuSeconds: cpu, rtts: [])
    }

    func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    func fail(_ why: String) {
        failure = why
        done.signal()
    }

    // MARK: Peripheral: publish, show the PSM, advertise, accept.

    func peripheralManagerDidUpdateState(_ p: CBPeripheralManager) {
        if p.state == .poweredOn { p.publishL2CAPChannel(withEncryption: false) }
    }

    func peripheralManager(_ p: CBPeripheralManager, didPublishL2CAPChannel PSM: CBL2CAPPSM, error: Error?) {
        if let error { return fail("publish failed: \(error)") }
        let c = CBMutableCharacteristic(
            type: CBUUID(string: CBUUIDL2CAPPSMCharacteristicString), properties: [.read],
            value: Data([UInt8(PSM & 0xFF), UInt8(PSM >> 8)]), permissions: [.readable])
        let s = CBMutableService(type: service, primary: true)
        s.characteristics = [c]
        p.add(s)
        p.startAdvertising([CBAdvertisementDataLocalNameKey: name])
    }

    func peripheralManager(_ p: CBPeripheralManager, didOpen channel: CBL2CAPChannel?, error: Error?) {
        guard let channel else { return fail("the peripheral's end did not open: \(String(describing: error))") }
        receiving = channel
        readerThread.attach([channel.inputStream], delegate: self)
    }

    // MARK: Central: find, connect, read the PSM, open.

    func centralManagerDidUpdateState(_ c: CBCentralManager) { if c.state == .poweredOn { c.scanForPeripherals(withServices: nil) } }

    func centralManager(_ c: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
        guard peripheral == nil, advertisementData[CBAdvertisementDataLocalNameKey] as? String == name else { return }
        peripheral = p
        c.stopScan()
        c.connect(p)
    }

    func centralManager(_ c: CBCentralManager, didConnect p: CBPeripheral) {
        p.delegate = self
        p.discoverServices([service])
    }

    func centralManager(_ c: CBCentralManager, didFailToConnect p: CBPeripheral, error: Error?) { fail("connection failed: \(String(describing: error))") }

    func peripheral(_ p: CBPeripheral, didDiscoverServices error: Error?) {
        guard let s = p.services?.first(where: { $0.uuid == service }) else { return fail("no service") }
        p.discoverCharacteristics([CBUUID(string: CBUUIDL2CAPPSMCharacteristicString)], for: s)
    }

    func peripheral(_ p: CBPeripheral, didDiscoverCharacteristicsFor s: CBService, error: Error?) {
        guard let c = s.characteristics?.first else { return fail("no PSM characteristic") }
        p.readValue(for: c)
    }

    func peripheral(_ p: CBPeripheral, didUpdateValueFor c: CBCharacteristic, error: Error?) {
        guard let v = c.value, v.count == 2 else { return fail("bad PSM value") }
        p.openL2CAPChannel(CBL2CAPPSM(v[v.startIndex]) | CBL2CAPPSM(v[v.startIndex + 1]) << 8)
    }

    func peripheral(_ p: CBPeripheral, didOpen channel: CBL2CAPChannel?, error: Error?) {
        guard let channel else { return fail("openL2CAPChannel failed: \(String(describing: error))") }
        sending = channel
        start = now(); cpuStart = cpuSeconds()
        writerThread.attach([channel.outputStream], delegate: self)
    }

    // MARK: The streams (on the stream threads).

    func stream(_ s: Stream, handle e: Stream.Event) {
        switch e {
        case .hasSpaceAvailable:
            guard let o = s as? OutputStream else { return }
            while written < total {
                // Each write continues the payload where the last (possibly partial) one stopped.
                let offset = written % writeSize
                let n = payload.withUnsafeBufferPointer { o.write($0.baseAddress! + offset, maxLength: min(writeSize - offset, total - written)) }
                if n <= 0 { return }
                written += n
            }
        case .hasBytesAvailable:
            guard let i = s as? InputStream else { return }
            while i.hasBytesAvailable {
                let n = i.read(&readBuffer, maxLength: readBuffer.count)
                guard n > 0 else { break }
                read += n
                reads += 1
            }
            if read >= total, end == 0 {
                end = now()
                done.signal()
            }
        case .errorOccurred:
            fail("stream error: \(String(describing: s.streamError))")
        case .endEncountered:
            if read < total { fail("the channel ended after \(read) of \(total) bytes") }
        default:
            break
        }
    }
}
