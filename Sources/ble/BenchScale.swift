// `ble bench --scale connections|advertisers`: how the stack and the virtual radio grow. One central host
// holding N connections with notifications flowing on all of them, or scanning N advertisers. Each size
// runs in a fresh process (so memory figures are not blurred by an earlier run) on a virtual clock; the
// report gives real time, CPU time and resident memory per connection or per advertiser at every size, to
// show whether the cost per unit stays flat (linear growth overall).
import Foundation
import BLEWire
import BLEHCI
import BLEGATT
import BLEHost
import BLETransport
import BLEVirtualRadio

enum ScaleBench {
    /// Resident set size of this process, in kB (/proc/self/status VmRSS).
    static func residentKB() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return 0 }
        return Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0
    }

    static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    final class Counter: HostCentralDelegate, HostPeripheralDelegate, @unchecked Sendable {
        var connected: [HostConnection] = []
        var values: [UInt16: Int] = [:]
        var total = 0
        var seen = Set<[UInt8]>()
        var reports = 0
        func host(_ host: LEHost, didReceive report: AdvertisingReport) { reports += 1; seen.insert(report.address.bytes) }
        func host(_ host: LEHost, didConnect connection: HostConnection) { if connection.role == .central { connected.append(connection) } }
        func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {}
        func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {}
        func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {
            values[connection.handle, default: 0] += 1
            total += 1
        }
        func host(_ host: LEHost, didReceiveRead request: HostReadRequest) {}
        func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) { host.respondToWrite(id: request.id, error: nil) }
        func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {}
        func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {}
    }

    /// One central, `n` peripherals; each peripheral notifies `each` 20-octet values once subscribed.
    static func connections(_ n: Int, each: Int) throws -> [String: Any] {
        let rss0 = residentKB(), t0 = now(), cpu0 = cpuSeconds()
        let air = VirtualAir(loop: EventLoop(label: "scale", clock: .virtual))
        let central = try HostFactory.makeHost(on: air, name: "central")
        let counter = Counter()
        var peripherals: [LEHost] = []
        var valueHandle: UInt16 = 0, cccd: UInt16 = 0
        for i in 0..<n {
            let p = try HostFactory.makeHost(on: air, name: "p\(i)")
            let h = try air.loop.sync { () throws -> GATTServiceHandles in
                p.peripheralDelegate = counter
                p.powerOn()
                return try p.addService(
                    GATTServiceDefinition(
                        uuid: BluetoothUUID(0xFFF0),
                        characteristics: [
                            GATTCharacteristicDefinition(uuid: BluetoothUUID(0xFFF1), properties: [.notify], permissions: [], value: nil)
                        ]))
            }
            valueHandle = h.characteristics[0].value
            cccd = h.characteristics[0].clientConfiguration!
            peripherals.append(p)
        }
        air.loop.sync {
            central.centralDelegate = counter; central.powerOn()
        }
        air.loop.advance(by: .milliseconds(50))
        air.loop.sync {
            for p in peripherals {
                p.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6], interval: 0x20))
                central.connect(to: BluetoothAddress(bytes: (p.transport as! VirtualController).address.bytes))
            }
        }
        var virtualSeconds = 0.0
        while air.loop.sync({ counter.connected.count < n }) && virtualSeconds < Double(n) + 30 {
            air.loop.advance(by: .milliseconds(100))
            virtualSeconds += 0.1
        }
        let connectedAt = now()
        let rssConnected = residentKB()
        let links = air.loop.sync { counter.connected }
        guard links.count == n else { throw BenchError("only \(links.count) of \(n) connections came up") }
        air.loop.sync { for c in links { c.gatt(.write(handle: cccd, value: [1, 0])) { _ in } } }
        air.loop.advance(by: .seconds(1))
        // Notifications on every link at once, in rounds, as buffers allow.
        let payload = [UInt8](repeating: 0x5A, count: 20)
        var sent = [Int](repeating: 0, count: n)
        let flowStart = now()
        while air.loop.sync({ counter.total < n * each }) {
            air.loop.sync {
                for (i, p) in peripherals.enumerated() where sent[i] < each {
                    while sent[i] < each && p.updateValue(payload, forHandle: valueHandle) { sent[i] += 1 }
                }
            }
            air.loop.advance(by: .milliseconds(10))
        }
        let flowSeconds = now() - flowStart
        let perLink = air.loop.sync { counter.values.values.sorted() }
        let result: [String: Any] = [
            "scale": "connections", "n": n, "notifications_each": each,
            "connected_all": perLink.count == n && perLink.allSatisfy { $0 == each },
            "setup_seconds": connectedAt - t0, "flow_seconds": flowSeconds,
            "notifications_per_s": Double(n * each) / flowSeconds,
            "cpu_seconds": cpuSeconds() - cpu0, "rss_kb": rssConnected - rss0,
            "kb_per_connection": Double(rssConnected - rss0) / Double(n),
            "cpu_ms_per_connection": (cpuSeconds() - cpu0) * 1000 / Double(n),
        ]
        air.loop.sync {
            central.powerOff(); for p in peripherals { p.powerOff() }
        }
        return result
    }

    final class NullSink: HCITransportSink, @unchecked Sendable {
        func transport(didReceive packet: HCIPacket) {}
        func transportDidClose(error: (any Error)?) {}
    }

    /// One scanning central, `n` advertisers (controllers driven over HCI, advertising every 100 ms).
    static func advertisers(_ n: Int) throws -> [String: Any] {
        let rss0 = residentKB(), t0 = now(), cpu0 = cpuSeconds()
        let air = VirtualAir(loop: EventLoop(label: "scale", clock: .virtual))
        let sink = NullSink()
        var controllers: [VirtualController] = []
        for i in 0..<n {
            let c = air.addController(position: VirtualPosition(x: Double(i % 100), y: Double(i / 100), z: 0))
            controllers.append(c)
        }
        air.loop.sync {
            for (i, c) in controllers.enumerated() {
                try? c.open(sink: sink)
                c.send(
                    HCICommand.leSetAdvertisingParameters(
                        LESetAdvertisingParameters(
                            advertisingIntervalMin: 0x00A0, advertisingIntervalMax: 0x00A0, advertisingType: .nonConnectableUndirected,
                            ownAddressType: 0, peerAddressType: 0, peerAddress: .zero, advertisingChannelMap: 7, advertisingFilterPolicy: 0)
                    ).encode())
                let name = Array("dev\(i)".utf8)
                c.send(HCICommand.leSetAdvertisingData([2, 1, 6, UInt8(name.count + 1), 9] + name).encode())
                c.send(HCICommand.leSetAdvertisingEnable(true).encode())
            }
        }
        let created = now()
        let rssCreated = residentKB()
        let central = try HostFactory.makeHost(on: air, name: "scanner")
        let counter = Counter()
        air.loop.sync {
            central.centralDelegate = counter; central.powerOn()
        }
        air.loop.advance(by: .milliseconds(20))
        air.loop.sync { central.startScanning(active: false, filterDuplicates: false) }
        let scanStart = now(), cpuScan = cpuSeconds()
        var virtual = 0.0
        while air.loop.sync({ counter.seen.count < n }) && virtual < 5 {
            air.loop.advance(by: .milliseconds(20))
            virtual += 0.02
        }
        let virtualToSeeAll = virtual
        // Then one more simulated second of steady scanning, to measure the per-report cost.
        let reportsBefore = air.loop.sync { counter.reports }
        let steadyStart = now(), cpuSteady = cpuSeconds()
        air.loop.advance(by: .seconds(1))
        let steadyReports = air.loop.sync { counter.reports } - reportsBefore
        let steadyReal = now() - steadyStart, steadyCPU = cpuSeconds() - cpuSteady
        let seen = air.loop.sync { counter.seen.count }
        let result: [String: Any] = [
            "scale": "advertisers", "n": n, "seen": seen,
            "setup_seconds": created - t0, "virtual_seconds_to_see_all": virtualToSeeAll,
            "real_seconds_to_see_all": steadyStart - scanStart, "cpu_seconds_to_see_all": steadyCPU > 0 ? cpuSteady - cpuScan : 0,
            "reports_per_virtual_second": steadyReports, "real_seconds_per_virtual_second": steadyReal,
            "cpu_us_per_report": steadyCPU * 1e6 / Double(max(steadyReports, 1)),
            "rss_kb": rssCreated - rss0, "kb_per_advertiser": Double(rssCreated - rss0) / Double(n),
            "cpu_seconds": cpuSeconds() - cpu0,
        ]
        air.loop.sync { central.powerOff() }
        return result
    }

    /// Runs each size in a child process (`--scale KIND --count N --single`) and prints a table.
    static func sweep(kind: String, sizes: [Int], each: Int) throws {
        let me = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var rows: [[String: Any]] = []
        for n in sizes {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: me)
            p.arguments = ["bench", "--scale", kind, "--count", String(n), "--single", "--each", String(each)]
            let out = Pipe()
            p.standardOutput = out
            try p.run()
            let data = out.fileHandleForReading.readDataToEndOfFile()
            p.waitUntilExit()
            guard let line = String(decoding: data, as: UTF8.self).split(separator: "\n").last,
                let obj = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            else {
                throw BenchError("size \(n) produced no result")
            }
            rows.append(obj)
            if kind == "connections" {
                print(
                    String(
                        format: "%5d connections: all up and notified %@; setup %.2f s, %.0f notifications/s, CPU %.2f ms/connection, %.1f kB/connection",
                        n, (obj["connected_all"] as? Bool ?? false) ? "yes" : "NO", obj["setup_seconds"] as? Double ?? 0,
                        obj["notifications_per_s"] as? Double ?? 0, obj["cpu_ms_per_connection"] as? Double ?? 0, obj["kb_per_connection"] as? Double ?? 0))
            } else {
                print(
                    String(
                        format: "%6d advertisers: seen %d in %.2f virtual s (%.2f s real); %.0f reports per simulated second at %.2f µs CPU each; %.2f kB/advertiser",
                        n, obj["seen"] as? Int ?? 0, obj["virtual_seconds_to_see_all"] as? Double ?? 0, obj["real_seconds_to_see_all"] as? Double ?? 0,
                        Double(obj["reports_per_virtual_second"] as? Int ?? 0), obj["cpu_us_per_report"] as? Double ?? 0, obj["kb_per_advertiser"] as? Double ?? 0))
            }
            fflush(nil)
        }
        // The cost of one more unit between consecutive sizes: flat figures mean linear growth.
        for i in rows.indices.dropFirst() {
            let (a, b) = (rows[i - 1], rows[i])
            let dn = Double((b["n"] as? Int ?? 0) - (a["n"] as? Int ?? 0))
            let dkb = Double((b["rss_kb"] as? Int ?? 0) - (a["rss_kb"] as? Int ?? 0))
            let dcpu = (b["cpu_seconds"] as? Double ?? 0) - (a["cpu_seconds"] as? Double ?? 0)
            print(
                String(
                    format: "  from %d to %d: %.2f kB and %.3f ms of CPU per added %@", a["n"] as? Int ?? 0, b["n"] as? Int ?? 0,
                    dkb / dn, dcpu * 1000 / dn, kind == "connections" ? "connection" : "advertiser"))
        }
        let json = try JSONSerialization.data(withJSONObject: ["scale": kind, "runs": rows], options: [.sortedKeys])
        print(String(decoding: json, as: UTF8.self))
    }
}
