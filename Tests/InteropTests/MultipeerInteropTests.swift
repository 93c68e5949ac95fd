// Multipeer Connectivity over Bluetooth through rootcanal (Google's controller, not ours): the seed's photo
// demo as two `ble mc` processes, each its own rootcanal device, with Multipeer on Bluetooth only —
// discovery from LE adverts, the session over L2CAP credit-based channels with TLS.
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(3)))
struct MultipeerOverRootcanalTests {
    @Test func seedPhotoDemoOverBluetoothThroughRootcanal() async throws {
        let canal = try RootCanal()
        defer { canal.stop() }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("mc-canal-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("in"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let photo = dir.appendingPathComponent("photo.png")
        let bytes = Data((0..<120_000).map { UInt8(truncatingIfNeeded: $0 &* 17) })
        try bytes.write(to: photo)
        let service = "rc" + String(UInt16.random(in: 0...UInt16.max), radix: 36)
        let adv = try ToolProcess(
            [
                "mc", "advertise", "--name", "Advertiser", "--service", service, "--say", "hello", "--transport", "bluetooth",
                "--dir", dir.appendingPathComponent("in").path, "--expect", "2", "--duration", "60",
            ], transport: canal.transport)
        defer { adv.kill() }
        try await adv.waitFor("advertising")
        let brw = try ToolProcess(
            [
                "mc", "browse", "--name", "Browser", "--service", service, "--say", "hi", "--transport", "bluetooth",
                "--photo", photo.path, "--dir", dir.path, "--expect", "1", "--duration", "60",
            ], transport: canal.transport)
        defer { brw.kill() }
        #expect(try await brw.exit(seconds: 90) == 0, "\(brw.output)")
        #expect(try await adv.exit(seconds: 30) == 0, "\(adv.output)")
        #expect(brw.output.contains("Advertiser: connected") && brw.output.contains("Advertiser says: hello"), "\(brw.output)")
        #expect(adv.output.contains("Browser says: hi") && adv.output.contains("stored "), "\(adv.output)")
        #expect(try Data(contentsOf: dir.appendingPathComponent("in/photo.png")) == bytes)
    }
}
