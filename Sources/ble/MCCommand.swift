// `ble mc`: the seed's Multipeer Connectivity photo demo in two terminals. `ble mc advertise` is the
// advertiser side (MCAdvertiserAssistant with a session, as in the seed), `ble mc browse` the browser side
// (MCBrowserViewController, headless: the nearby peers are listed and the first one — or the one named with
// --peer — is invited). Once connected, each side sends a chat line and, if given, a photo as a resource
// with progress; what arrives is printed and stored in --dir. Multipeer Connectivity API only.
import ArgumentParser
import Foundation
import MultipeerConnectivity

struct MCCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mc", abstract: "Multipeer Connectivity demo: advertise or browse, then chat and send a photo.",
        subcommands: [MCAdvertiseCommand.self, MCBrowseCommand.self, MCBenchCommand.self])
}

struct MCOptions: ParsableArguments {
    @Option(help: "This peer's display name (1 to 63 octets).")
    var name: String
    @Option(help: "The service type (1–15 ASCII letters, digits, hyphens; letters compare without case).")
    var service: String = "cmj-stream"
    @Option(help: "A chat line to send once connected.")
    var say: String?
    @Option(help: "A file (the photo) to send once connected, as a resource with progress.")
    var photo: String?
    @Option(help: "Where received resources are stored.")
    var dir: String = "."
    @Option(help: "Exit after this many seconds (0: run until interrupted).")
    var duration: Double = 0
    @Option(help: "Exit once this many messages and resources have arrived (0: never).")
    var expect: Int = 0
    @Option(help: "Encryption: required (TLS 1.3), optional or none.")
    var encryption: String = "required"
    @Option(
        help:
            "Transports: network (mDNS + TCP), bluetooth (LE adverts + L2CAP channels on BLE_TRANSPORT's controller) or both. Default: MC_TRANSPORTS, else network, plus bluetooth when BLE_TRANSPORT is set."
    )
    var transport: String?

    func validate() throws {
        guard MCPeerID.isValidDisplayName(name) else { throw ValidationError("--name must be 1 to 63 octets of UTF-8") }
        guard MCServiceType.isValid(service) else { throw ValidationError("--service: 1–15 ASCII letters, digits and hyphens, with a letter, no hyphen first, last or doubled") }
        guard ["required", "optional", "none"].contains(encryption) else { throw ValidationError("--encryption required, optional or none") }
        if let photo, !FileManager.default.isReadableFile(atPath: photo) { throw ValidationError("--photo: cannot read \(photo)") }
        if let transport, MCTransports(parsing: transport) == nil { throw ValidationError("--transport network, bluetooth or both") }
    }

    var preference: MCEncryptionPreference { encryption == "none" ? .none : encryption == "optional" ? .optional : .required }
}

/// When `ble mc browse` may invite a peer again: a second after its last invitation at the soonest.
final class InviteTries: @unchecked Sendable {
    private let lock = NSLock()
    private var next: [UInt64: Date] = [:]
    /// Seconds until this peer may be invited; the slot is taken.
    func delay(for token: UInt64) -> TimeInterval {
        lock.withLock {
            let now = Date()
            let at = max(now, next[token] ?? now)
            next[token] = at.addingTimeInterval(1)
            return at.timeIntervalSince(now)
        }
    }
}

/// The session side both commands share: prints what happens, sends the line and the photo once connected.
final class MCDemoPeer: NSObject, MCSessionDelegate, @unchecked Sendable {
    let options: MCOptions
    let session: MCSession
    private let lock = NSLock()
    private var arrived = 0
    private var sending = 0
    private var sentTo: Set<MCPeerID> = []

    init(options: MCOptions) {
        self.options = options
        // The app code stays Apple's: the transports reach the session, advertiser and browser through the
        // process-wide default.
        if let t = options.transport.flatMap(MCTransports.init(parsing:)) { setenv("MC_TRANSPORTS", t.description, 1) }
        session = MCSession(peer: MCPeerID(displayName: options.name), securityIdentity: nil, encryptionPreference: options.preference)
        super.init()
        session.delegate = self
        if options.duration > 0 {
            DispatchQueue.main.asyncAfter(deadline: .now() + options.duration) { Foundation.exit(0) }
        }
    }

    func say(_ s: String) {
        print(s)
        fflush(nil)
    }

    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        say("\(peerID.displayName): \(state)")
        guard state == .connected, lock.withLock({ sentTo.insert(peerID).inserted }) else { return }
        if let line = options.say {
            do { try session.send(Data(line.utf8), toPeers: [peerID], with: .reliable) } catch { say("cannot send: \(error.localizedDescription)") }
        }
        if let photo = options.photo {
            let url = URL(fileURLWithPath: photo)
            lock.withLock { sending += 1 }
            let progress = session.sendResource(at: url, withName: url.lastPathComponent, toPeer: peerID) { [self] e in
                say(e.map { "photo not sent: \($0.localizedDescription)" } ?? "photo sent to \(peerID.displayName)")
                lock.withLock { sending -= 1 }
                exitIfDone()
            }
            if let progress { watch(progress, label: "sending \(url.lastPathComponent)") }
        }
    }

    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        say("\(peerID.displayName) says: \(String(decoding: data, as: UTF8.self))")
        arrivedOne()
    }

    func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {
        say("\(peerID.displayName) opened stream \(streamName)")
    }

    func session(_ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, with progress: Progress) {
        say("receiving \(resourceName) from \(peerID.displayName)")
        watch(progress, label: "receiving \(resourceName)")
    }

    func session(_ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, at localURL: URL?, withError error: (any Error)?) {
        guard let localURL, error == nil else { return say("\(resourceName) failed: \(error?.localizedDescription ?? "?")") }
        // The file is temporary: move it now, never over an existing one.
        let base = URL(fileURLWithPath: options.dir)
        var target = base.appendingPathComponent((resourceName as NSString).lastPathComponent)
        var n = 1
        while FileManager.default.fileExists(atPath: target.path) {
            let name = (resourceName as NSString).lastPathComponent as NSString
            target = base.appendingPathComponent("\(name.deletingPathExtension) (\(n))" + (name.pathExtension.isEmpty ? "" : ".\(name.pathExtension)"))
            n += 1
        }
        do {
            try FileManager.default.moveItem(at: localURL, to: target)
            let size = (try? FileManager.default.attributesOfItem(atPath: target.path)[.size] as? NSNumber)?.intValue ?? 0
            say("stored \(target.path) (\(size) bytes) from \(peerID.displayName)")
        } catch {
            say("cannot store \(resourceName): \(error.localizedDescription)")
        }
        arrivedOne()
    }

    private func arrivedOne() {
        lock.withLock { arrived += 1 }
        exitIfDone()
    }

    /// With --expect: exits once that much arrived and our photo was delivered (its completion came).
    private func exitIfDone() {
        let done = lock.withLock { options.expect > 0 && arrived >= options.expect && sending == 0 }
        // Let the last messages leave before exiting.
        if done { DispatchQueue.main.asyncAfter(deadline: .now() + 1) { Foundation.exit(0) } }
    }

    private func watch(_ p: Progress, label: String) {
        DispatchQueue.global().async { [self] in
            var last = -1
            while !p.isFinished && !p.isCancelled {
                let pct = Int(p.fractionCompleted * 100)
                if pct / 25 != last / 25 { say("\(label): \(pct) %"); last = pct }
                usleep(100_000)
            }
        }
    }
}

struct MCAdvertiseCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "advertise", abstract: "Advertise (MCAdvertiserAssistant) and accept invitations.")
    @OptionGroup var options: MCOptions
    @Flag(help: "Ask on the terminal before accepting an invitation.")
    var ask = false

    func run() throws {
        let peer = MCDemoPeer(options: options)
        let assistant = MCAdvertiserAssistant(serviceType: options.service, discoveryInfo: nil, session: peer.session)
        if ask { assistant.invitationPresenter = MCTerminalPrompt.invitation }
        assistant.start()
        peer.say("advertising \"\(options.name)\" for \(options.service)")
        withExtendedLifetime((peer, assistant)) { dispatchMain() }
    }
}

struct MCBrowseCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "browse", abstract: "Browse (MCBrowserViewController) and invite a peer.")
    @OptionGroup var options: MCOptions
    @Option(help: "Invite the peer with this display name (default: the first one found).")
    var peer: String?

    func run() throws {
        let me = MCDemoPeer(options: options)
        let browser = MCBrowserViewController(serviceType: options.service, session: me.session)
        let wanted = peer
        // The controller shows the list again when an invitation failed or a session ended; the peer is then
        // invited again, a second after the last try at the soonest (a user tapping it again), not in a loop.
        let tries = InviteTries()
        browser.presenter = { vc, peers in
            me.say("nearby: " + (peers.isEmpty ? "nobody" : peers.map(\.displayName).joined(separator: ", ")))
            guard let p = peers.first(where: { wanted == nil || $0.displayName == wanted }) else { return }
            let wait = tries.delay(for: p.token)
            if wait <= 0 { return vc.invite(p) }
            DispatchQueue.global().asyncAfter(deadline: .now() + wait) {
                guard vc.nearbyPeers.contains(p), !vc.session.connectedPeers.contains(p) else { return }
                vc.invite(p)
            }
        }
        browser.present()
        me.say("browsing for \(options.service)")
        withExtendedLifetime((me, browser)) { dispatchMain() }
    }
}
