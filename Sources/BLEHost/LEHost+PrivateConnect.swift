// A pending connection to a bonded device that advertises from resolvable private addresses follows the
// device when its address changes. iOS has the controller do it (the resolving list, Vol 6 Part B §6); on a
// controller without it, or before it is filled, a direct LE Create Connection names one address, and a device
// that has moved to its next private address since it was last seen is never connected. So, as BlueZ does for
// such controllers, while the host initiates a connection to such a device it scans passively (when the app is
// not scanning anyway), resolves each connectable advertiser's address with the bond's IRK, and when the device
// shows up at another address, initiates again there. The app's peripheral and the pending connection keep the
// address they were asked with; the link carries the address it was made at.
import BLEWire
import BLEHCI

extension LEHost {
    /// The address to initiate at for a connection asked for `target`: where a bonded private device was last
    /// seen, or `target` itself. Loop.
    func initiationAddress(for target: BluetoothAddress) -> BluetoothAddress {
        privateTargetAddresses[target] ?? target
    }

    /// Loop: after a change of the initiation or of the app's scan, scans passively for a bonded device with an
    /// IRK being initiated directly, and stops that scan when nothing needs it.
    func updateConnectScan() {
        privateTargetAddresses = privateTargetAddresses.filter { pendingConnects.contains($0.key) || initiatingFor.contains($0.key) }
        followedPrivateTarget = nil
        if powerState == .on, initiatingFor.count == 1, let bond = bondStore.bond(matching: initiatingFor[0]), bond.keys.peerIRK != nil {
            followedPrivateTarget = initiatingFor[0]
        }
        if followedPrivateTarget != nil && !isScanning && !scanningForConnects {
            scanningForConnects = true
            loggers.gap.debug("scanning for a bonded private device being connected", metadata: ["address": "\(initiatingFor[0])"])
            commandExpectingSuccess(scanParametersCommand(active: false, interval: 0x0030, window: 0x0030)) { [self] e in
                guard scanningForConnects else { return }
                if e != nil { scanningForConnects = false; return }
                command(scanEnableCommand(true))
            }
        } else if followedPrivateTarget == nil && scanningForConnects {
            scanningForConnects = false
            if !isScanning { command(scanEnableCommand(false)) }
        }
    }

    /// Loop: a connectable advertiser at `address` while `followedPrivateTarget` is being initiated: if the bond's
    /// IRK resolves it and it is not where the initiation waits, the initiation starts again at that address.
    func followPrivateTarget(seenAt address: BluetoothAddress) {
        guard let target = followedPrivateTarget, initiatingFor == [target], address.randomKind == .resolvablePrivate,
            !connectCancelRequested, !connectRegroupRequested, !connectRotationRequested
        else { return }
        let current = initiationAddress(for: target)
        guard address.bytes != current.bytes, let bond = bondStore.bond(matching: target), bond.resolves(address) else { return }
        loggers.gap.debug("bonded device moved to a new private address; initiating there", metadata: ["was": "\(current)", "now": "\(address)"])
        privateTargetAddresses[target] = address
        regroupConnects()
    }
}
