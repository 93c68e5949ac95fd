// Joining a session: invitations (ours to an advertiser, with a timeout; theirs through our advertiser) and
// the custom-discovery trio, where apps exchange connection data themselves.
//
// Mutual invitations. Two peers may invite each other at once, and each app answers the other's invitation
// on its own: accept, decline or ignore it. An invitation an app accepted always leads to a connection, and
// the pair ends on one link:
// - accepting an invitation never declines it because we invited that peer too; when we are already
//   connected with the peer (through the other invitation), the acceptance is satisfied by that connection;
// - when both invitations are accepted, the link of the invitation sent by the lower token wins: the side
//   that sent it moves the peer onto it quietly (the app saw `.connected` once), the other drops its own;
// - the end of our own invitation (declined, timed out, dropped) is not reported while the peer is
//   connected, or being admitted, through theirs.
import Foundation
import PeerSession
import PeerTransport
import PeerBluetooth

extension MCSession {
    /// Invites `peer` (found by a browser at `addresses`) into this session.
    func invite(_ peer: MCPeerID, at addresses: [(host: String, port: UInt16)], context: Data?, timeout: TimeInterval) {
        let already = lock.withLock { peers[peer.token] != nil || pendingInvites[peer.token] != nil }
        guard !already else { return }
        lock.withLock { pendingInvites[peer.token] = .some(nil) }
        notify(peer, .connecting)
        let id = UInt32.random(in: 1...UInt32.max)
        let limit = timeout > 0 ? timeout : 30
        DispatchQueue.global().asyncAfter(deadline: .now() + limit) { [weak self] in
            guard let self else { return }
            let link = lock.withLock { () -> PeerLink?? in
                guard let entry = pendingInvites[peer.token] else { return nil }
                pendingInvites[peer.token] = nil
                return entry
            }
            guard let link else { return }   // answered already
            link?.onClose = nil
            link?.close()
            PeerLog.write("invitation to \(peer.displayName) timed out")
            invitationEnded(peer)
        }
        connect(to: addresses, peer: peer) { [weak self] link in
            guard let self else { return }
            guard let link else { return inviteFailed(peer) }
            let stillWanted = lock.withLock { () -> Bool in
                guard pendingInvites[peer.token] != nil else { return false }
                pendingInvites[peer.token] = .some(link)
                return true
            }
            guard stillWanted else { return link.close() }
            let backlog = Backlog()
            link.onMessage = { [weak self] m in self?.inviteAnswer(m, link: link, peer: peer, backlog: backlog) }
            link.onClose = { [weak self] _ in self?.inviteFailed(peer, link: link) }
            let ctx = context.map { [UInt8]($0) }
            link.send([hello(), .invite(id: id, mesh: lock.withLock { mesh }, context: ctx)])
        }
    }

    private func inviteAnswer(_ m: PeerMessage, link: PeerLink, peer: MCPeerID, backlog: Backlog) {
        if backlog.accepted {
            // Accepted, waiting for the app's word on the certificate: keep what arrives for the session.
            backlog.messages.append(m)
            return
        }
        switch m {
        case .hello:
            break
        case let .inviteReply(_, accepted):
            guard accepted else {
                link.close()
                return
            }
            backlog.accepted = true
            admit(link, peer: peer) { [self] ok in
                // Decided on the delegate queue; carried out on the link's event loop, between two of its reads. The
                // session's handlers take over from the backlog's and the backlog is delivered in one go, before
                // anything read later: done from here, a read under way on the loop (a burst of frames) handed its
                // first messages to the backlog and the rest straight to the session, which got them first. A
                // 400,000-octet message sent as soon as the inviter's peer was connected arrived as its last
                // 137,856 octets (the GameKit photo exchange, once in a whole run).
                link.execute { [self] in admitted(ok, link: link, peer: peer, backlog: backlog) }
            }
        default:
            PeerLog.warning("\(peer.displayName) answered an invitation with \(m); closing")
            link.close()
        }
    }

    /// Our invitation was accepted and the app has judged the peer (`ok`): on the link's event loop.
    private func admitted(_ ok: Bool, link: PeerLink, peer: MCPeerID, backlog: Backlog) {
        enum Outcome { case notOurs, refused, adopt(movedConnected: Bool), keepTheirs, moveOntoOurs(PeerConnection) }
        let outcome = lock.withLock { () -> Outcome in
            guard case .some(.some(let l)) = pendingInvites[peer.token], l === link else { return .notOurs }
            pendingInvites[peer.token] = nil
            guard ok else { return .refused }
            if let existing = peers[peer.token] {
                // Both invitations were accepted: the lower token's invitation link wins.
                return myPeerID.token < peer.token ? .moveOntoOurs(existing) : .keepTheirs
            }
            // Ours is the link that stays (theirs was dropped, or never accepted): the peer joins our
            // mesh, so a mesh we took on while accepting theirs is given up again.
            if let m = meshBeforeAccepting.removeValue(forKey: peer.token) { mesh = m }
            return .adopt(movedConnected: movingToOurInvitation.remove(peer.token) != nil)
        }
        switch outcome {
        case .notOurs:
            return
        case .refused:
            link.onClose = nil
            link.close()
            return invitationEnded(peer)
        case .keepTheirs:
            link.onClose = nil
            link.close()
            return
        case let .moveOntoOurs(existing):
            move(existing, onto: link, backlog: backlog)
            return
        case let .adopt(movedConnected):
            // Its member port and Bluetooth endpoint come with the hello after its reply.
            guard let c = adopt(link, peer: peer, memberPort: 0) else {
                link.close()
                return notify(peer, .notConnected)
            }
            if movedConnected { connectQuietly(c) } else { becameConnected(c, sendMembers: true) }
            deliver(backlog, on: c)
        }
    }

    /// Hands what arrived between the acceptance and the admission to the session.
    private func deliver(_ backlog: Backlog, on c: PeerConnection) {
        let held = Unchecked(self)
        c.link.execute {
            for m in backlog.messages { held.value.received(m, on: c) }
            backlog.messages.removeAll()
        }
    }

    /// Both invitations of a pair were accepted and ours (the lower token's) wins: the peer, connected through
    /// theirs, moves onto our link without the app seeing it leave; theirs is dropped (its inviter drops it too).
    private func move(_ existing: PeerConnection, onto link: PeerLink, backlog: Backlog) {
        existing.link.onMessage = nil
        existing.link.onResourceChunk = nil
        existing.link.onWritable = nil
        existing.link.onClose = nil
        existing.link.close()
        let wasConnected = lock.withLock { () -> Bool in
            if peers[existing.peer.token] === existing { peers[existing.peer.token] = nil }
            // We are the inviter of the link that stays: the mesh is ours again.
            if let m = meshBeforeAccepting.removeValue(forKey: existing.peer.token) { mesh = m }
            return existing.connected
        }
        failTransfers(of: existing)
        guard let c = adopt(link, peer: existing.peer, memberPort: existing.memberPort, bluetooth: existing.bluetooth) else {
            link.close()
            return wasConnected ? notify(existing.peer, .notConnected) : ()
        }
        if wasConnected { connectQuietly(c) } else { becameConnected(c, sendMembers: true) }
        deliver(backlog, on: c)
    }

    /// A peer whose `.connected` the app already heard, now on another link.
    private func connectQuietly(_ c: PeerConnection) {
        lock.withLock {
            c.connected = true
            c.lastHeard = Date()
        }
        updateMemberAdvert()
    }

    private func inviteFailed(_ peer: MCPeerID, link: PeerLink? = nil) {
        let was = lock.withLock { () -> Bool in
            guard let entry = pendingInvites[peer.token] else { return false }
            // A link we already replaced (a timeout, a new invitation) is not this invitation.
            if let link, let l = entry, l !== link { return false }
            pendingInvites[peer.token] = nil
            return true
        }
        if was { invitationEnded(peer) }
    }

    /// Our invitation to `peer` ended without a connection: tell the app, unless the peer is connected (or
    /// being admitted) through its own invitation to us — then the pair is settled on that link.
    private func invitationEnded(_ peer: MCPeerID) {
        let (report, wasMoving) = lock.withLock { () -> (Bool, Bool) in
            let moving = movingToOurInvitation.remove(peer.token) != nil
            meshBeforeAccepting[peer.token] = nil
            return (peers[peer.token] == nil && !accepting.contains(peer.token), moving)
        }
        if report || wasMoving { notify(peer, .notConnected) }
    }
    /// Tries each address in turn, over the transports this session uses: TCP hosts, and Bluetooth
    /// endpoints (`ble:` hosts, the port being the SPSM). TLS as the encryption preference says (mesh
    /// joins always offer it when we have an identity: the member admits or refuses it).
    func connect(to addresses: [(host: String, port: UInt16)], peer: MCPeerID, useTLS: Bool = false, _ done: @escaping @Sendable (PeerLink?) -> Void) {
        guard let first = addresses.first else { return done(nil) }
        let rest = Array(addresses.dropFirst())
        let identity = useTLS ? tls : (encryptionPreference == .none ? nil : tls)
        let next: @Sendable (Result<PeerLink, PeerTransportError>) -> Void = { [weak self] r in
            switch r {
            case let .success(link): done(link)
            case let .failure(e):
                PeerLog.write("\(peer.displayName) at \(first.host):\(first.port): \(e)")
                guard let self else { return done(nil) }
                connect(to: rest, peer: peer, useTLS: useTLS, done)
            }
        }
        if let endpoint = PeerBluetoothEndpoint(host: first.host, port: first.port) {
            guard let node = bluetooth else { return next(.failure(.cannotConnect("\(first.host): this session does not use Bluetooth"))) }
            node.connect(to: endpoint, tls: identity, completion: next)
        } else {
            guard transports.contains(.network) else { return next(.failure(.cannotConnect("\(first.host): this session does not use the network"))) }
            PeerTransport.shared.connect(host: first.host, port: first.port, tls: identity, completion: next)
        }
    }

    /// An invitation our advertiser received was accepted with this session. The app's yes stands even when
    /// we invited that peer too (see the top of this file).
    func acceptInvitation(
        link: PeerLink, peer: MCPeerID, inviteID: UInt32, mesh theirMesh: UInt64, memberPort port: UInt16,
        bluetooth: PeerBluetoothEndpoint? = nil
    ) {
        let satisfied = lock.withLock { () -> Bool in
            // Connected already (through our invitation, accepted meanwhile): that connection is the answer.
            if peers[peer.token] != nil || accepting.contains(peer.token) { return true }
            accepting.insert(peer.token)
            return false
        }
        if satisfied {
            link.send(.inviteReply(id: inviteID, accepted: false))
            return link.close()
        }
        admit(link, peer: peer) { [self] ok in
            guard link.isOpen else {
                // The inviter gave up (withdrew, timed out) before our app answered.
                let otherwise = lock.withLock { () -> Bool in
                    accepting.remove(peer.token)
                    return peers[peer.token] != nil || pendingInvites[peer.token] != nil
                }
                return otherwise ? () : notify(peer, .notConnected)
            }
            guard ok, let c = adopt(link, peer: peer, memberPort: port, bluetooth: bluetooth) else {
                link.send(.inviteReply(id: inviteID, accepted: false))
                link.close()
                let connectedOtherwise = lock.withLock { () -> Bool in
                    accepting.remove(peer.token)
                    return peers[peer.token] != nil || pendingInvites[peer.token] != nil
                }
                return connectedOtherwise ? () : notify(peer, .notConnected)
            }
            let ourInvitation = lock.withLock { () -> PeerLink?? in
                accepting.remove(peer.token)
                let pending = pendingInvites[peer.token]
                // A session that is alone joins the inviter's mesh (remembering its own while its invitation
                // to the same peer may still win).
                if peers.count == 1 {
                    if pending != nil, myPeerID.token < peer.token { meshBeforeAccepting[peer.token] = mesh }
                    mesh = theirMesh
                }
                return pending
            }
            if let ourInvitation {
                if myPeerID.token < peer.token {
                    // Ours would win if the peer accepts it too: then the peer drops this link, and we wait
                    // for our invitation's answer before telling the app anything.
                    link.onClose = { [weak self, weak c] e in
                        guard let self, let c else { return }
                        let moving = lock.withLock { () -> Bool in
                            guard peers[peer.token] === c, case .some(.some(let l)) = pendingInvites[peer.token], l.isOpen else { return false }
                            peers[peer.token] = nil
                            if c.connected { movingToOurInvitation.insert(peer.token) }
                            return true
                        }
                        if moving { failTransfers(of: c) } else { linkClosed(c, error: e) }
                    }
                } else {
                    // Theirs wins a tie: our invitation has nothing left to do.
                    let withdrawn = lock.withLock { () -> Bool in
                        guard pendingInvites[peer.token] != nil else { return false }
                        pendingInvites[peer.token] = nil
                        return true
                    }
                    if withdrawn, let l = ourInvitation {
                        l.onClose = nil
                        l.close()
                    }
                }
            }
            link.send([.inviteReply(id: inviteID, accepted: true), hello()])
            // Both ends of an invitation tell the newcomer about the members they know.
            becameConnected(c, sendMembers: true)
        }
    }

    // MARK: Custom discovery (MCSessionCustomDiscovery)

    /// Data another app instance needs to connect to us: our peer, our member port and our addresses.
    public func nearbyConnectionData(forPeer peerID: MCPeerID, withCompletionHandler completionHandler: @escaping (Data?, (any Error)?) -> Void) {
        let port = memberPort()
        let info: [String: Any] = [
            "v": 1, "token": String(myPeerID.token), "name": myPeerID.displayName, "port": Int(port),
            "hosts": LocalAddresses.all(),
        ]
        let data = try? JSONSerialization.data(withJSONObject: info, options: [.sortedKeys])
        nonisolated(unsafe) let handler = completionHandler
        delegateCalls.async { handler(data, data == nil ? MCError(.unknown) : nil) }
    }

    /// The async form Swift gives `nearbyConnectionData(forPeer:withCompletionHandler:)` on Apple platforms.
    public func nearbyConnectionData(forPeer peerID: MCPeerID) async throws -> Data {
        try await withCheckedThrowingContinuation { (done: CheckedContinuation<Data, any Error>) in
            nearbyConnectionData(forPeer: peerID) { data, error in
                if let data { done.resume(returning: data) } else { done.resume(throwing: error ?? MCError(.unknown)) }
            }
        }
    }

    /// Connects to a peer whose connection data the app obtained itself; both sides call this.
    public func connectPeer(_ peerID: MCPeerID, withNearbyConnectionData data: Data) {
        guard let obj = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let tokenText = obj["token"] as? String, let token = UInt64(tokenText), token == peerID.token,
            let port = obj["port"] as? Int, (1...65_535).contains(port), let hosts = obj["hosts"] as? [String]
        else {
            PeerLog.warning("connectPeer: the connection data for \(peerID.displayName) is not ours or is damaged")
            return notify(peerID, .notConnected)
        }
        let parked = lock.withLock { () -> ParkedJoin? in
            expectedPeers.insert(peerID.token)
            guard let p = parkedJoins.removeValue(forKey: peerID.token) else { return nil }
            if peers.isEmpty { mesh = p.mesh }
            return p
        }
        // It connected before the app gave us its data: its join was waiting for this call.
        if let parked {
            notify(peerID, .connecting)
            return acceptJoin(parked.link, peer: peerID, port: parked.port, bluetooth: parked.bluetooth)
        }
        // The lower token connects; the other waits for it (one link, no race).
        guard myPeerID.token < peerID.token else { return notify(peerID, .connecting) }
        notify(peerID, .connecting)
        connect(to: hosts.map { ($0, UInt16(port)) }, peer: peerID) { [weak self] link in
            guard let self else { return }
            guard let link, lock.withLock({ expectedPeers.contains(peerID.token) }), let c = adopt(link, peer: peerID, memberPort: UInt16(port)) else {
                link?.close()
                return notify(peerID, .notConnected)
            }
            c.awaitingJoinReply = true
            link.send([hello(), .join(mesh: lock.withLock { mesh })])
        }
    }

    /// Cancels a connection in progress: an invitation we sent, or custom-discovery data we were given.
    public func cancelConnectPeer(_ peerID: MCPeerID) {
        let (c, invite) = lock.withLock { () -> (PeerConnection?, PeerLink??) in
            expectedPeers.remove(peerID.token)
            let pending = pendingInvites.removeValue(forKey: peerID.token)
            return (peers[peerID.token].flatMap { $0.connected ? nil : $0 }, pending)
        }
        c?.link.close()
        if let invite {
            invite?.close()
            notify(peerID, .notConnected)
        }
    }
}

/// What an inviter receives between the acceptance and the app's admission of the peer (on the link's loop).
final class Backlog: @unchecked Sendable {
    var accepted = false
    var messages: [PeerMessage] = []
}

/// This machine's addresses (for custom discovery data).
enum LocalAddresses {
    static func all() -> [String] {
        var out: [String] = []
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return ["127.0.0.1"] }
        defer { freeifaddrs(list) }
        var p: UnsafeMutablePointer<ifaddrs>? = first
        while let ifa = p {
            defer { p = ifa.pointee.ifa_next }
            guard let sa = ifa.pointee.ifa_addr, sa.pointee.sa_family == sa_family_t(AF_INET) else { continue }
            var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            if getnameinfo(sa, socklen_t(MemoryLayout<sockaddr_in>.size), &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST) == 0 {
                out.append(String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
            }
        }
        // Loopback last: other machines cannot use it.
        return out.sorted { a, _ in !a.hasPrefix("127.") }
    }
}
