// Service Changed (Vol 3 Part G §7.1), as iOS handles it for the app: after connecting, the stack finds the
// peer's Service Changed characteristic and enables its indications; an indication invalidates the
// discovered services in the affected range and calls peripheral(_:didModifyServices:).
import Foundation
import BLEWire
import BLEGATT
import BLEHost

extension CBPeripheral {
    /// Loop: subscribes to the peer's Service Changed indications, quietly (no app callbacks).
    package func watchServiceChanged(on c: HostConnection) {
        c.gatt(.discoverPrimaryServices(uuid: .gattService)) { [weak self, weak c] r in
            guard let self, let c, case let .success(.services(found)) = r, let gatt = found.first else { return }
            c.gatt(.discoverCharacteristics(start: gatt.handle, end: gatt.endHandle, uuid: nil)) { [weak self, weak c] r in
                guard let self, let c, case let .success(.characteristics(chars)) = r,
                      let i = chars.firstIndex(where: { $0.uuid == .serviceChanged }) else { return }
                let sc = chars[i]
                let end = i + 1 < chars.count ? chars[i + 1].declarationHandle - 1 : gatt.endHandle
                self.serviceChangedHandle = sc.valueHandle
                guard sc.valueHandle < end else { return }
                c.gatt(.discoverDescriptors(start: sc.valueHandle + 1, end: end)) { [weak c] r in
                    guard let c, case let .success(.descriptors(ds)) = r,
                          let cccd = ds.first(where: { $0.uuid == .clientCharacteristicConfiguration }) else { return }
                    c.gatt(.write(handle: cccd.handle, value: [0x02, 0x00])) { _ in }
                }
            }
        }
    }

    /// Loop: a Service Changed indication with the affected handle range.
    package func serviceChanged(_ value: [UInt8]) {
        guard value.count >= 4 else { return }
        let start = UInt16(value[0]) | UInt16(value[1]) << 8
        let end = UInt16(value[2]) | UInt16(value[3]) << 8
        queue.async { [self] in
            guard state == .connected else { return }
            let all = services ?? []
            let invalid = all.filter { $0.handle <= end && $0.endHandle >= start }
            guard !invalid.isEmpty || start <= end else { return }
            setServices(all.filter { s in !invalid.contains { $0 === s } })
            delegate?.peripheral(self, didModifyServices: invalid)
        }
    }
}
