// `ble gk`: the seed's GameKit photo demo. `ble gk pick` shows a GKPeerPickerController (headless: the
// first peer found, or --peer, is chosen) and, once connected, sends the photo with sendData(toAllPeers:with:);
// `ble gk session` makes a GKSession in peer mode that accepts connection requests and stores what its
// data-receive handler gets. GameKit API only (the handler adopts GKSessionDataReceiveHandler: on iOS the
// same class would be found by the receiveData:fromPeer:inSession:context: selector).
import ArgumentParser
import Foundation
import GameKit

struct GKCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gk", abstract: "GameKit photo demo: a peer picker on one side, a session on the other.",
        subcommands: [GKPickCommand.self, GKSessionCommand.self])
}

struct GKOptions: ParsableArguments {
    @Option(help: "This peer's display name.")
    var name: String
    @Option(help: "The session ID (only sessions with the same ID see each other).")
    var sessionID: String = "cmj-photo"
    @Option(help: "Where received data is stored.")
    var dir: String = "."
    @Option(help: "Exit after this many seconds (0: run until interrupted).")
    var duration: Double = 0
}

final class GKDemo: NSObject, GKPeerPickerControllerDelegate, GKSessionDelegate, GKSessionDataReceiveHandler, @unchecked Sendable {
    let options: GKOptions
    let photo: String?
    let exitAfterReceiving: Bool
    var session: GKSession?

    init(options: GKOptions, photo: String?, exitAfterReceiving: Bool) {
        self.options = options
        self.photo = photo
        self.exitAfterReceiving = exitAfterReceiving
        super.init()
        if options.duration > 0 { DispatchQueue.main.asyncAfter(deadline: .now() + options.duration) { Foundation.exit(0) } }
    }

    func say(_ s: String) { print(s); fflush(nil) }

    // Picker side.
    func peerPickerController(_ picker: GKPeerPickerController, sessionFor type: GKPeerPickerConnectionType) -> GKSession {
        GKSession(sessionID: options.sessionID, displayName: options.name, sessionMode: .peer)
    }

    func peerPickerController(_ picker: GKPeerPickerController, didConnectPeer peerID: String, to session: GKSession) {
        self.session = session
        say("connected to \(session.displayName(forPeer: peerID) ?? peerID)")
        session.setDataReceiveHandler(self, withContext: nil)
        picker.dismiss()
        guard let photo else { return }
        do {
            let data = try Data(contentsOf: URL(fileURLWithPath: photo))
            try session.sendData(toAllPeers: data, with: .reliable)
            say("sent \(data.count) bytes")
        } catch {
            say("sending failed: \(error.localizedDescription)")
        }
        DispatchQueue.main.asyncAfter(deadline: .now() + 2) { Foundation.exit(0) }
    }

    func peerPickerControllerDidCancel(_ picker: GKPeerPickerController) { say("cancelled") }

    // Session side.
    func session(_ session: GKSession, peer peerID: String, didChange state: GKPeerConnectionState) {
        say("\(session.displayName(forPeer: peerID) ?? peerID): \(state)")
    }

    func session(_ session: GKSession, didReceiveConnectionRequestFromPeer peerID: String) {
        say("connection request from \(session.displayName(forPeer: peerID) ?? peerID): accepting")
        try? session.acceptConnection(fromPeer: peerID)
    }

    func receiveData(_ data: Data, fromPeer peer: String, inSession session: GKSession, context: UnsafeMutableRawPointer?) {
        let url = URL(fileURLWithPath: options.dir).appendingPathComponent("received-\(peer).png")
        do {
            try data.write(to: url, options: .withoutOverwriting)
            say("received \(data.count) bytes from \(session.displayName(forPeer: peer) ?? peer), stored \(url.path)")
        } catch {
            say("received \(data.count) bytes; cannot store: \(error.localizedDescription)")
        }
        if exitAfterReceiving { DispatchQueue.main.asyncAfter(deadline: .now() + 0.5) { Foundation.exit(0) } }
    }
}

struct GKPickCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "pick", abstract: "Show a peer picker; send the photo once connected.")
    @OptionGroup var options: GKOptions
    @Option(help: "The photo to send.")
    var photo: String?
    @Option(help: "Connect to the peer with this display name (default: the first found).")
    var peer: String?

    func run() throws {
        if let photo, !FileManager.default.isReadableFile(atPath: photo) { throw ValidationError("--photo: cannot read \(photo)") }
        let demo = GKDemo(options: options, photo: photo, exitAfterReceiving: false)
        let picker = GKPeerPickerController()
        picker.delegate = demo
        let wanted = peer
        picker.chooser = { peers in
            demo.say("nearby: " + peers.values.sorted().joined(separator: ", "))
            return peers.first { wanted == nil || $0.value == wanted }?.key
        }
        picker.show()
        demo.say("looking for peers in \"\(options.sessionID)\"")
        withExtendedLifetime((demo, picker)) { dispatchMain() }
    }
}

struct GKSessionCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "session", abstract: "A GKSession in peer mode that accepts requests and stores what it receives.")
    @OptionGroup var options: GKOptions
    @Flag(help: "Exit after the first data received.")
    var once = false

    func run() throws {
        let demo = GKDemo(options: options, photo: nil, exitAfterReceiving: once)
        let session: GKSession = GKSession(sessionID: options.sessionID, displayName: options.name, sessionMode: .peer)
        session.delegate = demo
        session.setDataReceiveHandler(demo, withContext: nil)
        session.isAvailable = true
        demo.session = session
        demo.say("available as \"\(options.name)\" in \"\(options.sessionID)\"")
        withExtendedLifetime((demo, session)) { dispatchMain() }
    }
}
