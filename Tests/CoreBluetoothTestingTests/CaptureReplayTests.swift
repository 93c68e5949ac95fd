// Record once against a real device, replay on CI: a Bumble peripheral (an independent host stack) is read
// whole by our central while the session is captured to btsnoop; the capture becomes a simulated
// peripheral, and the same app run against the replay must see the same database and the same
// notifications, byte for byte — checked on the replay's own capture and through the Core Bluetooth API.
import Foundation
import Testing
import TestSupport
import CoreBluetooth
import CoreBluetoothTesting
import BLEHost
import BLETransport
import BLEVirtualRadio

/// A Bumble script from Tests/InteropTests/peers, run under its guard so that it dies with the tests.
final class BumblePeer: @unchecked Sendable {
    static let python = repositoryRoot.appendingPathComponent(".venv/bin/python").path
    static let peers = repositoryRoot.appendingPathComponent("Tests/InteropTests/peers")
    /// Bumble installed into ./.venv once per process (scripts/setup-venv.sh, as the interop suite does).
    static let ready: Bool = {
        let p = Process()
        p.executableURL = repositoryRoot.appendingPathComponent("scripts/setup-venv.sh")
        p.standardOutput = FileHandle.standardError
        guard (try? p.run()) != nil else { return false }
        p.waitUntilExit()
        return p.terminationStatus == 0
    }()

    let process = Process()
    private let lifeline = Pipe()
    private let output = Pipe()
    private let lock = NSLock()
    private var text = ""

    init(script: String, arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: Self.python)
        process.arguments = [Self.peers.appendingPathComponent("guard.py").path, Self.python, "-u", Self.peers.appendingPathComponent(script).path] + arguments
        process.standardInput = lifeline
        process.standardOutput = output
        process.standardError = output
        output.fileHandleForReading.readabilityHandler = { [weak self] h in
            let d = h.availableData
            guard let self else { h.readabilityHandler = nil; return }
            guard !d.isEmpty else { if !self.process.isRunning { h.readabilityHandler = nil }; return }
            self.lock.withLock { self.text += String(decoding: d, as: UTF8.self) }
        }
        try process.run()
    }

    var transcript: String { lock.withLock { text } }

    func waitFor(_ needle: String, seconds: Double = 30) async throws {
        let deadline = Date().addingTimeInterval(seconds)
        while !transcript.contains(needle) {
            guard process.isRunning, Date() < deadline else { throw BumbleFailed(transcript: transcript) }
            try await pause(nanoseconds: 20_000_000)
        }
    }

    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        for _ in 0..<200 where process.isRunning { usleep(10_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        output.fileHandleForReading.readabilityHandler = nil
    }

    deinit { stop() }
}

struct BumbleFailed: Error, CustomStringConvertible {
    let transcript: String
    var description: String { "Bumble peer failed or timed out:\n\(transcript.suffix(2000))" }
}

func waitReal(_ what: String, seconds: Double = 30, _ condition: () -> Bool) async throws {
    let deadline = Date().addingTimeInterval(seconds)
    while !condition() {
        guard Date() < deadline else { throw BumbleFailed(transcript: "timed out waiting for \(what)") }
        try await pause(nanoseconds: 5_000_000)
    }
}

@Suite(.serialized, .timeLimit(.minutes(2))) struct CaptureReplayTests {
    static let heartRate = "2A37", indicate = "6E400004-B5A3-F393-E0A9-E50E24DCCA9E"

    @Test func aCaptureOfABumblePeripheralReplaysByteForByte() async throws {
        try #require(BumblePeer.ready, "Bumble could not be installed into .venv (scripts/setup-venv.sh)")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ocb-replay-\(getpid())-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let original = dir.appendingPathComponent("bumble.btsnoop").path
        let replayed = dir.appendingPathComponent("replay.btsnoop").path

        // 1. Record: our central reads the Bumble peripheral whole and takes notifications and indications.
        let air = VirtualAir(loop: EventLoop(label: "replay.record", clock: .real))
        let server = try RadioServer(air: air, port: 0)
        server.start()
        defer { server.stop() }
        let bumble = try BumblePeer(script: "bumble_peripheral.py", arguments: ["--transport", "tcp-client:127.0.0.1:\(server.port)", "--name", "Bumble HR"])
        defer { bumble.stop() }
        try await bumble.waitFor("\"advertising\"")
        let host = try HostFactory.makeHost(on: air, name: "recorder", capture: original)
        let recorder = ExplorerApp(name: "Bumble HR")
        recorder.host = host
        recorder.start()
        try await waitReal("the database and 5 notifications and 3 indications", seconds: 60) {
            recorder.has("database discovered") && recorder.has("read:6E400002-B5A3-F393-E0A9-E50E24DCCA9E")
                && (recorder.updates[Self.heartRate]?.count ?? 0) >= 5 && (recorder.updates[Self.indicate]?.count ?? 0) >= 3
        }
        recorder.onQueue { recorder.central.cancelPeripheralConnection(recorder.target!) }
        try await waitReal("the disconnection") { recorder.has("disconnected") }
        (host.transport as? SnoopingTransport)?.writer.close()
        bumble.stop()

        let captured = try CapturedDevice(capture: original)
        #expect(captured.name == "Bumble HR")
        let services = captured.database.attributes.filter { $0.type.uuidString == "2800" }.compactMap(\.value)
        #expect(services.contains([0x0D, 0x18]))
        #expect(captured.updates.filter { !$0.isIndication }.count >= 5)
        #expect(captured.updates.contains { $0.isIndication })

        // 2. Replay on the virtual clock, with the phone's traffic captured in turn.
        let sim = try BluetoothSimulation(seed: 42, installing: false, capture: replayed)
        let device = try sim.add(try captured.spec())
        let app = ExplorerApp(name: "Bumble HR")
        app.start(in: sim)
        // Every update the capture holds, by characteristic: the recorder's app cancelled while updates were
        // still arriving (the busier the machine, the more), and the capture has those too.
        let wanted = captured.updates.reduce(into: [String: Int]()) { counts, u in
            if let type = captured.database.attributes.first(where: { $0.handle == u.handle })?.type { counts[type.uuidString, default: 0] += 1 }
        }
        #expect(wanted.keys.sorted() == recorder.updates.keys.sorted())
        #expect(

            sim.run(
                until: {
                    app.has("read:6E400002-B5A3-F393-E0A9-E50E24DCCA9E") && app.has("database discovered")
                        && wanted.allSatisfy { (app.updates[$0.key]?.count ?? 0) >= $0.value }
                }, within: .seconds(60)), "\(app.log)")
        app.onQueue { app.central.cancelPeripheralConnection(app.target!) }
        sim.runUntilIdle()
        _ = device
        sim.finish()

        // 3. Through Core Bluetooth: the same services, values, descriptors and updates.
        #expect(app.log.first { $0.hasPrefix("services:") } == recorder.log.first { $0.hasPrefix("services:") })
        #expect(app.values == recorder.values)
        #expect(app.log.filter { $0.hasPrefix("descriptor:") }.sorted() == recorder.log.filter { $0.hasPrefix("descriptor:") }.sorted())
        // The replay's app got everything on the wire; the recorder's app all of it up to its cancellation.
        for (uuid, values) in recorder.updates {
            let replayed = app.updates[uuid] ?? []
            #expect(replayed.count == wanted[uuid] && Array(replayed.prefix(values.count)) == values, "\(uuid): \(replayed.count) vs \(values.count)")
        }
        #expect(app.advertisement[CBAdvertisementDataManufacturerDataKey] as? Data == recorder.advertisement[CBAdvertisementDataManufacturerDataKey] as? Data)

        // 4. On the wire: the replay's capture shows the same attributes (handles, types, values) and the
        // same notifications and indications, byte for byte, and the same advertising.
        let again = try CapturedDevice(capture: replayed)
        #expect(again.database.attributes == captured.database.attributes)
        #expect(again.database.attributes.count > 20)
        let key: (CapturedDevice.Update) -> [UInt8] = { [UInt8($0.handle & 0xFF), UInt8($0.handle >> 8), $0.isIndication ? 1 : 0] + $0.value }
        for h in Set(captured.updates.map(\.handle)) {
            #expect(again.updates.filter { $0.handle == h }.map(key) == captured.updates.filter { $0.handle == h }.map(key))
        }
        #expect(again.advertisingData == captured.advertisingData)
        #expect(again.scanResponse == captured.scanResponse)
        #expect(again.mtu == captured.mtu)
        let valueBytes = captured.database.attributes.reduce(0) { $0 + ($1.value?.count ?? 0) }
        print(
            "replay of \(original.split(separator: "/").last!): \(captured.database.attributes.count) attributes (\(valueBytes) value octets), "
                + "\(captured.updates.count) notifications/indications, \(captured.advertisingData.count)+\(captured.scanResponse.count) advertising octets: identical")
    }
}
