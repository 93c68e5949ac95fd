// BlueZPeerNode's advertisement monitor: where bluetoothd offers AdvertisementMonitorManager1 (its experimental
// interfaces), an AdvertisementMonitor1 per browsed service (or_patterns: the Service Data structure of that UUID),
// registered, replaced and dropped as the browses, the adapter and the manager change; DeviceFound and DeviceLost
// hold a peer found or lose it. Everything here runs on the node's `queue`.
import Foundation
import DBus
import PeerSession
import PeerTransport

extension BlueZPeerNode {
    static let monitorManagerInterface = "org.bluez.AdvertisementMonitorManager1"
    /// Whether a monitor of the node's is active (bluetoothd called Activate): for tests and logs.
    package var monitoring: Bool { queue.sync { !(monitorApp?.active.isEmpty ?? true) } }

    func setMonitorManager(_ props: [String: DBusValue]?) {
        let types = props?["SupportedMonitorTypes"]?.arrayItems?.compactMap(\.string)
        // bluetoothd 5.66 lists "or_patterns"; a manager that lists nothing is taken at its word only if it says nothing.
        let usable = props != nil && (types == nil || types!.contains("or_patterns"))
        if !usable { dropMonitor(unregister: false) }
        if props == nil || usable != monitorManager { monitorRefused = false }
        monitorManager = usable
    }

    /// Registers, replaces or unregisters the monitor application so that it watches the browsed services, while the
    /// manager is there, the adapter on and the node open.
    func refreshMonitor() {
        let wanted = Array(Set(browses.values.map(\.service))).sorted()
        let want = !closed && monitorManager && !monitorRefused && powered && adapterPath != nil && !wanted.isEmpty
        if let app = monitorApp {
            if want && app.services == wanted { return }
            dropMonitor(unregister: true)
        }
        guard want, let adapterPath else { return }
        monitorApps += 1
        let path = root + "/monitor\(monitorApps)"
        monitorApp = (path, wanted, [])
        bus.export(path: path) { [weak self] call in self?.answerMonitor(path, nil, call) }
        for i in wanted.indices {
            bus.export(path: path + "/s\(i)") { [weak self] call in self?.answerMonitor(path, i, call) }
        }
        let asked = epoch
        call(adapterPath, Self.monitorManagerInterface, "RegisterMonitor", [.objectPath(path)]) { [self] r in
            guard case let .failure(e) = r, asked == epoch, monitorApp?.path == path else { return }
            PeerLog.warning("Bluetooth (BlueZ): no advertisement monitor on \(adapterName) (\(e)); a peer is lost \(Int(lostAfter)) s after its last report")
            monitorRefused = true
            dropMonitor(unregister: false)
        }
        PeerLog.write("Bluetooth (BlueZ): registering an advertisement monitor for \(wanted.count) service(s) on \(adapterName)")
    }

    /// Ends the monitor application (asking bluetoothd to drop it when it may still hold it).
    private func dropMonitor(unregister: Bool) {
        guard let app = monitorApp else { return }
        monitorApp = nil
        forgetMonitored()
        if unregister, let adapterPath {
            call(adapterPath, Self.monitorManagerInterface, "UnregisterMonitor", [.objectPath(app.path)]) { _ in }
        }
        bus.unexport(path: app.path)
        for i in app.services.indices { bus.unexport(path: app.path + "/s\(i)") }
    }

    /// The properties of monitor `i` (doc/org.bluez.AdvertisementMonitor.rst): or_patterns, one pattern, the
    /// Service Data structure of the browsed 128-bit UUID (AD type 0x21, the UUID's 16 octets from the structure's
    /// first data octet); every RSSI counts (rootcanal's sweeps from -2 to -125 dBm); found after 1 s of adverts,
    /// lost after `monitorLostAfter` without one; every advert sampled.
    static func monitorProperties(service: String, lostAfter: UInt16) -> [String: DBusValue]? {
        guard let uuid = PeerAdvert.uuid(bluezString: service) else { return nil }
        return [
            "Type": .string("or_patterns"),
            "RSSILowThreshold": .int16(-127),
            "RSSIHighThreshold": .int16(-127),
            "RSSILowTimeout": .uint16(lostAfter),
            "RSSIHighTimeout": .uint16(1),
            "RSSISamplingPeriod": .uint16(0),
            "Patterns": .array(
                .structure([.byte, .byte, .array(.byte)]),
                [.structure([.byte(0), .byte(0x21), .bytes(uuid)])]),
        ]
    }

    private func answerMonitor(_ app: String, _ index: Int?, _ call: DBusMessage) -> DBusMessage? {
        guard let current = monitorApp, current.path == app else {
            return call.errorReply(name: "org.freedesktop.DBus.Error.UnknownObject", message: "no such monitor")
        }
        guard let index else {
            guard call.interface == "org.freedesktop.DBus.ObjectManager", call.member == "GetManagedObjects" else {
                return call.errorReply(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "not supported")
            }
            let entries = current.services.indices.compactMap { i -> DBusDictEntry? in
                guard let p = Self.monitorProperties(service: current.services[i], lostAfter: monitorLostAfter) else { return nil }
                return DBusDictEntry(
                    .objectPath(app + "/s\(i)"),
                    .dictionary(
                        key: .string, value: .dictionary(key: .string, value: .variant), [DBusDictEntry(.string("org.bluez.AdvertisementMonitor1"), .stringVariantDictionary(p))]))
            }
            return call.reply([.dictionary(key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)), entries)])
        }
        guard index < current.services.count else { return call.errorReply(name: "org.freedesktop.DBus.Error.UnknownObject", message: "no such monitor") }
        let service = current.services[index]
        switch (call.interface, call.member) {
        case ("org.bluez.AdvertisementMonitor1", "Activate"):
            monitorApp?.active.insert(index)
            PeerLog.write("Bluetooth (BlueZ): advertisement monitor active on \(adapterName): a peer is lost \(monitorLostAfter) s after its last advert")
            return call.reply()
        case ("org.bluez.AdvertisementMonitor1", "Release"):
            // bluetoothd dropped it (refused its values, or deactivated it): discovery alone until the adapter is
            // next powered on, when the monitor is tried once more.
            PeerLog.warning("Bluetooth (BlueZ): bluetoothd released the advertisement monitor for \(service); a peer is lost \(Int(lostAfter)) s after its last report")
            monitorRefused = true
            dropMonitor(unregister: true)
            return call.reply()
        case ("org.bluez.AdvertisementMonitor1", "DeviceFound"), ("org.bluez.AdvertisementMonitor1", "DeviceLost"):
            guard let device = call.body.first?.string, let adapterPath, device.hasPrefix(adapterPath + "/") else {
                return call.errorReply(name: "org.bluez.Error.InvalidArguments", message: "no device of \(adapterName)")
            }
            if call.member == "DeviceFound" {
                // Bounded as the browses are: bluetoothd reports only devices it has objects for.
                guard monitored[device] != nil || monitored.count < Self.maximumTracked else { return call.reply() }
                monitored[device, default: []].insert(service)
                if let d = devices[device] { report(device, d, only: nil) }
            } else {
                monitored[device]?.remove(service)
                if monitored[device]?.isEmpty == true { monitored[device] = nil }
                if let d = devices[device] { deviceGone(d, service: service) }
            }
            return call.reply()
        default:
            return call.errorReply(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "not supported")
        }
    }

    /// Hands the peers a monitor held found back to the sweep, as seen now (held, they may have sent no other sign
    /// for longer than `lostAfter`).
    func forgetMonitored() {
        let held = heldByMonitor()
        monitored = [:]
        guard !held.isEmpty else { return }
        let now = Date()
        for (id, b) in browses {
            for token in b.lastSeen.keys where held.contains(Held(service: b.service, token: token)) { browses[id]?.lastSeen[token] = now }
        }
    }

    struct Held: Hashable {
        var service: String
        var token: UInt64
    }

    /// The (service, token) pairs of devices a monitor holds found: the sweep does not lose those.
    func heldByMonitor() -> Set<Held> {
        var out: Set<Held> = []
        for (path, services) in monitored {
            guard let d = devices[path] else { continue }
            for s in services {
                guard let payload = d.serviceData[s], let uuid = PeerAdvert.uuid(bluezString: s), let a = PeerAdvert(service: uuid, serviceDataPayload: payload) else { continue }
                out.insert(Held(service: s, token: a.token))
            }
        }
        return out
    }
}
