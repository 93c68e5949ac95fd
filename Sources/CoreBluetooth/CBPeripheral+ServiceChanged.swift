// Service Changed (Vol 3 Part G §7.1), as iOS handles it for the app: after connecting, the stack finds the
// peer's Service Changed characteristic and enables its indications, once per link (SharedLink); an
// indication invalidates the discovered services in the affected range and calls
// peripheral(_:didModifyServices:) on every peripheral object using the link.
import Foundation
import BLEWire
import BLEGATT
import BLEHost

extension CBPeripheral {
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
