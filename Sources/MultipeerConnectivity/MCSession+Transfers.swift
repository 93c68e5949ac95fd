// What flows on a session's links: messages, resources (files with progress and cancellation from either
// side, read in pieces only as the link drains and written by a ResourceWriter that pauses the link while
// the disk lags, so memory stays flat), and one-way named
// streams with credits (the receiver grants 256 KB and more as its app reads).
import Foundation
import PeerSession
import PeerTransport
import BoundStreams

extension MCSession {
    // MARK: Incoming

    func received(_ m: PeerMessage, on c: PeerConnection) {
        lock.withLock { c.lastHeard = Date() }
        switch m {
        case let .data(id, final, unreliable, chunk):
            if unreliable {
                deliver(chunk, from: c)
                return
            }
            do {
                if let whole = try lock.withLock({ try c.assembler.take(id: id, final: final, chunk: chunk) }) { deliver(whole, from: c) }
            } catch {
                PeerLog.warning("\(c.peer.displayName) broke the message framing: \(error); disconnecting")
                c.link.close()
            }
        case .ping:
            c.link.send(.pong)
        case .pong, .infoRequest, .info:
            break
        case .bye:
            c.link.close()
        case let .members(theirMesh, list):
            // A newcomer (we know only the peer that told us) adopts the mesh it joined.
            lock.withLock { if peers.count == 1 { mesh = theirMesh } }
            join(list)
        case let .joinReply(ok):
            let waiting = lock.withLock { () -> Bool in
                defer { c.awaitingJoinReply = false }; return c.awaitingJoinReply
            }
            guard waiting else { return }
            if ok { becameConnected(c, sendMembers: false) } else { c.link.close() }
        case let .hello(_, _, port, bt):
            lock.withLock {
                if !c.link.isBluetooth { c.memberPort = port }
                if let bt { c.bluetooth = bt }
            }
        case let .resourceStart(id, size, name):
            startIncomingResource(id: id, size: size, name: name, on: c)
        case let .resourceChunk(id, chunk):
            resourceChunk(id: id, chunk: PeerChunk(chunk), on: c)
        case let .resourceEnd(id):
            finishIncomingResource(id: id, on: c)
        case let .resourceCancel(id):
            resourceCancelled(id: id, on: c)
        case let .resourceAck(id):
            takeOutgoingResource(id, of: c)?.completion(nil)
        case let .streamOpen(id, name):
            openIncomingStream(id: id, name: name, on: c)
        case let .streamData(id, chunk):
            let s = lock.withLock { c.incomingStreams[id] }
            // More than the window granted is a broken peer; credits bound what we hold.
            guard let s, s.bufferedByteCount + chunk.count <= PeerConnection.streamWindow else {
                if s != nil { PeerLog.warning("\(c.peer.displayName) overran stream \(id); disconnecting"); c.link.close() }
                return
            }
            s.deliver(chunk)
        case let .streamCredit(id, n):
            lock.withLock { c.outgoingStreams[id]?.credits += Int(n) }
            pump(c)
        case let .streamClose(id):
            let s = lock.withLock { c.incomingStreams.removeValue(forKey: id) }
            s?.finish(error: nil)
        case let .evict(token):
            if token == myPeerID.token {
                disconnect()
            } else if let victim = lock.withLock({ peers[token] }) {
                victim.link.close()
            }
        case .invite, .inviteReply, .join, .unknown:
            break
        }
    }

    private func deliver(_ bytes: [UInt8], from c: PeerConnection) {
        let data = Data(bytes)
        delegateCalls.async { [self] in delegate?.session(self, didReceive: data, fromPeer: c.peer) }
    }

    // MARK: Resources

    /// Sends a file (file URLs only on Linux) to a connected peer. The returned Progress counts octets and
    /// can cancel; `completionHandler` runs when the peer has it all, or with the error.
    @discardableResult
    public func sendResource(
        at resourceURL: URL, withName resourceName: String, toPeer peerID: MCPeerID,
        withCompletionHandler completionHandler: (((any Error)?) -> Void)? = nil
    ) -> Progress? {
        let complete = Unchecked(completionHandler)
        let done: @Sendable ((any Error)?) -> Void = { [delegateCalls] e in
            let err = Unchecked(e)
            delegateCalls.async { complete.value?(err.value) }
        }
        guard let c = lock.withLock({ peers[peerID.token] }), lock.withLock({ c.connected }) else {
            done(MCError(.notConnected))
            return nil
        }
        guard resourceURL.isFileURL, let file = try? FileHandle(forReadingFrom: resourceURL),
            let size = (try? FileManager.default.attributesOfItem(atPath: resourceURL.path)[.size] as? NSNumber)?.uint64Value
        else {
            done(MCError(.invalidParameter, userInfo: [NSLocalizedDescriptionKey: "Cannot read \(resourceURL)"]))
            return nil
        }
        let progress = Progress(totalUnitCount: Int64(size))
        let started = lock.withLock { () -> UInt32? in
            // The peer left since the look-up above (its transfers have been failed): nothing would complete this one.
            guard !c.transfersEnded else { return nil }
            defer { c.nextResourceID &+= 1 }
            c.outgoingResources[c.nextResourceID] = PeerConnection.OutgoingResource(file: file, progress: progress, completion: done, sent: 0, size: size)
            return c.nextResourceID
        }
        guard let id = started else {
            try? file.close()
            done(MCError(.notConnected))
            return nil
        }
        progress.cancellationHandler = { [weak self, weak c] in
            guard let self, let c, let r = self.takeOutgoingResource(id, of: c) else { return }
            c.link.send(.resourceCancel(id: id))
            r.completion(MCError(.cancelled))
        }
        c.link.send(.resourceStart(id: id, size: size, name: resourceName))
        pump(c)
        return progress
    }

    /// Sends what waits (resource pieces, stream data within credits) while the link is writable, and closes
    /// the files of resources that are done with; always on the link's event loop, so pieces leave in order.
    ///
    /// A resource's file is read by the pump alone and closed by it alone, between two of its reads. Closed
    /// from another thread (an app cancelling, a disconnect) while the pump had taken its descriptor and not
    /// yet read it, the number could go to a file or socket opened meanwhile, and the pump would send that
    /// file's octets to the peer.
    func pump(_ c: PeerConnection) {
        let session = Unchecked(self), conn = Unchecked(c)
        c.link.execute { session.value.pumpOnLoop(conn.value) }
    }

    /// Takes an outgoing resource out of its connection (nil when it is gone already). Its file, unless the pump
    /// read it to the end and has queued it itself, goes to the pump to close.
    func takeOutgoingResource(_ id: UInt32, of c: PeerConnection) -> PeerConnection.OutgoingResource? {
        let r = lock.withLock { () -> PeerConnection.OutgoingResource? in
            guard let r = c.outgoingResources.removeValue(forKey: id) else { return nil }
            if !r.finishedSending { c.filesToClose.append(r.file) }
            return r
        }
        if r != nil { pump(c) }
        return r
    }

    private func pumpOnLoop(_ c: PeerConnection) {
        // A send can flush, and a flush can report the link writable again — calling back in here while the
        // loop below holds copies of resource state. The running pump goes on instead.
        guard !c.pumping else { c.pumpAgain = true; return }
        c.pumping = true
        defer {
            closeReleasedFiles(c)
            c.pumping = false
        }
        while c.link.isWritable && c.link.isOpen {
            // Between turns no file is being read.
            closeReleasedFiles(c)
            var sentSomething = false
            c.pumpAgain = false
            let ids = lock.withLock { Array(c.outgoingResources.keys).sorted() }
            for id in ids {
                guard c.link.isWritable else { break }
                // Fetched again each turn: a resource taken out since is not read again. One taken out from here
                // on keeps its file open until the next turn.
                guard var r = lock.withLock({ c.outgoingResources[id] }), !r.finishedSending else { continue }
                // Read straight into the frame's buffer (a read error ends the resource short: the peer
                // then cancels it, as for a file that shrank).
                let fd = r.file.fileDescriptor
                let n = c.link.sendResourceChunk(id: id, maximum: c.link.isBluetooth ? PeerConnection.chunk : PeerConnection.networkResourceChunk) { space in
                    while true {
                        let got = read(fd, space.baseAddress, space.count)
                        if got >= 0 { return got }
                        if errno != EINTR { return 0 }
                    }
                }
                if n > 0 {
                    r.sent += UInt64(n)
                    r.progress.completedUnitCount = Int64(r.sent)
                    sentSomething = true
                    lock.withLock { if c.outgoingResources[id] != nil { c.outgoingResources[id] = r } }
                } else {
                    // Read to the end: its file is queued to be closed, unless the resource was taken out
                    // meanwhile (its taker queued the file, and cancelled or failed the resource).
                    r.finishedSending = true
                    let ended = lock.withLock { () -> Bool in
                        guard c.outgoingResources[id] != nil else { return false }
                        c.outgoingResources[id] = r
                        c.filesToClose.append(r.file)
                        return true
                    }
                    if ended { c.link.send(.resourceEnd(id: id)) }
                }
            }
            let streams = lock.withLock { c.outgoingStreams }
            for (id, s) in streams.sorted(by: { $0.key < $1.key }) {
                guard c.link.isWritable else { break }
                if s.credits > 0 {
                    let bytes = s.output.take(maxLength: min(s.credits, PeerConnection.chunk))
                    if !bytes.isEmpty {
                        lock.withLock { c.outgoingStreams[id]?.credits -= bytes.count }
                        c.link.send(.streamData(id: id, chunk: bytes))
                        sentSomething = true
                    }
                }
                if s.output.isClosedByApp, s.output.bufferedByteCount == 0 {
                    lock.withLock { _ = c.outgoingStreams.removeValue(forKey: id) }
                    c.link.send(.streamClose(id: id))
                }
            }
            if !sentSomething && !c.pumpAgain { break }
        }
    }

    /// Closes the files queued in `filesToClose` (event loop only, while no pump reads).
    private func closeReleasedFiles(_ c: PeerConnection) {
        let files = lock.withLock { () -> [FileHandle] in
            defer { c.filesToClose.removeAll() }
            return c.filesToClose
        }
        for file in files { try? file.close() }
    }

    func startIncomingResource(id: UInt32, size: UInt64, name: String, on c: PeerConnection) {
        let url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("MCResource-\(UUID().uuidString)")
        guard FileManager.default.createFile(atPath: url.path, contents: nil), let file = try? FileHandle(forWritingTo: url) else {
            c.link.send(.resourceCancel(id: id))
            return
        }
        let session = Unchecked(self), conn = Unchecked(c)
        let writer = ResourceWriter(file: file, link: c.link) { error in
            // A write failed: on the link's loop, as if the chunk had failed there.
            conn.value.link.execute { session.value.resourceFailed(id: id, on: conn.value, error: error, tellPeer: true) }
        }
        let progress = Progress(totalUnitCount: Int64(size))
        progress.cancellationHandler = { [weak self, weak c] in
            guard let self, let c, let r = self.lock.withLock({ c.incomingResources.removeValue(forKey: id) }) else { return }
            r.writer.cancel()
            try? FileManager.default.removeItem(at: r.url)
            c.link.send(.resourceCancel(id: id))
            delegateCalls.async { [self] in
                delegate?.session(self, didFinishReceivingResourceWithName: r.name, fromPeer: c.peer, at: nil, withError: MCError(.cancelled))
            }
        }
        lock.withLock { c.incomingResources[id] = PeerConnection.IncomingResource(name: name, url: url, writer: writer, progress: progress, size: size, received: 0) }
        delegateCalls.async { [self] in delegate?.session(self, didStartReceivingResourceWithName: name, fromPeer: c.peer, with: progress) }
    }

    func resourceChunk(id: UInt32, chunk: PeerChunk, on c: PeerConnection) {
        lock.withLock { c.lastHeard = Date() }
        guard var r = lock.withLock({ c.incomingResources[id] }) else { return }
        guard r.received + UInt64(chunk.count) <= r.size else {
            PeerLog.warning("\(c.peer.displayName) sent more than the resource's size; cancelling it")
            return resourceFailed(id: id, on: c, error: MCError(.invalidParameter), tellPeer: true)
        }
        r.writer.write(chunk)
        r.received += UInt64(chunk.count)
        r.progress.completedUnitCount = Int64(r.received)
        lock.withLock { if c.incomingResources[id] != nil { c.incomingResources[id] = r } }
    }

    func finishIncomingResource(id: UInt32, on c: PeerConnection) {
        guard let r = lock.withLock({ c.incomingResources.removeValue(forKey: id) }) else { return }
        // Once every chunk is on disk.
        let session = Unchecked(self), resource = Unchecked(r)
        r.writer.finish { error in
            let s = session.value, r = resource.value
            guard error == nil, r.received == r.size else {
                try? FileManager.default.removeItem(at: r.url)
                c.link.send(.resourceCancel(id: id))
                s.delegateCalls.async { s.delegate?.session(s, didFinishReceivingResourceWithName: r.name, fromPeer: c.peer, at: nil, withError: error ?? MCError(.unknown)) }
                return
            }
            c.link.send(.resourceAck(id: id))
            s.delegateCalls.async {
                s.delegate?.session(s, didFinishReceivingResourceWithName: r.name, fromPeer: c.peer, at: r.url, withError: nil)
                // As on iOS the file is temporary: the app moves it during the callback.
                try? FileManager.default.removeItem(at: r.url)
            }
        }
    }

    func resourceCancelled(id: UInt32, on c: PeerConnection) {
        takeOutgoingResource(id, of: c)?.completion(MCError(.cancelled))
        resourceFailed(id: id, on: c, error: MCError(.cancelled), tellPeer: false)
    }

    func resourceFailed(id: UInt32, on c: PeerConnection, error: any Error, tellPeer: Bool) {
        guard let r = lock.withLock({ c.incomingResources.removeValue(forKey: id) }) else { return }
        r.writer.cancel()
        try? FileManager.default.removeItem(at: r.url)
        if tellPeer { c.link.send(.resourceCancel(id: id)) }
        delegateCalls.async { [self] in delegate?.session(self, didFinishReceivingResourceWithName: r.name, fromPeer: c.peer, at: nil, withError: error) }
    }

    /// The link is gone: every transfer on it fails, every stream ends. Called from any thread (`disconnect`):
    /// the outgoing resources' files go to the pump to close.
    func failTransfers(of c: PeerConnection) {
        let (outR, inR, outS, inS) = lock.withLock { () -> ([PeerConnection.OutgoingResource], [PeerConnection.IncomingResource], [PipeOutputStream], [PipeInputStream]) in
            defer { c.outgoingResources.removeAll(); c.incomingResources.removeAll(); c.outgoingStreams.removeAll(); c.incomingStreams.removeAll() }
            c.transfersEnded = true
            c.filesToClose += c.outgoingResources.values.filter { !$0.finishedSending }.map(\.file)
            return (Array(c.outgoingResources.values), Array(c.incomingResources.values), c.outgoingStreams.values.map(\.output), Array(c.incomingStreams.values))
        }
        if !outR.isEmpty { pump(c) }
        for r in outR { r.completion(MCError(.notConnected)) }
        for r in inR {
            r.writer.cancel()
            try? FileManager.default.removeItem(at: r.url)
            delegateCalls.async { [self] in delegate?.session(self, didFinishReceivingResourceWithName: r.name, fromPeer: c.peer, at: nil, withError: MCError(.notConnected)) }
        }
        for s in outS { s.fail(error: MCError(.notConnected)) }
        for s in inS { s.finish(error: MCError(.notConnected)) }
    }

    // MARK: Streams

    /// Opens a one-way byte stream to a connected peer; it gets the InputStream through its delegate.
    /// Writes return 0 while the peer's reader lags (back-pressure), as a full socket would.
    public func startStream(withName streamName: String, toPeer peerID: MCPeerID) throws -> OutputStream {
        guard let c = lock.withLock({ peers[peerID.token] }), lock.withLock({ c.connected }) else { throw MCError(.notConnected) }
        let output = PipeOutputStream(capacity: PeerConnection.streamWindow)
        let started = lock.withLock { () -> UInt32? in
            guard !c.transfersEnded else { return nil }   // (as for a resource, above)
            defer { c.nextStreamID &+= 1 }
            c.outgoingStreams[c.nextStreamID] = PeerConnection.OutgoingStream(output: output, credits: 0)
            return c.nextStreamID
        }
        guard let id = started else { throw MCError(.notConnected) }
        output.onDataAvailable = { [weak self, weak c] in if let self, let c { self.pump(c) } }
        output.onClose = { [weak self, weak c] in if let self, let c { self.pump(c) } }
        c.link.send(.streamOpen(id: id, name: streamName))
        return output
    }

    func openIncomingStream(id: UInt32, name: String, on c: PeerConnection) {
        let input = PipeInputStream()
        lock.withLock { c.incomingStreams[id] = input }
        input.onConsumed = { [weak self, weak c] n in
            guard let self, let c else { return }
            // Credits go back in batches of a quarter window.
            let grant = lock.withLock { () -> Int in
                c.pendingCredits[id, default: 0] += n
                guard let g = c.pendingCredits[id], g >= PeerConnection.streamWindow / 4 else { return 0 }
                c.pendingCredits[id] = 0
                return g
            }
            if grant > 0 { c.link.send(.streamCredit(id: id, octets: UInt32(grant))) }
        }
        c.link.send(.streamCredit(id: id, octets: UInt32(PeerConnection.streamWindow)))
        let stream = Unchecked(input)
        delegateCalls.async { [self] in delegate?.session(self, didReceive: stream.value, withName: name, fromPeer: c.peer) }
    }
}
