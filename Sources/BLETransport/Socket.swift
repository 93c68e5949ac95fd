// Minimal POSIX stream sockets for H4-over-TCP/UNIX transports and the radio server.
//
// A `StreamConnection` owns a file descriptor and reads it on its own thread: each read takes everything the
// socket holds (up to 64 KB), every H4 packet in it is framed and the whole batch goes to the callback at
// once (the host handles it in one hop onto its loop). Writes are serialised by a lock; what is written
// during a loop turn (see `LoopTurn`) is gathered and leaves in one system call when the turn ends, so the
// packets a host sends in answer to one read, or in one burst of work, cost one write.
//
// TCP: TCP_NODELAY is set. ACKs matter because a controller on the other end may have Nagle on (rootcanal
// does, and writes each H4 indicator on its own): it then holds its next small segment until our ACK of the
// last one. Linux delays ACKs only in "ping-pong" mode, which a socket enters when it sends data soon after
// receiving; an answer written while handling a read carries the ACK anyway. So:
// - after a read that wrote nothing (whole packets, or only part of one), the reader re-arms TCP_QUICKACK
//   (which also leaves ping-pong mode) if something was written since it last did: a ping-pong pays once
//   per round trip, a receiver that never writes never pays;
// - except after a partial read while the host holds packets waiting for controller buffers: the write that
//   answers the next completion carries the ACK, and forcing one would split the stream into more segments
//   (if the rest has not come within 5 ms, poll(2) says so and the reader ACKs after all: no long stall).
//   OCB_TCP_BACKLOG_ACKS=0 turns this off (see `leaveAcksToHostBacklog`);
// - but a partial read that comes within half a millisecond of our last write is ACKed at once, and without
//   leaving ping-pong mode (TCP_QUICKACK 2). That write ACKed everything the peer had sent, so the peer sent
//   this fragment alone and its Nagle now holds the rest of the packet until our next ACK; and the rest is
//   what the host waits for. rootcanal ends a burst of completions that way in about one connection event
//   of five: the last Number Of Completed Packets stayed behind until its next event (5 ms later), the
//   buffers it frees missed that event, and a 1 MB transfer took 2.4 % longer than the controller allows.
//   OCB_TCP_RECENT_WRITE_ACK_US sets the half millisecond (0 turns this off; see `partialAckWindow`);
// - bulk reception: after 64 reads in a row that wrote nothing, within 250 ms, on a connection that has
//   written nothing for 250 ms and whose host holds no backlog (it only listens), the reader turns ACKs to
//   delayed (TCP_QUICKACK 0) so that the controller's Nagle gathers what it sends meanwhile into one
//   segment — one read for many packets instead of one or two per packet. A write or a 250 ms pause ends it,
//   except a sparse write (after 16 answerless reads or more, as an L2CAP receiver returns credits): it
//   carries an ACK itself and answers nothing the peer waits for.
//   OCB_TCP_BULK_ACKS=0 turns this off (see `bulkPolicy`). During a run each wait needs two bytes
//   (OCB_TCP_BULK_LOWAT=0: one) and first yields the processor (sched_yield): a controller feeding us from the
//   same processor writes on, and what it wrote is read without a sleep and a wake-up (over rootcanal, the
//   receiver's processor time 10-20 % less in interleaved pairs; OCB_TCP_BULK_YIELD=0 turns it off).
// Answers after draining (every socket, TCP or UNIX): while the host holds packets waiting for controller buffers,
// the answer the host writes to a read is held until the reader has read, without waiting, what else the socket
// holds (`drainsBeforeAnswering`; OCB_STREAM_DRAIN=0 turns it off), or until one such read found something
// (`drainLimit`). A controller's completions often come in two segments, the second released by the ACK of the
// first read: both are answered in one write (over rootcanal, 1 MB of L2CAP: about 27 % fewer writes on the
// sender). A host with no backlog answers at once, as before.
// Both cut the system calls of a GATT transfer over rootcanal by about 7× (1.4 → 0.2 per HCI packet on each
// side) at the same throughput. The 1 MB L2CAP echo through Bumble that once timed out with them on is bound
// by rootcanal's and Bumble's processor time (about 9 of its 11 CPU seconds): on a loaded machine it is slow
// either way, and no slower with them (see issue 23's notes).
// Two-byte waits while sending: while the host holds packets that wait for controller buffers, and the controller
// owes no completion for what we wrote before our last write, a wait for the next read needs two bytes. rootcanal
// begins each connection event's completions with a lone H4 indicator and sends the rest 0.4 ms later by itself;
// the sender woke for that byte, then again for the rest (about 2 wake-ups per event). It owes nothing then:
// everything written before our last write completed, and what that write carried is on the air no sooner than
// this event. But while a completion of an earlier write may still trickle in (the controller was still answering
// the event when we wrote), the mark stays at one byte: that lone indicator needs our ACK at once (the
// half-millisecond rule above), or its rest waits for the next event and the buffer it frees misses this one (2 %
// slower without this condition). The host says what it has sent and what the controller is done with
// (`HCITransportSink.aclPacketTally`). A two-byte wait over 20 ms (a controller that holds the rest until our ACK)
// stops them for 5 s. Over rootcanal, 1 MB of L2CAP: the sender's wake-ups 4,200 → 3,300 per MB, its processor time
// 2 % and 11 % less (medians of two series of 12 and 10 interleaved pairs), the same throughput.
// OCB_TCP_SEND_LOWAT=0 turns this off.
// OCB_TCP_QUICKACK=0 turns quick ACKs off, =always re-arms after every read that wrote nothing.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import BLEHCI
import Synchronization

public final class StreamConnection: @unchecked Sendable {
    public let fd: Int32
    private let isTCP: Bool
    /// A socket (TCP or UNIX) rather than a serial port or pipe: written with MSG_NOSIGNAL, so a peer that
    /// went away gives EPIPE instead of a SIGPIPE that would kill a program that never ignored it.
    private let isSocket: Bool
    private let writeLock = Locked(WriteState())
    struct WriteState {
        /// Bytes gathered during a loop turn, written when it ends.
        var pending: [UInt8] = []
        var flushScheduled = false
        /// A write failed (the peer left): later writes fail at once.
        var failed = false
        /// Counts calls to write (the reader uses it to know whether handling a read wrote an answer).
        var generation = 0
        /// Data left since the reader last re-armed quick-ACK.
        var wroteSinceQuickAck = false
        /// The host holds packets waiting for controller buffers (see `hostBacklogChanged`).
        var hostBacklog = false
        /// When the last write left (uptime nanoseconds).
        var lastWrite: UInt64 = 0
        /// The reader thread is handling a read (`drainsBeforeAnswering`): what its own turns write is held
        /// (`heldForReader`) until it has read what else the socket holds.
        var readerHandling = false
        var heldForReader = false
        var reader: pthread_t?
        var statistics = TransportStatistics()
        /// The sink's count of ACL packets sent (`HCITransportSink.aclPacketTally`) when the last write left, and
        /// when the one before it left (Int.max: none yet). Packets up to the latter count were written before the
        /// last write (`sendLowWater`).
        var sentAtLastWrite = Int.max
        var sentBeforeLastWrite = Int.max
    }
    /// Counts of the reader thread, published once per read.
    private let readStatistics = Locked(TransportStatistics())
    private let state = Locked<(closed: Bool, started: Bool)>((false, false))
    public let label: String

    enum QuickAckPolicy { case never, afterAnswerlessReads, always }
    let quickAck: QuickAckPolicy = {
        switch ProcessInfo.processInfo.environment["OCB_TCP_QUICKACK"] {
        case "0": return .never
        case "always": return .always
        default: return .afterAnswerlessReads
        }
    }()

    /// Delayed ACKs during bulk reception: on unless OCB_TCP_BULK_ACKS=0. Set before `start`.
    var bulkPolicy = BulkReception.Policy(enabled: ProcessInfo.processInfo.environment["OCB_TCP_BULK_ACKS"] != "0")

    /// More than this many bytes gathered in a turn are written at once rather than at its end.
    static let gatherLimit = 64 * 1024

    /// Made once: registering it at the end of a turn allocates nothing.
    private var flushHook: () -> Void = {}

    public init(fd: Int32, isTCP: Bool, label: String) {
        self.fd = fd
        self.isTCP = isTCP
        var st = stat()
        isSocket = fstat(fd, &st) == 0 && (st.st_mode & S_IFMT) == S_IFSOCK
        self.label = label
        if isTCP { Self.setNoDelay(fd) }
        // Through a box, not a `[weak self]` capture: the runtime checks exclusive access to a captured weak
        // variable on every call, and this runs at the end of every turn that writes.
        let me = WeakConnection(self)
        flushHook = { me.connection?.flushAtTurnEnd() }
    }

    /// The end of a turn that wrote: write, unless the turn is the reader's own handling of a read, which writes
    /// once it has drained the socket (see `drainsBeforeAnswering`).
    private func flushAtTurnEnd() {
        writeLock.withLock { w in
            if w.readerHandling, let r = w.reader, pthread_equal(r, pthread_self()) != 0 {
                w.flushScheduled = false
                w.heldForReader = !w.pending.isEmpty
                return
            }
            _ = flushLocked(&w)
        }
    }

    /// A connection held weakly by its own end-of-turn hook.
    private final class WeakConnection {
        @exclusivity(unchecked) weak var connection: StreamConnection?
        init(_ connection: StreamConnection) { self.connection = connection }
    }

    /// The sink whose answers decide what the framer merges: runs of completion events, asked when reading begins
    /// (`HCITransportSink.acceptsMergedCompletions`), and ACL continuations, asked before each read
    /// (`acceptsMergedACLContinuations`); none, nothing. The packet counts stay those the controller sent. Set
    /// before `start`. (Held weakly, and read without an exclusivity check: it is not changed once reading began.)
    @exclusivity(unchecked) public weak var mergeSink: (any HCITransportSink)?

    /// Whether the reader, having handled a read whose answer it holds, reads again without waiting before it
    /// writes: on unless OCB_STREAM_DRAIN=0. Set before `start`.
    var drainsBeforeAnswering = ProcessInfo.processInfo.environment["OCB_STREAM_DRAIN"] != "0"

    /// At most this many reads that found something drain the socket before a held answer leaves (a peer that never
    /// pauses does not hold our answers back). One: rootcanal's completions for a connection event come in two
    /// segments at most (the second released by the ACK of the first read), and a second read that would find
    /// nothing is a system call per event. OCB_STREAM_DRAIN_READS sets it. Set before `start`.
    var drainLimit = ProcessInfo.processInfo.environment["OCB_STREAM_DRAIN_READS"].flatMap { Int($0) }.map { max(1, $0) } ?? 1

    /// The fewest bytes a blocking read (or poll) waits for.
    static func setLowWater(_ fd: Int32, _ bytes: Int32) {
        var value = bytes
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &value, socklen_t(MemoryLayout<Int32>.size))
    }

    static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// How TCP_QUICKACK is set: 1 sends pending ACKs now and leaves Linux's ping-pong mode (the next segments
    /// are ACKed at once too); 2 sends them now and stays in it (later ACKs are delayed again); 0 enters it.
    enum AckMode: Int32 { case delayed = 0, quick = 1, now = 2 }

    static func setAcks(_ fd: Int32, _ mode: AckMode) {
        var value = mode.rawValue
        _ = setsockopt(fd, Int32(IPPROTO_TCP), 12 /* TCP_QUICKACK */, &value, socklen_t(MemoryLayout<Int32>.size))
    }

    /// The host started or stopped holding packets that wait for controller buffers.
    public func hostBacklogChanged(_ hasBacklog: Bool) {
        writeLock.withLock { $0.hostBacklog = hasBacklog }
    }

    /// What this connection has done so far.
    public var statistics: TransportStatistics {
        var s = readStatistics.withLock { $0 }
        let w = writeLock.withLock { $0.statistics }
        s.writes = w.writes
        s.other += w.other
        s.packetsOut = w.packetsOut
        s.bytesOut = w.bytesOut
        return s
    }

    /// Starts the reader thread. `onPacket` gets each framed packet; `onClose` is called once at the end.
    public func start(
        onPacket: @escaping @Sendable (HCIPacket) -> Void,
        onClose: @escaping @Sendable ((any Error)?) -> Void
    ) {
        start(onPackets: { for p in $0 { onPacket(p) } }, onClose: onClose)
    }

    /// Starts the reader thread. `onPackets` gets the packets framed from each read, in order (never empty);
    /// `onClose` is called once at the end.
    public func start(
        onPackets: @escaping @Sendable ([HCIPacket]) -> Void,
        onClose: @escaping @Sendable ((any Error)?) -> Void
    ) {
        let go = state.withLock { s -> Bool in
            if s.started || s.closed { return false }
            s.started = true
            return true
        }
        guard go else { return }
        let thread = Thread { [self] in
            let closeError = readLoop(onPackets)
            close()
            // The reader closes the descriptor, and only once it no longer reads it (see `close`).
            _ = Glibc.close(fd)
            onClose(closeError)
        }
        thread.name = label
        thread.start()
    }

    /// Reads until end of file, an error or `close`; returns the error to report, if any.
    private func readLoop(_ onPackets: ([HCIPacket]) -> Void) -> (any Error)? {
        var framer = H4Framer()
        framer.mergesCompletedPackets = mergeSink?.acceptsMergedCompletions ?? false
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var packets: [HCIPacket] = []
        var stats = TransportStatistics()
        var bulk = BulkReception()
        let drains = isSocket && drainsBeforeAnswering
        if drains {
            let me = pthread_self()
            writeLock.withLock { $0.reader = me }
        }
        // Reads in a row made without waiting, while an answer is held (0: the next read waits).
        var draining = 0
        // Set before `start`: read once, not for every read.
        let drainLimit = self.drainLimit, policy = bulkPolicy
        // The socket's SO_RCVLOWAT as last set (bulk reception).
        var socketLowWater: Int32 = 1
        var sendRule = sendLowWaterPause
        while true {
            if draining > drainLimit {
                // Enough read without waiting: the held answer leaves, and the reader waits as usual.
                draining = 0
                writeLock.withLock { _ = flushLocked(&$0) }
            }
            let n: Int
            if draining > 0 {
                n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
                stats.reads += 1
                if n <= 0 {
                    // Nothing more: the held answer leaves, and the reader waits as usual. (The read that found
                    // nothing is counted first: once the answer is out, the counts include it.)
                    draining = 0
                    let reads = stats.reads
                    readStatistics.withLock { $0.reads = reads }
                    writeLock.withLock { _ = flushLocked(&$0) }
                    if n == 0 { return nil }
                    continue
                }
            } else {
                // The low-water mark for this wait: a lone H4 indicator (controllers write it apart from the rest)
                // wakes no one while ACKs are delayed (bulk reception), nor while sending (`sendLowWater`). Unless
                // one byte is all a packet lacks.
                var lowWater: Int32 = 1
                // When a two-byte wait while sending began (0: this wait is not one).
                var twoForSendingSince: UInt64 = 0
                if isTCP && framer.missingCount >= 2 {
                    if bulk.delaying && policy.waitsForTwoBytes {
                        lowWater = 2
                    } else if sendLowWater {
                        // The tally only for a host with a backlog (a receiver's reads skip the sink's weak load).
                        let (backlog, before) = writeLock.withLock { ($0.hostBacklog, $0.sentBeforeLastWrite) }
                        if backlog, let tally = mergeSink?.aclPacketTally, tally.done >= before {
                            let now = DispatchTime.now().uptimeNanoseconds
                            if sendRule.allows(now: now) {
                                lowWater = 2
                                twoForSendingSince = now
                            }
                        }
                    }
                }
                if isTCP && lowWater != socketLowWater {
                    Self.setLowWater(fd, lowWater)
                    socketLowWater = lowWater
                    readStatistics.withLock { $0.other += 1 }
                }
                // While it only listens, the reader lets whatever else is runnable on its processor go first: the
                // peer feeding it (a controller on the same processor) writes on, and what it wrote is read without
                // the reader going to sleep and being woken for it.
                if bulk.delaying && policy.yieldsBeforeWaiting {
                    sched_yield()
                    readStatistics.withLock { $0.other += 1 }
                }
                n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                stats.reads += 1
                if twoForSendingSince != 0 {
                    sendRule.afterWait(since: twoForSendingSince, now: DispatchTime.now().uptimeNanoseconds)
                }
                if n < 0 {
                    if errno == EINTR { continue }
                    return isClosed ? nil : TransportError.io(String(cString: strerror(errno)))
                }
                if n == 0 { return nil }
            }
            buffer.withUnsafeBytes { framer.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            if let sink = mergeSink { framer.mergesACLContinuations = sink.acceptsMergedACLContinuations }
            var framingError: (any Error)?
            let framedBefore = framer.framedCount
            do {
                while let p = try framer.nextPacket() { packets.append(p) }
            } catch {
                framingError = error
            }
            stats.packetsIn += framer.framedCount - framedBefore
            stats.bytesIn += n
            let published = stats
            readStatistics.withLock {
                $0.reads = published.reads; $0.packetsIn = published.packetsIn; $0.bytesIn = published.bytesIn
            }
            let before = writeLock.withLock { w in
                w.readerHandling = drains
                return w.generation
            }
            if !packets.isEmpty {
                onPackets(packets)
                // Handled: their arrays carry the next read's packets (no allocation, no free per packet).
                framer.recycle(packets)
                packets.removeAll(keepingCapacity: true)
            }
            let (after, backlog, held) = writeLock.withLock { w in
                w.readerHandling = false
                // Only a host waiting for controller buffers expects more to answer soon (completions); else the
                // answer leaves now, as it did at the end of the turn.
                if w.heldForReader && !w.hostBacklog { _ = flushLocked(&w) }
                return (w.generation, w.hostBacklog, w.heldForReader)
            }
            // An answer is held: read on without waiting, so that what the peer sent meanwhile (a controller's
            // next completions, released by the ACK of this read) is answered in the same write.
            draining = held ? draining + 1 : 0
            if isTCP {
                if !bulk.afterRead(wroteSinceLastRead: after != bulk.lastGeneration, hostBacklog: backlog, fd: fd, policy: policy),
                    !held
                {
                    // Part of a packet (controllers write an H4 indicator and the rest separately): the rest
                    // may be held back by the peer's Nagle until this segment is ACKed, so the rule applies too.
                    // (Not while an answer is held: it leaves, with the ACK, as soon as the socket is drained.)
                    if afterHandlingRead(wrote: after != before, partial: packets.isEmpty) == .leftToTheHost {
                        // The host's next write should carry the ACK; if the rest has not come within a few
                        // milliseconds (that write may itself wait for it), ACK now.
                        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                        let ready = poll(&p, 1, Self.backlogAckDelayMilliseconds)
                        var calls = 1
                        // Nothing came (or poll failed, e.g. EINTR): ACK now rather than leave the rest to
                        // the kernel's delayed-ACK timer (40 ms or more).
                        if ready <= 0 {
                            Self.setAcks(fd, .quick)
                            writeLock.withLock { $0.wroteSinceQuickAck = false }
                            calls += 1
                        }
                        readStatistics.withLock { $0.other += calls }
                    }
                }
                bulk.lastGeneration = after
                if bulk.setsockopts != 0 {
                    let n = bulk.setsockopts
                    bulk.setsockopts = 0
                    readStatistics.withLock { $0.other += n }
                }
            }
            if let framingError { return framingError }
        }
    }

    /// Bulk reception over TCP (see the file's header): when the peer streams to us and we answer nothing,
    /// delay our ACKs (TCP_QUICKACK 0, Linux's ping-pong mode) so that a peer with Nagle on gathers what it
    /// sends meanwhile into one segment, read at once, instead of one wake-up per H4 fragment. A write, or a
    /// pause, ends it. Reader-thread state.
    struct BulkReception {
        /// Answerless reads in a row that start a bulk run, and the time they must fit in.
        static let runLength = 64
        static let runWindow: UInt64 = 250_000_000
        /// Without a read for this long the run is over (longer than a delayed ACK, 40 ms).
        static let pause: UInt64 = 250_000_000
        /// Nothing but sparse writes for this long before a run counts. 250 ms (it was a second): a receiver of
        /// 1 MB over L2CAP through rootcanal spent the first second of the transfer, about 1,700 reads (one
        /// per packet or two, most with a quick ACK), before bulk reception began; a connection that answers
        /// what it reads never enters it, whatever the quiet.
        static let quiet: UInt64 = 250_000_000
        /// The kernel leaves ping-pong mode when a delayed ACK fires: enter it again at most this often.
        static let reenter: UInt64 = 20_000_000
        /// A write after at least this many answerless reads does not end a run (see `afterRead`).
        static let sparseWriteReads = 16

        var answerless = 0
        var runStart: UInt64 = 0
        var lastRead: UInt64 = 0
        var lastGeneration = 0
        var lastWrite: UInt64 = 0
        var delaying = false
        var lastEnter: UInt64 = 0
        var setsockopts = 0
        /// Reads since the last one after which something had been written.
        var readsSinceWrite = 0

        /// Returns true while ACKs are delayed (the quick-ACK rule does not apply).
        /// The thresholds (a connection may be given others, as tests do).
        struct Policy: Sendable {
            var enabled = true
            var runLength = BulkReception.runLength
            var runWindow = BulkReception.runWindow
            var pause = BulkReception.pause
            /// How long nothing but sparse writes must have been written before a run counts.
            var quiet = BulkReception.quiet
            var sparseWriteReads = BulkReception.sparseWriteReads
            /// During a run, a read waits for two bytes at least (OCB_TCP_BULK_LOWAT=0 turns it off).
            var waitsForTwoBytes = ProcessInfo.processInfo.environment["OCB_TCP_BULK_LOWAT"] != "0"
            /// During a run, the reader yields the processor before each wait (OCB_TCP_BULK_YIELD=0 turns it off).
            var yieldsBeforeWaiting = ProcessInfo.processInfo.environment["OCB_TCP_BULK_YIELD"] != "0"
        }

        mutating func afterRead(wroteSinceLastRead: Bool, hostBacklog: Bool, fd: Int32, policy: Policy) -> Bool {
            guard policy.enabled else { return false }
            let now = DispatchTime.now().uptimeNanoseconds
            defer { lastRead = now }
            // A write after many answerless reads is not an answer the peer waits for but bookkeeping of the
            // stream (an L2CAP receiver's credits, every quarter window): it carries an ACK itself, and ending
            // the run at each one kept a credit-returning receiver at a read per packet.
            let sparse = wroteSinceLastRead && readsSinceWrite >= policy.sparseWriteReads
            readsSinceWrite = wroteSinceLastRead ? 0 : readsSinceWrite + 1
            let answered = wroteSinceLastRead && !sparse
            if answered { lastWrite = now }
            if answered || now &- lastRead > policy.pause {
                answerless = 0
                runStart = now
                // After a pause the kernel has left ping-pong mode by itself (its delayed ACK fired); after a
                // write the quick-ACK rule takes over again and leaves it if a read goes unanswered.
                delaying = false
                if answered { return false }
            }
            // A run that took longer than its window starts again from here (the window slides).
            if now &- runStart >= policy.runWindow {
                answerless = 0
                runStart = now
            }
            answerless += 1
            // Only a connection that only listens: nothing written for a while, nothing waiting to leave (a
            // host that waits for credits or buffers needs what the peer sends as soon as it comes).
            if !delaying && answerless >= policy.runLength && now &- runStart < policy.runWindow
                && now &- lastWrite > policy.quiet && !hostBacklog
            {
                delaying = true
                lastEnter = 0
            }
            guard delaying else { return false }
            if now &- lastEnter > Self.reenter {
                StreamConnection.setAcks(fd, .delayed)
                lastEnter = now
                setsockopts += 1
            }
            return true
        }
    }

    /// Two-byte waits while sending (see the file's header): on unless OCB_TCP_SEND_LOWAT=0. Set before `start`.
    var sendLowWater = ProcessInfo.processInfo.environment["OCB_TCP_SEND_LOWAT"] != "0"

    /// When the sending side's two-byte waits stop for a while. Set before `start` (tests wait longer).
    var sendLowWaterPause = SendLowWaterPause()

    /// The sending side's two-byte waits stop for a while after one that took too long: the controller may hold the
    /// rest of a packet until our ACK, which a wait for two bytes never sends (reader-thread state).
    struct SendLowWaterPause: Sendable {
        /// A two-byte wait longer than this, in nanoseconds, is taken for such a stall (the waits between the
        /// connection events of a transfer are shorter).
        var stall: UInt64 = 20_000_000
        /// Lone bytes then wake the reader for this long.
        var pause: UInt64 = 5_000_000_000
        /// Until when they do (uptime nanoseconds; 0: never paused).
        var until: UInt64 = 0

        /// Whether a two-byte wait may begin at `now` (uptime nanoseconds).
        func allows(now: UInt64) -> Bool { until == 0 || now >= until }

        /// A two-byte wait that began at `began` ended at `now`.
        mutating func afterWait(since began: UInt64, now: UInt64) {
            if now &- began > stall { until = now &+ pause }
        }
    }

    /// Quick-ACK policy after a read was handled (see the file's header). `partial`: the read ended inside
    /// a packet and delivered none.
    enum QuickAckDecision { case notNeeded, quickAcked, ackedNow, leftToTheHost }

    @discardableResult
    private func afterHandlingRead(wrote: Bool, partial: Bool = false) -> QuickAckDecision {
        if wrote { return .notNeeded }
        var decision = QuickAckDecision.quickAcked
        switch quickAck {
        case .never: return .notNeeded
        case .always: break
        case .afterAnswerlessReads:
            decision = writeLock.withLock { w -> QuickAckDecision in
                guard w.wroteSinceQuickAck else { return .notNeeded }
                // A partial read while the host holds a backlog: the write that answers the next buffer
                // completion carries the ACK (forcing one here splits the controller's stream into more
                // segments, each a read).
                // Unless our last write has only just left: it ACKed all the peer had sent, so this fragment
                // left on its own and the peer's Nagle holds the rest of the packet until our next ACK (and
                // the host's next write waits for that rest). ACK it now, staying in ping-pong mode.
                let heldForTheHost = partial && w.hostBacklog && leaveAcksToHostBacklog
                if heldForTheHost {
                    let window = partialAckWindow
                    guard window > 0, DispatchTime.now().uptimeNanoseconds &- w.lastWrite <= window else {
                        return .leftToTheHost
                    }
                }
                w.wroteSinceQuickAck = false
                return heldForTheHost ? .ackedNow : .quickAcked
            }
            guard decision == .quickAcked || decision == .ackedNow else { return decision }
        }
        Self.setAcks(fd, decision == .ackedNow ? .now : .quick)
        readStatistics.withLock { $0.other += 1 }
        return decision
    }

    /// The exemption for partial reads while the host holds a backlog: on unless OCB_TCP_BACKLOG_ACKS=0.
    let leaveAcksToHostBacklog = ProcessInfo.processInfo.environment["OCB_TCP_BACKLOG_ACKS"] != "0"

    /// A partial read this soon after our last write is ACKed at once even while the host holds a backlog
    /// (see the file's header), in nanoseconds; 0 never. Set before `start`.
    var partialAckWindow: UInt64 =
        ProcessInfo.processInfo.environment["OCB_TCP_RECENT_WRITE_ACK_US"].flatMap { UInt64($0) }.map { $0 * 1000 }
        ?? 500_000

    /// How long a partial read left to the host's next write waits for the rest before ACKing itself.
    static let backlogAckDelayMilliseconds: Int32 = 5

    private var isClosed: Bool { state.withLock { $0.closed } }

    /// Writes H4 bytes (one packet, or several whole ones). Returns false if the connection is closed or
    /// the write failed. Within a loop turn the bytes are gathered and written when the turn ends (true
    /// then means accepted).
    @discardableResult
    public func write(_ bytes: [UInt8]) -> Bool {
        submit(packets: 1) { $0.append(contentsOf: bytes) }
    }

    /// Writes one packet with its H4 indicator, without building an intermediate array.
    @discardableResult
    public func write(packet: HCIPacket) -> Bool {
        submit(packets: 1) { b in
            b.append(packet.type.rawValue)
            b.append(contentsOf: packet.bytes)
        }
    }

    /// Writes `packets` packets given as H4 bytes (each its indicator, then the packet).
    @discardableResult
    public func write(h4 bytes: UnsafeRawBufferPointer, packets: Int) -> Bool {
        submit(packets: packets) { $0.append(contentsOf: bytes) }
    }

    /// Writes several packets in order.
    @discardableResult
    public func write(packets: [HCIPacket]) -> Bool {
        submit(packets: packets.count) { b in
            for p in packets {
                b.append(p.type.rawValue)
                b.append(contentsOf: p.bytes)
            }
        }
    }

    private func submit(packets: Int, _ append: (inout [UInt8]) -> Void) -> Bool {
        let inTurn = LoopTurn.inProgress
        var scheduleFlush = false
        let ok = writeLock.withLock { w -> Bool in
            guard !w.failed else { return false }
            w.generation &+= 1
            w.statistics.packetsOut += packets
            append(&w.pending)
            if inTurn && w.pending.count < Self.gatherLimit {
                if !w.flushScheduled { w.flushScheduled = true; scheduleFlush = true }
                return true
            }
            return flushLocked(&w)
        }
        if scheduleFlush, !LoopTurn.atEnd(flushHook) { flush() }
        return ok
    }

    /// Writes what was gathered.
    @discardableResult
    public func flush() -> Bool {
        writeLock.withLock { w in flushLocked(&w) }
    }

    private func flushLocked(_ w: inout WriteState) -> Bool {
        w.flushScheduled = false
        // Whoever writes, a held answer leaves with the rest: the reader has nothing left to hold.
        w.heldForReader = false
        guard !w.pending.isEmpty else { return !w.failed }
        let ok = !w.failed && writeAll(w.pending, &w.statistics)
        w.pending.removeAll(keepingCapacity: true)
        if ok {
            if sendLowWater, let tally = mergeSink?.aclPacketTally {
                w.sentBeforeLastWrite = w.sentAtLastWrite
                w.sentAtLastWrite = tally.sent
            }
            w.wroteSinceQuickAck = true
            w.lastWrite = DispatchTime.now().uptimeNanoseconds
        } else {
            w.failed = true
        }
        return ok
    }

    /// Call with the write lock held.
    private func writeAll(_ bytes: [UInt8], _ stats: inout TransportStatistics) -> Bool {
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { b in
                isSocket
                    ? Glibc.send(fd, b.baseAddress! + off, b.count - off, Int32(MSG_NOSIGNAL))
                    : Glibc.write(fd, b.baseAddress! + off, b.count - off)
            }
            stats.writes += 1
            if n < 0 {
                if errno == EINTR { continue }
                return false
            }
            off += n
        }
        stats.bytesOut += off
        return true
    }

    /// Ends the connection. The descriptor is shut down at once, which ends a read or write blocked on it; it is
    /// closed by the reader thread once its loop is over, or here if no reader was started. Closed here while the
    /// reader was between two reads, its number could be given to a socket opened meanwhile (by anyone in the
    /// process), and the reader's next read would take that socket's bytes: under load, a test once lost the end
    /// of a packet that way to the reader of a connection another test had closed.
    public func close() {
        let (doClose, readerOwnsDescriptor) = state.withLock { s -> (Bool, Bool) in
            if s.closed { return (false, s.started) }
            s.closed = true
            return (true, s.started)
        }
        if doClose {
            // Shut down first: it ends a write blocked on a full socket, which holds the write lock, and a read.
            _ = shutdown(fd, Int32(SHUT_RDWR))
            // No write after this point: the descriptor's number may soon belong to another file.
            writeLock.withLock { w in
                w.failed = true
                w.pending.removeAll()
            }
            if !readerOwnsDescriptor { _ = Glibc.close(fd) }
        }
    }
}

public enum Sockets {
    /// Connects a TCP socket to host:port.
    public static func connectTCP(host: String, port: UInt16) throws -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var res: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &res)
        guard rc == 0, let first = res else {
            throw TransportError.connectFailed("\(host):\(port): \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(res) }
        var lastError = "no address"
        var ai: UnsafeMutablePointer<addrinfo>? = first
        while let a = ai {
            let fd = socket(a.pointee.ai_family, a.pointee.ai_socktype, a.pointee.ai_protocol)
            if fd >= 0 {
                if Glibc.connect(fd, a.pointee.ai_addr, a.pointee.ai_addrlen) == 0 { return fd }
                lastError = String(cString: strerror(errno))
                _ = Glibc.close(fd)
            }
            ai = a.pointee.ai_next
        }
        throw TransportError.connectFailed("\(host):\(port): \(lastError)")
    }

    /// Connects a UNIX stream socket.
    public static func connectUNIX(path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TransportError.io(String(cString: strerror(errno))) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else {
            _ = Glibc.close(fd)
            throw TransportError.invalidSpec("UNIX socket path too long: \(path)")
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { p in
            for (i, b) in bytes.enumerated() { p[i] = b }
            p[bytes.count] = 0
        }
        let ok = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard ok == 0 else {
            let e = String(cString: strerror(errno))
            _ = Glibc.close(fd)
            throw TransportError.connectFailed("\(path): \(e)")
        }
        return fd
    }
}

/// A TCP listening socket that accepts connections on its own thread.
public final class TCPListener: @unchecked Sendable {
    public let fd: Int32
    public let port: UInt16
    private let state = Locked<(closed: Bool, started: Bool)>((false, false))

    /// Binds to `port` (0 picks a free one) on `host` (default: loopback).
    public init(host: String = "127.0.0.1", port: UInt16) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TransportError.io(String(cString: strerror(errno))) }
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &addr.sin_addr) == 1 else {
            _ = Glibc.close(fd)
            throw TransportError.invalidSpec("bad IPv4 address \(host)")
        }
        let b = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard b == 0, listen(fd, 16) == 0 else {
            let e = String(cString: strerror(errno))
            _ = Glibc.close(fd)
            throw TransportError.io("cannot listen on \(host):\(port): \(e)")
        }
        var bound = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        self.fd = fd
        self.port = UInt16(bigEndian: bound.sin_port)
    }

    /// Accepts connections until closed, calling `onAccept` with each connected descriptor.
    public func start(onAccept: @escaping @Sendable (Int32) -> Void) {
        let go = state.withLock { s -> Bool in
            if s.started || s.closed { return false }
            s.started = true
            return true
        }
        guard go else { return }
        let thread = Thread { [self] in
            while !state.withLock({ $0.closed }) {
                let c = accept(fd, nil, nil)
                if c < 0 {
                    if errno == EINTR { continue }
                    break
                }
                // Accepted as the listener closed: nobody wants it.
                if state.withLock({ $0.closed }) {
                    _ = Glibc.close(c)
                    break
                }
                StreamConnection.setNoDelay(c)
                onAccept(c)
            }
            // The accepting thread closes the descriptor once it no longer accepts on it (see `close`).
            _ = Glibc.close(fd)
        }
        thread.name = "ble.listener.\(port)"
        thread.start()
    }

    /// Stops listening: the descriptor is shut down at once (an accept blocked on it returns), and closed by the
    /// accepting thread when it ends, or here if none was started. Closed here, its number could go to another
    /// listener opened meanwhile, and an accept between two connections would take that listener's client.
    public func close() {
        let (doIt, threadOwnsDescriptor) = state.withLock { s -> (Bool, Bool) in
            if s.closed { return (false, s.started) }
            s.closed = true
            return (true, s.started)
        }
        if doIt {
            _ = shutdown(fd, Int32(SHUT_RDWR))
            if !threadOwnsDescriptor { _ = Glibc.close(fd) }
        }
    }
}
