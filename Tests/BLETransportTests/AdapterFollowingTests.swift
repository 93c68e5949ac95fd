// An HCI user channel whose adapter vanishes and comes back, at its index or at a new one (issue 27), without a
// kernel: a fake kernel lists adapters and hands out one end of a SOCK_SEQPACKET pair per bind, the other end
// bridged to a controller on a virtual air (one H4 packet per message, as the user channel gives). Removing an
// adapter shuts its pair down, as the kernel ends a user channel whose adapter was unregistered. The same
// scenario on Linux's own Bluetooth runs in the kernel guest (scripts/kernel/scenarios/manager-vanish.sh).
import Foundation
import Testing
import BLEWire
import BLEHCI
import BLEVirtualRadio
import BLEHost
@testable import BLETransport
@testable import BLETransportLinux

/// Adapters that come and go, each a virtual controller behind a socket pair.
final class FakeKernel: @unchecked Sendable {
    let air: VirtualAir
    private let lock = NSLock()
    private var present: [Int: VirtualController] = [:]
    /// The kernel's ends of the pairs handed out, by adapter.
    private var bound: [Int: Int32] = [:]
    private var _binds: [Int] = []
    /// Every index a bind was asked for, in order (successful or not).
    var binds: [Int] { lock.withLock { _binds } }

    init(air: VirtualAir) { self.air = air }

    var adapters: [Int] { lock.withLock { present.keys.sorted() } }

    func plug(_ index: Int) { lock.withLock { present[index] = air.addController() } }

    /// Unplugs the adapter: its user channel (if bound) ends, as the kernel ends it with EPIPE.
    func unplug(_ index: Int) {
        let (fd, controller) = lock.withLock { (bound.removeValue(forKey: index), present.removeValue(forKey: index)) }
        if let fd { _ = shutdown(fd, Int32(SHUT_RDWR)) }
        if let controller { air.remove(controller) }
    }

    /// Whether adapter `index` is bound now (its pair open on our side).
    func isBound(_ index: Int) -> Bool { lock.withLock { bound[index] != nil } }

    /// bind(HCI_CHANNEL_USER) on adapter `index`.
    func bind(_ index: Int) throws -> Int32 {
        let controller = try lock.withLock { () throws -> VirtualController in
            _binds.append(index)
            guard let c = present[index] else {
                throw TransportError.connectFailed(HCISocketTransport.explainBindFailure(index: index, errno: ENODEV))
            }
            guard bound[index] == nil else {
                throw TransportError.connectFailed(HCISocketTransport.explainBindFailure(index: index, errno: EUSERS))
            }
            return c
        }
        var fds: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &fds) == 0 else { throw TransportError.io("socketpair") }
        let kernel = fds[1]
        lock.withLock { bound[index] = kernel }
        final class Up: HCITransportSink, @unchecked Sendable {
            let fd: Int32
            init(fd: Int32) { self.fd = fd }
            func transport(didReceive packet: HCIPacket) { let b = packet.h4Bytes; _ = b.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }
            func transportDidClose(error: (any Error)?) {}
        }
        try controller.open(sink: Up(fd: kernel))
        let reader = Thread { [self] in
            var buf = [UInt8](repeating: 0, count: 2048)
            while true {
                let n = buf.withUnsafeMutableBytes { read(kernel, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                if let t = HCIPacketType(rawValue: buf[0]) { controller.send(HCIPacket(type: t, bytes: Array(buf[1..<n]))) }
            }
            // Our side closed the channel (or the adapter was unplugged): the adapter is free again.
            lock.withLock { if bound[index] == kernel { bound[index] = nil } }
            controller.close()
            close(kernel)
        }
        reader.start()
        return fds[0]
    }
}

/// A host on `hci-socket:index` of `kernel`, its power states recorded.
final class FollowingHost: @unchecked Sendable {
    let transport: HCISocketTransport
    let host: LEHost
    let loop = EventLoop(label: "adapter-following")
    private let lock = NSLock()
    private var _states: [HostPowerState] = []
    var states: [HostPowerState] { lock.withLock { _states } }

    init(index: Int, kernel: FakeKernel) {
        transport = HCISocketTransport(index: index, openAdapter: { try kernel.bind($0) }, listAdapters: { kernel.adapters })
        host = LEHost(transport: transport, loop: loop, name: "following")
        host.reconnectInterval = .milliseconds(100)
        loop.sync {
            host.addPowerObserver { [unowned self] s in lock.withLock { _states.append(s) } }
            host.powerOn()
        }
    }

    var power: HostPowerState { loop.sync { host.powerState } }
    func count(_ s: HostPowerState) -> Int { states.filter { $0 == s }.count }
    func stop() { loop.sync { host.powerOff() } }
}

@Suite(.serialized, .timeLimit(.minutes(1))) struct AdapterFollowingTests {
    @Test func theFollowedAdapterIsOnlyItsOwnUntilItVanishes() {
        var f = AdapterFollower(index: 1)
        #expect(f.candidates(present: [0, 1, 2]) == [1])
        #expect(f.candidates(present: [0, 2]) == [1], "an adapter never had is waited for where it was asked, not replaced")
        f.lost(present: [0, 1])
        #expect(f.presentAtLoss == [0, 1])
        // Back at its own index: only there, even if another appeared at the same time.
        #expect(f.candidates(present: [0, 1, 2]) == [1])
        // Gone: its index first (the kernel may list it a moment later), then the adapters that appeared since,
        // lowest first; adapter 0, there when ours vanished, is someone else's and never tried.
        #expect(f.candidates(present: [0]) == [1])
        #expect(f.candidates(present: [0, 3, 2]) == [1, 2, 3])
        f.bound(2)
        #expect(f.index == 2 && f.presentAtLoss == nil)
        #expect(f.candidates(present: [0, 1, 2]) == [2], "once bound, the replacement is the adapter followed")
        // The set is taken whole at the loss, ours included even when the kernel had already unlisted it.
        var g = AdapterFollower(index: 4)
        g.lost(present: [0])
        #expect(g.presentAtLoss == [0, 4])
        #expect(g.candidates(present: [0, 1]) == [4, 1])
    }

    @Test func aVanishedAdapterIsFollowedWhenItComesBackAtItsIndex() throws {
        let kernel = FakeKernel(air: VirtualAir(loop: EventLoop(label: "following.air", clock: .real)))
        kernel.plug(0)
        kernel.plug(1)
        let h = FollowingHost(index: 1, kernel: kernel)
        defer { h.stop() }
        try waitSync("on") { h.power == .on }
        kernel.unplug(1)
        try waitSync("off after the unplug") { h.power == .off }
        // Retried while it is gone (every 100 ms here), never on adapter 0.
        try waitSync("retries") { kernel.binds.filter { $0 == 1 }.count >= 4 }
        #expect(h.power == .off)
        kernel.plug(1)
        try waitSync("on again") { h.count(.on) == 2 && h.power == .on }
        #expect(h.transport.name == "hci-socket:1")
        #expect(!kernel.binds.contains(0))
    }

    @Test func aVanishedAdapterIsFollowedToTheNewIndexOfItsReplacement() throws {
        let kernel = FakeKernel(air: VirtualAir(loop: EventLoop(label: "following.air", clock: .real)))
        kernel.plug(0)
        kernel.plug(1)
        let h = FollowingHost(index: 1, kernel: kernel)
        defer { h.stop() }
        try waitSync("on") { h.power == .on }
        kernel.unplug(1)
        try waitSync("off after the unplug") { h.power == .off }
        // The dongle comes back as hci2 (something still held hci1's index).
        kernel.plug(2)
        try waitSync("on at the new index") { h.count(.on) == 2 && h.power == .on }
        #expect(h.transport.name == "hci-socket:2")
        #expect(h.transport.index == 2 && h.transport.requestedIndex == 1)
        #expect(kernel.isBound(2))
        #expect(!kernel.binds.contains(0), "adapter 0 was there when ours vanished: never taken")
        // From now on it is hci2 that is followed: hci1 coming back later is left alone.
        kernel.plug(1)
        kernel.unplug(2)
        try waitSync("off again") { h.power == .off }
        let bindsBefore = kernel.binds.count
        try waitSync("retries") { kernel.binds.count >= bindsBefore + 3 }
        #expect(h.power == .off, "hci1 was present when hci2 vanished: someone else's now")
        #expect(!kernel.isBound(1))
        kernel.plug(3)
        try waitSync("on at hci3") { h.count(.on) == 3 && h.power == .on }
        #expect(h.transport.name == "hci-socket:3")
    }

    @Test func anAdapterNeverReachedIsNotReplaced() throws {
        let kernel = FakeKernel(air: VirtualAir(loop: EventLoop(label: "following.air", clock: .real)))
        kernel.plug(0)
        let h = FollowingHost(index: 1, kernel: kernel)
        defer { h.stop() }
        try waitSync("retries") { kernel.binds.count >= 3 }
        kernel.plug(2)
        let bindsBefore = kernel.binds.count
        try waitSync("retries") { kernel.binds.count >= bindsBefore + 3 }
        #expect(Set(kernel.binds) == [1], "hci-socket:1 waits for hci1: \(kernel.binds)")
        kernel.plug(1)
        try waitSync("on") { h.power == .on }
    }

    @Test func closingLetsTheAdapterGoAtOnce() throws {
        let kernel = FakeKernel(air: VirtualAir(loop: EventLoop(label: "following.air", clock: .real)))
        kernel.plug(1)
        let h = FollowingHost(index: 1, kernel: kernel)
        try waitSync("on") { h.power == .on }
        #expect(kernel.isBound(1))
        h.stop()
        // The reader thread is woken and closes the channel: the adapter is free for the next program.
        try waitSync("released", seconds: 2) { !kernel.isBound(1) }
        #expect(h.count(.off) == 1 && h.power == .off)
    }
}
