// `ble send FILE --to ADDRESS|NAME`: finds a `ble receive` peripheral, reads the PSM from its
// CBUUIDL2CAPPSMCharacteristicString characteristic, opens an L2CAP channel and sends the file with a
// progress line; the receiver checks the SHA-256. A link lost mid-transfer is reconnected and the transfer
// resumes where the receiver stopped. Core Bluetooth API only (the tool opens the controller first, to fail
// with its reason).
import ArgumentParser
import Foundation
import CoreBluetooth

struct SendCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "send", abstract: "Send a file over an L2CAP channel to `ble receive`.")

    @Argument(help: "The file to send.")
    var file: String
    @Option(help: "The receiver: its address (AA:BB:CC:DD:EE:FF) or advertised name; default the first receiver found.")
    var to: String?
    @Option(help: "Seconds to look for the receiver.")
    var timeout: Double = 15
    @Option(help: "Reconnections tried after a lost link before giving up.")
    var retries = 3

    func run() throws {
        let url = URL(fileURLWithPath: file)
        try checkReadableFile(file)
        let (hasher, size) = try FileTransfer.sha256(of: url)
        let sender = FileSender(url: url, size: size, sha256: Array(hasher.finalize()), target: to, retries: retries)
        try sender.start()
        DispatchQueue.main.asyncAfter(deadline: .now() + timeout) {
            if sender.peripheral == nil { sender.fail("no receiver\(to.map { " matching \"\($0)\"" } ?? "") found in \(Int(timeout)) s") }
        }
        dispatchMain()
    }
}

final class FileSender: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate, StreamDelegate, @unchecked Sendable {
    let url: URL, size: UInt64, sha256: [UInt8], target: String?
    var retriesLeft: Int
    var manager: CBCentralManager!
    var peripheral: CBPeripheral?
    var channel: CBL2CAPChannel?
    let streams = StreamThread.start(name: "ble.send.streams")
    let service = CBUUID(string: FileTransfer.serviceUUID)

    // Stream-thread state.
    enum Phase { case offer, data, result, done }
    var phase = Phase.offer
    var inbound: [UInt8] = []
    var outbound: [UInt8] = []
    var file: FileHandle?
    var sent: UInt64 = 0
    var progress: ProgressLine

    /// Fault injection for tests (`OCB_SEND_KILL_AFTER=BYTES`): the process kills itself with SIGKILL, as a user's
    /// `kill -9` would, once that many octets of the file have gone into the channel, so that an interrupted transfer
    /// is reproduced at a known point however the machine schedules the test that watches it.
    static let killAfterBytes: UInt64? = ProcessInfo.processInfo.environment["OCB_SEND_KILL_AFTER"].flatMap { UInt64($0) }

    init(url: URL, size: UInt64, sha256: [UInt8], target: String?, retries: Int) {
        self.url = url
        self.size = size
        self.sha256 = sha256
        self.target = target
        self.retriesLeft = retries
        progress = ProgressLine(label: url.lastPathComponent, total: size)
    }

    /// Opens the controller first, so that one that cannot be opened fails with its reason.
    func start() throws {
        // BLE_TRANSPORT=bluez: through bluetoothd, the channel on the kernel's L2CAP sockets.
        if let bluez = BlueZTool.options { return manager = CBCentralManager(delegate: self, queue: nil, options: nil, bluez: bluez) }
        manager = CBCentralManager(delegate: self, queue: nil, options: nil, host: try Controller.open(name: "central"))
    }

    func fail(_ why: String) -> Never {
        progress.finish()
        FileHandle.standardError.write(Data("ble send: \(why)\n".utf8))
        Foundation.exit(1)
    }

    func centralManagerDidUpdateState(_ central: CBCentralManager) {
        switch central.state {
        case .poweredOn: central.scanForPeripherals(withServices: [service])
        case .unsupported, .unauthorized: fail("no usable Bluetooth controller (\(central.state))")
        default: break
        }
    }

    func centralManager(_ central: CBCentralManager, didDiscover p: CBPeripheral, advertisementData: [String: Any], rssi RSSI: NSNumber) {
        guard peripheral == nil else { return }
        if let target {
            let name = advertisementData[CBAdvertisementDataLocalNameKey] as? String ?? p.name
            guard p.deviceAddress.string.caseInsensitiveCompare(target) == .orderedSame || name == target else { return }
        }
        peripheral = p
        central.stopScan()
        print("sending \(url.lastPathComponent) (\(ProgressLine.bytes(size))) to \(p.name ?? p.deviceAddress.string)")
        central.connect(p)
    }

    func centralManager(_ central: CBCentralManager, didConnect p: CBPeripheral) {
        p.delegate = self
        p.discoverServices([service])
    }

    func centralManager(_ central: CBCentralManager, didFailToConnect p: CBPeripheral, error: (any Error)?) {
        fail("cannot connect: \(error?.localizedDescription ?? "unknown error")")
    }

    func centralManager(_ central: CBCentralManager, didDisconnectPeripheral p: CBPeripheral, error: (any Error)?) {
        let finished = streamsSync { phase == .done }
        guard !finished else { return }
        channel = nil
        guard retriesLeft > 0 else { fail("the link was lost (\(error?.localizedDescription ?? "disconnected")); no retries left") }
        retriesLeft -= 1
        progress.finish()
        print("link lost; reconnecting to resume (\(retriesLeft) retr\(retriesLeft == 1 ? "y" : "ies") left)")
        streamsSync {
            phase = .offer; inbound = []; outbound = []
        }
        central.connect(p)
    }

    func peripheral(_ p: CBPeripheral, didDiscoverServices error: (any Error)?) {
        guard let s = p.services?.first(where: { $0.uuid == service }) else { fail("the device offers no file-transfer service") }
        p.discoverCharacteristics([CBUUID(string: CBUUIDL2CAPPSMCharacteristicString)], for: s)
    }

    func peripheral(_ p: CBPeripheral, didDiscoverCharacteristicsFor s: CBService, error: (any Error)?) {
        guard let c = s.characteristics?.first else { fail("the device publishes no L2CAP PSM characteristic") }
        p.readValue(for: c)
    }

    func peripheral(_ p: CBPeripheral, didUpdateValueFor c: CBCharacteristic, error: (any Error)?) {
        guard let v = c.value, v.count == 2 else { fail("unreadable PSM characteristic: \(error?.localizedDescription ?? "bad value")") }
        p.openL2CAPChannel(CBL2CAPPSM(v[0]) | CBL2CAPPSM(v[1]) << 8)
    }

    func peripheral(_ p: CBPeripheral, didOpen channel: CBL2CAPChannel?, error: (any Error)?) {
        guard let channel else { fail("the receiver refused the channel: \(error?.localizedDescription ?? "unknown error")") }
        self.channel = channel
        streamsSync {
            outbound = FileTransfer.Offer(name: url.lastPathComponent, size: size, sha256: sha256).encode()
        }
        streams.attach([channel.inputStream, channel.outputStream], delegate: self)
    }

    /// Runs `body` with the stream thread's state (the state is only touched under this lock).
    private let lock = NSLock()
    func streamsSync<T>(_ body: () -> T) -> T { lock.withLock(body) }

    // MARK: StreamDelegate (stream thread)

    func stream(_ s: Stream, handle event: Stream.Event) {
        lock.withLock {
            switch event {
            case .hasBytesAvailable:
                guard let input = s as? InputStream else { return }
                var chunk = [UInt8](repeating: 0, count: 4096)
                while input.hasBytesAvailable {
                    let n = input.read(&chunk, maxLength: chunk.count)
                    guard n > 0 else { break }
                    inbound += chunk[0..<n]
                }
                handleReplies()
            case .hasSpaceAvailable:
                pump()
            case .errorOccurred, .endEncountered:
                break   // the disconnect callback decides: resume or done
            default:
                break
            }
        }
    }

    func handleReplies() {
        switch phase {
        case .offer:
            guard inbound.count >= 13 else { return }
            guard Array(inbound[0..<4]) == FileTransfer.acceptMagic, inbound[4] == 0 else {
                fail("the receiver refused the file")
            }
            let offset = inbound[5..<13].enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * $1.offset) }
            inbound.removeFirst(13)
            guard offset <= size else { fail("the receiver asked for offset \(offset) of a \(size)-octet file") }
            do {
                file = try FileHandle(forReadingFrom: url)
                try file?.seek(toOffset: offset)
            } catch { fail("cannot read \(url.path): \(error)") }
            if offset > 0 { print("resuming at \(ProgressLine.bytes(offset))") }
            sent = offset
            progress.startOffset = offset
            phase = offset == size ? .result : .data
            pump()
        case .result:
            guard inbound.count >= 5 else { return }
            guard Array(inbound[0..<4]) == FileTransfer.resultMagic else { fail("unexpected reply from the receiver") }
            progress.update(sent, force: true)
            progress.finish()
            switch inbound[4] {
            case 0:
                print(
                    "sent \(url.lastPathComponent): \(ProgressLine.bytes(size)) in \(String(format: "%.1f", Date().timeIntervalSince(progress.start))) s, SHA-256 verified by the receiver"
                )
                phase = .done
                fflush(nil)
                Foundation.exit(0)
            case 1: fail("the receiver's SHA-256 does not match: the file changed or was corrupted")
            default: fail("the receiver could not store the file")
            }
        case .data, .done:
            break
        }
    }

    /// Writes what the channel takes: the offer, then the file in 64 KB pieces read only as space frees.
    func pump() {
        guard let out = channel?.outputStream else { return }
        while true {
            if outbound.isEmpty, phase == .data, let file {
                let piece = (try? file.read(upToCount: 64 * 1024)) ?? nil
                if let piece, !piece.isEmpty {
                    outbound = Array(piece)
                } else {
                    try? file.close()
                    self.file = nil
                    phase = .result
                }
            }
            guard !outbound.isEmpty else { return }
            let n = outbound.withUnsafeBufferPointer { out.write($0.baseAddress!, maxLength: $0.count) }
            guard n > 0 else { return }
            if phase == .data { sent += UInt64(n); progress.update(sent) }
            outbound.removeFirst(n)
            if let killAt = Self.killAfterBytes, phase == .data, sent >= killAt { Foundation.kill(getpid(), SIGKILL) }
        }
    }
}
