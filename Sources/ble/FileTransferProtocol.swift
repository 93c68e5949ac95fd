// The file-transfer protocol of `ble send` / `ble receive` over an L2CAP channel (docs/file-transfer.md):
//
//   sender → receiver   offer   "OCBF" | version 1 | size u64 | SHA-256 (32) | name length u16 | name (UTF-8)
//   receiver → sender   accept  "OCBA" | status u8 (0 go on from offset) | offset u64
//   sender → receiver   the file's octets from `offset` to the end
//   receiver → sender   result  "OCBR" | status u8 (0 stored, 1 SHA-256 mismatch, 2 cannot write)
//
// All integers little-endian. A receiver keeps an interrupted transfer as a hidden partial file named by
// the SHA-256, so the same file offered again resumes where it stopped.
import Foundation
import Crypto
import BLEWire

enum FileTransfer {
    static let offerMagic: [UInt8] = Array("OCBF".utf8)
    static let acceptMagic: [UInt8] = Array("OCBA".utf8)
    static let resultMagic: [UInt8] = Array("OCBR".utf8)
    static let version: UInt8 = 1
    /// The GATT service a receiver advertises; its PSM characteristic is CBUUIDL2CAPPSMCharacteristicString.
    static let serviceUUID = "8E3A0001-4C8B-4F4E-9D0E-6F63622D6674"

    struct Offer: Equatable {
        var name: String
        var size: UInt64
        var sha256: [UInt8]

        func encode() -> [UInt8] {
            var w = ByteWriter()
            w.write(contentsOf: offerMagic); w.write(version); w.write(size); w.write(contentsOf: sha256)
            let n = Array(name.utf8)
            w.write(UInt16(n.count)); w.write(contentsOf: n)
            return w.bytes
        }

        /// Decodes an offer from the start of `bytes`: nil while incomplete, the offer and its length when
        /// whole; throws on anything a sender may not send.
        static func decode(_ bytes: [UInt8]) throws -> (Offer, Int)? {
            guard bytes.count >= 47 else {
                if !bytes.isEmpty, !offerMagic.starts(with: bytes.prefix(4)) { throw FileTransferError.protocolViolation("not a file offer") }
                return nil
            }
            var r = ByteReader(bytes)
            guard try r.readBytes(4) == offerMagic else { throw FileTransferError.protocolViolation("not a file offer") }
            let v = try r.readUInt8()
            guard v == version else { throw FileTransferError.protocolViolation("protocol version \(v) (we speak \(version))") }
            let size = try r.readUInt64()
            let hash = try r.readBytes(32)
            let n = Int(try r.readUInt16())
            guard n <= 255 else { throw FileTransferError.protocolViolation("file name of \(n) octets") }
            guard r.remaining >= n else { return nil }
            guard let name = String(validating: try r.readBytes(n), as: UTF8.self) else {
                throw FileTransferError.protocolViolation("file name is not UTF-8")
            }
            return (Offer(name: name, size: size, sha256: hash), 47 + n)
        }
    }

    static func accept(offset: UInt64) -> [UInt8] {
        var w = ByteWriter()
        w.write(contentsOf: acceptMagic); w.write(UInt8(0)); w.write(offset)
        return w.bytes
    }

    static func result(_ status: UInt8) -> [UInt8] { resultMagic + [status] }

    /// A name safe to create in the receiving directory: the last path component, no control characters,
    /// not hidden, not empty.
    static func safeName(_ name: String) -> String {
        let last = name.split(separator: "/").last.map(String.init) ?? ""
        var cleaned = String(last.unicodeScalars.filter { $0.value >= 0x20 && $0 != "\u{7F}" && $0 != "\\" }.map(Character.init))
        while cleaned.hasPrefix(".") { cleaned.removeFirst() }
        return cleaned.isEmpty ? "received" : cleaned
    }

    static func sha256(of url: URL, upTo length: UInt64? = nil) throws -> (SHA256, UInt64) {
        let h = try FileHandle(forReadingFrom: url)
        defer { try? h.close() }
        var hasher = SHA256()
        var total: UInt64 = 0
        while length.map({ total < $0 }) ?? true {
            let want = length.map { Int(min(UInt64(1 << 20), $0 - total)) } ?? (1 << 20)
            guard let d = try h.read(upToCount: want), !d.isEmpty else { break }
            hasher.update(data: d)
            total += UInt64(d.count)
        }
        return (hasher, total)
    }

    static func hex(_ bytes: some Sequence<UInt8>) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
}

enum FileTransferError: Error, CustomStringConvertible {
    case protocolViolation(String)
    case refused(String)
    case failed(String)

    var description: String {
        switch self {
        case let .protocolViolation(why): return "the peer broke the file-transfer protocol: \(why)"
        case let .refused(why): return "refused: \(why)"
        case let .failed(why): return why
        }
    }
}

/// A progress line (bytes, rate, ETA): redrawn in place on a terminal, a plain line every few seconds otherwise.
final class ProgressLine: @unchecked Sendable {
    let total: UInt64
    let label: String
    let start = Date()
    var lastPrint = Date.distantPast
    let tty = isatty(1) != 0
    var startOffset: UInt64 = 0

    init(label: String, total: UInt64) {
        self.label = label
        self.total = total
    }

    func update(_ done: UInt64, force: Bool = false) {
        let now = Date()
        guard force || now.timeIntervalSince(lastPrint) >= (tty ? 0.1 : 2) else { return }
        lastPrint = now
        let elapsed = max(now.timeIntervalSince(start), 0.001)
        let rate = Double(done - min(done, startOffset)) / elapsed
        let eta = rate > 0 ? Double(total - min(total, done)) / rate : 0
        let pct = total == 0 ? 100 : Double(done) * 100 / Double(total)
        let line = String(
            format: "%@ %5.1f %% %@ of %@, %@/s, ETA %@", label, pct, Self.bytes(done), Self.bytes(total), Self.bytes(UInt64(rate)),
            Self.duration(eta))
        if tty {
            let width = 24
            let filled = total == 0 ? width : Int(Double(width) * Double(done) / Double(total))
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            print("\r[\(bar)] \(line)\u{1B}[K", terminator: "")
        } else {
            print(line)
        }
        fflush(nil)
    }

    func finish() { if tty { print("") } }

    static func bytes(_ n: UInt64) -> String {
        let d = Double(n)
        if d >= 1_048_576 { return String(format: "%.1f MB", d / 1_048_576) }
        if d >= 1024 { return String(format: "%.1f KB", d / 1024) }
        return "\(n) B"
    }

    static func duration(_ s: Double) -> String {
        guard s.isFinite else { return "?" }
        let t = Int(s.rounded())
        return t >= 3600 ? String(format: "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60) : String(format: "%d:%02d", t / 60, t % 60)
    }
}
