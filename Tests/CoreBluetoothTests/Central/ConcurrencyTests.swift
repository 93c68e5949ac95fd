// The Swift concurrency API beside the delegates: events streams for several listeners, async operations,
// value streams, and everything pending ending when the link drops.
import Foundation
import Testing
import TestSupport
import CoreBluetooth

// Three minutes: every suite of the package runs beside this one; every await has a 30 s bound of its own below
// (`within`), so a lost event fails by name (a full run at load 19 once exceeded the three minutes without one).
@Suite(.serialized, .timeLimit(.minutes(3))) struct ConcurrencyTests {
    @Test func asyncCentralFlow() async throws {
        let air = TestAir()
        let per = HRPeripheral()
        per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: try air.host("peripheral"))
        try await waitUntil("advertising") { per.log.contains("advertising:true") }

        let central = CBCentralManager(delegate: nil, queue: DispatchQueue(label: "async.central"), options: nil, host: try air.host("central"))
        // Two listeners at once see the same events.
        let listenerA = central.events, listenerB = central.events
        try await within("powered on") { try await central.waitUntilPoweredOn() }
        let found = try await within("a discovery") { () -> CBDiscovery? in
            // The stream lives in here only: dropping it stops the scan.
            for await d in central.discoveries(withServices: [CBUUID(string: "180D")]) { return d }
            return nil
        }
        let discovery = try #require(found)
        #expect(discovery.advertisementData[CBAdvertisementDataLocalNameKey] as? String == "HR Sensor")
        #expect(!central.isScanning)   // dropping the stream stopped the scan
        let p = discovery.peripheral
        try await within("connected") { try await central.connectAndWait(p) }
        #expect(p.state == .connected)
        for listener in [listenerA, listenerB] {
            let sawConnected = try await within("the connected event") { () -> Bool in
                for await e in listener { if case let .connected(x) = e, x === p { return true } }
                return false
            }
            #expect(sawConnected)
        }

        let services = try await within("services") { try await p.services([CBUUID(string: "180D")]) }
        #expect(services.map(\.uuid) == [CBUUID(string: "180D")])
        let chars = try await within("characteristics") { try await p.characteristics(for: services[0]) }
        #expect(chars.map(\.uuid.uuidString) == ["2A37", "2A38", "2A39"])
        #expect(try await within("a read") { try await p.value(for: chars[1]) } == Data([0x01]))
        try await within("a write") { try await p.write(Data([0x01]), to: chars[2]) }
        #expect(per.queue.sync { per.writes.count } == 1)
        let descriptors = try await within("descriptors") { try await p.descriptors(for: chars[0]) }
        #expect(descriptors.map(\.uuid.uuidString) == ["2902", "2901"])
        #expect(try await within("RSSI") { try await p.currentRSSI() } < 0)

        // Two streams of the same characteristic both get every value.
        let s1 = try await within("the first subscription") { try await p.updates(of: chars[0]) }
        let s2 = try await within("the second subscription") { try await p.updates(of: chars[0]) }
        try await waitUntil("subscribed") { per.log.contains("subscribe:2A37") }
        for b in UInt8(60)..<UInt8(63) { _ = per.queue.sync { per.manager.updateValue(Data([0, b]), for: per.measurement, onSubscribedCentrals: nil) } }
        func three(_ s: AsyncStream<Data>, _ name: String) async throws -> [Data] {
            try await within("three values on \(name)") { () -> [Data] in
                var got: [Data] = []
                for await v in s { got.append(v); if got.count == 3 { break } }
                return got
            }
        }
        let got1 = try await three(s1, "the first stream"), got2 = try await three(s2, "the second stream")
        #expect(got1 == [Data([0, 60]), Data([0, 61]), Data([0, 62])] && got2 == got1)

        // The link drops: a pending operation fails with peripheralDisconnected and streams end.
        per.queue.sync { per.writes.removeAll() }
        let s3 = try await within("the third subscription") { try await p.updates(of: chars[0]) }
        let ended = Task {
            var n = 0; for await _ in s3 { n += 1 }; return n
        }
        per.manager.leHostForTests.loop.sync {
            let h = per.manager.leHostForTests
            for (handle, _) in h.connections { h.disconnect(handle: handle) }
        }
        _ = try await within("the stream's end after the link dropped") { await ended.value }
        await #expect(throws: CBError.self) { try await within("a read after the drop") { try await p.value(for: chars[1]) } }
        #expect(p.state == .disconnected)
    }
}
