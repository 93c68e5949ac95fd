// BluetoothSimulation: the world a test owns. One simulated air on a virtual clock, a "phone" (the device
// the app under test runs on: every CBCentralManager and CBPeripheralManager the app creates without a host
// lands on it, as every manager of an iOS app shares the phone's controller), and the simulated peripherals.
// Underneath everything is real: the app's managers drive our host stack over HCI into a virtual
// controller, and each simulated peripheral is a whole host of its own with a GATT server.
//
// Time: the air's clock is virtual and stands still unless the test moves it. `runUntilIdle()` runs what is
// due now — the stack's work, the app's delegate callbacks and whatever the app does in them — until nothing
// is left; `advance(by:)` steps from one timer to the next, letting the app react at each instant, so a
// 30-second ATT timeout or a day of reconnections takes milliseconds and every run gives the same result
// (randomness on the air comes from the seed).
//
// Threading contract: call the simulation from the test (any thread but the air's loop; XCTest's main thread
// and Swift Testing's tasks both work). The app's delegate queues are waited on as the clock moves: the main
// queue, the queues of the managers on the phone, and any queue given to `observe(queue:)`.
import Foundation
import Dispatch
import BLEWire
import BLEHCI
import BLEHost
import BLETransport
import BLEVirtualRadio
@preconcurrency import CoreBluetooth

public final class BluetoothSimulation: @unchecked Sendable {
    /// The simulated air (virtual clock, seeded randomness).
    public let air: VirtualAir
    /// The device the app under test runs on.
    public let phone: LEHost
    /// The phone's controller.
    public let phoneController: VirtualController
    var loop: EventLoop { air.loop }

    private let lock = NSLock()
    private var extraQueues: [DispatchQueue] = []
    private var installed = false
    private var finished = false
    private var mainQueueUnserviced = false
    private var peripheralList: [SimulatedPeripheral] = []
    /// "Other apps" on the phone (simulateConnection): managers kept alive by the simulation.
    var otherApps: [AnyObject] = []

    /// Signals at or below this strength are not received (dBm). Proximity `.far` is just above it.
    public static let receiverSensitivity = -100.0

    /// A new world. With `installing` (the default), managers the app creates without a host join the phone
    /// until `finish()`; only one simulation is installed at a time in a process (a second one waits).
    /// `capture` records the phone's HCI traffic to a btsnoop file (open it with `ble snoop` or Wireshark).
    public init(seed: UInt64 = 0x5EED, installing: Bool = true, capture: String? = nil) throws {
        air = VirtualAir(loop: EventLoop(label: "ble.simulation", clock: .virtual), seed: seed)
        air.setReceiverSensitivity(Self.receiverSensitivity)
        let controller = air.addController(position: .origin)
        phoneController = controller
        let transport: any HCITransport = try capture.map { SnoopingTransport(controller, writer: try BTSnoopWriter(path: $0)) } ?? controller
        phone = LEHost(transport: transport, loop: air.loop, name: "phone")
        watchPower(phoneController, phone)
        // The phone's controller is up before the app starts, as a phone's is.
        loop.execute { [phone] in phone.powerOn() }
        runUntilIdle()
        if installing { install() }
    }

    deinit { finish() }

    // MARK: Installing

    private static let installation = NSCondition()
    nonisolated(unsafe) private static var installedSimulation = false

    /// Makes the managers that the app creates without a host join this simulation's phone.
    public func install() {
        lock.lock(); defer { lock.unlock() }
        guard !installed, !finished else { return }
        Self.installation.lock()
        while Self.installedSimulation { Self.installation.wait() }
        Self.installedSimulation = true
        Self.installation.unlock()
        HostFactory.virtualHostProvider = { [weak self] _ in
            guard let self else { throw HostError.transportClosed }
            return self.lock.withLock { self.unsupportedPhone } ?? self.phone
        }
        installed = true
    }

    /// Stops routing new managers to this simulation (they go to the process-wide air again).
    public func uninstall() {
        lock.lock(); defer { lock.unlock() }
        guard installed else { return }
        installed = false
        HostFactory.virtualHostProvider = nil
        Self.installation.lock()
        Self.installedSimulation = false
        Self.installation.signal()
        Self.installation.unlock()
    }

    /// Ends the simulation: uninstalls it, switches every device off and lets the app see it. Called by
    /// deinit too; calling it twice is harmless.
    public func finish() {
        uninstall()
        lock.lock()
        let already = finished
        finished = true
        let list = peripheralList
        peripheralList.removeAll()
        otherApps.removeAll()
        lock.unlock()
        guard !already else { return }
        phoneController.refuseAccess(nil)
        for p in list { p.remove() }
        loop.execute { [phone] in phone.powerOff() }
        runUntilIdle()
    }

    /// A host on this air (a device of the test's own: a second phone, a central that competes with the app).
    public func makeHost(name: String = "device", position: VirtualPosition? = nil) throws -> LEHost {
        let controller = air.addController(position: position)
        let host = LEHost(transport: controller, loop: air.loop, name: name)
        watchPower(controller, host)
        return host
    }

    func watchPower(_ controller: VirtualController, _ host: LEHost) {
        controller.onPowerChange = { [weak host] on in
            guard on, let host else { return }
            host.loop.execute { host.reconnectNow() }
        }
    }

    // MARK: Peripherals

    /// Puts a simulated peripheral on the air; it is on and advertising (after its delay) when this returns.
    @discardableResult
    public func add(_ spec: PeripheralSpec) throws -> SimulatedPeripheral {
        let p = try SimulatedPeripheral(spec: spec, simulation: self)
        lock.withLock { peripheralList.append(p) }
        p.start()
        runUntilIdle()
        return p
    }

    /// The simulated peripherals on the air.
    public var peripherals: [SimulatedPeripheral] { lock.withLock { peripheralList } }

    // MARK: The clock

    /// Virtual time since the simulation began.
    public var now: Duration { .nanoseconds(Int64(clamping: loop.sync { loop.now })) }

    /// How many instants the clock has stopped at so far (each with timers due): what a run costs.
    public var clockSteps: Int { lock.withLock { steps } }
    private var steps = 0

    /// Waits on a queue the app uses besides its managers' delegate queues (an app's own serial queue).
    public func observe(queue: DispatchQueue) { lock.withLock { extraQueues.append(queue) } }

    /// Runs everything due now — the stack's work, the app's delegate callbacks and what the app does in
    /// them — until nothing is left, without moving the clock.
    public func runUntilIdle() {
        precondition(!loop.isInLoop, "BluetoothSimulation: call the simulation from the test, not from the air's loop")
        for _ in 0..<1_000_000 {
            // Quiet when nothing ran on the loop while the delegate queues emptied: delegate work only ever
            // comes from the loop, and what the app does in its callbacks enters the loop.
            let before = loop.runPending()
            drainDelegateQueues()
            if loop.runPending() == before { return }
        }
        preconditionFailure("BluetoothSimulation: the app and the stack never went idle (a loop that keeps scheduling work?)")
    }

    /// Moves the clock forward by `duration`, one timer at a time, letting the app react at each instant.
    public func advance(by duration: Duration) {
        let target = loop.sync { loop.now } &+ Self.nanoseconds(duration)
        _ = step(until: target) { false }
    }

    /// Moves the clock until `condition` holds (checked whenever the world is idle) or `limit` has passed;
    /// returns whether it held. The clock stops at the instant the condition became true.
    @discardableResult
    public func run(until condition: () -> Bool, within limit: Duration = .seconds(60)) -> Bool {
        let target = loop.sync { loop.now } &+ Self.nanoseconds(limit)
        return step(until: target, condition)
    }

    private func step(until target: LoopTime, _ condition: () -> Bool) -> Bool {
        runUntilIdle()
        while !condition() {
            let (now, next) = loop.sync { (loop.now, loop.nextTimerDeadline) }
            guard let next, next <= target else {
                if target > now { loop.advance(by: target - now) }
                runUntilIdle()
                return condition()
            }
            loop.advance(by: next > now ? next - now : 0)
            lock.withLock { steps += 1 }
            runUntilIdle()
        }
        return true
    }

    static func nanoseconds(_ d: Duration) -> LoopTime {
        let (s, atto) = d.components
        guard s >= 0 else { return 0 }
        return LoopTime(clamping: s) &* 1_000_000_000 &+ LoopTime(atto / 1_000_000_000)
    }

    /// Lets every delegate queue run what it has: the main queue (through the run loop when the caller is
    /// the main thread), the queues of the phone's managers, and the observed ones.
    private func drainDelegateQueues() {
        let other = lock.withLock { unsupportedPhone }
        var queues = loop.sync { delegateQueues(ofManagersOn: phone) + (other.map { delegateQueues(ofManagersOn: $0) } ?? []) }
        queues += lock.withLock { extraQueues }
        // The main queue is not always the same object: compare labels. It is run only when someone uses
        // it (a manager created with a nil queue, or one observed), as reaching it costs a thread hop.
        let main = DispatchQueue.main.label
        if queues.contains(where: { $0.label == main }) { drainMainQueue() }
        for q in queues where q.label != main { q.sync {} }
    }

    private func drainMainQueue() {
        if Thread.isMainThread {
            _ = RunLoop.main.run(mode: .default, before: Date())
            return
        }
        guard !lock.withLock({ mainQueueUnserviced }) else { return }
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.main.async { done.signal() }
        if done.wait(timeout: .now() + 5) == .timedOut {
            // Nobody runs the main queue (a test process whose main thread is busy): delegates given a nil
            // queue cannot be driven. Say so once; the app should pass a queue of its own.
            lock.withLock { mainQueueUnserviced = true }
            FileHandle.standardError.write(Data("[CoreBluetoothTesting] the main queue is not being run; managers created with a nil queue get no callbacks\n".utf8))
        }
    }

    // MARK: The phone (CoreBluetoothMock's manager-side simulations)

    /// The state the phone's Bluetooth is in when the app creates its first manager: `.poweredOn` (the
    /// default), `.poweredOff` (the radio is switched off), `.unauthorized` (the app is refused Bluetooth;
    /// `CBManager.authorization` reads `.denied`) or `.unsupported` (no usable controller). Call before the
    /// app creates a manager.
    public func simulateInitialState(_ state: CBManagerState) {
        switch state {
        case .poweredOff:
            phoneController.powerOff()
        case .unauthorized:
            phoneController.refuseAccess("Bluetooth access refused to the app (simulated)")
            powerCycle()
        case .unsupported:
            // A phone whose Bluetooth controller cannot be reached at all: managers read `.unsupported`.
            lock.withLock { unsupportedPhone = LEHost(transport: NoController(), loop: air.loop, name: "phone without Bluetooth LE") }
        case .poweredOn, .unknown, .resetting:
            lock.withLock { unsupportedPhone = nil }
            phoneController.refuseAccess(nil)
            phoneController.powerOn()
        @unknown default:
            break
        }
        runUntilIdle()
    }
    private var unsupportedPhone: LEHost?

    /// Changes the phone's Bluetooth state while the app runs: `.poweredOff` (links drop, the managers read
    /// `.poweredOff`), `.poweredOn` (back on), `.resetting` (the controller fails and is reset: links drop,
    /// then the managers are powered on again).
    public func simulateStateChange(_ state: CBManagerState) {
        switch state {
        case .poweredOff: phoneController.powerOff()
        case .poweredOn:
            phoneController.refuseAccess(nil)
            phoneController.powerOn()
        case .resetting: phoneController.raiseHardwareError()
        case .unauthorized: simulateAuthorization(.denied)
        case .unsupported, .unknown: phoneController.powerOff()
        @unknown default: break
        }
        runUntilIdle()
    }

    /// Sets what the app is allowed: `.denied` (or `.restricted`) makes the managers read `.unauthorized`
    /// and `CBManager.authorization` read `.denied`; `.allowedAlways` gives Bluetooth back. Linux asks no
    /// question, so `.notDetermined` reads as allowed.
    public func simulateAuthorization(_ authorization: CBManagerAuthorization) {
        switch authorization {
        case .denied, .restricted:
            phoneController.refuseAccess("Bluetooth access refused to the app (simulated)")
        default:
            phoneController.refuseAccess(nil)
        }
        // The host meets the refusal when it next opens its controller.
        powerCycle()
    }

    /// Switches the phone's controller off and on, letting the host see each step.
    private func powerCycle() {
        phoneController.powerOff()
        runUntilIdle()
        phoneController.powerOn()
        runUntilIdle()
    }

    /// The phone's controller reports a hardware error (Vol 4 Part E §7.7.16) and loses its state: links
    /// drop, the host resets it, and the managers go off and on again.
    public func simulateHardwareError(code: UInt8 = 0x01) {
        phoneController.raiseHardwareError(code: code)
        runUntilIdle()
    }

    // MARK: The air

    /// The probability (0…1) that an advertising packet is lost on its way to a scanner. Data on links is
    /// retransmitted by the link layer, so its loss shows as delay: give `airtime` a loss rate for that.
    public func simulateAdvertisingLoss(_ probability: Double) {
        air.setAdvertisingLoss(probability)
        runUntilIdle()
    }

    /// Models airtime on links (connection events, retransmission of lost packets with `lossRate`); links
    /// made after this call use it.
    public func simulateAirtime(lossRate: Double = 0, connectionIntervalMilliseconds: Double = 30) {
        loop.sync { air.airtime = AirtimeModel(connectionIntervalMilliseconds: connectionIntervalMilliseconds, lossRate: lossRate) }
    }

    /// Every link of the phone is lost on the spot (both sides report a connection timeout after the link's
    /// supervision timeout): a link lost in the middle of whatever procedure was running.
    public func simulateLinkLoss() {
        air.breakLinks(of: phoneController)
        runUntilIdle()
    }
}

/// A transport with no controller behind it (a phone without Bluetooth LE).
private final class NoController: HCITransport, @unchecked Sendable {
    func open(sink: any HCITransportSink) throws { throw TransportError.connectFailed("this device has no Bluetooth LE controller (simulated)") }
    func send(_ packet: HCIPacket) {}
    func close() {}
    var name: String { "none" }
}
