// Copyright 2026 the OpenCoreBluetooth authors
// SPDX-License-Identifier: Apache-2.0
//
// The stack logs through swift-log only: an application that bootstraps its own backend gets every layer's
// lines there, under one label per layer, at the levels the ecosystem uses, with metadata.
//
// `LoggingSystem.bootstrap` is once per process and every suite shares this one, so the backend installed
// here hands a capturing handler only to loggers made inside a test's capture scope (a task-local) and
// swift-log's default handler to everyone else, exactly as before the bootstrap.
import Foundation
import Logging
import Testing
import BLEHost
import CoreBluetooth

/// What the capturing backend received.
final class LogCapture: @unchecked Sendable {
    struct Record: Sendable {
        var label: String
        var level: Logger.Level
        var message: String
        var metadata: Logger.Metadata
    }
    private let lock = NSLock()
    private var items: [Record] = []

    func add(_ r: Record) { lock.lock(); items.append(r); lock.unlock() }
    var records: [Record] { lock.lock(); defer { lock.unlock() }; return items }
}

/// A LogHandler that records every line at or above its level into a capture.
struct CapturingLogHandler: LogHandler {
    let label: String
    let capture: LogCapture
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        capture.add(
            .init(
                label: label, level: event.level, message: "\(event.message)",
                metadata: metadata.merging(event.metadata ?? [:]) { _, new in new }))
    }
}

enum CapturingBackend {
    /// The capture of the running test, if it set one.
    @TaskLocal static var capture: LogCapture?

    /// Bootstraps the process's logging once: loggers made in a capture scope record there; others get
    /// swift-log's default (standard error at `info`).
    static let installed: Void = {
        LoggingSystem.bootstrap { label in
            if let capture { return CapturingLogHandler(label: label, capture: capture) }
            return StreamLogHandler.standardError(label: label)
        }
    }()
}

@Suite(.serialized) struct LoggingTests {
    @Test func theStacksLogsGoToTheBackendTheApplicationBootstraps() async throws {
        CapturingBackend.installed
        let capture = LogCapture()
        try await CapturingBackend.$capture.withValue(capture) {
            let air = TestAir()
            // API misuse: a scan before the manager is powered on (iOS logs the same line). Its queue is held
            // until then, so the manager surely still reads .unknown.
            let held = DispatchQueue(label: "test.log-early")
            held.suspend()
            let early = CBCentralManager(delegate: nil, queue: held, options: nil, host: try air.host("log-early"))
            early.scanForPeripherals(withServices: nil, options: nil)
            held.resume()

            let per = HRPeripheral()
            per.manager = CBPeripheralManager(delegate: per, queue: per.queue, options: nil, host: try air.host("log-peripheral"))
            try await waitUntil("advertising") { per.log.contains("advertising:true") }
            let cen = HRCentral()
            cen.manager = CBCentralManager(delegate: cen, queue: cen.queue, options: nil, host: try air.host("log-central"))
            try await waitUntil("subscription") { per.log.contains("subscribe:2A37") && cen.log.contains("notifying:true") }
        }
        let records = capture.records

        // One label per layer, all under the package's prefix.
        let labels = Set(records.map(\.label))
        for label in [
            "opencorebluetooth.hci", "opencorebluetooth.l2cap", "opencorebluetooth.att", "opencorebluetooth.gap",
            "opencorebluetooth.transport", "opencorebluetooth.corebluetooth",
        ] {
            #expect(labels.contains(label), "nothing logged as \(label): \(labels.sorted())")
        }
        #expect(labels.allSatisfy { $0.hasPrefix("opencorebluetooth.") }, "\(labels.sorted())")

        // Packets and PDUs at trace, with what they are as metadata.
        let packetIn = records.first { $0.label == "opencorebluetooth.hci" && $0.message == "packet in" }
        #expect(packetIn?.level == .trace)
        #expect(packetIn?.metadata["type"] != nil && packetIn?.metadata["length"] != nil)
        let pdus = records.filter { $0.label == "opencorebluetooth.att" && $0.level == .trace }
        #expect(pdus.contains { "\($0.metadata["pdu"] ?? "")".hasPrefix("readByGroupTypeRequest") }, "\(pdus.prefix(5).map(\.metadata))")
        // ACL payloads (pairing values, keys) are never written out.
        #expect(!records.contains { $0.metadata["type"] == "ACL" && $0.metadata["octets"] != nil })

        // Procedures and life-cycle at debug (an application that bootstrapped nothing sees none of it in normal
        // operation: swift-log's default prints from info up), each line carrying the host it is about.
        let connected = records.filter { $0.label == "opencorebluetooth.gap" && $0.message == "connected" }
        #expect(connected.count == 2)
        #expect(connected.allSatisfy { $0.level == .debug && $0.metadata["connection"] != nil })
        #expect(Set(connected.compactMap { $0.metadata["host"].map { "\($0)" } }) == ["log-peripheral", "log-central"])
        let ready = records.filter { $0.message == "controller ready" }
        #expect(ready.allSatisfy { $0.level == .debug && $0.label == "opencorebluetooth.hci" })
        #expect(!records.contains { $0.level == .info }, "\(records.filter { $0.level == .info }.map(\.message))")
        #expect(Set(ready.compactMap { $0.metadata["host"].map { "\($0)" } }).isSuperset(of: ["log-peripheral", "log-central"]))
        let hostLines = records.filter { !["opencorebluetooth.corebluetooth"].contains($0.label) }
        #expect(hostLines.allSatisfy { ["log-early", "log-peripheral", "log-central"].contains("\($0.metadata["host"] ?? "")") })

        // Core Bluetooth's API MISUSE line, at error.
        let misuse = records.filter { $0.label == "opencorebluetooth.corebluetooth" }
        #expect(misuse.count == 1)
        #expect(misuse.first?.level == .error)
        #expect(misuse.first?.message.hasPrefix("API MISUSE: <CBCentralManager: ") == true, "\(misuse.map(\.message))")
    }

    @Test func aHostsLoggersCanBeReplacedOneByOne() async throws {
        let capture = LogCapture()
        let air = TestAir()
        let host = try air.host("log-replaced")
        host.loggers = HostLoggers(hostName: "renamed") { label in
            Logger(label: label) { CapturingLogHandler(label: $0, capture: capture) }
        }
        #expect(host.loggers.hciTraces && host.loggers.attTraces)
        host.loggers.hci.logLevel = .info
        // The packet path's flag follows the level (it is what the host tests before building a trace line).
        #expect(!host.loggers.hciTraces && host.loggers.attTraces)
        let power = EventLog()
        host.loop.execute {
            host.addPowerObserver { if $0 == .on { power.add("on") } }
            host.powerOn()
        }
        try await waitUntil("the controller") { power.contains("on") }
        let records = capture.records
        // The HCI logger at info: its packets and "controller ready" are not logged, the transport's debug lines are.
        #expect(!records.contains { $0.label == "opencorebluetooth.hci" })
        #expect(records.contains { $0.label == "opencorebluetooth.transport" && $0.level == .debug && $0.message == "opened" })
        #expect(records.allSatisfy { $0.metadata["host"] == "renamed" })
        host.loop.execute { host.powerOff() }
    }
}
