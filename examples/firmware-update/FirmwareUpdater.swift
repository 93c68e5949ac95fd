// The updater side of the firmware-update example: a CBCentralManager that finds a device advertising the
// update service, subscribes to its control point, announces the image (START with its size and SHA-256),
// sends it — over an L2CAP channel when the device shows a PSM, else in Write Commands paced by
// `canSendWriteWithoutResponse` and `peripheralIsReady(toSendWriteWithoutResponse:)` — waits for the device
// to verify it, and APPLYs it. Every status indication is kept in `statuses`.
//
// Threading: the manager's and the peripheral's delegate calls run on `queue`; the channel's output stream
// events run on `streams`, which owns the L2CAP write position.
import Foundation
import CoreBluetooth
#if canImport(CryptoKit)
import CryptoKit
#else
import Crypto
#endif

final class FirmwareUpdater: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate, StreamDelegate, @unchecked Sendable {
    enum Path: String { case l2cap, writeWithoutResponse }
    enum Outcome: Equatable, Sendable { case applied(Path), failed(String) }

    let image: Data
    let deviceName: String
    let queue = DispatchQueue(label: "firmware.updater")
    let streams = StreamRunLoop(name: "firmware.updater.streams")
    var manager: CBCentralManager!
    private var device: CBPeripheral?
    private var controlPoint: CBCharacteristic?
    private var dataCharacteristic: CBCharacteristic?
    private var psm: CBL2CAPPSM?
    private var channel: CBL2CAPChannel?
    /// Bytes of the image sent so far over GATT (on `queue`) or written into the channel (on `streams`).
    private var gattOffset = 0
    private var streamOffset = 0
    private(set) var path: Path?
    /// The device's status indications, in order (read on `queue`).
    private(set) var statuses: [UpdateStatus] = []
    /// Called once on `queue` when the update ends.
    var onFinish: ((Outcome) -> Void)?
    private var finished = false

    init(image: Data, deviceName: String) {
        self.image = image
        self.deviceName = deviceName
        super.init()
        // Made on `queue`, so the first delegate call (also on `queue`) finds `manager` set.
        queue.sync { manager = CBCentralManager(delegate: self, queue: queue) }
    }

    func stop() {
        queue.sync {
            manager.stopScan()
            channel = nil
            if let device { manager.cancelPeripheralConnection(device) }
        }
        streams.stop()
    }

    private func finish(_ o: Outcome) {
        guard !finished else { return }
        finished = true
        onFinish?(o)
    }

    // MARK: Finding the device

    func centralManagerDidUpdateState(_ c: CBCentralManager) {
        if c.state == .poweredOn { c.scanForPeripherals(withServices: [UpdateService.service]) }
    }

    func centralManager(_ c: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi: NSNumber) {
        guard device == nil, advertisementData[CBAdvertisementDataLocalNameKey] as? String == deviceName else { return }
        device = p
        c.stopScan()
        c.connect(p)
    }

    func centralManager(_ c: CBCentralManager, didConnect p: CBPeripheral) {
        p.delegate = self
        p.discoverServices([UpdateService.service])
    }

    func centralManager(_ c: CBCentralManager, didFailToConnect p: CBPeripheral, error: Error?) {
        finish(.failed("could not connect: \(String(describing: error))"))
    }

    func centralManager(_ c: CBCentralManager, didDisconnectPeripheral p: CBPeripheral, error: Error?) {
        finish(.failed("disconnected: \(String(describing: error))"))
    }

    func peripheral(_ p: CBPeripheral, didDiscoverServices error: Error?) {
        guard let s = p.services?.first(where: { $0.uuid == UpdateService.service }) else { return finish(.failed("no update service")) }
        p.discoverCharacteristics([UpdateService.controlPoint, UpdateService.data, UpdateService.psm], for: s)
    }

    func peripheral(_ p: CBPeripheral, didDiscoverCharacteristicsFor s: CBService, error: Error?) {
        let cs = s.characteristics ?? []
        controlPoint = cs.first { $0.uuid == UpdateService.controlPoint }
        dataCharacteristic = cs.first { $0.uuid == UpdateService.data }
        guard let controlPoint else { return finish(.failed("no control point")) }
        if let psmCharacteristic = cs.first(where: { $0.uuid == UpdateService.psm }) {
            // The PSM first; subscribing follows its read.
            p.readValue(for: psmCharacteristic)
        } else {
            p.setNotifyValue(true, for: controlPoint)
        }
    }

    func peripheral(_ p: CBPeripheral, didUpdateNotificationStateFor c: CBCharacteristic, error: Error?) {
        guard c.uuid == UpdateService.controlPoint, error == nil, c.isNotifying else { return finish(.failed("cannot subscribe: \(String(describing: error))")) }
        let hash = Data(SHA256.hash(data: image))
        p.writeValue(UpdateCommand.start(size: image.count, sha256: hash).bytes, for: c, type: .withResponse)
    }

    func peripheral(_ p: CBPeripheral, didWriteValueFor c: CBCharacteristic, error: Error?) {
        if let error { finish(.failed("control point write failed: \(error)")) }
    }

    // MARK: Status from the device

    func peripheral(_ p: CBPeripheral, didUpdateValueFor c: CBCharacteristic, error: Error?) {
        if c.uuid == UpdateService.psm {
            if let v = c.value, v.count == 2 { psm = CBL2CAPPSM(v[v.startIndex]) | CBL2CAPPSM(v[v.startIndex + 1]) << 8 }
            if let controlPoint { p.setNotifyValue(true, for: controlPoint) }
            return
        }
        guard c.uuid == UpdateService.controlPoint, let v = c.value, let status = UpdateStatus(v) else { return }
        statuses.append(status)
        switch status {
        case .response(0x01, UpdateStatus.success):
            sendImage(to: p)
        case .response(0x02, UpdateStatus.success):
            finish(.applied(path!))
        case let .response(command, result):
            finish(.failed("command \(command) failed with \(result)"))
        case .verified(UpdateStatus.success):
            p.writeValue(UpdateCommand.apply.bytes, for: c, type: .withResponse)
        case .verified:
            finish(.failed("the device rejected the image"))
        case .progress:
            break
        }
    }

    private func sendImage(to p: CBPeripheral) {
        if let psm {
            path = .l2cap
            p.openL2CAPChannel(psm)
        } else {
            path = .writeWithoutResponse
            pumpWrites(p)
        }
    }

    // MARK: The image in Write Commands

    private func pumpWrites(_ p: CBPeripheral) {
        guard let dataCharacteristic else { return finish(.failed("no data characteristic")) }
        let chunk = p.maximumWriteValueLength(for: .withoutResponse)
        while gattOffset < image.count, p.canSendWriteWithoutResponse {
            let end = min(image.count, gattOffset + chunk)
            p.writeValue(image.subdata(in: gattOffset..<end), for: dataCharacteristic, type: .withoutResponse)
            gattOffset = end
        }
    }

    func peripheralIsReady(toSendWriteWithoutResponse p: CBPeripheral) {
        if path == .writeWithoutResponse { pumpWrites(p) }
    }

    // MARK: The image over L2CAP

    func peripheral(_ p: CBPeripheral, didOpen channel: CBL2CAPChannel?, error: Error?) {
        guard let channel else {
            // The device published a PSM but refused the channel: fall back to GATT.
            path = .writeWithoutResponse
            return pumpWrites(p)
        }
        self.channel = channel
        streams.attach(channel.outputStream, delegate: self)
    }

    func stream(_ s: Stream, handle e: Stream.Event) {
        guard e == .hasSpaceAvailable, let output = s as? OutputStream else { return }
        while streamOffset < image.count {
            let n = image.withUnsafeBytes { raw in
                output.write(raw.bindMemory(to: UInt8.self).baseAddress! + streamOffset, maxLength: image.count - streamOffset)
            }
            // 0: full; .hasSpaceAvailable follows when the device has read some.
            guard n > 0 else { return }
            streamOffset += n
        }
    }
}
