// `hci-socket:N`: the Linux HCI user channel (AF_BLUETOOTH, BTPROTO_HCI, HCI_CHANNEL_USER) for USB and
// UART dongles the kernel knows as hciN. The user channel gives this process exclusive access to the
// controller: the kernel's own Bluetooth stack (and bluetoothd) must not be using it. Each message on the socket is
// one packet with its H4 indicator. The reader takes all the socket holds (up to 16 packets) with one recvmmsg(2)
// and hands them to the host at once, on its own thread (`PacketSocketBatch.swift`). Before, each packet coming in
// cost a poll, a read and a hop from the reader thread onto the host's loop. Going out, each packet is still one
// system call (the socket refuses sendmmsg's batches), gathered from its own array without a copy.
//
// An adapter that vanishes (a dongle pulled out, a driver that removed it) is followed: the host opens the
// transport again every second, and each attempt tries hciN first; while hciN is absent, it also tries the
// adapters that appeared since hciN vanished, lowest index first, and stays with the first it can bind
// (`AdapterFollower`). The kernel gives a dongle plugged in again the lowest free index, which is N again
// unless something still held the old adapter (then N+1 or another): either way the manager comes back.
// Adapters that were there when hciN vanished are never taken (they belong to someone else, and one that
// bluetoothd powers cannot be bound anyway).
#if canImport(Glibc)
import Glibc
#endif
import Foundation
import BLEHCI
import BLETransport
import Synchronization

/// Which adapter an HCI user channel opens (pure: the transport gives it the adapters present and tries the
/// indices it returns, in order). Until the adapter vanishes, only its own index; once it has vanished, its
/// own index while the kernel lists it, and otherwise also every adapter that was not there when it vanished.
public struct AdapterFollower: Sendable, Equatable {
    /// The adapter followed now: the one asked for, until a replacement was bound.
    public private(set) var index: Int
    /// The adapters present when ours vanished; nil while ours has not vanished since it was last bound.
    public private(set) var presentAtLoss: Set<Int>?

    /// Follows adapter `index` (hci0 is 0), which has not vanished.
    public init(index: Int) { self.index = index }

    /// Our adapter vanished while `present` were listed (ours among them or not).
    public mutating func lost(present: [Int]) {
        presentAtLoss = Set(present).union([index])
    }

    /// The indices to try, in order, when `present` are listed now.
    public func candidates(present: [Int]) -> [Int] {
        guard let before = presentAtLoss, !present.contains(index) else { return [index] }
        return [index] + present.filter { !before.contains($0) }.sorted()
    }

    /// The adapter at `index` was bound: it is the one followed from now on.
    public mutating func bound(_ index: Int) {
        self.index = index
        presentAtLoss = nil
    }
}

public final class HCISocketTransport: HCITransport, @unchecked Sendable {
    /// The adapter asked for (hci0 is 0).
    public let requestedIndex: Int
    /// The adapter this transport opens now: `requestedIndex`, or the adapter that replaced it (see above).
    public var index: Int { state.withLock { $0.follower.index } }
    public var name: String { "hci-socket:\(index)" }
    /// Sent before `send` returns.
    public var keepsSentPackets: Bool { false }
    /// The reader thread hands each read's packets to the host, which runs them there (no thread hop).
    public var deliversOnReaderThread: Bool { true }
    private let openSocket: (Int) throws -> Int32
    private let listAdapters: () -> [Int]
    private let state: Mutex<SocketState>
    struct SocketState {
        var fd: Int32 = -1
        var wake: Int32 = -1
        var closed = false
        var follower: AdapterFollower
        /// Counts the sockets bound: a reader knows its own by this, not by its descriptor's number, which the next
        /// socket may be given.
        var generation = 0
        /// The thread that reads the socket of `generation`, once it runs.
        var reader: pthread_t?
        /// The socket of this generation was closed by `close()` on its own reader thread (see there).
        var closedByCaller = -1
    }
    /// Held by a send from reading the descriptor until the kernel has the packet, and by the reader while it closes
    /// the socket: a send never reaches a number that was closed meanwhile and maybe given to another file. Not
    /// the state lock: a send the kernel holds back would then hold up `close`.
    private let sendLock = Mutex(())
    private let sendStatistics = Mutex(TransportStatistics())
    /// The readers' counts (reads, polls as "other", packets and octets in) and the messages they dropped, over every
    /// socket so far.
    private let readStatistics = Mutex(ReadTally())
    /// Reads' counts: the transport's totals, or what a reader counted since it last added it to them (once per read:
    /// one lock, not one per count).
    struct ReadTally {
        var counts = TransportStatistics(), dropped = 0
    }

    private func publish(_ tally: inout ReadTally) {
        let t = tally
        readStatistics.withLock {
            $0.counts = $0.counts + t.counts
            $0.dropped += t.dropped
        }
        tally = ReadTally()
    }

    static let AF_BLUETOOTH: Int32 = 31
    static let BTPROTO_HCI: Int32 = 1
    static let HCI_CHANNEL_USER: UInt16 = 1

    /// A transport for adapter `index` (hci0 is 0) that follows it to a new index when it is replaced.
    public convenience init(index: Int) {
        self.init(index: index, openAdapter: { try HCISocketTransport.openUserChannel(index: $0) }, listAdapters: { HCISocketTransport.adapters() })
    }

    /// A transport over any packet socket (tests pass one end of a socketpair); it never changes adapter.
    public convenience init(index: Int, socketFactory: @escaping () throws -> Int32) {
        self.init(index: index, openAdapter: { _ in try socketFactory() }, listAdapters: { [] })
    }

    /// A transport that opens adapter N with `openAdapter(N)` and learns which adapters exist from
    /// `listAdapters` (tests give a fake kernel; `adapters()` reads sysfs).
    public init(index: Int, openAdapter: @escaping (Int) throws -> Int32, listAdapters: @escaping () -> [Int]) {
        self.requestedIndex = index
        self.openSocket = openAdapter
        self.listAdapters = listAdapters
        self.state = Mutex(SocketState(follower: AdapterFollower(index: index)))
    }

    /// The adapters the kernel lists now (`/sys/class/bluetooth/hciN`; connections there are `hciN:H`).
    public static func adapters(sysfs: String = "/sys/class/bluetooth") -> [Int] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: sysfs)) ?? []
        return names.compactMap { name in
            guard name.hasPrefix("hci"), let n = Int(name.dropFirst(3)), n >= 0 else { return nil }
            return n
        }.sorted()
    }

    /// sockaddr_hci { sa_family_t hci_family; unsigned short hci_dev; unsigned short hci_channel; }
    static func openUserChannel(index: Int) throws -> Int32 {
        let fd = socket(AF_BLUETOOTH, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), BTPROTO_HCI)
        guard fd >= 0 else {
            let e = errno
            if e == EAFNOSUPPORT {
                throw TransportError.connectFailed("hci-socket:\(index): this kernel has no Bluetooth support (AF_BLUETOOTH unavailable)")
            }
            if e == EPERM || e == EACCES {
                throw TransportError.permissionDenied("hci-socket:\(index): socket(): \(String(cString: strerror(e))); the HCI user channel needs CAP_NET_ADMIN")
            }
            throw TransportError.connectFailed("hci-socket:\(index): socket(): \(String(cString: strerror(e)))")
        }
        var addr: (UInt16, UInt16, UInt16) = (UInt16(AF_BLUETOOTH), UInt16(index), HCI_CHANNEL_USER)
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(6)) }
        }
        if rc != 0 {
            let e = errno
            _ = Glibc.close(fd)
            if e == EPERM || e == EACCES { throw TransportError.permissionDenied(Self.explainBindFailure(index: index, errno: e)) }
            throw TransportError.connectFailed(Self.explainBindFailure(index: index, errno: e))
        }
        widenReceiveQueue(fd)
        return fd
    }

    /// The kernel drops what arrives while a user channel's receive queue is full, and nothing slows the
    /// controller for it: a host that fell behind lost 45 of a 1000-Write-Command flood at the default queue
    /// (about 212 KB, a few hundred small packets; `cb-peripheral-hci` in a guest at load 26). 8 MB holds
    /// thousands. The user channel's CAP_NET_ADMIN lets SO_RCVBUFFORCE pass `net.core.rmem_max`.
    static func widenReceiveQueue(_ fd: Int32, bytes: Int32 = 8 << 20) {
        var size = bytes
        let length = socklen_t(MemoryLayout<Int32>.size)
        if setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, length) != 0 {
            _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, length)
        }
    }

    /// A message that says what to do, for the usual reasons binding the user channel fails.
    public static func explainBindFailure(index: Int, errno e: Int32) -> String {
        switch e {
        case EBUSY:
            return "hci\(index) is in use by the kernel's Bluetooth stack (bluetoothd). Release it with "
                + "`sudo systemctl stop bluetooth` and `sudo hciconfig hci\(index) down` (or `btmgmt --index \(index) power off`), then try again. "
                + "bluetoothd powers every adapter again as soon as it is let go: to keep it running but away from this one, "
                + "set `AutoEnable=false` under [Policy] in /etc/bluetooth/main.conf."
        case EPERM, EACCES:
            return "hci\(index): permission denied. The HCI user channel needs CAP_NET_ADMIN: run as root or "
                + "`sudo setcap cap_net_admin+ep <your binary>`."
        case ENODEV:
            return "hci\(index): no such adapter (see `ls /sys/class/bluetooth`)."
        case ERFKILL:
            return "hci\(index) is blocked by rfkill (its radio is switched off in software). Unblock it with "
                + "`rfkill unblock bluetooth` (`sudo` if you are not root; `rfkill list` shows every block), then try again."
        case EUSERS:
            return "hci\(index) is already open on the HCI user channel by another program (another `ble`, Bumble, "
                + "a btstack or Zephyr host): only one program at a time can have it."
        case EALREADY:
            return "hci\(index) is still being set up by the kernel: try again in a moment."
        default:
            return "hci\(index): bind(HCI_CHANNEL_USER): \(String(cString: strerror(e)))"
        }
    }

    public func open(sink: any HCITransportSink) throws {
        // close() wakes the reader through a pipe: HCI sockets have no shutdown(2) (the kernel answers
        // EOPNOTSUPP), and closing a descriptor another thread is reading leaves that read blocked and the
        // adapter bound until the next packet.
        var pair: [Int32] = [-1, -1]
        guard pipe(&pair) == 0 else { throw TransportError.io("pipe: \(String(cString: strerror(errno)))") }
        for d in pair { _ = fcntl(d, F_SETFD, FD_CLOEXEC) }
        let wake = pair
        let fd: Int32, generation: Int
        do { (fd, generation) = try bindFollowedAdapter(wake: wake[1]) } catch {
            _ = Glibc.close(wake[0]); _ = Glibc.close(wake[1])
            throw error
        }
        let thread = Thread { [self] in
            state.withLock { if $0.generation == generation { $0.reader = pthread_self() } }
            /// This socket was closed, or closed and another bound (whose descriptor may have the same number).
            func ended() -> Bool { state.withLock { $0.closed || $0.generation != generation } }
            var closeError: (any Error)?
            var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wake[0], events: Int16(POLLIN), revents: 0)]
            let receiver = PacketSocketReceiver()
            var pool = HCIPacketBufferPool()
            var packets: [HCIPacket] = []
            packets.reserveCapacity(receiver.slots)
            // Completion events for one handle in a row, one to a message, reach a host as one (see
            // `HCITransportSink.acceptsMergedCompletions`).
            let mergesCompletions = sink.acceptsMergedCompletions
            // After a read that filled every slot, more is likely waiting: read again before sleeping in poll.
            var full = false
            var tally = ReadTally()
            reading: while true {
                if full {
                    if ended() { break }
                } else {
                    let ready = poll(&fds, 2, -1)
                    let e = errno
                    tally.counts.other += 1
                    if ready < 0 {
                        if e == EINTR { continue }
                        closeError = TransportError.io("poll: \(String(cString: strerror(e)))")
                        break
                    }
                    if fds[1].revents != 0 { break }   // close()
                    guard fds[0].revents != 0 else { continue }
                }
                let count: Int
                let read = receiver.receive(fd)
                tally.counts.reads += 1
                switch read {
                case .nothing:
                    full = false
                    publish(&tally)
                    continue
                case .endOfFile: break reading
                case let .failed(e):
                    closeError = TransportError.io(String(cString: strerror(e)))
                    break reading
                case let .messages(n): count = n
                }
                full = count == receiver.slots
                for i in 0..<count {
                    // One packet per message, H4 indicator first. One cut short (larger than a slot) or of an
                    // unknown type is dropped: the host would only fail to parse it.
                    guard let m = receiver.message(i), m.count > 1, let type = HCIPacketType(rawValue: m[0]) else {
                        tally.dropped += 1
                        continue
                    }
                    tally.counts.bytesIn += m.count
                    tally.counts.packetsIn += 1
                    let body = UnsafeRawBufferPointer(rebasing: m[1...])
                    if mergesCompletions, type == .event, !packets.isEmpty, packets[packets.count - 1].addCompletions(of: body) {
                        continue
                    }
                    packets.append(HCIPacket(type: type, bytes: pool.make(count: body.count) { $0.copyMemory(from: body) }))
                }
                publish(&tally)
                if !packets.isEmpty {
                    sink.transport(didReceivePackets: packets)
                    // Handled (the host runs them on this thread): their arrays carry the next read's packets.
                    pool.recycle(packets)
                    packets.removeAll(keepingCapacity: true)
                    // The host may have closed the transport meanwhile (and opened it again): this socket is done.
                    if ended() { break }
                }
            }
            publish(&tally)
            // Not closed by us: the adapter went away (the kernel ends the user channel with EPIPE). A socket we
            // closed is no news: the host may already have opened the next one, which must not read as lost.
            let vanished = state.withLock { !$0.closed && $0.generation == generation }
            if vanished {
                let present = listAdapters()
                state.withLock { $0.follower.lost(present: present) }
            }
            finish(fd, wake: wake, generation: generation)
            if vanished { sink.transportDidClose(error: closeError) }
        }
        thread.name = name
        thread.start()
    }

    /// Binds the adapter followed now, or one that replaced it; the error is the followed adapter's.
    private func bindFollowedAdapter(wake: Int32) throws -> (Int32, generation: Int) {
        let follower = state.withLock { $0.follower }
        let candidates = follower.presentAtLoss == nil ? [follower.index] : follower.candidates(present: listAdapters())
        var firstError: (any Error)?
        for candidate in candidates {
            do {
                let fd = try openSocket(candidate)
                let generation = state.withLock { s -> Int in
                    s.fd = fd; s.wake = wake; s.closed = false; s.follower.bound(candidate)
                    s.generation += 1
                    s.reader = nil
                    return s.generation
                }
                return (fd, generation)
            } catch {
                if firstError == nil { firstError = error }
            }
        }
        throw firstError ?? TransportError.connectFailed(Self.explainBindFailure(index: follower.index, errno: ENODEV))
    }

    public func send(_ packet: HCIPacket) {
        transmit(CollectionOfOne(packet))
    }

    /// Each packet is a send of its own (the HCI socket takes no batch: see `sendPacket`), under one lock.
    public func send(batch packets: [HCIPacket]) {
        transmit(packets)
    }

    private func transmit<C: Collection>(_ packets: C) where C.Element == HCIPacket {
        sendLock.withLock { _ in
            let fd = state.withLock { $0.closed ? -1 : $0.fd }
            guard fd >= 0 else { return }
            var calls = 0, sent = 0, octets = 0
            for p in packets {
                var n: Int
                repeat {
                    n = sendPacket(p, on: fd)
                    calls += 1
                } while n < 0 && errno == EINTR
                // A packet the socket refuses is lost alone, as before; one the controller's end took is counted.
                if n > 0 { sent += 1; octets += n }
            }
            sendStatistics.withLock {
                $0.writes += calls; $0.packetsOut += sent; $0.bytesOut += octets
            }
        }
    }

    /// System calls and packets so far (the reader's poll(2) calls count as "other").
    public var statistics: TransportStatistics? {
        // The readers count only reads, polls and what comes in; the senders only writes and what goes out.
        readStatistics.withLock { $0.counts } + sendStatistics.withLock { $0 }
    }

    /// Messages the reader dropped: larger than its 4 KB slots, empty, or of no HCI packet type.
    public var droppedMessages: Int { readStatistics.withLock { $0.dropped } }

    /// Stops reading and lets the adapter go: the reader thread closes the socket (at once: it is woken).
    ///
    /// Called on the reader thread itself, from within a batch it handed the host (the host reopens the controller
    /// after a Hardware Error event, at once), the socket is closed here and now: the reader would close it only once
    /// the batch returns, and until then the adapter could not be bound again (EBUSY). The reader touches it no more.
    public func close() {
        let now = state.withLock { s -> Int32? in
            guard !s.closed else { return nil }
            s.closed = true
            // Under the lock: the reader closes the pipe under it too, so this never writes to a reused descriptor.
            if s.wake >= 0 {
                var one: UInt8 = 1
                _ = write(s.wake, &one, 1)
            }
            guard let reader = s.reader, pthread_equal(reader, pthread_self()) != 0, s.fd >= 0 else { return nil }
            let fd = s.fd
            s.fd = -1
            s.closedByCaller = s.generation
            return fd
        }
        // After a send that read the descriptor before it was marked closed above; a later one finds it gone.
        if let now { sendLock.withLock { _ in _ = Glibc.close(now) } }
    }

    /// Ends one socket and its wake pipe: only its reader thread calls this, once it has stopped reading.
    private func finish(_ fd: Int32, wake: [Int32], generation: Int) {
        let closedAlready = state.withLock { s -> Bool in
            if s.generation == generation { s.closed = true; s.fd = -1; s.wake = -1; s.reader = nil }
            _ = Glibc.close(wake[1])
            return s.closedByCaller == generation
        }
        // After a send that read the descriptor before it was marked closed above; a later one finds it gone.
        if !closedAlready { sendLock.withLock { _ in _ = Glibc.close(fd) } }
        _ = Glibc.close(wake[0])
    }
}
