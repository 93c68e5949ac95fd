// Carries a PeerLink over a connected SOCK_SEQPACKET socket whose every send is one SDU and every recv one SDU: the
// kernel's LE credit-based L2CAP socket on BLE_TRANSPORT=bluez (BlueZPeerNode). As L2CAPBridge does for our own
// host's channels, a UNIX stream socket pair stands between: one end becomes the PeerLink's NIO channel (framing,
// TLS and back-pressure are the TCP ones), this bridge pumps the other end to and from the L2CAP socket.
//
// Flow control end to end: the L2CAP socket is read only while what it gave could be written into the pair (the
// kernel grants the peer credits as we take SDUs, so a session that stops reading stops the sender after the
// kernel's window); the pair is read only while the L2CAP socket takes SDUs (a full socket makes the PeerLink's
// writes back up). Sends are cut at the peer's SDU size. Either side closing closes the other once what is in
// hand was passed on; when the session closes, the L2CAP socket is closed only once it has passed on what it was
// given (`unsent` says 0, the peer closed, or `drainLimit` ran out): closing a kernel L2CAP socket drops the SDUs
// still waiting in it for credits, so a session's last words (a GameKit photo, Multipeer's goodbye) were lost.
//
// Threading: everything on the bridge's own serial queue; the descriptors are the bridge's until it finishes.
import Foundation
import Synchronization
import PeerTransport
#if canImport(Glibc)
import Glibc
#endif

final class SeqPacketBridge: @unchecked Sendable {
    private let queue = DispatchQueue(label: "opencorebluetooth.multipeer.seqpacket")
    private var packetFD: Int32
    private var streamFD: Int32
    private let sendMTU: Int
    /// What the L2CAP socket holds of what it was given (nil: it cannot say; then it is closed at once).
    private let unsent: (@Sendable (Int32) -> Int?)?
    /// How long a closing bridge waits for the socket to pass its SDUs on (by default), and how often it looks.
    static let defaultDrainLimit: Double = 30
    private let drainLimit: Double
    static let drainPoll: Double = 0.05
    /// The drain limit's timer is running (`armDrainLimit`).
    private var drainArmed = false
    /// The four sources, by `Source`, and which of them run (a suspended source must be resumed before it is
    /// cancelled).
    private var sources: [DispatchSourceProtocol] = []
    private var running: [Bool] = [false, false, false, false]
    private enum Source: Int { case packetRead, packetWrite, streamRead, streamWrite }
    /// The SDU received (its first `toStreamCount` octets), not yet written into the pair from `toStreamOffset`
    /// on. The socket is read straight into it, and only once it has all been written: no copy per SDU.
    private var toStream: [UInt8]
    private var toStreamCount = 0
    private var toStreamOffset = 0
    /// Octets the pair gave, not yet sent as SDUs.
    /// (Its first `toPacketCount` octets, from `toPacketOffset` on; read into only once all were sent.)
    private var toPacket = [UInt8](repeating: 0, count: SeqPacketBridge.streamChunk)
    private var toPacketCount = 0
    private var toPacketOffset = 0
    private var packetEnded = false
    private var streamEnded = false
    private var finished = false
    private let ended = Atomic<Bool>(false)
    /// Whether the bridge has ended (any thread).
    var isFinished: Bool { ended.load(ordering: .relaxed) }
    static let streamChunk = 64 * 1024
    /// The largest SDU sent, whatever the peer takes (BlueZ offers 65535): the peer hears from us at least
    /// once per this many octets, which at the few KB/s of a busy LE link is seconds, not the tens of seconds
    /// a 64 KB SDU takes — Multipeer's keep-alive counts any octets as the peer talking, but only as they
    /// come out of the peer's socket, one whole SDU at a time.
    static let largestSDU = 8 * 1024
    /// What ended the L2CAP side (for the log).
    private(set) var endReason = ""

    private init(packetFD: Int32, streamFD: Int32, sendMTU: Int, receiveMTU: Int, unsent: (@Sendable (Int32) -> Int?)?, drainLimit: Double) {
        self.packetFD = packetFD
        self.drainLimit = drainLimit
        self.streamFD = streamFD
        self.sendMTU = max(1, min(sendMTU, Self.largestSDU))
        self.unsent = unsent
        toStream = [UInt8](repeating: 0, count: max(receiveMTU, 65_535))
    }

    /// Bridges `fd` (a connected non-blocking SEQPACKET socket, now the bridge's); the other end of the pair goes
    /// to `adopt`, which owns it from then on. Nil when no socket pair can be made (`fd` is then closed).
    static func start(
        fd: Int32, sendMTU: Int, receiveMTU: Int, unsent: (@Sendable (Int32) -> Int?)? = nil, drainLimit: Double = SeqPacketBridge.defaultDrainLimit,
        adopt: (Int32) -> Void
    ) -> SeqPacketBridge? {
        var ends: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
            close(fd)
            return nil
        }
        _ = fcntl(ends[1], F_SETFL, fcntl(ends[1], F_GETFL) | O_NONBLOCK)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        let b = SeqPacketBridge(packetFD: fd, streamFD: ends[1], sendMTU: sendMTU, receiveMTU: receiveMTU, unsent: unsent, drainLimit: drainLimit)
        b.queue.async { b.startSources() }
        adopt(ends[0])
        return b
    }

    private func startSources() {
        let pr = DispatchSource.makeReadSource(fileDescriptor: packetFD, queue: queue)
        pr.setEventHandler { [self] in packetReadable() }
        let pw = DispatchSource.makeWriteSource(fileDescriptor: packetFD, queue: queue)
        // Each write handler, once what waited is written, reads on at once: what arrived meanwhile (the session's
        // last octets and its close together, say) raised no new read event (seen: a session that wrote and closed at
        // once had its close never read, and its channel stayed open).
        pw.setEventHandler { [self] in
            pause(.packetWrite)
            pumpToPacket()
            if toPacketOffset >= toPacketCount { streamReadable() }
        }
        let sr = DispatchSource.makeReadSource(fileDescriptor: streamFD, queue: queue)
        sr.setEventHandler { [self] in streamReadable() }
        let sw = DispatchSource.makeWriteSource(fileDescriptor: streamFD, queue: queue)
        sw.setEventHandler { [self] in
            pause(.streamWrite)
            pumpToStream()
            if toStreamOffset >= toStreamCount { packetReadable() }
        }
        sources = [pr, pw, sr, sw]
        resume(.packetRead)
        resume(.streamRead)
    }

    private func resume(_ s: Source) {
        guard !finished, !sources.isEmpty, !running[s.rawValue] else { return }
        running[s.rawValue] = true
        sources[s.rawValue].resume()
    }

    private func pause(_ s: Source) {
        guard !sources.isEmpty, running[s.rawValue] else { return }
        running[s.rawValue] = false
        sources[s.rawValue].suspend()
    }

    // MARK: L2CAP → pair

    private func packetReadable() {
        guard !finished, !packetEnded else { return }
        // One SDU at a time while the pair takes them; what it does not take waits (and the socket is not read).
        while toStreamOffset >= toStreamCount {
            let n = toStream.withUnsafeMutableBytes { recv(packetFD, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if n > 0 {
                toStreamCount = n
                toStreamOffset = 0
                pumpToStream()
                continue
            }
            let code = errno
            if n < 0, code == EAGAIN || code == EWOULDBLOCK || code == EINTR { return }
            endReason = n == 0 ? "closed by the peer" : "recv: \(String(cString: strerror(code)))"
            packetEnded = true
            pause(.packetRead)
            // Nothing more comes: the pair's writer side ends once what we hold was written.
            if toStreamOffset >= toStreamCount { shutdownStream() }
            return
        }
        pause(.packetRead)
    }

    private func pumpToStream() {
        guard !finished else { return }
        while toStreamOffset < toStreamCount {
            let n = toStream.withUnsafeBytes { b in
                send(streamFD, b.baseAddress! + toStreamOffset, toStreamCount - toStreamOffset, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
            }
            if n > 0 {
                toStreamOffset += n
                continue
            }
            let code = errno
            if n < 0, code == EAGAIN || code == EWOULDBLOCK || code == EINTR { return resume(.streamWrite) }
            // The session has gone while its last octets are still on their way out (in the socket waiting for
            // credits, or still in the pair: its end of file can come after what the peer sent): what the peer sends
            // now has no reader, and is dropped rather than ending the channel before they are passed on. How long
            // the channel may stay for them is bounded as a drain is.
            if code == EPIPE || code == ECONNRESET {
                toStreamOffset = toStreamCount
                if !streamEnded { armDrainLimit() }
                break
            }
            return finish("the session's socket failed: \(String(cString: strerror(code)))")
        }
        toStreamCount = 0
        toStreamOffset = 0
        if packetEnded { shutdownStream() } else { resume(.packetRead) }
    }

    private func shutdownStream() {
        // The PeerLink sees the end of its input; the bridge ends when the pair's other side closes.
        Glibc.shutdown(streamFD, Int32(SHUT_WR))
        if streamEnded { finish(nil) }
    }

    // MARK: pair → L2CAP

    private func streamReadable() {
        // Until the pair has nothing more (or the socket is full): a read event is not raised again for what was
        // already there when the last one came.
        while true {
            guard !finished, !streamEnded else { return pause(.streamRead) }
            guard toPacketOffset >= toPacketCount else { return }   // the socket is full: its write event goes on
            let n = toPacket.withUnsafeMutableBytes { recv(streamFD, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if n > 0 {
                toPacketCount = n
                toPacketOffset = 0
                pumpToPacket()
                continue
            }
            let code = errno
            if n < 0, code == EAGAIN || code == EWOULDBLOCK || code == EINTR { return }
            // The session closed its side: the channel closes once what it gave has been sent.
            streamEnded = true
            pause(.streamRead)
            if packetEnded { return finish(nil) }
            return pumpToPacket()
        }
    }

    private func pumpToPacket() {
        guard !finished else { return }
        while toPacketOffset < toPacketCount {
            let length = min(sendMTU, toPacketCount - toPacketOffset)
            let n = toPacket.withUnsafeBytes { b in
                send(packetFD, b.baseAddress! + toPacketOffset, length, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
            }
            if n > 0 {
                toPacketOffset += n
                continue
            }
            let code = errno
            if n < 0, code == EAGAIN || code == EWOULDBLOCK || code == ENOBUFS || code == EINTR {
                pause(.streamRead)
                return resume(.packetWrite)
            }
            return finish("send: \(String(cString: strerror(code)))")
        }
        toPacketCount = 0
        toPacketOffset = 0
        if streamEnded { return drainThenFinish() }
        resume(.streamRead)
    }

    /// The session has closed and every SDU was given to the socket: closes once the socket has passed them on.
    private func drainThenFinish() {
        guard !finished else { return }
        guard !packetEnded, let left = unsent?(packetFD), left > 0 else { return finish(nil) }
        armDrainLimit()
        queue.asyncAfter(deadline: .now() + Self.drainPoll) { [self] in drainThenFinish() }
    }

    /// From the first sign that the session has gone: the bridge ends by `drainLimit` from now, whatever it still
    /// holds (a peer that grants no credits does not keep a dead session's channel open).
    private func armDrainLimit() {
        guard !drainArmed else { return }
        drainArmed = true
        queue.asyncAfter(deadline: .now() + drainLimit) { [self] in
            guard !finished else { return }
            let left = unsent?(packetFD).map { "\($0)" } ?? "some"
            finish("closed with \(left) octets not passed on after \(drainLimit) s")
        }
    }

    // MARK: End

    /// Closes both descriptors (once every source is cancelled).
    private func finish(_ why: String?) {
        guard !finished else { return }
        if let why { PeerLog.write("Bluetooth (BlueZ) channel: \(why)") }
        finished = true
        ended.store(true, ordering: .relaxed)
        let group = DispatchGroup()
        for (i, s) in sources.enumerated() {
            group.enter()
            s.setCancelHandler { group.leave() }
            s.cancel()
            if !running[i] { s.resume() }
        }
        running = [false, false, false, false]
        sources = []
        let fds = (packetFD, streamFD)
        packetFD = -1
        streamFD = -1
        group.notify(queue: queue) {
            close(fds.0)
            close(fds.1)
        }
    }

    /// Ends the bridge now (the node is closing).
    func cancel() { queue.async { [self] in finish(nil) } }
}
