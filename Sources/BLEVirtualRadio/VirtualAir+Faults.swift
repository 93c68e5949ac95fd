// Faults on the simulated air, for tests (CoreBluetoothTesting drives them): a receiver sensitivity that
// puts distant devices out of range, advertising packets lost at random, a link broken on the spot (both
// sides find out after their supervision timeout, as after a real loss), a device whose data stops reaching
// its peers while its link layer still acknowledges (a peer that stops answering: the other side's ATT
// transaction times out), and a controller hardware error.
//
// Threading: the fault state is confined to the air's loop like the rest of the link layer; the public
// methods may be called from any thread and hop onto the loop. Random losses draw from the air's seeded
// generator, and only while a loss rate is set, so runs without faults draw exactly as before.
import Foundation
import BLEHCI
import BLETransport

/// The faults switched on for an air (loop-confined).
struct AirFaults {
    /// Signals weaker than this (dBm) are not received; nil: every device hears every other.
    var sensitivity: Double?
    /// The probability that one advertising PDU (or scan response) is lost on its way to one scanner.
    var advertisingLoss: Double = 0
    // A silenced controller (its ACL data lost on the air, its links up) carries its own flag,
    // `VirtualController.silenced`: the ACL path reads it for every packet without going to the air.
}

extension VirtualAir {
    /// The received signal strength of `a` at `b`, in dBm, before rounding (log-distance path loss).
    func signal(from a: VirtualController, to b: VirtualController) -> Double {
        let d = max(a.position.distance(to: b.position), 0.1)
        return txPower - (pathLossAt1m + 20 * log10(d))
    }

    /// Whether `b` hears `a` at all (range), regardless of random loss.
    func inRange(_ a: VirtualController, _ b: VirtualController) -> Bool {
        guard let s = faults.sensitivity else { return true }
        return signal(from: a, to: b) >= s
    }

    /// Whether one advertising PDU from `a` reaches `b`: in range, and not lost.
    func delivers(from a: VirtualController, to b: VirtualController) -> Bool {
        guard inRange(a, b) else { return false }
        let p = faults.advertisingLoss
        guard p > 0 else { return true }
        return Double(rng.next(below: 1_000_000)) / 1_000_000 >= p
    }

    private func onLoop(_ work: @escaping @Sendable () -> Void) {
        if loop.isInLoop { work() } else { loop.execute(work) }
    }

    /// Sets the receiver sensitivity in dBm (nil: unlimited range). Links between devices that no longer
    /// hear each other are lost (after their supervision timeout).
    public func setReceiverSensitivity(_ dBm: Double?) {
        onLoop { [self] in
            faults.sensitivity = dBm
            dropLinksOutOfRange()
        }
    }

    /// Sets the probability (0…1) that an advertising PDU is lost on its way to a scanner.
    public func setAdvertisingLoss(_ probability: Double) {
        let p = min(max(probability, 0), 1)
        onLoop { [self] in faults.advertisingLoss = p }
    }

    /// Moves a device; its links to devices now out of range are lost (after their supervision timeout).
    public func move(_ controller: VirtualController, to position: VirtualPosition) {
        controller.position = position
        onLoop { [self] in dropLinksOutOfRange() }
    }

    /// Loses the links of `controller` (those to `peer` only, when given) as if the radio path vanished:
    /// both controllers report Connection Timeout after the link's supervision timeout.
    public func breakLinks(of controller: VirtualController, to peer: VirtualController? = nil) {
        onLoop { controller.breakLinks(to: peer) }
    }

    /// Loses (true) or restores (false) every ACL packet `controller` sends; its links stay up, so the
    /// peers see a device that stops answering.
    public func silence(_ controller: VirtualController, _ on: Bool = true) {
        onLoop { controller.silenced = on }
    }

    /// Checks every link against the sensitivity.
    func dropLinksOutOfRange() {
        guard faults.sensitivity != nil else { return }
        for c in controllers where c.isPoweredOn {
            for (_, link) in c.links where !link.lost {
                if let peer = link.peer, !inRange(c, peer) || !inRange(peer, c) { c.breakLinks(to: peer) }
            }
        }
    }
}

extension VirtualController {
    /// Both ends of each matching link lose it: the link layer stops hearing the peer, and each side reports
    /// Connection Timeout when its supervision timeout runs out (Vol 6 Part B §4.5.2).
    func breakLinks(to other: VirtualController?) {
        for (handle, link) in links where !link.lost {
            guard let peer = link.peer, other == nil || peer === other else { continue }
            peer.peerLost(link.peerHandle)
            peerLost(handle)
        }
    }

    /// The controller fails: it sends Hardware Error (Vol 4 Part E §7.7.16) and loses its state (links drop,
    /// peers time out; advertising and scanning stop) until the host resets it.
    public func raiseHardwareError(code: UInt8 = 0x01) {
        let work: @Sendable () -> Void = { [self] in
            guard isPoweredOn else { return }
            resetState()
            deliver(.hardwareError(code))
        }
        if loop.isInLoop { work() } else { loop.execute(work) }
    }

    /// While `reason` is set, opening this controller fails as an operating system's refusal does
    /// (TransportError.permissionDenied: an HCI user channel without CAP_NET_ADMIN); nil lifts it.
    /// A host already using the controller is unaffected until it opens it again.
    public func refuseAccess(_ reason: String?) {
        refusal.withLock { $0 = reason }
    }

    var accessRefusal: TransportError? {
        refusal.withLock { $0 }.map { TransportError.permissionDenied($0) }
    }
}
