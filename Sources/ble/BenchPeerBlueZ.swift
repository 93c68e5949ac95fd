// `ble bench peer --mode l2cap` on BLE_TRANSPORT=bluez[:hciN]: one side of bumble-bench's L2CAP protocol
// (BenchPeerL2CAP.swift: SPSM 128, packets framed by a 2-octet big-endian length, RESET, SEQUENCE, ACK) over the
// kernel's LE credit-based L2CAP sockets, while bluetoothd keeps the adapter. The central connects a socket to the
// peer's SPSM 128 (the kernel makes the LE link); the peripheral listens on SPSM 128 and advertises "Speed
// Peripheral" through bluetoothd (a CBPeripheralManager on bluez).
//
// What it cannot do, said on standard error when asked for: set the connection parameters (the kernel chooses the
// interval, 30-50 ms by default, and a peer may ask for others; --interval is not applied), or take the peripheral
// address bumble-bench uses (F1:F1:…): the peripheral advertises from the adapter's own address, which the
// central's --peer must then name. The credits are the kernel's: receive MTU / MPS + 1 (65535 asked, as
// Multipeer's channels on bluez ask).
//
// The protocol's state is a SpeedSession (BenchSpeedSession.swift), as in BenchPeer and BenchPeerL2CAP.
//
// Threading: the transfer runs on a thread of its own with a blocking socket (a send waits for credits); `run`
// waits for it, and reads the session under `lock` (the transfer changes it under the same lock).
import CoreBluetooth
import Foundation
import BLEWire
#if canImport(Glibc)
import Glibc
#endif

final class BenchPeerBlueZ: NSObject, CBPeripheralManagerDelegate, @unchecked Sendable {
    typealias Role = BenchPeer.Role
    typealias Scenario = BenchPeer.Scenario

    let options: BlueZOptions
    let role: Role, scenario: Scenario
    let size: Int, count: Int
    let peer: BluetoothAddress
    private let done = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var failure: String?
    private var manager: CBPeripheralManager?
    private var listener: BlueZKernelL2CAP.Listener?
    private var fd: Int32 = -1
    private var deframer = SpeedL2CAP.Deframer()
    /// The protocol's state (BenchSpeedSession.swift), on the transfer thread (read by `run` once it is over).
    private var session: SpeedSession
    private var cpuStart = 0.0, cpuEnd = 0.0
    private var sendMTU = 23
    static let receiveMTU = BlueZKernelL2CAP.largestReceiveMTU

    init(options: BlueZOptions, role: Role, scenario: Scenario, size: Int, count: Int, peer: BluetoothAddress) {
        self.options = options
        self.role = role
        self.scenario = scenario
        self.size = size
        self.count = count
        self.peer = peer
        session = SpeedSession(scenario: scenario, size: size, count: count, counting: .framed)
    }

    func say(_ s: String) { FileHandle.standardError.write(Data((s + "\n").utf8)) }
    func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    private func fail(_ why: String) {
        lock.withLock { if failure == nil { failure = why } }
        done.signal()
    }

    func run(timeout: Double, interval: Double?) throws -> BenchResult {
        if let interval {
            say(
                "--interval \(interval) ms is not applied on \(BlueZTool.transportName(options)): the kernel chooses the connection parameters "
                    + "(its default interval is 30-50 ms; root can change it in /sys/kernel/debug/bluetooth/hciN/conn_{min,max}_interval)")
        }
        switch role {
        case .central: connect()
        case .peripheral: serve()
        }
        guard done.wait(timeout: .now() + timeout) == .success else {
            let s = lock.withLock { session }
            throw BenchError("timed out (\(s.received) packets received, \(s.sent) sent)")
        }
        if let failure = lock.withLock({ failure }) { throw BenchError(failure) }
        // Let the last ACK leave before the socket closes (closing drops what the kernel still holds).
        usleep(200_000)
        if fd >= 0 { close(fd) }
        listener?.close()
        manager?.stopAdvertising()
        let s = lock.withLock { session }
        return BenchResult(
            mode: "l2cap \(scenario.rawValue) as \(role.rawValue) (bumble-bench protocol, kernel L2CAP socket on \(BlueZTool.transportName(options)))",
            bytes: s.bytes, packets: s.packets, seconds: s.seconds, cpuSeconds: cpuEnd - cpuStart, rtts: s.rtts, cost: nil)
    }

    // MARK: Central: a socket connected to the peer's SPSM.

    private func connect() {
        let text = peer.bytes.reversed().map { String(format: "%02X", $0) }.joined(separator: ":")
        say("connecting to \(peer) SPSM \(SpeedL2CAP.psm) through the kernel (\(BlueZTool.transportName(options)))")
        BlueZKernelL2CAP.connect(
            address: text, random: peer.type.isRandom, psm: SpeedL2CAP.psm, adapterAddress: nil, receiveMTU: Self.receiveMTU
        ) { [self] r in
            switch r {
            case let .success(fd): attach(fd)
            case let .failure(e): fail("cannot open SPSM \(SpeedL2CAP.psm) on \(peer): \(e)")
            }
        }
    }

    // MARK: Peripheral: a listener on SPSM 128, advertised through bluetoothd.

    private func serve() {
        do {
            let l = try BlueZKernelL2CAP.Listener(adapterAddress: nil, psm: SpeedL2CAP.psm, receiveMTU: Self.receiveMTU)
            l.start { [self] fd in
                let first = lock.withLock { () -> Bool in
                    guard self.fd < 0 else { return false }
                    self.fd = fd
                    return true
                }
                guard first else { return _ = close(fd) }
                attach(fd)
            }
            listener = l
        } catch {
            return fail("cannot listen on SPSM \(SpeedL2CAP.psm): \(error)")
        }
        manager = CBPeripheralManager(delegate: self, queue: DispatchQueue(label: "bench.bluez.advertising"))
    }

    func peripheralManagerDidUpdateState(_ peripheral: CBPeripheralManager) {
        guard peripheral.state == .poweredOn else { return }
        peripheral.startAdvertising([CBAdvertisementDataLocalNameKey: "Speed Peripheral"])
    }

    func peripheralManagerDidStartAdvertising(_ peripheral: CBPeripheralManager, error: (any Error)?) {
        if let error { return fail("advertising failed: \(error.localizedDescription)") }
        say(
            "advertising \"Speed Peripheral\" through bluetoothd (\(BlueZTool.transportName(options))), SPSM \(SpeedL2CAP.psm), "
                + "from the adapter's own address (bluetoothd does not take bumble-bench's \(peer)): give it to the central's --peer")
    }

    // MARK: The channel

    private func attach(_ fd: Int32) {
        self.fd = fd
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        let mtus = BlueZKernelL2CAP.mtus(fd)
        sendMTU = max(1, mtus.send)
        say("channel open: the peer takes SDUs of \(mtus.send) octets, we offered \(mtus.receive)")
        let t = Thread { [self] in transfer() }
        t.name = "bench-bluez"
        t.start()
    }

    private func transfer() {
        guard perform(update { $0.begin(at: now()) }) else { return }
        if scenario == .send {
            var outgoing: [UInt8] = []
            while true {
                while outgoing.count < sendMTU, let next = update({ $0.takeSequence(at: now()) }) {
                    outgoing += SpeedL2CAP.frame(next.packet.encode())
                    if let note = next.note { say(note) }
                }
                if outgoing.isEmpty { break }
                let n = min(sendMTU, outgoing.count)
                guard sendSDU(Array(outgoing[0..<n])) else { return }
                outgoing.removeFirst(n)
            }
        }
        readUntilDone()
    }

    /// A change of the session, under the lock (`run` reads it from another thread).
    private func update<T>(_ change: (inout SpeedSession) -> T) -> T { lock.withLock { change(&session) } }

    /// What the session asked for: the CPU clock at the start and end of the measurement, its packets, the end.
    /// False once the run is over (finished, or a send failed).
    private func perform(_ step: SpeedSession.Step) -> Bool {
        if let note = step.note { say(note) }
        if step.startMeasuring { cpuStart = cpuSeconds() }
        if step.stopMeasuring { cpuEnd = cpuSeconds() }
        for p in step.send { guard write(p) else { return false } }
        if step.finished { done.signal() }
        return !step.finished
    }

    /// One packet, framed, in SDUs of the peer's MTU.
    private func write(_ p: SpeedProtocol.Packet) -> Bool {
        var bytes = SpeedL2CAP.frame(p.encode())
        while !bytes.isEmpty {
            let n = min(sendMTU, bytes.count)
            guard sendSDU(Array(bytes[0..<n])) else { return false }
            bytes.removeFirst(n)
        }
        return true
    }

    private func sendSDU(_ sdu: [UInt8]) -> Bool {
        while true {
            let n = sdu.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n == sdu.count { return true }
            if n < 0, errno == EINTR { continue }
            fail("send: \(n < 0 ? String(cString: strerror(errno)) : "\(n) of \(sdu.count) octets")")
            return false
        }
    }

    private func readUntilDone() {
        var buffer = [UInt8](repeating: 0, count: Int(Self.receiveMTU))
        while lock.withLock({ failure == nil }) {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else {
                if !update({ $0.ended }) { fail(n == 0 ? "the channel closed" : "recv: \(String(cString: strerror(errno)))") }
                return
            }
            for p in deframer.feed(Array(buffer[0..<n])) {
                guard perform(update { $0.arrived(p, at: now()) }) else { return }
            }
        }
    }
}
