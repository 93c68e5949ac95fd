// LE privacy (Vol 3 Part C §10.7, Vol 6 Part B §1.3.2.2): while on, the host advertises, scans and connects
// from a resolvable private address made from its IRK and renews it on a timer, so that only bonded
// devices (which hold the IRK) can tell that two addresses are the same device. Peers' private addresses
// are resolved with the IRKs in the bond store (BondStore.bond(matching:)).
import BLEWire
import BLEHCI
import BLETransport

extension LEHost {
    /// The Own_Address_Type for advertising, scanning and connecting: random while privacy is on.
    var ownAddressType: UInt8 { currentPrivateAddress == nil ? 0 : 1 }

    /// Turns privacy on with a new RPA now and every `interval` (Core Spec default 15 minutes).
    public func enablePrivacy(rotatingEvery interval: LoopTime = .seconds(900), completion: @escaping (HostError?) -> Void = { _ in }) {
        loop.assertInLoop()
        guard powerState == .on else { return completion(.notPoweredOn) }
        privacyInterval = interval
        // On a controller without a public address, the static address stays our identity (key distribution).
        staticIdentityAddress = controllerStaticAddress
        rotatePrivateAddress(completion: completion)
    }

    /// Back to the identity address: the public one, or on a controller without one the static address
    /// the host uses for it.
    public func disablePrivacy() {
        loop.assertInLoop()
        loop.cancel(privacyTimer)
        privacyTimer = nil
        privacyInterval = nil
        staticIdentityAddress = nil
        if let s = controllerStaticAddress {
            // Queued after any LE Set Random Address of the privacy just ended, so it is the last one.
            setStaticRandomAddress(s)
            return
        }
        guard currentPrivateAddress != nil else { return }
        currentPrivateAddress = nil
        if let want = wantsAdvertising { startAdvertising(want) }
    }

    /// A new RPA: advertising and scanning pause around LE Set Random Address, which controllers refuse
    /// while either is enabled; while a connection is being initiated, the change waits a second.
    func rotatePrivateAddress(completion: @escaping (HostError?) -> Void = { _ in }) {
        loop.cancel(privacyTimer)
        privacyTimer = nil
        guard powerState == .on, let interval = privacyInterval else { return completion(.notPoweredOn) }
        if !initiatingFor.isEmpty {
            privacyTimer = loop.schedule(after: .seconds(1)) { [weak self] in self?.rotatePrivateAddress(completion: completion) }
            return
        }
        let rpa = PrivateAddress.make(irk: bondStore.localIRK)
        let wasScanning = isScanning
        // Advertising off whatever `isAdvertising` says (an enable may still be in flight): the controller refuses
        // LE Set Random Address while it advertises.
        if isAdvertising || wantsAdvertising != nil { command(advertisingEnableCommand(false)); isAdvertising = false }
        if wasScanning { command(scanEnableCommand(false)) }
        commandExpectingSuccess(.leSetRandomAddress(rpa)) { [self] e in
            // Unless privacy was turned off meanwhile (disablePrivacy decided the address since).
            if e == nil && privacyInterval != nil {
                currentPrivateAddress = rpa
                loggers.gap.debug("new resolvable private address", metadata: ["address": "\(rpa)"])
            }
            // Advertising parameters carry the own address type: set them again.
            if let want = wantsAdvertising { startAdvertising(want) }
            if wasScanning { restartScanningAfterAddressChange() }
            completion(e)
        }
        privacyTimer = loop.schedule(after: interval) { [weak self] in self?.rotatePrivateAddress() }
    }

    /// Uses a fixed random address (a static one, top bits 0b11, or any the application chooses) for
    /// advertising, scanning and connecting, without rotation.
    public func setStaticRandomAddress(_ address: BluetoothAddress, completion: @escaping (HostError?) -> Void = { _ in }) {
        loop.assertInLoop()
        loop.cancel(privacyTimer)
        privacyTimer = nil
        privacyInterval = nil
        let random = BluetoothAddress(bytes: address.bytes, type: .random)
        commandExpectingSuccess(.leSetRandomAddress(random)) { [self] e in
            if e == nil {
                currentPrivateAddress = random
                staticIdentityAddress = random.randomKind == .staticAddress ? random : nil
            }
            if let want = wantsAdvertising { startAdvertising(want) }
            completion(e)
        }
    }
}
