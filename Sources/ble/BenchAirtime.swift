// `ble bench --airtime`: the same transfers on a virtual radio that charges airtime (AirtimeModel): the
// link is set to the requested PHY, data length and connection interval, the data moves in connection
// events, and the result is compared with the model's theoretical maximum. Runs on a virtual clock, so a
// megabyte at 30 kB/s takes a second or two of real time, not thirty. `--sweep FILE.svg` runs a grid.
import Foundation
import BLEWire
import BLEHCI
import BLEGATT
import BLEL2CAP
import BLEHost
import BLETransport
import BLEVirtualRadio

struct AirtimeSettings {
    var phy: LEPHY
    var dataLength: Int
    var intervalMilliseconds: Double
    var eventLengthMilliseconds: Double?
    var lossRate: Double
    var reserveMicroseconds = 0.0

    var model: AirtimeModel {
        var m = AirtimeModel(
            phy: phy, dataLength: dataLength, connectionIntervalMilliseconds: intervalMilliseconds,
            eventLengthMilliseconds: eventLengthMilliseconds, lossRate: lossRate)
        m.controllerReserveMicroseconds = reserveMicroseconds
        return m
    }
}

struct AirtimeOutcome {
    var result: BenchResult
    var theoretical: Double
    var fraction: Double { result.throughput / theoretical }
}

final class AirtimeBench: HostCentralDelegate, HostPeripheralDelegate, @unchecked Sendable {
    let settings: AirtimeSettings
    let mode: BenchClassicCommand.Mode
    let size: Int, count: Int
    let air = VirtualAir(loop: EventLoop(label: "bench.air", clock: .virtual))
    var central: LEHost!, peripheral: LEHost!
    var link: HostConnection?
    var valueHandle: UInt16 = 0
    var sent = 0, received = 0, receivedBytes = 0
    var firstArrival: LoopTime?, lastArrival: LoopTime = 0
    let payload: [UInt8]

    init(settings: AirtimeSettings, mode: BenchClassicCommand.Mode, size: Int, count: Int) {
        self.settings = settings
        self.mode = mode
        self.size = size
        self.count = count
        payload = (0..<size).map { UInt8($0 & 0xFF) }
        var template = AirtimeModel(eventLengthMilliseconds: settings.eventLengthMilliseconds, lossRate: settings.lossRate)
        template.controllerReserveMicroseconds = settings.reserveMicroseconds
        template.connectionIntervalMicroseconds = settings.intervalMilliseconds * 1000
        air.airtime = template
    }

    func run() throws -> AirtimeOutcome {
        central = try HostFactory.makeHost(on: air, name: "bench-central")
        peripheral = try HostFactory.makeHost(on: air, name: "bench-peripheral")
        let handles = try air.loop.sync { () throws -> GATTServiceHandles in
            central.centralDelegate = self
            peripheral.peripheralDelegate = self
            peripheral.transmitQueueLimit = 64
            central.powerOn(); peripheral.powerOn()
            return try peripheral.addService(
                GATTServiceDefinition(
                    uuid: BluetoothUUID(string: "50DB505C-8AC4-4738-8448-3B1D9CC09CC5")!,
                    characteristics: [
                        GATTCharacteristicDefinition(
                            uuid: SpeedProtocol.rx,
                            properties: [.notify, .writeWithoutResponse], permissions: .readWrite, value: nil)
                    ]))
        }
        valueHandle = handles.characteristics[0].value
        let cccd = handles.characteristics[0].clientConfiguration!
        air.loop.advance(by: .milliseconds(20))
        let target = BluetoothAddress(bytes: (peripheral.transport as! VirtualController).address.bytes)
        air.loop.sync {
            peripheral.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6], interval: 0x20)); central.connect(to: target)
        }
        for _ in 0..<100 where air.loop.sync({ link == nil }) { air.loop.advance(by: .milliseconds(50)) }
        guard let link else { throw BenchError("no connection on the virtual radio") }
        // The link as asked: PHY, data length, interval; then ATT_MTU 247 and the subscription.
        let phyBits: UInt8 = settings.phy == .le1M ? 0x01 : settings.phy == .le2M ? 0x02 : 0x04
        air.loop.sync {
            central.setPHY(handle: link.handle, phys: phyBits, codedOptions: settings.phy == .codedS2 ? 1 : settings.phy == .codedS8 ? 2 : 0)
            central.setDataLength(handle: link.handle, octets: UInt16(settings.dataLength))
            central.updateConnection(handle: link.handle, interval: UInt16((settings.intervalMilliseconds / 1.25).rounded()), timeout: 3200)
            link.exchangeMTU(247) { _ in link.gatt(.write(handle: cccd, value: [1, 0])) { _ in } }
        }
        air.loop.advance(by: .seconds(3))
        if mode == .l2cap { try openChannel(on: link) }
        let cpuStart = cpuSeconds()
        air.loop.sync {
            switch mode {
            case .write: pumpWrites()
            case .l2cap: pumpChannel()
            default: pumpNotifications()
            }
        }
        // Virtual time runs until everything has crossed (or far longer than the model allows).
        let budget = Double(count * size) / max(settings.model.theoreticalThroughput(attPayload: size) * 0.2, 1) + 10
        var simulated = 0.0
        while air.loop.sync({ received < count }) && simulated < budget {
            air.loop.advance(by: .milliseconds(200))
            simulated += 0.2
        }
        let cpu = cpuSeconds() - cpuStart
        guard let first = firstArrival, received > 1 else { throw BenchError("nothing arrived") }
        // From the first arrival to the last: the bytes after the first packet, over that time.
        let seconds = Double(lastArrival - first) / 1e9
        let result = BenchResult(
            mode: "\(mode.rawValue) (airtime \(settings.phy.rawValue), DL \(settings.dataLength), CI \(settings.intervalMilliseconds) ms)",
            bytes: receivedBytes - size, packets: received - 1, seconds: seconds, cpuSeconds: cpu, rtts: [])
        var model = settings.model
        model.lossRate = 0
        // For a channel the ceiling is the link itself: every LL payload octet carrying application data.
        let theoretical = mode == .l2cap ? model.linkPayloadThroughput : model.theoreticalThroughput(attPayload: size)
        return AirtimeOutcome(result: result, theoretical: theoretical)
    }

    // L2CAP: a credit-based channel whose K-frames fill one LL PDU each (MPS = data length − 4), SDUs of
    // `size` octets from the central; the peripheral consumes each SDU as it arrives.
    var channel: HostL2CAPChannel?

    func openChannel(on link: HostConnection) throws {
        let params = L2CAPChannelParameters(mtu: UInt16(clamping: max(size, 23)), mps: UInt16(settings.dataLength - 4), window: 256 * 1024)
        var opened: Result<[HostL2CAPChannel], L2CAPOpenError>?
        air.loop.sync {
            let psm = peripheral.publishL2CAP(parameters: params) { [unowned self] ch in
                ch.onReceive = { [unowned self, unowned ch] sdu in
                    ch.consumed(sdu.count); arrived(sdu.count)
                }
            }
            link.openL2CAPChannel(psm: psm!, parameters: params) { opened = $0 }
        }
        air.loop.advance(by: .milliseconds(500))
        guard case let .success(chs)? = air.loop.sync({ opened }) else { throw BenchError("could not open the channel: \(String(describing: opened))") }
        channel = chs[0]
        air.loop.sync {
            chs[0].sendQueueLimit = 256 * 1024
            chs[0].onWritable = { [unowned self] in pumpChannel() }
        }
    }

    func pumpChannel() {
        guard let channel else { return }
        while sent < count, channel.send(payload) { sent += 1 }
    }

    func pumpNotifications() {
        while sent < count {
            guard peripheral.updateValue(payload, forHandle: valueHandle) else { return }
            sent += 1
        }
    }

    func pumpWrites() {
        guard let link else { return }
        while sent < count {
            guard link.writeWithoutResponse(handle: valueHandle, value: payload) else { return }
            sent += 1
        }
    }

    func arrived(_ bytes: Int) {
        let now = air.loop.now
        if firstArrival == nil { firstArrival = now }
        lastArrival = now
        received += 1
        receivedBytes += bytes
    }

    func hostIsReadyToUpdateSubscribers(_ host: LEHost) { if mode != .write { pumpNotifications() } }
    func host(_ host: LEHost, connectionIsReadyToSendWriteWithoutResponse connection: HostConnection) { if mode == .write { pumpWrites() } }
    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) { arrived(value.count) }
    func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) {
        if !request.needsResponse { for i in request.items { arrived(i.value.count) } }
        host.respondToWrite(id: request.id, error: nil)
    }
    func host(_ host: LEHost, didReceive report: AdvertisingReport) {}
    func host(_ host: LEHost, didConnect connection: HostConnection) { if host === central { link = connection } }
    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {}
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {}
    func host(_ host: LEHost, didReceiveRead request: HostReadRequest) { host.respondToRead(id: request.id, result: .success(payload)) }
    func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {}
    func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {}
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// The grid of the issue: LE 1M and 2M, data lengths 27 and 251, intervals 7.5, 15, 30 and 50 ms.
enum AirtimeSweep {
    static let phys: [LEPHY] = [.le1M, .le2M]
    static let dataLengths = [27, 251]
    static let intervals: [Double] = [7.5, 15, 30, 50]

    struct Point { var phy: LEPHY; var dataLength: Int; var interval: Double; var theoretical: Double; var achieved: Double }

    static func run(bytesPerPoint: Int, loss: Double, reserve: Double = 0, progress: (Point) -> Void) throws -> [Point] {
        var points: [Point] = []
        for phy in phys {
            for dl in dataLengths {
                for ci in intervals {
                    let size = min(dl - 7, 244)
                    var settings = AirtimeSettings(phy: phy, dataLength: dl, intervalMilliseconds: ci, eventLengthMilliseconds: nil, lossRate: loss)
                    settings.reserveMicroseconds = reserve
                    let bench = AirtimeBench(
                        settings: settings,
                        mode: .notify, size: size, count: max(50, bytesPerPoint / size))
                    let o = try bench.run()
                    let p = Point(phy: phy, dataLength: dl, interval: ci, theoretical: o.theoretical, achieved: o.result.throughput)
                    progress(p)
                    points.append(p)
                }
            }
        }
        return points
    }

    /// Throughput (kbit/s) against connection interval: one colour per PHY and data length, the
    /// theoretical maximum as a dashed line, what the stack achieved as a solid line with dots.
    static func svg(_ points: [Point]) -> String {
        let w = 860.0, h = 520.0, left = 80.0, right = 230.0, top = 40.0, bottom = 60.0
        let maxY = (points.map { max($0.theoretical, $0.achieved) }.max() ?? 1) * 8 / 1000 * 1.1
        let minX = 0.0, maxX = 55.0
        func x(_ v: Double) -> Double { left + (v - minX) / (maxX - minX) * (w - left - right) }
        func y(_ v: Double) -> Double { h - bottom - v / maxY * (h - top - bottom) }
        var s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(w))\" height=\"\(Int(h))\" font-family=\"sans-serif\" font-size=\"12\">\n"
        s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        s += "<text x=\"\(left)\" y=\"22\" font-size=\"15\">OpenCoreBluetooth on the airtime-modelled virtual radio: notification throughput</text>\n"
        // Axes and grid.
        s += "<line x1=\"\(left)\" y1=\"\(y(0))\" x2=\"\(x(maxX))\" y2=\"\(y(0))\" stroke=\"black\"/>\n"
        s += "<line x1=\"\(left)\" y1=\"\(y(0))\" x2=\"\(left)\" y2=\"\(top)\" stroke=\"black\"/>\n"
        for ci in intervals {
            s += "<line x1=\"\(x(ci))\" y1=\"\(y(0))\" x2=\"\(x(ci))\" y2=\"\(y(0) + 5)\" stroke=\"black\"/>"
            s += "<text x=\"\(x(ci))\" y=\"\(y(0) + 20)\" text-anchor=\"middle\">\(ci == ci.rounded() ? String(Int(ci)) : String(ci))</text>\n"
        }
        let step = maxY > 1000 ? 200.0 : maxY > 400 ? 100.0 : 50.0
        var t = 0.0
        while t <= maxY {
            s += "<line x1=\"\(left - 5)\" y1=\"\(y(t))\" x2=\"\(x(maxX))\" y2=\"\(y(t))\" stroke=\"#ddd\"/>"
            s += "<text x=\"\(left - 8)\" y=\"\(y(t) + 4)\" text-anchor=\"end\">\(Int(t))</text>\n"
            t += step
        }
        s += "<text x=\"\((left + x(maxX)) / 2)\" y=\"\(h - 15)\" text-anchor=\"middle\">connection interval (ms)</text>\n"
        s += "<text x=\"20\" y=\"\((top + y(0)) / 2)\" transform=\"rotate(-90 20 \((top + y(0)) / 2))\" text-anchor=\"middle\">throughput (kbit/s)</text>\n"
        let colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
        var series = 0
        for phy in phys {
            for dl in dataLengths {
                let pts = points.filter { $0.phy == phy && $0.dataLength == dl }.sorted { $0.interval < $1.interval }
                guard !pts.isEmpty else { continue }
                let c = colours[series % colours.count]
                let theo = pts.map { "\(x($0.interval)),\(y($0.theoretical * 8 / 1000))" }.joined(separator: " ")
                let got = pts.map { "\(x($0.interval)),\(y($0.achieved * 8 / 1000))" }.joined(separator: " ")
                s += "<polyline points=\"\(theo)\" fill=\"none\" stroke=\"\(c)\" stroke-dasharray=\"6 4\"/>\n"
                s += "<polyline points=\"\(got)\" fill=\"none\" stroke=\"\(c)\" stroke-width=\"2\"/>\n"
                for p in pts { s += "<circle cx=\"\(x(p.interval))\" cy=\"\(y(p.achieved * 8 / 1000))\" r=\"4\" fill=\"\(c)\"/>\n" }
                let ly = top + 20 + Double(series) * 40
                s += "<line x1=\"\(w - right + 20)\" y1=\"\(ly)\" x2=\"\(w - right + 50)\" y2=\"\(ly)\" stroke=\"\(c)\" stroke-width=\"2\"/>"
                s += "<text x=\"\(w - right + 58)\" y=\"\(ly + 4)\">\(phy == .le1M ? "LE 1M" : "LE 2M"), DL \(dl) achieved</text>\n"
                s += "<line x1=\"\(w - right + 20)\" y1=\"\(ly + 16)\" x2=\"\(w - right + 50)\" y2=\"\(ly + 16)\" stroke=\"\(c)\" stroke-dasharray=\"6 4\"/>"
                s += "<text x=\"\(w - right + 58)\" y=\"\(ly + 20)\">theoretical</text>\n"
                series += 1
            }
        }
        return s + "</svg>\n"
    }
}
