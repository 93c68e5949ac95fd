// `ble receive`: a peripheral that publishes an L2CAP channel (its PSM in the CBUUIDL2CAPPSMCharacteristicString
// characteristic, as iOS apps do) and stores the files senders offer, through the Core Bluetooth API only.
// A file is written under a hidden partial name and appears under its final name only once its SHA-256
// checks; an existing file is never overwritten ("name (1).ext" instead); an interrupted transfer resumes.
import ArgumentParser
import Foundation
import Crypto
import CoreBluetooth

struct ReceiveCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "receive", abstract: "Receive files over an L2CAP channel (see `ble send`).")

    @Option(help: "Directory to store files in.")
    var dir: String = "."
    @Option(help: "The name to advertise.")
    var name: String = "ble receive"
    @Flag(help: "Require an encrypted link (senders pair first).")
    var encrypted = false
    @Flag(help: "Exit after one file.")
    var once = false

    func validate() throws {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dir, isDirectory: &isDir), isDir.boolValue else {
            throw ValidationError("--dir: \(dir) is not a directory")
        }
    }

    func run() throws {
        let receiver = FileReceiver(directory: URL(fileURLWithPath: dir), name: name, encrypted: encrypted, once: once)
        try receiver.start()
        dispatchMain()
    }
}

final class FileReceiver: NSObject, CBPeripheralManagerDelegate, @unchecked Sendable {
    let directory: URL
    let name: String
    let encrypted: Bool
    let once: Bool
    var manager: CBPeripheralManager!
    let streams = StreamThread.start(name: "ble.receive.streams")
    var sessions: [ReceiveSession] = []

    init(directory: URL, name: String, encrypted: Bool, once: Bool) {
        self.directory = directory
        self.name = name
        self.encrypted = encrypted
        self.once = once
    }

    /// Opens the controller first, so that one that cannot be opened fails with its reason.
    func start() throws {
        // BLE_TRANSPORT=bluez: through bluetoothd, the channel published on the kernel's L2CAP sockets.
        if let bluez = BlueZTool.options { return manager = CBPeripheralManager(delegate: self, queue: nil, options: nil, bluez: bluez) }
        manager = CBPeripheralManager(delegate: self, queue: nil, options: nil, host: try Controller.open(name: "receive"))
    }

    func peripheralManagerDidUpdateState(_ peripheral: CBPeripheralManager) {
        switch peripheral.state {
        case .poweredOn: peripheral.publishL2CAPChannel(withEncryption: encrypted)
        case .unsupported, .unauthorized:
            FileHandle.standardError.write(Data("ble receive: no usable Bluetooth controller (\(peripheral.state))\n".utf8))
            Foundation.exit(1)
        default: break
        }
    }

    func peripheralManager(_ peripheral: CBPeripheralManager, didPublishL2CAPChannel PSM: CBL2CAPPSM, error: (any Error)?) {
        if let error {
            FileHandle.standardError.write(Data("ble receive: cannot publish a channel: \(error.localizedDescription)\n".utf8))
            Foundation.exit(1)
        }
        let psm = CBMutableCharacteristic(
            type: CBUUID(string: CBUUIDL2CAPPSMCharacteristicString), properties: [.read],
            value: Data([UInt8(PSM & 0xFF), UInt8(PSM >> 8)]), permissions: [.readable])
        let service = CBMutableService(type: CBUUID(string: FileTransfer.serviceUUID), primary: true)
        service.characteristics = [psm]
        peripheral.add(service)
        print("receiving into \(directory.path) on PSM 0x\(String(PSM, radix: 16)) as \"\(name)\"")
        fflush(nil)
    }

    func peripheralManager(_ peripheral: CBPeripheralManager, didAdd service: CBService, error: (any Error)?) {
        peripheral.startAdvertising([CBAdvertisementDataLocalNameKey: name, CBAdvertisementDataServiceUUIDsKey: [service.uuid]])
    }

    func peripheralManager(_ peripheral: CBPeripheralManager, didOpen channel: CBL2CAPChannel?, error: (any Error)?) {
        guard let channel else { return }
        let session = ReceiveSession(channel: channel, directory: directory) { [weak self] s, stored in
            DispatchQueue.main.async {
                // Kept while --once waits for the channel's end (its events reach it).
                if !(stored && self?.once == true) { self?.sessions.removeAll { $0 === s } }
                // --once: the process ends when the sender, having read our result, closes the channel (the
                // session's end event). Not at once: on bluez the result still waits in the channel's stream for
                // the kernel socket, and exiting dropped it (cb-bluez-bluez: the sender waited for it for good);
                // a sender that never closes, 10 s later.
                if stored, self?.once == true { DispatchQueue.main.asyncAfter(deadline: .now() + 10) { Foundation.exit(0) } }
            }
        }
        session.exitWhenClosedAfterStoring = once
        sessions.append(session)
        streams.attach([channel.inputStream, channel.outputStream], delegate: session)
    }
}

/// One sender on one channel; runs on the stream thread.
final class ReceiveSession: NSObject, StreamDelegate, @unchecked Sendable {
    enum State { case offer, data, done }
    let channel: CBL2CAPChannel
    let directory: URL
    let finished: (ReceiveSession, Bool) -> Void
    var state = State.offer
    var buffer: [UInt8] = []
    var offer: FileTransfer.Offer?
    var part: URL?
    var file: FileHandle?
    var hasher = SHA256()
    var received: UInt64 = 0
    var progress: ProgressLine?
    var reply: [UInt8] = []
    /// --once: the channel's end after a stored file ends the process.
    var exitWhenClosedAfterStoring = false
    private var stored = false

    init(channel: CBL2CAPChannel, directory: URL, finished: @escaping (ReceiveSession, Bool) -> Void) {
        self.channel = channel
        self.directory = directory
        self.finished = finished
    }

    func stream(_ s: Stream, handle event: Stream.Event) {
        switch event {
        case .hasBytesAvailable:
            guard let input = s as? InputStream else { return }
            var chunk = [UInt8](repeating: 0, count: 64 * 1024)
            while input.hasBytesAvailable {
                let n = input.read(&chunk, maxLength: chunk.count)
                guard n > 0 else { break }
                take(chunk[0..<n])
                if state == .done { break }
            }
        case .hasSpaceAvailable:
            flush()
        case .endEncountered, .errorOccurred:
            if state == .done, stored, exitWhenClosedAfterStoring {
                fflush(nil)
                Foundation.exit(0)
            }
            if state != .done {
                try? file?.close()
                if let offer, received < offer.size {
                    progress?.finish()
                    print(
                        "interrupted at \(ProgressLine.bytes(received)) of \(ProgressLine.bytes(offer.size)); the partial file is kept and the next send of this file resumes there"
                    )
                }
                end(stored: false)
            }
        default:
            break
        }
    }

    func take(_ bytes: ArraySlice<UInt8>) {
        switch state {
        case .offer:
            buffer += bytes
            do {
                guard let (o, used) = try FileTransfer.Offer.decode(buffer) else { return }
                let rest = buffer[used...]
                buffer = []
                try begin(o)
                if !rest.isEmpty { take(rest) }
            } catch {
                print("refusing a sender: \(error)")
                end(stored: false)
            }
        case .data:
            guard let offer, let file else { return }
            let room = Int(min(UInt64(bytes.count), offer.size - received))
            guard room == bytes.count else {
                print("the sender sent more than the file's size; closing")
                return end(stored: false)
            }
            let d = Data(bytes)
            do { try file.write(contentsOf: d) } catch {
                print("cannot write \(part?.path ?? ""): \(error)")
                send(FileTransfer.result(2))
                return end(stored: false)
            }
            hasher.update(data: d)
            received += UInt64(bytes.count)
            progress?.update(received)
            if received == offer.size { complete() }
        case .done:
            break
        }
    }

    func begin(_ o: FileTransfer.Offer) throws {
        offer = o
        let name = FileTransfer.safeName(o.name)
        let partURL = directory.appendingPathComponent(".\(name).\(FileTransfer.hex(o.sha256.prefix(8))).part")
        part = partURL
        // Resume: a partial file from an earlier attempt of the same content continues where it stopped.
        var offset: UInt64 = 0
        if FileManager.default.fileExists(atPath: partURL.path) {
            let (h, n) = try FileTransfer.sha256(of: partURL, upTo: o.size)
            hasher = h
            offset = n
            if let handle = try? FileHandle(forWritingTo: partURL) { try handle.truncate(atOffset: n); try handle.close() }
        } else {
            guard FileManager.default.createFile(atPath: partURL.path, contents: nil) else {
                send(FileTransfer.result(2))
                throw FileTransferError.failed("cannot create \(partURL.path)")
            }
        }
        file = try FileHandle(forWritingTo: partURL)
        try file?.seekToEnd()
        received = offset
        state = .data
        print(
            offset > 0
                ? "receiving \(name) (\(ProgressLine.bytes(o.size))), resuming at \(ProgressLine.bytes(offset))"
                : "receiving \(name) (\(ProgressLine.bytes(o.size)))")
        progress = ProgressLine(label: name, total: o.size)
        progress?.startOffset = offset
        send(FileTransfer.accept(offset: offset))
        if received == o.size { complete() }
    }

    func complete() {
        guard let offer, let part else { return }
        try? file?.close()
        file = nil
        progress?.update(received, force: true)
        progress?.finish()
        let digest = Array(hasher.finalize())
        guard digest == offer.sha256 else {
            print("SHA-256 mismatch for \(offer.name): the file is discarded")
            try? FileManager.default.removeItem(at: part)
            send(FileTransfer.result(1))
            return end(stored: false)
        }
        // Never overwrite: link the partial file to the first free name, then drop the partial name.
        let name = FileTransfer.safeName(offer.name)
        let base = (name as NSString).deletingPathExtension, ext = (name as NSString).pathExtension
        var n = 0
        while true {
            let candidate = n == 0 ? name : "\(base) (\(n))" + (ext.isEmpty ? "" : ".\(ext)")
            let target = directory.appendingPathComponent(candidate)
            if link(part.path, target.path) == 0 {
                unlink(part.path)
                print("stored \(target.path) (SHA-256 \(FileTransfer.hex(digest)))")
                break
            }
            guard errno == EEXIST, n < 10_000 else {
                print("cannot store \(target.path): \(String(cString: strerror(errno)))")
                send(FileTransfer.result(2))
                return end(stored: false)
            }
            n += 1
        }
        fflush(nil)
        send(FileTransfer.result(0))
        end(stored: true)
    }

    func send(_ bytes: [UInt8]) {
        reply += bytes
        flush()
    }

    func flush() {
        guard let out = channel.outputStream, !reply.isEmpty else { return }
        let n = reply.withUnsafeBufferPointer { out.write($0.baseAddress!, maxLength: $0.count) }
        if n > 0 { reply.removeFirst(n) }
    }

    func end(stored: Bool) {
        guard state != .done else { return }
        state = .done
        self.stored = stored
        try? file?.close()
        fflush(nil)
        finished(self, stored)
    }
}
