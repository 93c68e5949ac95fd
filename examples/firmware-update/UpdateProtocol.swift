// The firmware-update service both sides of the example share, in the style of common device-update
// services (a control point for commands and status, the image over a separate data path):
//
//   Update service            7E5A0001-…
//   ├── Control point         7E5A0002-…   write, indicate
//   ├── Data                  7E5A0003-…   write without response (the fallback data path)
//   └── L2CAP PSM             CBUUIDL2CAPPSMCharacteristicString, read (only when the device published a channel)
//
// Control point commands (the updater writes, with response):
//   START  [0x01, image size u32 LE, SHA-256 (32 octets)]   get ready for an image
//   APPLY  [0x02]                                            install the verified image
//   ABORT  [0x03]                                            forget the image
// Control point status (the device indicates):
//   RESPONSE [0x80, command, result]                         a command's outcome (result 0 = success)
//   PROGRESS [0x81, percent]                                 every 25 % of the image received
//   VERIFIED [0x82, result]                                  the whole image arrived; result 0 when its SHA-256 matches
// The image goes over the L2CAP channel when the device has one (the updater opens it after START
// succeeded), else in Write Commands on the data characteristic.
import Foundation
import CoreBluetooth

enum UpdateService {
    static let service = CBUUID(string: "7E5A0001-5B8F-4C39-9D8C-4F0E7A2B1C01")
    static let controlPoint = CBUUID(string: "7E5A0002-5B8F-4C39-9D8C-4F0E7A2B1C01")
    static let data = CBUUID(string: "7E5A0003-5B8F-4C39-9D8C-4F0E7A2B1C01")
    static let psm = CBUUID(string: CBUUIDL2CAPPSMCharacteristicString)
}

enum UpdateCommand: Equatable {
    case start(size: Int, sha256: Data)
    case apply
    case abort

    var bytes: Data {
        switch self {
        case let .start(size, sha256):
            return Data([0x01] + withUnsafeBytes(of: UInt32(size).littleEndian, Array.init)) + sha256
        case .apply: return Data([0x02])
        case .abort: return Data([0x03])
        }
    }

    var opcode: UInt8 {
        switch self {
        case .start: return 0x01
        case .apply: return 0x02
        case .abort: return 0x03
        }
    }

    init?(_ d: Data) {
        let b = [UInt8](d)
        switch b.first {
        case 0x01 where b.count == 37:
            let size = Int(b[1]) | Int(b[2]) << 8 | Int(b[3]) << 16 | Int(b[4]) << 24
            self = .start(size: size, sha256: Data(b[5...]))
        case 0x02 where b.count == 1: self = .apply
        case 0x03 where b.count == 1: self = .abort
        default: return nil
        }
    }
}

enum UpdateStatus: Equatable, CustomStringConvertible {
    case response(command: UInt8, result: UInt8)
    case progress(percent: UInt8)
    case verified(result: UInt8)

    static let success: UInt8 = 0, badCommand: UInt8 = 1, badState: UInt8 = 2, hashMismatch: UInt8 = 3, tooLarge: UInt8 = 4

    var bytes: Data {
        switch self {
        case let .response(c, r): return Data([0x80, c, r])
        case let .progress(p): return Data([0x81, p])
        case let .verified(r): return Data([0x82, r])
        }
    }

    init?(_ d: Data) {
        let b = [UInt8](d)
        switch b.first {
        case 0x80 where b.count == 3: self = .response(command: b[1], result: b[2])
        case 0x81 where b.count == 2: self = .progress(percent: b[1])
        case 0x82 where b.count == 2: self = .verified(result: b[1])
        default: return nil
        }
    }

    var description: String {
        switch self {
        case let .response(c, r): return "response:\(c):\(r)"
        case let .progress(p): return "progress:\(p)"
        case let .verified(r): return "verified:\(r)"
        }
    }
}

/// A thread whose run loop carries the L2CAP channel's stream events, as an app's stream thread does.
final class StreamRunLoop: @unchecked Sendable {
    private(set) var runLoop: RunLoop!
    private let lock = NSLock()
    private var stopped = false

    init(name: String) {
        let ready = DispatchSemaphore(value: 0)
        let t = Thread { [self] in
            runLoop = RunLoop.current
            // A run loop without a source returns at once; a far-off timer keeps this one waiting for events.
            runLoop.add(Timer(timeInterval: 86_400, repeats: true) { _ in }, forMode: .default)
            ready.signal()
            while !lock.withLock({ stopped }) { _ = runLoop.run(mode: .default, before: Date().addingTimeInterval(0.2)) }
        }
        t.name = name
        t.start()
        ready.wait()
    }

    /// Lets the thread end (within 0.2 s).
    func stop() { lock.withLock { stopped = true } }

    func attach(_ stream: Stream, delegate: StreamDelegate) {
        stream.delegate = delegate
        stream.schedule(in: runLoop, forMode: .default)
        stream.open()
    }
}
