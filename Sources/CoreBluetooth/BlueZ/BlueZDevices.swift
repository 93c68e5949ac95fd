// The devices bluetoothd knows on one adapter, for command-line tools on BLE_TRANSPORT=bluez[:hciN] (`ble pair`,
// `ble bonds`): bonds are BlueZ's own (Device1.Paired / Bonded, kept by bluetoothd under /var/lib/bluetooth),
// pairing is Device1.Pair answered by a CBPairingAgent through BlueZAgent, forgetting is Adapter1.RemoveDevice.
//
// Threading: a blocking API for a tool's own thread; it rides on a BlueZCentral session (no manager) and waits on
// semaphores, so it must never be called on that session's queue (nor on a delegate queue that one waits for).
import Foundation
import BLEWire
import DBus

package final class BlueZDevices: @unchecked Sendable {
    package struct Device: Sendable, Equatable {
        package let path: String
        package let address: String
        /// "public" or "random".
        package let addressType: String
        package let name: String?
        package let paired: Bool
        /// Keys kept (Bonded, BlueZ 5.68+; older releases say Paired only, and keep the keys of every LE pairing).
        package let bonded: Bool
        package let trusted: Bool
        package let connected: Bool
    }

    package enum Failure: Error, CustomStringConvertible, Equatable {
        case noBluetoothd(String)
        case adapterOff(String)
        case notFound(String)
        case bluez(String)

        package var description: String {
            switch self {
            case let .noBluetoothd(s), let .adapterOff(s), let .notFound(s), let .bluez(s): return s
            }
        }
    }

    let session: BlueZCentral
    private let state = CBMutex(CBManagerState.unknown)
    private let changed = DispatchSemaphore(value: 0)

    /// Connects to bluetoothd and waits (`timeout` seconds at most) for its objects; fails unless the adapter is there
    /// and powered on.
    package init(options: BlueZOptions, timeout: Double = 10) throws(Failure) {
        session = BlueZCentral(options: options)
        session.onStateChange = { [state, changed] s in
            state.withLock { $0 = s }
            changed.signal()
        }
        session.start(nil)
        let deadline = DispatchTime.now() + timeout
        // The first state is the answer: bluetoothd's objects are loaded once it is known.
        while state.withLock({ $0 }) == .unknown {
            if changed.wait(timeout: deadline) == .timedOut { break }
        }
        let adapter = options.adapter ?? "the first adapter"
        switch state.withLock({ $0 }) {
        case .poweredOn: return
        case .poweredOff:
            session.close()
            throw .adapterOff("BlueZ's \(adapter) is powered off (bluetoothctl power on)")
        default:
            session.close()
            throw .noBluetoothd(
                "no bluetoothd with \(adapter) on the system bus at \(options.busAddress) (is bluetoothd running? `systemctl status bluetooth`)")
        }
    }

    deinit { session.close() }

    package func close() { session.close() }

    /// The devices BlueZ lists under the adapter.
    package func devices() -> [Device] {
        session.queue.sync {
            guard let adapter = session.adapterPath else { return [] }
            return session.tree.paths(with: BlueZObjectTree.deviceInterface).filter { $0.hasPrefix(adapter + "/") }.compactMap(device)
        }
    }

    /// The adapter's address as bluetoothd gives it, with /P or /R for its type (what it advertises from, unless
    /// bluetoothd's privacy is on).
    package var adapterAddress: String? {
        session.queue.sync {
            guard let path = session.adapterPath, let a = session.tree[path, BlueZObjectTree.adapterInterface],
                let address = a["Address"]?.string
            else { return nil }
            return address + (a["AddressType"]?.string == "random" ? "/R" : "/P")
        }
    }

    /// The identifier a Core Bluetooth manager on the same adapter gives this device (retrievePeripherals).
    package func identifier(of d: Device) -> UUID {
        let address = BlueZAdvertisement.address(d.address, type: d.addressType) ?? BluetoothAddress(bytes: [0, 0, 0, 0, 0, 0], type: .public)
        return BlueZAdvertisement.identifier(for: address, adapter: session.options.adapter ?? "")
    }

    /// The devices BlueZ keeps keys for.
    package func bonds() -> [Device] { devices().filter { $0.paired || $0.bonded } }

    /// The device with this address (any address type; a /P or /R suffix allowed) or advertised name; with `discover`, a scan of up to
    /// `timeout` seconds finds one BlueZ does not know yet.
    package func find(_ target: String, discover timeout: Double = 10) throws(Failure) -> Device {
        // An address as `ble scan` prints it may end in /P or /R (its type); BlueZ's Address has no suffix.
        let suffixed = target.count == 19 && (target.hasSuffix("/P") || target.hasSuffix("/R") || target.hasSuffix("/p") || target.hasSuffix("/r"))
        let addressOrName = suffixed ? String(target.dropLast(2)) : target
        func match() -> Device? {
            let all = devices()
            return all.first { $0.address.caseInsensitiveCompare(addressOrName) == .orderedSame } ?? all.first { $0.name == addressOrName }
        }
        if let d = match() { return d }
        guard timeout > 0 else { throw .notFound("BlueZ does not know \(addressOrName)") }
        session.startScan(services: nil, allowDuplicates: false)
        defer { session.stopScan() }
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let d = match() { return d }
            usleep(100_000)
        }
        throw .notFound("no device \(addressOrName) found in \(Int(timeout)) s of scanning")
    }

    /// Registers `agent` as bluetoothd's default agent (waits for its answer).
    /// `asDefault` false: the agent answers only the pairings this process starts (Device1.Pair), and the default
    /// agent (the desktop's) stays as it was.
    package func install(agent: any CBPairingAgent, asDefault: Bool = true) throws(Failure) {
        let done = DispatchSemaphore(value: 0)
        let failure = CBMutex<DBusError?>(nil)
        session.setPairingAgent(agent, asDefault: asDefault, peer: { _ in nil }) { e in
            failure.withLock { $0 = e }
            done.signal()
        }
        if done.wait(timeout: .now() + 10) == .timedOut { throw .bluez("bluetoothd did not answer RegisterAgent within 10 s") }
        if let e = failure.withLock({ $0 }) { throw .bluez("RegisterAgent failed: \(e)") }
    }

    /// Device1.Pair: BlueZ connects if needed, pairs (asking the registered agent) and keeps the keys.
    package func pair(_ device: Device, timeout: Double = 60) throws(Failure) -> Device {
        try call(device.path, BlueZObjectTree.deviceInterface, "Pair", timeout: timeout)
        // The answer comes once bluetoothd has the keys; Paired and Bonded follow in PropertiesChanged.
        let deadline = Date().addingTimeInterval(2)
        while Date() < deadline {
            if let d = refreshed(device), d.paired { return d }
            usleep(20_000)
        }
        return refreshed(device) ?? device
    }

    /// Device1.Disconnect.
    package func disconnect(_ device: Device) throws(Failure) {
        try call(device.path, BlueZObjectTree.deviceInterface, "Disconnect", timeout: 10)
    }

    /// Adapter1.RemoveDevice: BlueZ forgets the device and its keys (and drops its link).
    package func remove(_ device: Device) throws(Failure) {
        guard let adapter = session.queue.sync(execute: { session.adapterPath }) else { throw .adapterOff("the adapter went away") }
        try call(adapter, BlueZObjectTree.adapterInterface, "RemoveDevice", [.objectPath(device.path)], timeout: 10)
    }

    private func refreshed(_ d: Device) -> Device? { session.queue.sync { device(d.path) } }

    /// On the session's queue.
    private func device(_ path: String) -> Device? {
        guard let p = session.tree[path, BlueZObjectTree.deviceInterface], let address = p["Address"]?.string else { return nil }
        return Device(
            path: path, address: address, addressType: p["AddressType"]?.string ?? "public", name: p["Name"]?.string,
            paired: p["Paired"]?.bool == true, bonded: p["Bonded"]?.bool == true, trusted: p["Trusted"]?.bool == true,
            connected: p["Connected"]?.bool == true)
    }

    private func call(_ path: String, _ interface: String, _ member: String, _ body: [DBusValue] = [], timeout: Double) throws(Failure) {
        let done = DispatchSemaphore(value: 0)
        let outcome = CBMutex<DBusError?>(nil)
        session.queue.async { [session] in
            session.call(path, interface, member, body, timeout: timeout) { r in
                if case let .failure(e) = r { outcome.withLock { $0 = e } }
                done.signal()
            }
        }
        done.wait()
        if let e = outcome.withLock({ $0 }) { throw .bluez("\(member) failed: \(e)") }
    }
}
