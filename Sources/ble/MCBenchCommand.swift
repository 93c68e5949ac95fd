// `ble mc bench`: a Multipeer resource between two peers over Bluetooth only, on a virtual radio that charges
// airtime (real clock), compared with what the link itself can carry. Both peers are in this process, each
// its own device; the app side is the Multipeer Connectivity API (advertiser, browser, invitation,
// sendResource), so the figure includes discovery-free session overhead: framing, TLS when asked, the socket
// bridge and L2CAP credits.
import ArgumentParser
import Foundation
import MultipeerConnectivity
import PeerBluetooth
import BLEHost
import BLETransport
import BLEVirtualRadio

struct MCBenchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Multipeer throughput between two peers of this process: over Bluetooth on the airtime-modelled virtual radio, or over TCP on loopback.")
    @Option(
        help:
            "bluetooth (LE adverts + L2CAP on an in-process virtual radio with the airtime model) or network (TCP on loopback, connected with the custom-discovery calls: no multicast)."
    )
    var transport = "bluetooth"
    @Option(help: "Resource size in bytes (0: no resource).")
    var size = 1_000_000
    @Option(help: "Reliable messages to send before the resource (0: none).")
    var messages = 0
    @Option(help: "Size of each message in bytes.")
    var messageSize = 1024
    @Option(help: "Encryption: required (TLS 1.3) or none.")
    var encryption = "none"

    func validate() throws {
        guard size >= 0 && size <= 1 << 36 else { throw ValidationError("--size 0…68719476736") }
        guard messages >= 0, (1...1 << 20).contains(messageSize) else { throw ValidationError("--messages ≥ 0, --message-size 1…1048576") }
        guard ["required", "none"].contains(encryption) else { throw ValidationError("--encryption required or none") }
        guard ["bluetooth", "network"].contains(transport) else { throw ValidationError("--transport bluetooth or network") }
        guard size > 0 || messages > 0 else { throw ValidationError("nothing to measure: give --size or --messages") }
    }

    final class Watcher: NSObject, MCSessionDelegate, MCNearbyServiceAdvertiserDelegate, MCNearbyServiceBrowserDelegate, @unchecked Sendable {
        let lock = NSLock()
        var connected = false, found: MCPeerID?, received: Date?, messages = 0, lastMessage: Date?
        var session: MCSession?
        func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) { if state == .connected { lock.withLock { connected = true } } }
        func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
            lock.withLock {
                messages += 1; lastMessage = Date()
            }
        }
        func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}
        func session(_ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, with progress: Progress) {}
        func session(_ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, at localURL: URL?, withError error: (any Error)?) {
            if let localURL { try? FileManager.default.removeItem(at: localURL) }
            lock.withLock { received = Date() }
        }
        func advertiser(
            _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID, withContext context: Data?,
            invitationHandler: @escaping (Bool, MCSession?) -> Void
        ) { invitationHandler(true, session) }
        func browser(_ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?) { lock.withLock { found = peerID } }
        func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {}
    }

    func wait(_ what: String, _ seconds: Double, _ cond: () -> Bool) throws {
        let end = Date().addingTimeInterval(seconds)
        while !cond() { guard Date() < end else { throw ValidationError("timed out waiting for \(what)") }; usleep(1_000) }
    }

    func run() throws {
        let bluetooth = transport == "bluetooth"
        var air: VirtualAir?
        if bluetooth {
            let a = VirtualAir(loop: EventLoop(label: "mc-bench-air", clock: .real))
            // The air's template; each link is charged at its own PHY, data length and interval.
            a.loop.sync { a.airtime = AirtimeModel(phy: .le2M, dataLength: 251) }
            BluetoothPeerNode.configure(factory: { name in try HostFactory.makeHost(on: a, name: name) }, sharing: .perPeer)
            air = a
        }
        let pref: MCEncryptionPreference = encryption == "none" ? .none : .required
        let transports: MCTransports = bluetooth ? .bluetooth : .network
        let a = MCSession(peer: MCPeerID(displayName: "bench-A"), securityIdentity: nil, encryptionPreference: pref, transports: transports)
        let b = MCSession(peer: MCPeerID(displayName: "bench-B"), securityIdentity: nil, encryptionPreference: pref, transports: transports)
        let wa = Watcher(), wb = Watcher()
        wa.session = a
        a.delegate = wa
        b.delegate = wb
        var keep: [AnyObject] = []
        if bluetooth {
            let advertiser = MCNearbyServiceAdvertiser(peer: a.myPeerID, discoveryInfo: nil, serviceType: "mc-bench")
            advertiser.transports = .bluetooth
            advertiser.delegate = wa
            let browser = MCNearbyServiceBrowser(peer: b.myPeerID, serviceType: "mc-bench")
            browser.transports = .bluetooth
            browser.delegate = wb
            advertiser.startAdvertisingPeer()
            browser.startBrowsingForPeers()
            keep = [advertiser, browser]
            try wait("discovery", 10) { wb.lock.withLock { wb.found != nil } }
            browser.invitePeer(wb.lock.withLock { wb.found! }, to: b, withContext: nil, timeout: 10)
            advertiser.stopAdvertisingPeer()
            browser.stopBrowsingForPeers()
        } else {
            // Custom discovery: each side hands the other its connection data (no multicast needed).
            let dataA = try connectionData(a, for: b.myPeerID), dataB = try connectionData(b, for: a.myPeerID)
            a.connectPeer(b.myPeerID, withNearbyConnectionData: dataB)
            b.connectPeer(a.myPeerID, withNearbyConnectionData: dataA)
        }
        try wait("the session", 10) { wb.lock.withLock { wb.connected } && wa.lock.withLock { wa.connected } }
        // Let the link settle (over Bluetooth: at its negotiated PHY and data length).
        Thread.sleep(forTimeInterval: bluetooth ? 0.5 : 0.1)
        let label = bluetooth ? (try linkDescription(of: b, air: air!)) : "TCP loopback"
        if messages > 0 {
            let payload = Data((0..<messageSize).map { UInt8(truncatingIfNeeded: $0) })
            let start = Date(), cpu0 = cpuSeconds()
            for _ in 0..<messages { try b.send(payload, toPeers: [a.myPeerID], with: .reliable) }
            try wait("the messages", Double(messages) / 1000 + 60) { wa.lock.withLock { wa.messages >= messages } }
            let seconds = wa.lock.withLock { wa.lastMessage! }.timeIntervalSince(start)
            print(
                String(
                    format: "%d messages of %d bytes over %@ (encryption %@): %.0f messages/s, %.1f MB/s, %.2f s, CPU %.2f s, max RSS %d MB",
                    messages, messageSize, label, encryption, Double(messages) / seconds, Double(messages * messageSize) / seconds / 1e6,
                    seconds, cpuSeconds() - cpu0, maxRSSMegabytes()))
        }
        if size > 0 {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("mc-bench-\(getpid())")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: dir) }
            let file = dir.appendingPathComponent("payload.bin")
            // The payload's own write is the same kind of work the receiver does last (into the page cache),
            // so its rate, printed alongside, is the file-write floor at this moment.
            let writeStart = Date()
            try writePayload(file)
            let writeRate = Double(size) / Date().timeIntervalSince(writeStart)
            let rssBefore = maxRSSMegabytes()
            let start = Date(), cpu0 = cpuSeconds()
            let sent = NSLock()
            var outcome: (any Error)??
            _ = b.sendResource(at: file, withName: "payload.bin", toPeer: a.myPeerID) { e in sent.withLock { outcome = .some(e) } }
            try wait("the resource", Double(size) / 20_000 + 60) { wa.lock.withLock { wa.received != nil } && sent.withLock { outcome != nil } }
            if case let .some(.some(e)) = sent.withLock({ outcome }) { throw ValidationError("the resource failed: \(e)") }
            let seconds = wa.lock.withLock { wa.received! }.timeIntervalSince(start)
            let rate = Double(size) / seconds
            print(
                String(
                    format:
                        "resource of %ld bytes over %@ (encryption %@): %.1f MB/s in %.2f s, CPU %.2f s, max RSS %d MB (%d MB before); the payload file was written at %.1f MB/s",
                    size, label, encryption, rate / 1e6, seconds, cpuSeconds() - cpu0, maxRSSMegabytes(), rssBefore, writeRate / 1e6))
            if bluetooth, let air {
                let link = try linkModel(of: b, air: air)
                // An L2CAP channel's own ceiling: every LL payload octet but the 4-octet basic header of each K-frame.
                let channelMax = link.linkPayloadThroughput * Double(link.dataLength - 4) / Double(link.dataLength)
                print(
                    String(
                        format: "link ceiling %.1f kB/s, L2CAP channel ceiling %.1f kB/s: %.1f %% of the channel's", link.linkPayloadThroughput / 1000,
                        channelMax / 1000, rate / channelMax * 100))
            }
        }
        a.disconnect()
        b.disconnect()
        withExtendedLifetime(keep) {}
    }

    /// The payload file, written in 1 MB pieces (a 1 GB resource needs no 1 GB buffer).
    private func writePayload(_ url: URL) throws {
        guard FileManager.default.createFile(atPath: url.path, contents: nil) else {
            throw ValidationError("cannot create \(url.path)")
        }
        let h = try FileHandle(forWritingTo: url)
        defer { try? h.close() }
        let piece = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        var left = size
        while left > 0 {
            let n = min(left, piece.count)
            try h.write(contentsOf: piece.prefix(n))
            left -= n
        }
    }

    private func connectionData(_ s: MCSession, for peer: MCPeerID) throws -> Data {
        let box = NSLock()
        var out: Data?
        s.nearbyConnectionData(forPeer: peer) { d, _ in box.withLock { out = d } }
        try wait("connection data", 5) { box.withLock { out != nil } }
        return box.withLock { out! }
    }

    private func linkDescription(of session: MCSession, air: VirtualAir) throws -> String {
        let m = try linkModel(of: session, air: air)
        return String(format: "Bluetooth (%@, DL %d, CI %.2f ms)", m.phy.rawValue, m.dataLength, m.connectionIntervalMicroseconds / 1000)
    }

    /// The airtime model in force on the session's link (its PHY, data length and interval as negotiated).
    private func linkModel(of session: MCSession, air: VirtualAir) throws -> AirtimeModel {
        guard let node = session.bluetooth as? BluetoothPeerNode else { throw ValidationError("no Bluetooth node on our own host") }
        let c = node.host.loop.sync { node.host.connections.values.first }
        guard let c, let controller = node.host.transport as? VirtualController else { throw ValidationError("no link") }
        return air.loop.sync { controller.linkModel(handle: c.handle) } ?? AirtimeModel(phy: .le2M, dataLength: 251, connectionIntervalMilliseconds: Double(c.interval) * 1.25)
    }
}

private func maxRSSMegabytes() -> Int {
    var u = rusage()
    getrusage(RUSAGE_SELF.rawValue, &u)
    return Int(u.ru_maxrss / 1024)
}
