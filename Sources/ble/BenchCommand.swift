// `ble bench`: moves data between a central and a peripheral and reports throughput, CPU time and round
// trips, with one JSON line at the end. Both sides run in this process on the virtual radio (airtime not
// modelled yet: this measures the host stack's own cost).
import ArgumentParser
import Foundation
import BLEWire
import BLEHCI
import BLEGATT
import BLEL2CAP
import BLEHost
import BLETransport
import BLEVirtualRadio

/// The flat form of `ble bench` (every option, `--mode`, `--airtime`, `--sweep`, `--scale`, `--role`): the
/// default when no subcommand is named, kept for scripts. The subcommands (BenchSubcommands.swift) take only
/// the options that apply to them and run this.
struct BenchClassicCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "classic", abstract: "Every bench option at once (the form before the subcommands).", shouldDisplay: false)

    enum Mode: String, ExpressibleByArgument, CaseIterable { case notify, write, rtt, read, l2cap }

    @Option(
        help:
            "notify (peripheral → central), write (without response, central → peripheral), rtt (write-with-response round trips), read, l2cap (SDUs over a credit-based channel, central → peripheral)."
    )
    var mode: Mode = .notify
    @Option(help: "Payload size in octets (at most ATT_MTU − 3 = 244 here).")
    var size = 20
    @Option(help: "Number of packets (round trips for rtt and read).")
    var count = 100_000
    @Option(help: "The virtual controllers' HCI ACL buffer size in octets (27…65535; real controllers report 27 to 1021).")
    var aclBuffer = 251

    enum API: String, ExpressibleByArgument { case host, corebluetooth }
    @Option(
        help:
            "host: the host core's API; corebluetooth: end to end through the Core Bluetooth API (notify: CBPeripheralManager.updateValue to the CBPeripheral delegate; l2cap: CBL2CAPChannel streams on run loop threads, --size octets per write)."
    )
    var api: API = .host
    @Flag(help: "With --api corebluetooth --mode l2cap: schedule both ends' streams on one run loop thread instead of one each.")
    var oneStreamThread = false

    @Flag(help: "Charge airtime on the virtual radio (connection events, PHY, data length) and compare with the theoretical maximum.")
    var airtime = false
    @Option(help: "With --airtime: 1m, 2m, coded-s2 or coded-s8.")
    var phy: String = "1m"
    @Option(help: "With --airtime: LE data length, 27…251 octets.")
    var dataLength = 251
    @Option(help: "With --airtime, or --role central: connection interval in ms (7.5…4000).")
    var interval = 7.5
    @Option(help: "With --airtime: connection event length in ms (default: the whole interval).")
    var eventLength: Double?
    @Option(help: "With --airtime: probability that a packet is lost and sent again (0…0.9).")
    var loss = 0.0
    @Option(help: "With --airtime or --sweep: time (µs) the controller keeps at the end of each event; 3600 matches Nordic's SoftDevice.")
    var controllerReserve = 0.0
    @Option(help: "Run the airtime grid (LE 1M/2M × data length 27/251 × 7.5/15/30/50 ms) and write an SVG plot here.")
    var sweep: String?

    @Option(help: "Scale run on the virtual radio: connections (one central, --count peripherals notifying) or advertisers (one scanner, --count advertisers).")
    var scale: String?
    @Option(help: "With --scale: the sizes to run, each in its own process (default 25,50,100 or 1000,2500,5000,10000).")
    var sizes: String?
    @Option(help: "With --scale connections: notifications per connection.")
    var each = 200
    @Flag(help: .hidden)
    var single = false
    @Option(
        help: "Run one side over BLE_TRANSPORT with bumble-bench's GATT protocol (with --mode l2cap: its L2CAP protocol, SPSM 128): central (connects to --peer) or peripheral.")
    var role: String?
    @Option(help: "With --role: send, receive, ping or pong (bumble-bench's scenarios).")
    var scenario: String?
    @Option(help: "With --role central: the peripheral's address (default bumble-bench's F1:F1:F1:F1:F1:F1/R); with --role peripheral: our static random address.")
    var peer: String = "F1:F1:F1:F1:F1:F1/R"
    @Option(help: "With --role: give up after this many seconds.")
    var timeout: Double = 120

    /// The flat form accepts every option, so it checks that each one given applies to what runs: an option
    /// that would be ignored is an error, as in the subcommands.
    /// The arguments a subcommand built for this form; nil when the user typed the flat form.
    nonisolated(unsafe) static var forwardedArguments: [String]?

    func validate() throws {
        let args = Self.forwardedArguments ?? Array(CommandLine.arguments.dropFirst())
        func given(_ option: String) -> Bool { args.contains { $0 == option || $0.hasPrefix(option + "=") } }
        let kinds = [("--role", role != nil), ("--scale", scale != nil), ("--sweep", sweep != nil), ("--airtime", airtime)].filter(\.1).map(\.0)
        if kinds.count > 1 { throw ValidationError("\(kinds.joined(separator: " and ")) cannot be used together") }
        let kind = kinds.first
        let onlyWith: [(String, Set<String>)] = [
            ("--phy", ["--airtime"]), ("--data-length", ["--airtime"]), ("--event-length", ["--airtime"]), ("--loss", ["--airtime"]),
            ("--controller-reserve", ["--airtime", "--sweep"]), ("--interval", ["--airtime", "--role"]),
            ("--sizes", ["--scale"]), ("--each", ["--scale"]),
            ("--scenario", ["--role"]), ("--peer", ["--role"]), ("--timeout", ["--role"]),
        ]
        for (option, modes) in onlyWith where given(option) && !(kind.map(modes.contains) ?? false) {
            throw ValidationError("\(option) applies to \(modes.sorted().joined(separator: " or "))")
        }
        if let kind, given("--api") { throw ValidationError("--api does not apply to \(kind)") }
        if let kind, given("--acl-buffer") { throw ValidationError("--acl-buffer does not apply to \(kind)") }
        if oneStreamThread && !(api == .corebluetooth && mode == .l2cap) {
            throw ValidationError("--one-stream-thread applies to --api corebluetooth --mode l2cap")
        }
    }

    func run() throws {
        if let role {
            guard let r = BenchPeer.Role(rawValue: role) else { throw ValidationError("--role central or peripheral") }
            let sc = BenchPeer.Scenario(rawValue: scenario ?? (r == .central ? "send" : "receive"))
            guard let sc else { throw ValidationError("--scenario send, receive, ping or pong") }
            guard let address = BluetoothAddress(string: peer, type: .random) else { throw ValidationError("--peer: not an address") }
            let result: BenchResult
            if let bluez = BlueZTool.options {
                // bluetoothd keeps the adapter: bumble-bench's L2CAP protocol over the kernel's sockets (BenchPeerBlueZ).
                guard mode == .l2cap else {
                    throw ToolError(
                        BlueZTool.needsOwnController(bluez) + ". bumble-bench's GATT protocol needs our own host; its L2CAP protocol "
                            + "(`ble bench peer --l2cap`) runs here, over the kernel's L2CAP sockets")
                }
                let packet = CommandLine.arguments.contains("--size") ? size : 1024
                guard (12...65_535).contains(packet) else { throw ValidationError("--size must be 12…65535 with --role and --mode l2cap") }
                let total = CommandLine.arguments.contains("--count") ? count : (sc == .ping ? 100 : max(1, 1_000_000 / packet))
                let bench = BenchPeerBlueZ(options: bluez, role: r, scenario: sc, size: packet, count: total, peer: address)
                result = try bench.run(timeout: timeout, interval: CommandLine.arguments.contains("--interval") ? interval : nil)
            } else if mode == .l2cap {
                // bumble-bench's L2CAP packets count their 2-octet length prefix; 1024 fills one SDU.
                let packet = CommandLine.arguments.contains("--size") ? size : 1024
                guard (12...65_535).contains(packet) else { throw ValidationError("--size must be 12…65535 with --role and --mode l2cap") }
                let total = CommandLine.arguments.contains("--count") ? count : (sc == .ping ? 100 : max(1, 1_000_000 / packet))
                let bench = try BenchPeerL2CAP(role: r, scenario: sc, size: packet, count: total, peer: address)
                bench.intervalMilliseconds = interval
                result = try bench.run(timeout: timeout)
            } else {
                guard mode == .write || mode == .notify else { throw ValidationError("--role runs bumble-bench's GATT protocol (default) or --mode l2cap") }
                guard (10...244).contains(size) else { throw ValidationError("--size must be 10…244 with --role") }
                let total = CommandLine.arguments.contains("--count") ? count : (sc == .ping ? 100 : max(1, 1_000_000 / size))
                let bench = try BenchPeer(role: r, scenario: sc, size: size, count: total, peer: address)
                bench.intervalMilliseconds = interval
                result = try bench.run(timeout: timeout)
            }
            print(result.summary)
            print(result.json)
            return
        }
        if let scale {
            guard scale == "connections" || scale == "advertisers" else { throw ValidationError("--scale connections or advertisers") }
            if single {
                let r = scale == "connections" ? try ScaleBench.connections(count, each: each) : try ScaleBench.advertisers(count)
                print(String(decoding: try JSONSerialization.data(withJSONObject: r, options: [.sortedKeys]), as: UTF8.self))
                return
            }
            let list = (sizes ?? (scale == "connections" ? "25,50,100" : "1000,2500,5000,10000")).split(separator: ",").compactMap { Int($0) }
            return try ScaleBench.sweep(kind: scale, sizes: list, each: each)
        }
        if let sweep { return try runSweep(to: sweep) }
        if airtime { return try runAirtime() }
        if mode == .l2cap {
            guard (1...65_535).contains(size) else { throw ValidationError("--size must be 1…65535 with --mode l2cap (one SDU)") }
        } else {
            guard (1...244).contains(size) else { throw ValidationError("--size must be 1…244") }
        }
        let result: BenchResult
        if api == .corebluetooth {
            switch mode {
            case .notify:
                result = try CoreBluetoothNotifyBench(size: size, count: count).run()
            case .l2cap:
                guard (27...65_535).contains(aclBuffer) else { throw ValidationError("--acl-buffer must be 27…65535") }
                // Unless told otherwise: 100 MB in 32 KB writes.
                let writeSize = CommandLine.arguments.contains("--size") ? size : 32_768
                let writes = CommandLine.arguments.contains("--count") ? count : 100_000_000 / writeSize
                result = try CoreBluetoothL2CAPBench(writeSize: writeSize, count: writes, aclBuffer: aclBuffer, sharedThread: oneStreamThread).run()
            default:
                throw ValidationError("--api corebluetooth supports --mode notify and l2cap")
            }
        } else {
            guard (27...65_535).contains(aclBuffer) else { throw ValidationError("--acl-buffer must be 27…65535") }
            result = try Bench(mode: mode, size: size, count: count, aclBuffer: aclBuffer).run()
        }
        print(result.summary)
        print(result.json)
    }
}

extension BenchClassicCommand {
    func runAirtime() throws {
        guard let p = LEPHY(rawValue: phy) else { throw ValidationError("--phy must be one of 1m, 2m, coded-s2, coded-s8") }
        guard (27...251).contains(dataLength) else { throw ValidationError("--data-length must be 27…251") }
        guard interval >= 7.5, interval <= 4000 else { throw ValidationError("--interval must be 7.5…4000 ms") }
        guard (0...0.9).contains(loss) else { throw ValidationError("--loss must be 0…0.9") }
        guard mode == .notify || mode == .write || mode == .l2cap else { throw ValidationError("--airtime supports --mode notify, write and l2cap") }
        // The default size fills one LL packet (an SDU of 64 KB − 1 for l2cap); an explicit --size is kept.
        let payload = CommandLine.arguments.contains("--size") ? size : mode == .l2cap ? 65_535 : min(dataLength - 7, 244)
        var settings = AirtimeSettings(phy: p, dataLength: dataLength, intervalMilliseconds: interval, eventLengthMilliseconds: eventLength, lossRate: loss)
        settings.reserveMicroseconds = controllerReserve
        let total = CommandLine.arguments.contains("--count") ? count : max(mode == .l2cap ? 16 : 100, 1_000_000 / payload)
        let o = try AirtimeBench(settings: settings, mode: mode, size: payload, count: total).run()
        print(o.result.summary + " (simulated time, on the airtime model's virtual clock)")
        print(String(format: "theoretical maximum %.1f kB/s (%.1f kbit/s); reached %.1f %%", o.theoretical / 1000, o.theoretical * 8 / 1000, o.fraction * 100))
        var json = o.result.json
        json.removeLast()
        print(
            json
                + ",\"theoretical_bytes_per_s\":\(o.theoretical),\"fraction\":\(o.fraction),\"phy\":\"\(p.rawValue)\",\"data_length\":\(dataLength),\"interval_ms\":\(interval),\"loss\":\(loss)}"
        )
    }

    func runSweep(to path: String) throws {
        print("PHY    DL   CI (ms)   theoretical kbit/s   achieved kbit/s   fraction")
        let points = try AirtimeSweep.run(
            bytesPerPoint: CommandLine.arguments.contains("--count") ? count * 244 : 250_000, loss: loss,
            reserve: controllerReserve
        ) { p in
            print(
                String(
                    format: "%-5@ %4d %8.1f %20.1f %17.1f %9.1f %%", p.phy.rawValue, p.dataLength, p.interval,
                    p.theoretical * 8 / 1000, p.achieved * 8 / 1000, p.achieved / p.theoretical * 100))
            fflush(nil)
        }
        try AirtimeSweep.svg(points).write(toFile: path, atomically: true, encoding: .utf8)
        let worst = points.map { $0.achieved / $0.theoretical }.min() ?? 0
        print(String(format: "worst fraction %.1f %%; plot written to %@", worst * 100, path))
    }
}

struct BenchResult {
    var mode: String, bytes: Int, packets: Int, seconds: Double, cpuSeconds: Double, rtts: [Double]
    /// What the measured stretch cost in detail (CPU split, system calls, HCI packets), when measured.
    var cost: BenchMeter.Cost?
    var throughput: Double { Double(bytes) / seconds }
    /// Processor seconds per megabyte (10⁶ octets) moved, and microseconds per packet.
    var cpuSecondsPerMB: Double { bytes > 0 ? cpuSeconds / (Double(bytes) / 1e6) : 0 }
    var cpuMicrosecondsPerPacket: Double { packets > 0 ? cpuSeconds * 1e6 / Double(packets) : 0 }
    var summary: String {
        var s = String(
            format: "%@: %d bytes in %.3f s = %.1f kB/s (%.0f packets/s), CPU %.3f s (%.3f s/MB, %.2f µs/packet)", mode, bytes,
            seconds, throughput / 1000, Double(packets) / seconds, cpuSeconds, cpuSecondsPerMB, cpuMicrosecondsPerPacket)
        if !rtts.isEmpty { s += String(format: ", RTT p50 %.3f ms p99 %.3f ms", percentile(0.5), percentile(0.99)) }
        if let cost { s += "\n  " + cost.summary }
        return s
    }
    func percentile(_ p: Double) -> Double {
        let sorted = rtts.sorted()
        return sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }
    var json: String {
        var j = "{\"mode\":\"\(mode)\",\"bytes\":\(bytes),\"packets\":\(packets),\"seconds\":\(seconds),\"throughput_bytes_per_s\":\(throughput),\"cpu_seconds\":\(cpuSeconds)"
        j += ",\"cpu_seconds_per_mb\":\(cpuSecondsPerMB),\"cpu_us_per_packet\":\(cpuMicrosecondsPerPacket)"
        if let cost { j += "," + cost.jsonFields }
        if !rtts.isEmpty { j += ",\"rtt_ms\":{\"p50\":\(percentile(0.5)),\"p99\":\(percentile(0.99))}" }
        return j + "}"
    }
}

func cpuSeconds() -> Double {
    var u = rusage()
    getrusage(RUSAGE_SELF.rawValue, &u)
    return Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) / 1e6 + Double(u.ru_stime.tv_sec) + Double(u.ru_stime.tv_usec) / 1e6
}

final class Bench: HostCentralDelegate, HostPeripheralDelegate, @unchecked Sendable {
    let mode: BenchClassicCommand.Mode, size: Int, count: Int
    let air = VirtualAir(loop: EventLoop(label: "bench", clock: .real))
    var central: LEHost!, peripheral: LEHost!
    var link: HostConnection?
    var valueHandle: UInt16 = 0
    var sent = 0, received = 0, receivedBytes = 0
    var start = 0.0, end = 0.0, cpuStart = 0.0
    var rtts: [Double] = []
    var lastSend = 0.0
    let done = DispatchSemaphore(value: 0)
    let payload: [UInt8]
    let meter = BenchMeter()
    var startSnapshot: BenchMeter.Snapshot?, endSnapshot: BenchMeter.Snapshot?

    let aclBuffer: Int

    init(mode: BenchClassicCommand.Mode, size: Int, count: Int, aclBuffer: Int = 251) {
        self.mode = mode; self.size = size; self.count = count; self.aclBuffer = aclBuffer
        payload = (0..<size).map { UInt8($0 & 0xFF) }
    }

    func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    func run() throws -> BenchResult {
        central = try HostFactory.makeHost(on: air, name: "bench-central")
        peripheral = try HostFactory.makeHost(on: air, name: "bench-peripheral")
        for h in [central!, peripheral!] { (h.transport as! VirtualController).aclBufferSize = UInt16(aclBuffer) }
        let handles = try air.loop.sync { () throws -> GATTServiceHandles in
            central.centralDelegate = self
            peripheral.peripheralDelegate = self
            central.powerOn(); peripheral.powerOn()
            return try peripheral.addService(
                GATTServiceDefinition(
                    uuid: BluetoothUUID(string: "50DB505C-8AC4-4738-8448-3B1D9CC09CC5")!,
                    characteristics: [
                        GATTCharacteristicDefinition(
                            uuid: SpeedProtocol.rx,
                            properties: [.notify, .read, .write, .writeWithoutResponse], permissions: .readWrite, value: nil)
                    ]))
        }
        valueHandle = handles.characteristics[0].value
        let cccd = handles.characteristics[0].clientConfiguration!
        while air.loop.sync({ central.powerState != .on || peripheral.powerState != .on }) { usleep(1000) }
        let target = BluetoothAddress(bytes: (peripheral.transport as! VirtualController).address.bytes)
        air.loop.sync {
            peripheral.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6], interval: 0x20)); central.connect(to: target)
        }
        while air.loop.sync({ link == nil }) { usleep(1000) }
        let ready = DispatchSemaphore(value: 0)
        air.loop.sync {
            link!.exchangeMTU(247) { _ in
                self.link!.gatt(.write(handle: cccd, value: [1, 0])) { _ in ready.signal() }
            }
        }
        ready.wait()
        air.loop.sync {
            start = now(); cpuStart = cpuSeconds(); startSnapshot = meter.snapshot()
            switch mode {
            case .notify: pumpNotifications()
            case .write: pumpWrites()
            case .rtt, .read: roundTrip()
            case .l2cap: openChannel()
            }
        }
        let progress = BenchProgress(label: mode.rawValue, total: count, loop: air.loop) { [unowned self] in received }
        done.wait()
        progress.finish()
        let cost = air.loop.sync { startSnapshot.flatMap { a in endSnapshot.map { BenchMeter.cost(from: a, to: $0) } } }
        return BenchResult(
            mode: mode.rawValue, bytes: receivedBytes, packets: received, seconds: end - start, cpuSeconds: cost?.cpu ?? 0,
            rtts: rtts, cost: cost)
    }

    // Notify: the peripheral sends while the transmit queue has room, and resumes when told it drained.
    func pumpNotifications() {
        while sent < count {
            guard peripheral.updateValue(payload, forHandle: valueHandle) else { return }
            sent += 1
        }
    }

    func hostIsReadyToUpdateSubscribers(_ host: LEHost) { if mode == .notify { pumpNotifications() } }

    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {
        received += 1
        receivedBytes += value.count
        if received == count { finish() }
    }

    // Write without response: the central writes while it may, and resumes when buffers free.
    func pumpWrites() {
        guard let link else { return }
        while sent < count {
            // Refused when full; the host then calls connectionIsReadyToSendWriteWithoutResponse.
            guard link.writeWithoutResponse(handle: valueHandle, value: payload) else { return }
            sent += 1
        }
    }

    func host(_ host: LEHost, connectionIsReadyToSendWriteWithoutResponse connection: HostConnection) { pumpWrites() }

    func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) {
        if mode == .write {
            received += 1
            receivedBytes += request.items.reduce(0) { $0 + $1.value.count }
            if received == count { finish() }
        }
        host.respondToWrite(id: request.id, error: nil)
    }

    // Round trips: write with response (rtt) or read, one after the other.
    func roundTrip() {
        guard let link else { return }
        lastSend = now()
        let procedure: GATTClient.Procedure = mode == .rtt ? .write(handle: valueHandle, value: payload) : .read(handle: valueHandle)
        link.gatt(procedure) { [self] r in
            rtts.append((now() - lastSend) * 1000)
            received += 1
            receivedBytes += size
            if received == count { finish() } else { roundTrip() }
        }
    }

    func finish() {
        end = now()
        endSnapshot = meter.snapshot()
        done.signal()
    }

    // L2CAP: the central sends SDUs on a credit-based channel while the host takes them; the peripheral
    // consumes each as it arrives (so credits flow back).
    var channel: HostL2CAPChannel?

    func openChannel() {
        guard let link else { return }
        let params = L2CAPChannelParameters(
            mtu: UInt16(clamping: max(size, 2048)), mps: UInt16(clamping: max(23, central.aclBufferSize - 4)),
            window: 256 * 1024)
        let psm = peripheral.publishL2CAP(parameters: params) { [self] ch in
            ch.onReceive = { [unowned ch, self] sdu in
                ch.consumed(sdu.count)
                received += 1
                receivedBytes += sdu.count
                if receivedBytes == size * count { finish() }
            }
        }
        link.openL2CAPChannel(psm: psm!, parameters: params) { [self] r in
            guard case let .success(chs) = r else { fatalError("could not open the channel: \(r)") }
            channel = chs[0]
            channel!.sendQueueLimit = 256 * 1024
            channel!.onWritable = { [unowned self] in pumpChannel() }
            start = now(); cpuStart = cpuSeconds(); startSnapshot = meter.snapshot()
            pumpChannel()
        }
    }

    func pumpChannel() {
        guard let channel else { return }
        while sent < count, channel.send(payload) { sent += 1 }
    }

    func host(_ host: LEHost, didReceive report: AdvertisingReport) {}
    func host(_ host: LEHost, didConnect connection: HostConnection) { if host === central { link = connection } }
    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {}
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {}
    func host(_ host: LEHost, didReceiveRead request: HostReadRequest) { host.respondToRead(id: request.id, result: .success(payload)) }
    func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {}
    func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {}
}
