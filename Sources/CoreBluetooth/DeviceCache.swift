// The device cache iOS keeps for each Bluetooth controller: every peripheral met gets a random identifier
// (identifiers are per host, never derived from the address), kept with its address, address type, name
// and whether it is bonded, so that `retrievePeripherals(withIdentifiers:)` finds a device met in an earlier
// run and the app can connect to it without scanning ("remember the device, reconnect after relaunch").
//
// Where: hosts with a state directory (real controllers: `LEHost.bondStoreDirectory`, set by HostFactory)
// keep the cache in `devices-<controller address>.json` beside their bonds, written atomically with mode
// 0600; virtual controllers (whose addresses are per process) keep it in memory. One cache per host,
// shared by every manager on it.
//
// Bounded: a long scan among rotating private addresses meets a new "device" every few minutes, so the
// cache keeps at most `maximumUnbondedEntries` devices that are neither bonded nor ever connected, dropping
// the least recently seen first. A bonded device is looked up by its identity address, so it keeps its
// identifier at every new private address.
//
// Threading: any thread (one lock); saving runs on a private queue, coalesced.
import Foundation
import BLEWire
import BLEHost

package final class DeviceCache: @unchecked Sendable {
    struct Entry: Codable, Equatable {
        var identifier: UUID
        var address: String
        var random: Bool
        var name: String?
        var bonded: Bool
        /// Connected at least once: such devices are kept when the cache trims scanned-only ones.
        var connected: Bool
        var lastSeen: Double

        var bluetoothAddress: BluetoothAddress? { BluetoothAddress(string: address, type: random ? .random : .public) }
    }

    private struct Document: Codable {
        var version: Int
        var devices: [Entry]
    }

    static let formatVersion = 1
    /// How many devices that were only scanned are remembered.
    static let maximumUnbondedEntries = 512

    private let lock = NSLock()
    private var entries: [UUID: Entry] = [:]
    private var byAddress: [BluetoothAddress: UUID] = [:]
    package let file: URL?
    private var saveScheduled = false
    private static let saveQueue = DispatchQueue(label: "ocb.device-cache.save")

    init(file: URL?) {
        self.file = file
        guard let file, let data = try? Data(contentsOf: file) else { return }
        guard let doc = try? JSONDecoder().decode(Document.self, from: data), doc.version == Self.formatVersion else {
            CBLog.warning("ignoring the device cache \(file.path): unreadable or of another version")
            return
        }
        for e in doc.devices {
            guard let a = e.bluetoothAddress else { continue }
            entries[e.identifier] = e
            byAddress[Self.key(a)] = e.identifier
        }
    }

    /// Addresses compare by octets and random/public (identity types read as their base type).
    static func key(_ a: BluetoothAddress) -> BluetoothAddress {
        BluetoothAddress(bytes: a.bytes, type: a.type.isRandom ? .random : .public)
    }

    /// The identifier of the device at `identity` (its identity address when bonded, else the address seen),
    /// made and remembered on first sight.
    /// `preferring`: the identifier to give a device not yet in the cache (one the app saved, restored state).
    package func identifier(for identity: BluetoothAddress, bonded: Bool = false, preferring preferred: UUID? = nil) -> UUID {
        let k = Self.key(identity)
        let now = Date().timeIntervalSince1970
        let (id, changed) = lock.withLock { () -> (UUID, Bool) in
            if let id = byAddress[k], var e = entries[id] {
                e.lastSeen = now
                let newlyBonded = bonded && !e.bonded
                if newlyBonded { e.bonded = true }
                entries[id] = e
                return (id, newlyBonded)
            }
            let id = preferred.flatMap { entries[$0] == nil ? $0 : nil } ?? UUID()
            entries[id] = Entry(
                identifier: id, address: k.string, random: k.type.isRandom, name: nil, bonded: bonded,
                connected: false, lastSeen: now)
            byAddress[k] = id
            trim()
            return (id, true)
        }
        if changed { scheduleSave() }
        return id
    }

    func entry(for identifier: UUID) -> Entry? { lock.withLock { entries[identifier] } }

    var count: Int { lock.withLock { entries.count } }

    func setName(_ name: String, for identifier: UUID) {
        let changed = lock.withLock { () -> Bool in
            guard var e = entries[identifier], e.name != name else { return false }
            e.name = name
            entries[identifier] = e
            return true
        }
        if changed { scheduleSave() }
    }

    /// The device is connected (or bonded): it is kept when scanned-only devices are trimmed.
    func markConnected(_ identifier: UUID, bonded: Bool) {
        let changed = lock.withLock { () -> Bool in
            guard var e = entries[identifier], !e.connected || (bonded && !e.bonded) else { return false }
            e.connected = true
            e.bonded = e.bonded || bonded
            entries[identifier] = e
            return true
        }
        if changed { scheduleSave() }
    }

    /// A device that gave its identity while paired: its identifier now follows its identity address.
    func bind(_ identifier: UUID, toIdentity identity: BluetoothAddress) {
        let k = Self.key(identity)
        lock.withLock {
            guard var e = entries[identifier] else { return }
            if let old = byAddress[k], old != identifier { entries[old] = nil }
            if let oldKey = e.bluetoothAddress.map(Self.key), byAddress[oldKey] == identifier { byAddress[oldKey] = nil }
            e.address = k.string
            e.random = k.type.isRandom
            e.bonded = true
            e.connected = true
            entries[identifier] = e
            byAddress[k] = identifier
        }
        scheduleSave()
    }

    // MARK: Bounds and saving

    /// Drops the least recently seen scanned-only devices beyond the bound. Under `lock`.
    private func trim() {
        let scannedOnly = entries.values.filter { !$0.bonded && !$0.connected }
        guard scannedOnly.count > Self.maximumUnbondedEntries else { return }
        // Trim a tenth at a time, so a long scan pays for the sort rarely.
        let excess = scannedOnly.count - Self.maximumUnbondedEntries + Self.maximumUnbondedEntries / 10
        for e in scannedOnly.sorted(by: { $0.lastSeen < $1.lastSeen }).prefix(excess) {
            entries[e.identifier] = nil
            if let a = e.bluetoothAddress.map(Self.key), byAddress[a] == e.identifier { byAddress[a] = nil }
        }
    }

    package var hasUnsavedChanges: Bool { lock.withLock { saveScheduled } }

    private func scheduleSave() {
        guard file != nil else { return }
        let first = lock.withLock { () -> Bool in
            defer { saveScheduled = true }
            return !saveScheduled
        }
        guard first else { return }
        Self.saveQueue.asyncAfter(deadline: .now() + 0.2) { [self] in if hasUnsavedChanges { save() } }
    }

    /// Writes the cache now (atomically, owner-only from the start).
    func save() {
        guard let file else { return }
        let doc = lock.withLock { () -> Document in
            saveScheduled = false
            return Document(version: Self.formatVersion, devices: entries.values.sorted { $0.address < $1.address })
        }
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            // Created 0600 before a byte is written (it was written with the umask's mode, then changed:
            // readable by others for a moment, and a test caught it 0644).
            try OwnerOnlyFile.write(encoder.encode(doc), to: file)
        } catch {
            CBLog.warning("could not save the device cache \(file.path): \(error)")
        }
    }

    // MARK: One cache per host

    private struct Registered { weak var host: LEHost?; let cache: DeviceCache }
    private static let registryLock = NSLock()
    nonisolated(unsafe) private static var registry: [ObjectIdentifier: Registered] = [:]

    /// Writes every cache with changes not yet saved (saving is coalesced; a program that exits right
    /// after meeting a device must not lose it). Runs at exit too.
    package static func flushAll() {
        let caches = registryLock.withLock { registry.values.map(\.cache) }
        for c in caches where c.hasUnsavedChanges { c.save() }
    }

    private static let flushAtExit: Void = { atexit { DeviceCache.flushAll() } }()

    /// The cache of `host`, made on first use. Call once the controller is on (its address names the file).
    package static func of(_ host: LEHost) -> DeviceCache {
        if host.bondStoreDirectory != nil { _ = flushAtExit }
        return registryLock.withLock {
            // A cache whose host is gone stays until its last changes are written.
            registry = registry.filter { entry in entry.value.host != nil || entry.value.cache.hasUnsavedChanges }
            if let r = registry[ObjectIdentifier(host)], r.host === host { return r.cache }
            let file = host.bondStoreDirectory.map {
                $0.appendingPathComponent("devices-\(host.localAddress.string.replacingOccurrences(of: ":", with: "")).json")
            }
            let cache = DeviceCache(file: file)
            registry[ObjectIdentifier(host)] = Registered(host: host, cache: cache)
            return cache
        }
    }
}
