// Bonds: the keys from pairings that both sides asked to keep, and our own identity (IRK), so that a device
// is recognised and the link encrypted without pairing again after a restart.
//
// On disk: one JSON document with a format version, written as a new file that is fsync'ed and renamed over
// the old one (then the directory is fsync'ed), readable by its owner only (0600). A crash leaves either the
// old or the new document. A file that cannot be read is kept aside (renamed *.corrupt) rather than lost.
import Foundation
import Synchronization
import Logging
import StackLog
import BLEWire
import BLESMP
import BLECrypto

#if canImport(Glibc)
import Glibc
#endif

/// The keys kept for one bonded peer, found by its identity address.
public struct Bond: Sendable, Hashable {
    public var identityAddress: BluetoothAddress
    public var keys: PairingKeys
    public var authenticated: Bool
    public var secureConnections: Bool
    public var keySize: UInt8
    /// Other fixed addresses the device paired from (a device may distribute an identity address other than
    /// the static address it connects with); private addresses are resolved with the IRK instead.
    public var otherAddresses: [BluetoothAddress]

    public init(
        identityAddress: BluetoothAddress, keys: PairingKeys, authenticated: Bool, secureConnections: Bool, keySize: UInt8,
        otherAddresses: [BluetoothAddress] = []
    ) {
        self.identityAddress = identityAddress
        self.otherAddresses = otherAddresses
        self.keys = keys
        self.authenticated = authenticated
        self.secureConnections = secureConnections
        self.keySize = keySize
    }

    /// The key to encrypt with as central: the SC key, else the one the peer gave us.
    public var centralKey: PairingKeys.LongTermKey? { keys.secureConnectionsLTK ?? keys.peerLTK }

    /// The key a central asks us for by EDIV and Rand when we are the peripheral.
    public func peripheralKey(ediv: UInt16, rand: UInt64) -> PairingKeys.LongTermKey? {
        if let k = keys.secureConnectionsLTK, ediv == 0, rand == 0 { return k }
        if let k = keys.localLTK, k.ediv == ediv, k.rand == rand { return k }
        return nil
    }

    /// Whether `address` is this device's: its identity, another fixed address it used, or an RPA from its IRK.
    public func matches(_ address: BluetoothAddress) -> Bool {
        Bond.same(identityAddress, address) || otherAddresses.contains { Bond.same($0, address) } || resolves(address)
    }

    /// Same device address: the octets and public/random (identity types compare as their base type).
    static func same(_ a: BluetoothAddress, _ b: BluetoothAddress) -> Bool {
        a.bytes == b.bytes && a.type.isRandom == b.type.isRandom
    }

    /// Whether a resolvable private address was made from this peer's IRK.
    public func resolves(_ address: BluetoothAddress) -> Bool {
        guard let irk = keys.peerIRK, address.randomKind == .resolvablePrivate else { return false }
        return PrivateAddress.resolve(address, irk: irk)
    }
}

public enum BondStoreError: Error, CustomStringConvertible {
    case unsupportedVersion(Int)
    case malformed(String)
    case io(String)

    public var description: String {
        switch self {
        case let .unsupportedVersion(v): return "bond store format version \(v) is newer than this program understands"
        case let .malformed(why): return "bond store is malformed: \(why)"
        case let .io(why): return "bond store: \(why)"
        }
    }
}

/// Bonds in memory, optionally backed by a file. Not thread-safe: the host uses it on its loop.
public final class BondStore: @unchecked Sendable {
    public static let formatVersion = 1
    public let fileURL: URL?
    public private(set) var bonds: [Bond] = []
    /// Our Identity Resolving Key (least significant octet first), made once and kept.
    public private(set) var localIRK: [UInt8]
    /// The last problem loading or saving, for diagnostics.
    public private(set) var lastError: BondStoreError?

    /// A store that lives only as long as the process.
    public init() {
        fileURL = nil
        localIRK = SMPSession.systemRandom(16)
    }

    /// A store kept in `fileURL`; a missing file is an empty store.
    public init(fileURL: URL) {
        self.fileURL = fileURL
        localIRK = SMPSession.systemRandom(16)
        do {
            try load()
        } catch let e as BondStoreError {
            Logger(.host).warning("bond store unreadable; starting afresh", metadata: ["file": "\(fileURL.path)", "error": "\(e)"])
            if case .unsupportedVersion = e { lastError = e; return }   // leave a newer program's file alone
            // Keep the unreadable file for inspection and start afresh.
            try? FileManager.default.moveItem(at: fileURL, to: fileURL.appendingPathExtension("corrupt"))
            save()
            lastError = e
        } catch {
            lastError = .io("\(error)")
        }
    }

    public func bond(for identity: BluetoothAddress) -> Bond? {
        bonds.first { Bond.same($0.identityAddress, identity) }
    }

    /// The bond of the device using `address`: its identity address, or a private address its IRK resolves.
    public func bond(matching address: BluetoothAddress) -> Bond? {
        bond(for: address) ?? bonds.first { $0.matches(address) }
    }

    public func store(_ b: Bond) {
        bonds.removeAll { Bond.same($0.identityAddress, b.identityAddress) }
        bonds.append(b)
        save()
    }

    @discardableResult
    public func remove(_ identity: BluetoothAddress) -> Bool {
        let before = bonds.count
        bonds.removeAll { Bond.same($0.identityAddress, identity) }
        guard bonds.count != before else { return false }
        save()
        return true
    }

    public func removeAll() {
        bonds.removeAll()
        save()
    }

    // MARK: File format

    private func hex(_ b: [UInt8]?) -> Any { b.map { $0.hexString } ?? NSNull() }

    private func ltkJSON(_ k: PairingKeys.LongTermKey?) -> Any {
        guard let k else { return NSNull() }
        return ["key": k.key.hexString, "ediv": Int(k.ediv), "rand": String(k.rand, radix: 16)]
    }

    private func addressJSON(_ a: BluetoothAddress) -> [String: Any] { ["address": a.string, "random": a.type.isRandom] }

    func encode() throws -> Data {
        let list: [[String: Any]] = bonds.map { b in
            [
                "identity": addressJSON(b.identityAddress), "authenticated": b.authenticated,
                "secureConnections": b.secureConnections, "keySize": Int(b.keySize),
                "ltk": ltkJSON(b.keys.secureConnectionsLTK), "peerLTK": ltkJSON(b.keys.peerLTK), "localLTK": ltkJSON(b.keys.localLTK),
                "otherAddresses": b.otherAddresses.map(addressJSON),
                "peerIRK": hex(b.keys.peerIRK), "peerCSRK": hex(b.keys.peerCSRK), "localCSRK": hex(b.keys.localCSRK),
            ]
        }
        let root: [String: Any] = ["version": Self.formatVersion, "localIRK": localIRK.hexString, "bonds": list]
        return try JSONSerialization.data(withJSONObject: root, options: [.sortedKeys, .prettyPrinted])
    }

    func load() throws {
        guard let url = fileURL, FileManager.default.fileExists(atPath: url.path) else { return }
        let data: Data
        do { data = try Data(contentsOf: url) } catch { throw BondStoreError.io("cannot read \(url.path): \(error)") }
        guard let root = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { throw BondStoreError.malformed("not a JSON object") }
        guard let version = root["version"] as? Int else { throw BondStoreError.malformed("no version") }
        guard version <= Self.formatVersion else { throw BondStoreError.unsupportedVersion(version) }
        func bytes(_ v: Any?, _ n: Int, _ what: String) throws -> [UInt8]? {
            guard let s = v as? String else { return nil }
            guard let b = [UInt8](hexString: s), b.count == n else { throw BondStoreError.malformed("\(what) is not \(n) octets of hex") }
            return b
        }
        func ltk(_ v: Any?, _ what: String) throws -> PairingKeys.LongTermKey? {
            guard let d = v as? [String: Any] else { return nil }
            guard let key = try bytes(d["key"], 16, what), let ediv = d["ediv"] as? Int, let rs = d["rand"] as? String,
                let rand = UInt64(rs, radix: 16), (0...0xFFFF).contains(ediv)
            else { throw BondStoreError.malformed("\(what) incomplete") }
            return .init(key: key, ediv: UInt16(ediv), rand: rand)
        }
        guard let irk = try bytes(root["localIRK"], 16, "localIRK") else { throw BondStoreError.malformed("no localIRK") }
        var loaded: [Bond] = []
        for (i, e) in ((root["bonds"] as? [[String: Any]]) ?? []).enumerated() {
            guard let id = e["identity"] as? [String: Any], let s = id["address"] as? String,
                let a = BluetoothAddress(string: s, type: (id["random"] as? Bool ?? false) ? .random : .public)
            else {
                throw BondStoreError.malformed("bond \(i) has no identity address")
            }
            var keys = PairingKeys()
            keys.secureConnectionsLTK = try ltk(e["ltk"], "bond \(i) ltk")
            keys.peerLTK = try ltk(e["peerLTK"], "bond \(i) peerLTK")
            keys.localLTK = try ltk(e["localLTK"], "bond \(i) localLTK")
            keys.peerIRK = try bytes(e["peerIRK"], 16, "bond \(i) peerIRK")
            keys.peerCSRK = try bytes(e["peerCSRK"], 16, "bond \(i) peerCSRK")
            keys.localCSRK = try bytes(e["localCSRK"], 16, "bond \(i) localCSRK")
            keys.peerIdentityAddress = a
            let others = ((e["otherAddresses"] as? [[String: Any]]) ?? []).compactMap { o -> BluetoothAddress? in
                guard let s = o["address"] as? String else { return nil }
                return BluetoothAddress(string: s, type: (o["random"] as? Bool ?? false) ? .random : .public)
            }
            let size = e["keySize"] as? Int ?? 16
            guard (7...16).contains(size) else { throw BondStoreError.malformed("bond \(i) key size \(size)") }
            loaded.append(
                Bond(
                    identityAddress: a, keys: keys, authenticated: e["authenticated"] as? Bool ?? false,
                    secureConnections: e["secureConnections"] as? Bool ?? false, keySize: UInt8(size), otherAddresses: others))
        }
        localIRK = irk
        bonds = loaded
    }

    /// Writes the store: temporary file (0600) → fsync → rename → fsync of the directory.
    func save() {
        guard let url = fileURL else { return }
        do {
            try OwnerOnlyFile.write(try encode(), to: url)
            lastError = nil
        } catch let e as BondStoreError {
            lastError = e
            Logger(.host).warning("bond store not saved", metadata: ["error": "\(e)"])
        } catch {
            lastError = .io("\(error)")
        }
    }
}

/// A file of the host's state (bonds, the device cache) written so that it is never readable by others, not
/// even for a moment, and never half written: a temporary file created 0600 in a 0700 directory, written,
/// fsynced, renamed over the old one, then the directory fsynced.
package enum OwnerOnlyFile {
    /// Temporary names: the process and a counter, so two stores of one process writing the same file (two
    /// hosts on one controller address) never share, and truncate, one temporary file.
    private static let counter = Mutex<UInt64>(0)

    package static func write(_ data: Data, to url: URL) throws {
        let dir = url.deletingLastPathComponent()
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let n = counter.withLock { c -> UInt64 in
            c &+= 1
            return c
        }
        let tmp = dir.appendingPathComponent(".\(url.lastPathComponent).\(getpid()).\(n).tmp")
        let fd = open(tmp.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw BondStoreError.io("cannot create \(tmp.path): errno \(errno)") }
        var ok = data.withUnsafeBytes { raw -> Bool in
            var off = 0
            while off < raw.count {
                let n = Glibc.write(fd, raw.baseAddress! + off, raw.count - off)
                if n < 0 { if errno == EINTR { continue }; return false }
                off += n
            }
            return true
        }
        ok = ok && fchmod(fd, 0o600) == 0 && fsync(fd) == 0
        close(fd)
        guard ok, rename(tmp.path, url.path) == 0 else {
            let failure = errno
            unlink(tmp.path)
            throw BondStoreError.io("cannot write \(url.path): errno \(failure)")
        }
        let dfd = open(dir.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 { fsync(dfd); close(dfd) }
    }
}

/// Where OpenCoreBluetooth keeps state: $OCB_STATE_DIR, else $XDG_STATE_HOME/OpenCoreBluetooth, else
/// ~/.local/state/OpenCoreBluetooth.
public enum HostStateDirectory {
    public static var url: URL {
        let env = ProcessInfo.processInfo.environment
        if let d = env["OCB_STATE_DIR"], !d.isEmpty { return URL(fileURLWithPath: d) }
        if let x = env["XDG_STATE_HOME"], !x.isEmpty { return URL(fileURLWithPath: x).appendingPathComponent("OpenCoreBluetooth") }
        return FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".local/state/OpenCoreBluetooth")
    }
}

extension LEHost {
    /// Opens `bondStoreDirectory/bonds-<address>.json` once the controller's address is known.
    func openBondStoreIfNeeded() {
        guard let dir = bondStoreDirectory else { return }
        let name = "bonds-" + localAddress.string.replacingOccurrences(of: ":", with: "") + ".json"
        let url = dir.appendingPathComponent(name)
        // A store the application gave explicitly (another file) wins.
        guard bondStore.fileURL != url, bondStore.fileURL == nil || bondStore.fileURL?.deletingLastPathComponent() == dir else { return }
        bondStore = BondStore(fileURL: url)
        loggers.host.debug("bond store opened", metadata: ["file": "\(url.path)", "bonds": "\(bondStore.bonds.count)"])
    }
}

/// Resolvable private addresses (Vol 6 Part B §1.3.2.2, Vol 3 Part H §2.2.2).
public enum PrivateAddress {
    /// A new RPA from an IRK (least significant octet first): prand with its top bits 0b01, and hash = ah(IRK, prand).
    public static func make(irk: [UInt8], random: [UInt8] = SMPSession.systemRandom(3)) -> BluetoothAddress {
        var prand = Array(random.prefix(3))   // least significant first
        prand[2] = (prand[2] & 0x3F) | 0x40
        let hash = (try? SMPCrypto.ah(k: irk.reversed(), r: prand.reversed())) ?? [0, 0, 0]
        return BluetoothAddress(bytes: hash.reversed() + prand, type: .random)
    }

    /// Whether `address` is a resolvable private address made with `irk`.
    public static func resolve(_ address: BluetoothAddress, irk: [UInt8]) -> Bool {
        guard address.randomKind == .resolvablePrivate, irk.count == 16 else { return false }
        let prand = Array(address.bytes[3...5])
        guard let hash = try? SMPCrypto.ah(k: irk.reversed(), r: prand.reversed()) else { return false }
        return Array(hash.reversed()) == Array(address.bytes[0...2])
    }
}
