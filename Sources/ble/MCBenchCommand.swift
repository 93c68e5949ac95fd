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
    static let configuration = CommandConfiguration(commandName: "bench",
        abstract: "Resource throughput over Bluetooth between two in-process peers on the airtime-modelled virtual radio.")
    @Option(help: "Resource size in bytes.")
    var size = 1_000_000
    @Option(help: "PHY the peers ask for after connecting is LE 2M; the air charges airtime for the link's own PHY and data length. Encryption: required (TLS 1.3 over the channel) or none.")
    var encryption = "none"

    func validate() throws {
        guard size > 0 && size <= 1 << 30 else { throw ValidationError("--size 1…1073741824") }
        guard ["required", "none"].contains(encryption) else { throw ValidationError("--encryption required or none") }
    }

    final class Watcher: NSObject, MCSessionDelegate, MCNearbyServiceAdvertiserDelegate, MCNearbyServiceBrowserDelegate, @unchecked Sendable {
        let lock = NSLock()
        var connected = false, found: MCPeerID?, received: Date?
        var session: MCSession?
        func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) { if state == .connected { lock.withLock { connected = true } } }
        func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {}
        func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}
        func session(_ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, with progress: Progress) {}
        func session(_ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, at localURL: URL?, withError error: (any Error)?) {
            if let localURL { try? FileManager.default.removeItem(at: localURL) }
            lock.withLock { received = Date() }
        }
        func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID, withContext context: Data?,
                        invitationHandler: @escaping (Bool, MCSession?) -> Void) { invitationHandler(true, session) }
        func browser(_ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?) { lock.withLock { found = peerID } }
        func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {}
    }

    func run() throws {
        let air = VirtualAir(loop: EventLoop(label: "mc-bench-air", clock: .real))
        // The air's template; each link is charged at its own PHY, data length and interval.
        air.loop.sync { air.airtime = AirtimeModel(phy: .le2M, dataLength: 251) }
        BluetoothPeerNode.configure(factory: { name in try HostFactory.makeHost(on: air, name: name) }, sharing: .perPeer)
        let pref: MCEncryptionPreference = encryption == "none" ? .none : .required
        let a = MCSession(peer: MCPeerID(displayName: "bench-A"), securityIdentity: nil, encryptionPreference: pref, transports: .bluetooth)
        let b = MCSession(peer: MCPeerID(displayName: "bench-B"), securityIdentity: nil, encryptionPreference: pref, transports: .bluetooth)
        let wa = Watcher(), wb = Watcher()
        wa.session = a
        a.delegate = wa
        b.delegate = wb
        let advertiser = MCNearbyServiceAdvertiser(peer: a.myPeerID, discoveryInfo: nil, serviceType: "mc-bench")
        advertiser.transports = .bluetooth
        advertiser.delegate = wa
        let browser = MCNearbyServiceBrowser(peer: b.myPeerID, serviceType: "mc-bench")
        browser.transports = .bluetooth
        browser.delegate = wb
        advertiser.startAdvertisingPeer()
        browser.startBrowsingForPeers()
        func wait(_ what: String, _ seconds: Double, _ cond: () -> Bool) throws {
            let end = Date().addingTimeInterval(seconds)
            while !cond() { guard Date() < end else { throw ValidationError("timed out waiting for \(what)") }; usleep(2_000) }
        }
        try wait("discovery", 10) { wb.lock.withLock { wb.found != nil } }
        browser.invitePeer(wb.lock.withLock { wb.found! }, to: b, withContext: nil, timeout: 10)
        try wait("the session", 10) { wb.lock.withLock { wb.connected } && wa.lock.withLock { wa.connected } }
        // Let the link settle at its negotiated PHY and data length.
        Thread.sleep(forTimeInterval: 0.5)
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("mc-bench-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("payload.bin")
        try Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) }).write(to: file)
        let start = Date()
        let cpu0 = clock()
        let sent = NSLock()
        var outcome: (any Error)??
        _ = b.sendResource(at: file, withName: "payload.bin", toPeer: a.myPeerID) { e in sent.withLock { outcome = .some(e) } }
        try wait("the resource", Double(size) / 20_000 + 30) { wa.lock.withLock { wa.received != nil } && sent.withLock { outcome != nil } }
        if case let .some(.some(e)) = sent.withLock({ outcome }) { throw ValidationError("the resource failed: \(e)") }
        let seconds = wa.lock.withLock { wa.received! }.timeIntervalSince(start)
        let cpu = Double(clock() - cpu0) / Double(CLOCKS_PER_SEC)
        let link = try linkModel(of: b, air: air)
        let rate = Double(size) / seconds
        // An L2CAP channel's own ceiling: every LL payload octet but the 4-octet basic header of each K-frame.
        let channelMax = link.linkPayloadThroughput * Double(link.dataLength - 4) / Double(link.dataLength)
        print(String(format: "resource %d bytes over Bluetooth (%@, DL %d, CI %.2f ms, encryption %@): %.1f kB/s in %.2f s, CPU %.2f s",
                     size, link.phy.rawValue, link.dataLength, link.connectionIntervalMicroseconds / 1000, encryption, rate / 1000, seconds, cpu))
        print(String(format: "link ceiling %.1f kB/s, L2CAP channel ceiling %.1f kB/s: %.1f %% of the channel's", link.linkPayloadThroughput / 1000,
                     channelMax / 1000, rate / channelMax * 100))
        advertiser.stopAdvertisingPeer()
        browser.stopBrowsingForPeers()
        a.disconnect()
        b.disconnect()
    }

    /// The airtime model in force on the session's link (its PHY, data length and interval as negotiated).
    private func linkModel(of session: MCSession, air: VirtualAir) throws -> AirtimeModel {
        guard let node = session.bluetooth else { throw ValidationError("no Bluetooth node") }
        let c = node.host.loop.sync { node.host.connections.values.first }
        guard let c, let controller = node.host.transport as? VirtualController else { throw ValidationError("no link") }
        return air.loop.sync { controller.linkModel(handle: c.handle) } ?? AirtimeModel(phy: .le2M, dataLength: 251, connectionIntervalMilliseconds: Double(c.interval) * 1.25)
    }
}
