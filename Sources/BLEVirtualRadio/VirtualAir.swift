// The simulated air shared by virtual controllers.
//
// Threading contract: every controller's link-layer state lives on the air's loop. Hosts in the same
// process share that loop (so a test on a virtual clock is deterministic end to end); packets from other
// threads (the radio server's sockets) are moved onto it with `loop.execute`. Randomness (advertising
// delays, LE Rand) comes from a seeded generator, so runs on the virtual clock repeat exactly.
import Foundation
import BLEWire
import BLETransport

/// A position in metres.
public struct VirtualPosition: Sendable, Equatable {
    public var x: Double
    public var y: Double
    public var z: Double
    public init(x: Double, y: Double, z: Double = 0) { self.x = x; self.y = y; self.z = z }
    public static let origin = VirtualPosition(x: 0, y: 0, z: 0)

    public func distance(to o: VirtualPosition) -> Double {
        ((x - o.x) * (x - o.x) + (y - o.y) * (y - o.y) + (z - o.z) * (z - o.z)).squareRoot()
    }
}

/// SplitMix64: small, fast, seedable.
struct SeededRandom: Sendable {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func next(below n: UInt64) -> UInt64 { n == 0 ? 0 : next() % n }
}

public final class VirtualAir: @unchecked Sendable {
    public let loop: EventLoop
    /// The process-wide air (real clock) that managers use when `BLE_TRANSPORT` is unset or `virtual`.
    public static let shared = VirtualAir(loop: EventLoop(label: "ble.virtual-air", clock: .real))

    /// Transmit power assumed for every advertiser, in dBm, and the path loss at 1 m.
    public var txPower: Double = 0
    public var pathLossAt1m: Double = 40
    /// Airtime model: nil delivers ACL data at once; a model makes links move data in connection events
    /// with its event length and loss rate (each link's PHY, data length and interval come from the link).
    /// Set it before connections are made.
    public var airtime: AirtimeModel?

    private let addressCounter = Locked<UInt32>(0)
    // Loop-confined.
    var controllers: [VirtualController] = []
    var scanners: [VirtualController] = []
    var initiators: [VirtualController] = []
    var rng: SeededRandom
    /// Faults a test has switched on (VirtualAir+Faults.swift).
    var faults = AirFaults()

    func listening(_ c: VirtualController, scanning on: Bool) {
        if on { scanners.append(c) } else { scanners.removeAll { $0 === c } }
    }

    func listening(_ c: VirtualController, initiating on: Bool) {
        if on { initiators.append(c) } else { initiators.removeAll { $0 === c } }
    }

    public init(loop: EventLoop = EventLoop(label: "ble.virtual-air", clock: .real), seed: UInt64 = 0x0CB_0CB) {
        self.loop = loop
        self.rng = SeededRandom(seed: seed)
    }

    /// Adds a controller (callable from any thread). Without an address, a unique public one is made.
    /// Without a position, devices are placed one metre apart along the x axis.
    public func addController(address: BluetoothAddress? = nil, position: VirtualPosition? = nil) -> VirtualController {
        let n = addressCounter.withLock { c -> UInt32 in
            c += 1; return c
        }
        let position = position ?? VirtualPosition(x: Double(n), y: 0, z: 0)
        let addr = address ?? BluetoothAddress(bytes: [UInt8(n & 0xFF), UInt8((n >> 8) & 0xFF), UInt8((n >> 16) & 0xFF), 0x5A, 0xB1, 0x0C], type: .public)
        let c = VirtualController(air: self, address: addr, position: position)
        if loop.isInLoop { controllers.append(c) } else { loop.execute { self.controllers.append(c) } }
        return c
    }

    /// Takes a controller off the air: its links drop (peers time out), and its host sees the transport close.
    public func remove(_ controller: VirtualController) {
        let work: @Sendable () -> Void = { [self] in
            controller.leaveAir(reason: .removed)
            controllers.removeAll { $0 === controller }
        }
        if loop.isInLoop { work() } else { loop.execute(work) }
    }

    /// The RSSI one controller measures from another, from a log-distance path-loss model.
    func rssi(from a: VirtualController, to b: VirtualController) -> Int8 {
        let d = max(a.position.distance(to: b.position), 0.1)
        let v = txPower - (pathLossAt1m + 20 * log10(d))
        return Int8(max(-127, min(20, v.rounded())))
    }

    func controller(at address: BluetoothAddress) -> VirtualController? {
        controllers.first { $0.address.bytes == address.bytes && $0.isPoweredOn }
    }
}
