// GameKit's peer sessions as an iOS app calls them, written only from Apple's Swift declarations
// (../shared/conformance/api-audit-mc-gk.md §2; each line names its audit row). Compiling this file is the
// check; SourceCompatRuntimeTests runs what needs no network.
import GameKit

// Rows 21–25: every GKSessionDelegate method with Apple's spelling, and the switch over Apple's cases.
final class AppGameSessionDelegate: NSObject, GKSessionDelegate {
    var seen: [String] = []
    func session(_ session: GKSession, peer peerID: String, didChange state: GKPeerConnectionState) {   // 22
        switch state {   // 49–55
        case .stateAvailable: seen.append("available")
        case .stateUnavailable: seen.append("unavailable")
        case .stateConnected: seen.append("connected")
        case .stateDisconnected: seen.append("disconnected")
        case .stateConnecting: seen.append("connecting")
        case .stateConnectedRelay: seen.append("relay")
        @unknown default: break
        }
    }
    func session(_ session: GKSession, didReceiveConnectionRequestFromPeer peerID: String) {   // 23
        do { try session.acceptConnection(fromPeer: peerID) } catch { session.denyConnection(fromPeer: peerID) }
    }
    func session(_ session: GKSession, connectionWithPeerFailed peerID: String, withError error: Error) {}   // 24
    func session(_ session: GKSession, didFailWithError error: Error) {}   // 25
}

// Rows 34–38: every picker delegate method with Apple's spelling.
final class AppPickerDelegate: NSObject, GKPeerPickerControllerDelegate {
    var connected: (String, GKSession)?
    func peerPickerController(_ picker: GKPeerPickerController, didSelect type: GKPeerPickerConnectionType) {}   // 35
    func peerPickerController(_ picker: GKPeerPickerController, sessionFor type: GKPeerPickerConnectionType) -> GKSession {   // 36
        GKSession(sessionID: "cmj-photo", displayName: "KenshinCui", sessionMode: .peer)
    }
    func peerPickerController(_ picker: GKPeerPickerController, didConnectPeer peerID: String, to session: GKSession) {   // 37
        connected = (peerID, session)
        picker.dismiss()
    }
    func peerPickerControllerDidCancel(_ picker: GKPeerPickerController) {}   // 38
}

enum GameKitSurface {
    /// Rows 1–20 (what needs no connected peer runs; the rest is compiled).
    static func session(delegate: AppGameSessionDelegate) -> GKSession {
        let session: GKSession! = GKSession(sessionID: "cmj-photo", displayName: "KenshinCui", sessionMode: .peer)   // 1, 2, 45–48
        if let optional = GKSession(sessionID: nil, displayName: nil, sessionMode: .client) {   // 2: init!
            _ = optional.sessionMode
        }
        session.delegate = delegate   // 3
        let _: String = session.sessionID   // 4
        let _: String = session.displayName   // 5
        let mode: GKSessionMode = session.sessionMode   // 6
        switch mode {
        case .server, .client, .peer: break
        @unknown default: break
        }
        let me: String = session.peerID   // 7
        session.isAvailable = false   // 8
        session.disconnectTimeout = 20   // 9
        let name: String = session.displayName(forPeer: me)   // 10
        let greeting = "hello " + session.displayName(forPeer: me)
        precondition(!name.isEmpty && !greeting.isEmpty)
        session.setDataReceiveHandler(nil, withContext: nil)   // 13
        let peers = session.peers(with: .stateConnected)   // 20
        if let connected = session.peers(with: .stateConnected) as? [String] { _ = connected.count }
        _ = peers
        return session
    }

    /// Rows 11–19 as an app calls them once connected (compiled; run against a real peer in GameKitTests).
    static func talk(_ session: GKSession, to peer: String, photo: Data) {
        do {
            try session.send(photo, toPeers: [peer], with: .reliable)   // 11, 42–44
            try session.sendData(toAllPeers: photo, with: .unreliable)   // 12
        } catch GKSessionError.dataTooBigError {
            print("too big")
        } catch let error as GKSessionError where error.code == .notConnectedError {
            print("not connected")
        } catch {
            print(error.localizedDescription)
        }
        session.connect(toPeer: peer, withTimeout: 10)   // 14
        session.cancelConnect(toPeer: peer)   // 15
        session.denyConnection(fromPeer: peer)   // 17
        try? session.acceptConnection(fromPeer: peer)   // 16
        session.disconnectPeer(fromAllPeers: peer)   // 18
        session.disconnectFromAllPeers()   // 19
    }

    /// Rows 27–33, 39–41.
    static func picker(delegate: AppPickerDelegate) -> GKPeerPickerController {
        let picker = GKPeerPickerController()   // 27, 28
        picker.delegate = delegate   // 29
        picker.connectionTypesMask = .nearby   // 30, 41
        let type: GKPeerPickerConnectionType = picker.connectionTypesMask   // 39
        switch type {   // 39: an enumeration
        case .online: break   // 40
        case .nearby: break
        @unknown default: break
        }
        if let both = GKPeerPickerConnectionType(rawValue: 2) { _ = both }   // 39: init?(rawValue:)
        picker.show()   // 31
        let _: Bool = picker.isVisible   // 33
        picker.dismiss()   // 32
        return picker
    }

    /// Rows 56–91: the error domain, the struct, its codes with the Error suffix, the static shorthands and
    /// the patterns Foundation's bridged errors give on Apple platforms.
    static func matches(_ error: Error) -> String {
        do { throw error } catch GKSessionError.notConnectedError {   // 84
            return "notConnected"
        } catch GKSessionError.dataTooBigError {   // 83
            return "dataTooBig"
        } catch let e as GKSessionError {   // 57
            switch e.code {   // 59–75
            case .invalidParameterError, .peerNotFoundError, .declinedError, .timedOutError, .cancelledError,
                .connectionFailedError, .connectionClosedError, .dataTooBigError, .notConnectedError,
                .cannotEnableError, .inProgressError, .connectivityError, .transportError, .internalError,
                .unknownError, .systemError:
                return "\(e.code.rawValue)"
            @unknown default:
                return "unknown"
            }
        } catch {
            return "other"
        }
    }

    static let allShorthands: [GKSessionError.Code] = [   // 76–91
        GKSessionError.invalidParameterError, GKSessionError.peerNotFoundError, GKSessionError.declinedError,
        GKSessionError.timedOutError, GKSessionError.cancelledError, GKSessionError.connectionFailedError,
        GKSessionError.connectionClosedError, GKSessionError.dataTooBigError, GKSessionError.notConnectedError,
        GKSessionError.cannotEnableError, GKSessionError.inProgressError, GKSessionError.connectivityError,
        GKSessionError.transportError, GKSessionError.internalError, GKSessionError.unknownError, GKSessionError.systemError,
    ]
    static let domain: String = GKSessionErrorDomain + GKSessionError.errorDomain   // 56, 58
}

// The same pattern for GameKit's states.
extension GKPeerConnectionState: CustomStringConvertible {
    public var description: String { "GKPeerConnectionState(\(rawValue))" }
}
