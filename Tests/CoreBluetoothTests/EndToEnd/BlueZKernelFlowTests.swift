// The Core Bluetooth flow tests on the kernel's adapters (issue 28): the delegates of HeartRateFlowTests (HRPeripheral,
// HRCentral) and of L2CAPChannelTests (L2CAPPeripheral, L2CAPCentral, ChannelEndpoint), unchanged, with one manager
// on the bluez backend (bluetoothd keeps hci0, BLE_TRANSPORT=bluez:hci0's path) and the other on our own stack over
// the HCI user channel of hci1, each way round. The flow and the checks are the virtual radio's; where bluetoothd
// gives something else, the check says what and why. Runs only inside the kernel test guest
// (scripts/kernel/scenarios/cb-flows-bluez.sh sets OCB_KERNEL_GUEST=1).
import Foundation
import Testing
import TestSupport
import CoreBluetooth
import BLEHost
import BLETransport

private enum KernelAdapters {
    static let bluez = BlueZOptions(adapter: "hci0")
    /// Our own stack on hci1 (the scenario takes it from bluetoothd first).
    static func ours(_ name: String) throws -> LEHost { try HostFactory.makeHost(spec: .hciSocket(index: 1), name: name) }
}

private func step(_ what: String) {
    FileHandle.standardError.write(Data("[\(String(format: "%.2f", ProcessInfo.processInfo.systemUptime))] \(what)\n".utf8))
}

@Suite(
    .serialized, .timeLimit(.minutes(5)),
    .enabled(if: ProcessInfo.processInfo.environment["OCB_KERNEL_GUEST"] == "1", "runs only inside the kernel test guest (scripts/kernel/run cb-flows-bluez)"))
struct BlueZKernelFlowTests {
    /// HeartRateFlowTests.seedsHeartRateFlowEndToEnd with the central on bluez and the peripheral on our stack.
    @Test func heartRateFlowWithTheCentralOnBlueZ() async throws {
        _ = testStateDirectory
        let per = HRPeripheral()
        per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: try KernelAdapters.ours("peripheral"))
        defer {
            per.queue.sync {
                per.manager.stopAdvertising(); per.manager.removeAllServices()
            }
        }
        try await waitUntil("advertising", seconds: 60) { per.log.contains("advertising:true") }
        #expect(per.log.all.prefix(3) == ["state:5", "didAdd:180D:true", "advertising:true"])
        step("our peripheral advertises on hci1")
        let cen = HRCentral()
        cen.manager = CBCentralManager(delegate: cen, queue: cen.queue, options: nil, bluez: KernelAdapters.bluez)
        try await waitUntil("subscription", seconds: 90) { per.log.contains("subscribe:2A37") && cen.log.contains("notifying:true") }
        step("the central on bluez subscribed")
        try await checkFlow(per, cen, services: "services:1801,180D")
    }

    /// The same flow with the peripheral on bluez (its service registered with bluetoothd, its advertisement through
    /// LEAdvertisingManager1) and the central on our stack.
    @Test func heartRateFlowWithThePeripheralOnBlueZ() async throws {
        _ = testStateDirectory
        let per = HRPeripheral()
        per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, bluez: KernelAdapters.bluez)
        defer {
            per.queue.sync {
                per.manager.stopAdvertising(); per.manager.removeAllServices()
            }
        }
        try await waitUntil("advertising", seconds: 60) { per.log.contains("advertising:true") }
        #expect(per.log.all.prefix(3) == ["state:5", "didAdd:180D:true", "advertising:true"])
        step("the peripheral on bluez advertises")
        let cen = HRCentral()
        cen.manager = CBCentralManager(delegate: cen, queue: cen.queue, options: nil, host: try KernelAdapters.ours("central"))
        try await waitUntil("subscription", seconds: 90) { per.log.contains("subscribe:2A37") && cen.log.contains("notifying:true") }
        step("our central subscribed")
        // bluetoothd's own database comes first (GAP, GATT, and Device Information when main.conf names one).
        let services = try #require(cen.log.all.first { $0.hasPrefix("services:") })
        #expect(services.hasPrefix("services:1800,1801,") && services.hasSuffix(",180D"), "\(services)")
        // bluetoothd puts an advertisement's LocalName in the scan response (advertising.c, generate_scan_rsp), and
        // HRCentral keeps the first discovery, made from the advertising packet (the scan response comes in a second
        // one, as on iOS): the name is not in it. Our own peripheral puts both in the advertising packet.
        try await checkFlow(per, cen, services: services, name: nil)
    }

    /// The checks of seedsHeartRateFlowEndToEnd after the subscription.
    private func checkFlow(_ per: HRPeripheral, _ cen: HRCentral, services: String, name: String? = "HR Sensor") async throws {
        #expect(cen.advertisement[CBAdvertisementDataLocalNameKey] as? String == name)
        #expect(cen.advertisement[CBAdvertisementDataServiceUUIDsKey] as? [CBUUID] == [CBUUID(string: "180D")])
        #expect((cen.advertisement[CBAdvertisementDataIsConnectable] as? NSNumber)?.boolValue == true)
        // rootcanal gives RSSI values across HCI's whole range (-127 included), not a distance's.
        let rssi = try #require(cen.rssi?.intValue)
        #expect((-127...20).contains(rssi))
        // On bluez as the central, bluetoothd keeps the GAP service to itself (it is not among the objects it exports).
        #expect(cen.log.contains(services), "\(cen.log.all)")
        #expect(cen.log.contains("characteristics:2A37,2A38,2A39"), "\(cen.log.all)")
        #expect(cen.log.contains("descriptors:2902,2901"), "\(cen.log.all)")

        let p = try #require(cen.peripheral)
        for beat in UInt8(70)..<UInt8(75) {
            let sent = per.queue.sync { per.manager.updateValue(Data([0x00, beat]), for: per.measurement, onSubscribedCentrals: nil) }
            #expect(sent)
        }
        try await waitUntil("notifications", seconds: 30) { cen.queue.sync { cen.values.count } >= 5 }
        #expect(cen.queue.sync { cen.values } == (UInt8(70)..<UInt8(75)).map { Data([0x00, $0]) })
        step("5 notifications in order")
        // A burst sent as the seeds send, until updateValue says false and again a moment later: every value arrives,
        // in order. On bluez bluetoothd paces the peripheral (BlueZPeripheral's window of values it has not handled,
        // known by a Peer.Ping behind them); on our stack its transmit queue does.
        let burst = (0..<200).map { Data([0x00, UInt8($0)]) }
        var next = 0
        var refusals = 0
        let start = ContinuousClock.now
        while next < burst.count, ContinuousClock.now - start < .seconds(120) {
            if per.queue.sync(execute: { per.manager.updateValue(burst[next], for: per.measurement, onSubscribedCentrals: nil) }) {
                next += 1
            } else {
                refusals += 1
                try await pause(nanoseconds: 20_000_000)
            }
        }
        #expect(next == burst.count)
        try await waitUntil("the burst", seconds: 120) { cen.queue.sync { cen.values.count } >= 5 + burst.count }
        #expect(cen.queue.sync { Array(cen.values.dropFirst(5)) } == burst)
        step("a burst of \(burst.count) notifications in order (\(refusals) refusals)")

        let location = try #require(p.services?.first { $0.uuid == CBUUID(string: "180D") }?.characteristics?.first { $0.uuid == CBUUID(string: "2A38") })
        cen.queue.sync { p.readValue(for: location) }
        try await waitUntil("read", seconds: 30) { cen.log.contains("value:2A38:[1]") }

        let control = try #require(location.service?.characteristics?.first { $0.uuid == CBUUID(string: "2A39") })
        cen.queue.sync { p.writeValue(Data([0x01]), for: control, type: .withResponse) }
        try await waitUntil("write", seconds: 30) { cen.log.contains("wrote:2A39:true") }
        #expect(per.queue.sync { per.writes.map { [UInt8]($0.2) } } == [[0x01]])
        #expect(per.queue.sync { per.writes.first?.0 } == per.queue.sync { per.subscribed?.identifier })
        step("read and write done")

        cen.queue.sync { cen.manager.cancelPeripheralConnection(p) }
        try await waitUntil("disconnect", seconds: 30) { cen.log.contains("disconnect") && per.log.contains("unsubscribe:2A37") }
        if case let .some(err) = cen.queue.sync(execute: { cen.disconnectError }) { #expect(err == nil) } else { Issue.record("no disconnect error recorded") }
        #expect(p.state == .disconnected)
        #expect(p.services == nil)
    }

    /// L2CAPChannelTests.dataBothWaysThroughStreamsOnARunLoop with the channel published on bluez (a kernel L2CAP
    /// socket listening, the PSM the kernel chose) and opened by our stack, then published by ours and opened on bluez.
    @Test func l2capChannelPublishedOnBlueZ() async throws { try await l2capDataBothWays(publishedOnBlueZ: true) }

    @Test func l2capChannelOpenedOnBlueZ() async throws { try await l2capDataBothWays(publishedOnBlueZ: false) }

    private func l2capDataBothWays(publishedOnBlueZ: Bool) async throws {
        _ = testStateDirectory
        let per = L2CAPPeripheral()
        let cen = L2CAPCentral()
        let loop = StreamLoop()
        defer { loop.stop() }
        per.manager =
            publishedOnBlueZ
            ? CBPeripheralManager(delegate: per, queue: per.queue, options: nil, bluez: KernelAdapters.bluez)
            : CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: try KernelAdapters.ours("p"))
        defer {
            per.queue.sync {
                per.manager.stopAdvertising(); per.manager.removeAllServices()
            }
        }
        try await waitUntil("published", seconds: 60) { per.log.contains("published:") }
        cen.manager =
            publishedOnBlueZ
            ? CBCentralManager(delegate: cen, queue: cen.queue, options: nil, host: try KernelAdapters.ours("c"))
            : CBCentralManager(delegate: cen, queue: cen.queue, options: nil, bluez: KernelAdapters.bluez)
        try await waitUntil("PSM read", seconds: 90) { cen.log.contains("psm") }
        step("PSM \(cen.queue.sync { cen.psm ?? 0 }) read from the \(publishedOnBlueZ ? "bluez" : "hci1") peripheral")
        let accepted = per.queue.sync { per.channels.count }
        cen.queue.sync { cen.peripheral!.openL2CAPChannel(cen.psm!) }
        try await waitUntil("didOpen", seconds: 60) { cen.queue.sync { cen.opened.count } > 0 }
        let (channel, error) = cen.queue.sync { cen.opened.last! }
        #expect(error == nil)
        let ours = try #require(channel)
        try await waitUntil("accepted", seconds: 30) { per.queue.sync { per.channels.count } > accepted }
        let b = try per.queue.sync { () throws -> ChannelEndpoint in
            let theirs = try #require(per.channels.last)
            #expect(ours.psm == cen.psm && theirs.psm == ours.psm)
            #expect(theirs.peer is CBCentral && ours.peer is CBPeripheral)
            return ChannelEndpoint(theirs, on: loop)
        }
        #expect(ours.peer.identifier == cen.peripheral?.identifier)
        let a = ChannelEndpoint(ours, on: loop)
        let up = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 1) }
        let down = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 11) }
        let start = Date()
        a.send(up)
        b.send(down)
        // (The virtual radio's limit is 30 s; the emulated guest's controllers move 100-150 KB/s.)
        try await waitUntil("1 MB up, 300 KB down", seconds: 240) { b.received.count == up.count && a.received.count == down.count }
        step("1 MB up and 300 KB down in \(Int(Date().timeIntervalSince(start))) s")
        #expect(b.received == up && a.received == down)
        #expect(a.events.first == .openCompleted && a.events.contains(.hasSpaceAvailable))
        per.queue.sync { per.channels.removeAll() }
        try await waitUntil("end", seconds: 30) { a.events.contains(.endEncountered) }
        #expect(ours.inputStream.streamStatus == .atEnd)
        if let p = cen.peripheral { cen.queue.sync { cen.manager.cancelPeripheralConnection(p) } }
        try await waitUntil("disconnected", seconds: 30) { cen.log.contains("disconnected") }
    }
}
