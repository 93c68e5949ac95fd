// Issue 21, end to end: `ble serve` with a file that fixes every handle serves the database exactly as the
// file lays it out (a notifying characteristic without its CCCD stays without it), warns on standard error
// for each departure from the specification, and `ble gatt` in another process discovers just that.
import Foundation
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct ServeExactTests {
    static let file = #"""
        { "advertise": { "name": "PTS copy" },
          "services": [
            { "uuid": "1800", "handle": 1, "endHandle": 5, "characteristics": [
                { "uuid": "2A00", "properties": ["read"], "permissions": ["readable"], "value": "utf8:PTS copy", "handle": 2 },
                { "uuid": "2A01", "properties": ["read"], "permissions": ["readable"], "value": "hex:0000", "handle": 4 } ] },
            { "uuid": "180D", "handle": 16, "endHandle": 32, "characteristics": [
                { "uuid": "2A37", "properties": ["notify"], "permissions": [], "value": "hex:0048", "handle": 18 },
                { "uuid": "2A38", "properties": ["read"], "permissions": ["readable"], "value": "hex:01", "handle": 20 } ] } ] }
        """#

    @Test func anExactFileIsServedAsWrittenWithAWarning() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ocb-exact-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("pts.json").path
        try Data(Self.file.utf8).write(to: URL(fileURLWithPath: path))
        let bench = try Bench()
        defer { bench.stop() }
        let (serve, _) = try bench.serve(path)
        #expect(serve.stderr.contains("warning: \(path): every service fixes its handle and end handle: the database is served exactly as written"), "\(serve.stderr)")
        #expect(
            serve.stderr.contains("warning: \(path): services[1].characteristics[0]: notifies without a Client Characteristic Configuration descriptor (0x2902)"), "\(serve.stderr)"
        )
        let r = try bench.run(["gatt", "PTS copy", "--json", "--yes"])
        #expect(r.status == 0, "\(r)")
        let o = try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        let services = try #require(o["services"] as? [[String: Any]])
        // No GATT service added, the end handles as written.
        #expect(services.compactMap { $0["handle"] as? Int } == [1, 16])
        #expect(services.compactMap { $0["end_handle"] as? Int } == [5, 32])
        let chars = try #require(services.last?["characteristics"] as? [[String: Any]])
        #expect(chars.compactMap { $0["handle"] as? Int } == [18, 20])
        #expect(chars.compactMap { $0["value_handle"] as? Int } == [19, 21])
        #expect((chars.first?["descriptors"] as? [Any])?.isEmpty == true)
    }
}
