// Opening channels from a central (CBPeripheral.openL2CAPChannel) and publishing them from a peripheral
// manager (publishL2CAPChannel / unpublishL2CAPChannel), as CBPeripheral.h and CBPeripheralManager.h declare.
import Foundation
import BLEHost
import BLEL2CAP

extension CBPeripheral {
    /// Opens an L2CAP credit-based channel to `PSM` on the peripheral; the result arrives in
    /// `peripheral(_:didOpen:error:)`. A PSM the peripheral protects with encryption makes the link pair (or
    /// encrypt with the bond) first, transparently. Keep a strong reference to the channel: releasing it
    /// closes it.
    public func openL2CAPChannel(_ PSM: CBL2CAPPSM) {
        guard LEHost.dynamicPSMs.contains(PSM) || (0x0001...0x007F).contains(PSM) else {
            // Observed on iOS: a PSM outside the LE SPSM range is refused with CBError.invalidParameters.
            queue.async { [self] in delegate?.peripheral(self, didOpen: nil, error: CBError(.invalidParameters)) }
            return
        }
        if let b = bluez { return b.openL2CAPChannel(self, psm: PSM) }
        withConnection("openL2CAPChannel") { [self] c in
            guard let host = c.host else { return }
            c.openL2CAPChannel(psm: PSM) { [self] result in
                switch result {
                case let .success(channels):
                    let ch = CBL2CAPChannel(peer: self, channel: channels[0], loop: host.loop)
                    deliver { $0.peripheral(self, didOpen: ch, error: nil) }
                case let .failure(e):
                    deliver { $0.peripheral(self, didOpen: nil, error: e.cbError) }
                }
            }
        }
    }
}

extension CBPeripheralManager {
    /// Publishes a channel on a PSM the stack picks (reported in `didPublishL2CAPChannel`). With
    /// `encryptionRequired`, a central must pair (or encrypt with its bond) before it may open a channel.
    /// Channels centrals open arrive in `peripheralManager(_:didOpen:error:)`.
    public func publishL2CAPChannel(withEncryption encryptionRequired: Bool) {
        guard !misusedOutsidePoweredOn() else { return }
        if let bluez { return bluez.publishL2CAPChannel(encryption: encryptionRequired) }
        guard let host = leHost else { return }
        host.loop.execute { [self] in
            let psm = host.publishL2CAP(security: encryptionRequired ? .encryption() : .none) { [weak self] ch in
                guard let self, let c = ch.connection else { return ch.close() }
                let channel = CBL2CAPChannel(peer: central(for: c), channel: ch, loop: host.loop)
                queue.async { [self] in delegate?.peripheralManager(self, didOpen: channel, error: nil) }
            }
            queue.async { [self] in
                if let psm {
                    delegate?.peripheralManager(self, didPublishL2CAPChannel: psm, error: nil)
                } else {
                    delegate?.peripheralManager(self, didPublishL2CAPChannel: 0, error: CBError(.outOfSpace))
                }
            }
        }
    }

    /// Stops accepting channels on `PSM` and closes the channels open on it.
    public func unpublishL2CAPChannel(_ PSM: CBL2CAPPSM) {
        if let bluez { return bluez.unpublishL2CAPChannel(PSM) }
        guard let host = leHost else { return }
        host.loop.execute { [self] in
            let existed = host.unpublishL2CAP(psm: PSM)
            if existed {
                for (_, c) in host.connections where c.role == .peripheral {
                    for ch in c.l2capChannels where ch.psm == PSM { ch.close() }
                }
            }
            queue.async { [self] in
                delegate?.peripheralManager(self, didUnpublishL2CAPChannel: PSM, error: existed ? nil : CBError(.invalidParameters))
            }
        }
    }
}
