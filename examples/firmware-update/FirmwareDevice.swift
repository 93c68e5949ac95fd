// The device side of the firmware-update example: a CBPeripheralManager offering the update service
// (UpdateProtocol.swift). With `offersL2CAP` it publishes an L2CAP channel and shows its PSM in the
// CBUUIDL2CAPPSMCharacteristicString characteristic; the image then arrives in the channel's input stream.
// Without it, the image arrives in Write Commands on the data characteristic.
//
// Threading: the manager's delegate calls run on `queue`, and so does everything that touches the update's
// state; the channel's stream events run on `streams` and hand the bytes over to `queue`.
import Foundation
import CoreBluetooth
#if canImport(CryptoKit)
import CryptoKit
#else
import Crypto
#endif

final class FirmwareDevice: NSObject, CBPeripheralManagerDelegate, StreamDelegate, @unchecked Sendable {
    let name: String
    let offersL2CAP: Bool
    let queue = DispatchQueue(label: "firmware.device")
    let streams = StreamRunLoop(name: "firmware.device.streams")
    var manager: CBPeripheralManager!
    private var controlPoint: CBMutableCharacteristic!
    private var channel: CBL2CAPChannel?

    /// The update in progress: what START announced and what has arrived.
    private var expectedSize = 0
    private var expectedHash = Data()
    private var image = Data()
    private var reported = 0
    private var verified = false
    /// Status indications waiting for room in the manager's queue.
    private var pending: [UpdateStatus] = []

    /// The image installed by APPLY (read on `queue`).
    private(set) var installed: Data?
    /// Called on `queue` once an image is installed.
    var onInstalled: ((Data) -> Void)?

    init(name: String, offersL2CAP: Bool) {
        self.name = name
        self.offersL2CAP = offersL2CAP
        super.init()
        // Made on `queue`, so the first delegate call (also on `queue`) finds `manager` set.
        queue.sync { manager = CBPeripheralManager(delegate: self, queue: queue) }
    }

    func stop() {
        queue.sync {
            manager.stopAdvertising()
            channel = nil
        }
        streams.stop()
    }

    func peripheralManagerDidUpdateState(_ p: CBPeripheralManager) {
        guard p.state == .poweredOn else { return }
        if offersL2CAP { p.publishL2CAPChannel(withEncryption: false) } else { addService(psm: nil) }
    }

    func peripheralManager(_ p: CBPeripheralManager, didPublishL2CAPChannel PSM: CBL2CAPPSM, error: Error?) {
        // A device that cannot publish still updates, over the data characteristic.
        addService(psm: error == nil ? PSM : nil)
    }

    private func addService(psm: CBL2CAPPSM?) {
        controlPoint = CBMutableCharacteristic(type: UpdateService.controlPoint, properties: [.write, .indicate], value: nil, permissions: [.writeable])
        let data = CBMutableCharacteristic(type: UpdateService.data, properties: [.writeWithoutResponse], value: nil, permissions: [.writeable])
        var characteristics = [controlPoint!, data]
        if let psm {
            characteristics.append(
                CBMutableCharacteristic(
                    type: UpdateService.psm, properties: [.read],
                    value: Data([UInt8(psm & 0xFF), UInt8(psm >> 8)]), permissions: [.readable]))
        }
        let service = CBMutableService(type: UpdateService.service, primary: true)
        service.characteristics = characteristics
        manager.add(service)
    }

    func peripheralManager(_ p: CBPeripheralManager, didAdd service: CBService, error: Error?) {
        p.startAdvertising([CBAdvertisementDataLocalNameKey: name, CBAdvertisementDataServiceUUIDsKey: [UpdateService.service]])
    }

    // MARK: Commands and image data over GATT

    func peripheralManager(_ p: CBPeripheralManager, didReceiveWrite requests: [CBATTRequest]) {
        for r in requests where r.characteristic.uuid == UpdateService.data {
            if let v = r.value { imageArrived(v) }
        }
        guard let first = requests.first, first.characteristic.uuid == UpdateService.controlPoint else { return }
        // The write is accepted as ATT; the command's own result follows as an indication.
        p.respond(to: first, withResult: .success)
        for r in requests where r.characteristic.uuid == UpdateService.controlPoint {
            guard let v = r.value, let command = UpdateCommand(v) else {
                indicate(.response(command: r.value?.first ?? 0, result: UpdateStatus.badCommand))
                continue
            }
            perform(command)
        }
    }

    private func perform(_ command: UpdateCommand) {
        switch command {
        case let .start(size, sha256):
            guard size > 0, size <= 16 * 1024 * 1024 else { return indicate(.response(command: command.opcode, result: UpdateStatus.tooLarge)) }
            expectedSize = size
            expectedHash = sha256
            image = Data(capacity: size)
            reported = 0
            verified = false
            indicate(.response(command: command.opcode, result: UpdateStatus.success))
        case .apply:
            guard verified else { return indicate(.response(command: command.opcode, result: UpdateStatus.badState)) }
            installed = image
            indicate(.response(command: command.opcode, result: UpdateStatus.success))
            onInstalled?(image)
        case .abort:
            expectedSize = 0
            image = Data()
            verified = false
            indicate(.response(command: command.opcode, result: UpdateStatus.success))
        }
    }

    /// Image bytes from either path, on `queue`.
    private func imageArrived(_ bytes: Data) {
        guard expectedSize > 0, image.count + bytes.count <= expectedSize else { return }
        image.append(bytes)
        let percent = image.count * 100 / expectedSize
        while reported + 25 <= percent {
            reported += 25
            indicate(.progress(percent: UInt8(reported)))
        }
        if image.count == expectedSize {
            let ok = Data(SHA256.hash(data: image)) == expectedHash
            verified = ok
            indicate(.verified(result: ok ? UpdateStatus.success : UpdateStatus.hashMismatch))
        }
    }

    private func indicate(_ s: UpdateStatus) {
        pending.append(s)
        flushIndications()
    }

    private func flushIndications() {
        while let s = pending.first {
            guard manager.updateValue(s.bytes, for: controlPoint, onSubscribedCentrals: nil) else { return }
            pending.removeFirst()
        }
    }

    func peripheralManagerIsReady(toUpdateSubscribers p: CBPeripheralManager) { flushIndications() }

    // MARK: Image data over L2CAP

    func peripheralManager(_ p: CBPeripheralManager, didOpen channel: CBL2CAPChannel?, error: Error?) {
        guard let channel else { return }
        self.channel = channel
        streams.attach(channel.inputStream, delegate: self)
    }

    func stream(_ s: Stream, handle e: Stream.Event) {
        guard e == .hasBytesAvailable, let input = s as? InputStream else { return }
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while input.hasBytesAvailable {
            let n = input.read(&buffer, maxLength: buffer.count)
            guard n > 0 else { break }
            let bytes = Data(buffer[0..<n])
            queue.async { [self] in imageArrived(bytes) }
        }
    }
}
