// How iOS packs what CBPeripheralManager.startAdvertising honours (a local name and service UUIDs) into
// legacy advertising (Core Bluetooth Programming Guide: 28 octets after the flags; the name can move to
// the scan response; UUIDs that do not fit go to an "overflow" area).
//
// Rules chosen here:
// 1. The advertising packet starts with Flags (LE General Discoverable, BR/EDR not supported).
// 2. Service UUIDs follow, grouped by width (16-bit, then 32-bit expanded to 128, then 128-bit), each in
//    a "complete" list; if not all UUIDs of a width fit, the list becomes "incomplete" and the rest
//    overflows to the scan response, and whatever fits in neither packet is returned as overflow.
// 3. The local name goes into the advertising packet if it fits whole; otherwise into the scan response
//    (complete if it fits there, else shortened on a UTF-8 character boundary).
import BLEWire

public enum AdvertisingPacker {
    public struct Result: Sendable, Equatable {
        public var advertisingData: [UInt8]
        public var scanResponseData: [UInt8]
        public var overflowServiceUUIDs: [BluetoothUUID]
    }

    public static let maximumLength = 31

    public static func pack(localName: String?, serviceUUIDs: [BluetoothUUID]) -> Result {
        var adv = AdvertisingData([ADStructure(type: .flags, data: [ADFlags.leGeneralDiscoverable.union(.brEdrNotSupported).rawValue])])
        var rsp = AdvertisingData()
        var overflow: [BluetoothUUID] = []

        let short = serviceUUIDs.filter { $0.uuid16 != nil }.map(\.shortened)
        let long = serviceUUIDs.filter { $0.uuid16 == nil }.map(\.expanded)
        for (list, complete, incomplete, width) in [
            (short, ADType.completeList16, ADType.incompleteList16, 2),
            (long, ADType.completeList128, ADType.incompleteList128, 16),
        ] where !list.isEmpty {
            var rest = list[...]
            for packet in [0, 1] {
                guard !rest.isEmpty else { break }
                let used = packet == 0 ? adv.encode().count : rsp.encode().count
                let room = (maximumLength - used - 2) / width
                guard room > 0 else { continue }
                let take = rest.prefix(room)
                rest = rest.dropFirst(take.count)
                let type = rest.isEmpty && packet == 0 ? complete : incomplete
                let s = ADStructure(type: type, data: take.flatMap(\.littleEndianBytes))
                if packet == 0 { adv.structures.append(s) } else { rsp.structures.append(s) }
            }
            overflow += rest
        }

        if let name = localName, !name.isEmpty {
            let bytes = Array(name.utf8)
            if adv.encode().count + 2 + bytes.count <= maximumLength {
                adv.structures.append(ADStructure(type: .completeLocalName, data: bytes))
            } else {
                let room = maximumLength - rsp.encode().count - 2
                if bytes.count <= room {
                    rsp.structures.append(ADStructure(type: .completeLocalName, data: bytes))
                } else if room > 0 {
                    rsp.structures.append(ADStructure(type: .shortenedLocalName, data: utf8Prefix(name, maxBytes: room)))
                }
            }
        }
        return Result(advertisingData: adv.encode(), scanResponseData: rsp.encode(), overflowServiceUUIDs: overflow)
    }

    /// The longest prefix of `s` whose UTF-8 form fits in `maxBytes`, cut on a character boundary.
    static func utf8Prefix(_ s: String, maxBytes: Int) -> [UInt8] {
        var out: [UInt8] = []
        for ch in s {
            let b = Array(String(ch).utf8)
            if out.count + b.count > maxBytes { break }
            out += b
        }
        return out
    }
}
