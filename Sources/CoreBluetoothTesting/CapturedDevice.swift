// CapturedDevice: a real device as a btsnoop capture saw it (record once with BLE_SNOOP=FILE, or
// `HostFactory.makeHost(on:capture:)`, against the real thing), rebuilt for replay: its advertising data and
// scan response, its GATT database with the very same handles (services, includes, characteristic
// declarations, descriptors, and every value that was read), the values each read returned in order, and
// the notifications and indications it sent, with their timing after the subscription.
//
// How it reads the capture: HCI events and ACL data are decoded with our own codecs; ACL fragments are
// reassembled per connection and direction into L2CAP frames, and the ATT channel's PDUs are paired, request
// with response (ATT has one transaction at a time per direction, Vol 3 Part F §3.3.2). The capture may come
// from either side: when our host was the central, the device's PDUs are the ones from the controller; when
// it was the peripheral (the device was us), they are the ones to it. Only what the capture shows can be
// replayed: an attribute never discovered is absent, a value never read is empty.
import Foundation
import BLEWire
import BLEHCI
import BLEL2CAP
import BLEATT
import BLEGATT
import BLETransport

public struct CapturedDevice: Sendable {
    /// One notification or indication the device sent.
    public struct Update: Sendable, Equatable {
        public var handle: UInt16
        public var value: [UInt8]
        public var isIndication: Bool
        /// Microseconds since the capture's first packet.
        public var time: UInt64
    }

    /// The device's address as the capture saw it.
    public var address: BluetoothAddress
    public var advertisingData: [UInt8] = []
    public var scanResponse: [UInt8] = []
    /// Seconds between the device's advertisements, as far as the capture shows (nil: unknown).
    public var advertisingInterval: TimeInterval?
    /// The database, attribute by attribute.
    public var database: AttributeTable
    /// The complete values each read returned, per handle, in order (long reads reassembled).
    public var reads: [UInt16: [[UInt8]]] = [:]
    /// Notifications and indications, in the order sent.
    public var updates: [Update] = []
    /// When the central subscribed to each value handle (µs since the capture began).
    public var subscriptionTimes: [UInt16: UInt64] = [:]
    /// The device's ATT_MTU (its Exchange MTU answer).
    public var mtu: UInt16?

    public enum CaptureError: Error, Equatable, CustomStringConvertible {
        case noConnection
        case deviceNotFound(String)
        public var description: String {
            switch self {
            case .noConnection: return "the capture holds no connection to a device"
            case let .deviceNotFound(a): return "the capture holds no connection to \(a)"
            }
        }
    }

    /// Reads a capture file; `device` picks the connection to replay (the first one otherwise).
    public init(capture path: String, device: BluetoothAddress? = nil) throws {
        try self.init(records: BTSnoopReader.read(path: path), device: device)
    }

    public init(records: [BTSnoopRecord], device: BluetoothAddress? = nil) throws {
        var parser = CaptureParser()
        for r in records { parser.feed(r) }
        guard let link = parser.links.first(where: { device == nil || $0.peer.bytes == device!.bytes }) else {
            throw device.map { CaptureError.deviceNotFound($0.string) } ?? CaptureError.noConnection
        }
        address = link.peer
        if link.role == 1 {
            advertisingData = parser.ownAdvertising
            scanResponse = parser.ownScanResponse
        } else {
            advertisingData = parser.advertising[link.peer.bytes] ?? []
            scanResponse = parser.scanResponses[link.peer.bytes] ?? []
            let times = parser.advertisingTimes[link.peer.bytes] ?? []
            let gaps = zip(times.dropFirst(), times).map { $0 - $1 }.filter { $0 > 0 }.sorted()
            if let median = gaps.isEmpty ? nil : gaps[gaps.count / 2] { advertisingInterval = min(max(Double(median) / 1e6, 0.02), 10.24) }
        }
        let a = link.att
        var attributes: [UInt16: CapturedAttribute] = [:]
        for (start, s) in a.services {
            attributes[start] = CapturedAttribute(handle: start, type: s.primary ? .primaryService : .secondaryService, value: s.uuid)
        }
        for (h, v) in a.declarations { attributes[h] = CapturedAttribute(handle: h, type: v.type, value: v.value) }
        // Value attributes from the characteristic declarations.
        for (_, v) in a.declarations where v.type == .characteristic && (v.value.count == 5 || v.value.count == 19) {
            let valueHandle = UInt16(v.value[1]) | UInt16(v.value[2]) << 8
            if let u = try? BluetoothUUID(littleEndianBytes: v.value[3...]), attributes[valueHandle] == nil || attributes[valueHandle]?.type == u {
                attributes[valueHandle] = CapturedAttribute(handle: valueHandle, type: u, value: nil)
            }
        }
        for (h, t) in a.types where attributes[h] == nil { attributes[h] = CapturedAttribute(handle: h, type: t, value: nil) }
        for (h, list) in a.reads { attributes[h]?.value = list.first }
        database = AttributeTable(attributes: Array(attributes.values), serviceEnds: a.services.mapValues(\.end))
        reads = a.reads
        updates = a.updates.map { Update(handle: $0.handle, value: $0.value, isIndication: $0.indication, time: $0.time - parser.origin) }
        subscriptionTimes = a.subscriptions.mapValues { $0 - parser.origin }
        mtu = a.serverMTU
    }

    /// The device's GAP name: its Device Name characteristic as read, else the advertised local name.
    public var name: String? {
        if let a = database.attributes.first(where: { $0.type == .deviceName }), let v = a.value { return String(decoding: v, as: UTF8.self) }
        for data in [advertisingData, scanResponse] {
            let ad = AdvertisingDataReader(data)
            if let n = ad.localName { return n }
        }
        return nil
    }

    /// A spec that replays this device: same advertising bytes, same database and handles, each read
    /// answering the captured values in order, and the captured notifications sent at their captured pace
    /// after a central subscribes.
    public func spec(proximity: Proximity = .immediate) throws -> PeripheralSpec {
        var s = PeripheralSpec()
        s.name = name
        s.proximity = proximity
        s.advertising = PeripheralSpec.Advertising(
            data: advertisingData, scanResponse: scanResponse, interval: advertisingInterval ?? 0.1,
            delay: 0, alsoWhenConnected: false, isConnectable: true)
        s.isConnectable = true
        s.includesDefaultServices = false
        s.services = try database.serviceDefinitions()
        s.mtu = mtu ?? 517
        s.recordedValues = reads
        var byHandle: [UInt16: [(after: TimeInterval, value: [UInt8], indication: Bool)]] = [:]
        for u in updates {
            let start = subscriptionTimes[u.handle] ?? updates.first { $0.handle == u.handle }!.time
            byHandle[u.handle, default: []].append((Double(u.time >= start ? u.time - start : 0) / 1e6, u.value, u.isIndication))
        }
        s.recordedUpdates = byHandle
        return s
    }
}

/// Local name from advertising data (Vol 3 Part C §11; Supplement Part A §1.2).
struct AdvertisingDataReader {
    var structures: [(type: UInt8, data: [UInt8])] = []
    init(_ bytes: [UInt8]) {
        var i = 0
        while i < bytes.count {
            let len = Int(bytes[i])
            guard len > 0, i + 1 + len <= bytes.count else { break }
            structures.append((bytes[i + 1], Array(bytes[(i + 2)..<(i + 1 + len)])))
            i += 1 + len
        }
    }
    var localName: String? {
        (structures.first { $0.type == 0x09 } ?? structures.first { $0.type == 0x08 }).map { String(decoding: $0.data, as: UTF8.self) }
    }
}

/// What the capture says about one connection's ATT traffic, from the device's side.
struct CapturedATT {
    var services: [UInt16: (uuid: [UInt8], end: UInt16, primary: Bool)] = [:]
    /// Include and characteristic declarations, and other attributes read by type.
    var declarations: [UInt16: (type: BluetoothUUID, value: [UInt8])] = [:]
    /// Attribute types from Find Information.
    var types: [UInt16: BluetoothUUID] = [:]
    var reads: [UInt16: [[UInt8]]] = [:]
    var updates: [(handle: UInt16, value: [UInt8], indication: Bool, time: UInt64)] = []
    var subscriptions: [UInt16: UInt64] = [:]
    var serverMTU: UInt16?
    /// The client's outstanding request (one at a time, Vol 3 Part F §3.3.2).
    var pending: ATTPDU?

    mutating func fromClient(_ pdu: ATTPDU, time: UInt64) {
        switch pdu {
        case let .writeRequest(w): noteWrite(w.handle, w.value, time)
        case let .writeCommand(w): noteWrite(w.handle, w.value, time)
        default:
            // Requests have an even opcode without the command flag (Vol 3 Part F §3.3.1); the client's
            // answers to the device's own requests are no requests.
            let op = pdu.opcode.rawValue
            if op & 0x01 == 0 && op & 0x40 == 0 && op != 0x1E { pending = pdu }
        }
    }

    private mutating func noteWrite(_ handle: UInt16, _ value: [UInt8], _ time: UInt64) {
        // A Client Characteristic Configuration write with notify or indicate set: the subscription to the
        // value just before it (CCCDs follow their value attribute; the type confirms it when known).
        guard types[handle] == nil || types[handle] == .clientCharacteristicConfiguration, value.count == 2, value[0] & 0x03 != 0 else { return }
        if let valueHandle = characteristicValue(containing: handle), subscriptions[valueHandle] == nil { subscriptions[valueHandle] = time }
    }

    private func characteristicValue(containing handle: UInt16) -> UInt16? {
        declarations.filter { $0.value.type == .characteristic && $0.key < handle }.max { $0.key < $1.key }
            .flatMap { d in d.value.value.count >= 3 ? UInt16(d.value.value[1]) | UInt16(d.value.value[2]) << 8 : nil }
    }

    mutating func fromServer(_ pdu: ATTPDU, time: UInt64) {
        switch pdu {
        case let .handleValueNotification(n): updates.append((n.handle, n.value, false, time)); return
        case let .handleValueIndication(n): updates.append((n.handle, n.value, true, time)); return
        default: break
        }
        // Only responses (odd opcodes) answer the client; the device's own requests are not replayed.
        guard pdu.opcode.rawValue & 0x01 == 1, let request = pending else { return }
        pending = nil
        switch (request, pdu) {
        case let (.readByGroupTypeRequest(q), .readByGroupTypeResponse(r)):
            let primary = q.attributeGroupType == .primaryService
            guard primary || q.attributeGroupType == .secondaryService else { return }
            for g in r.attributeDataList { services[g.handle] = (g.value, g.endGroupHandle, primary) }
        case let (.findByTypeValueRequest(q), .findByTypeValueResponse(r)) where q.attributeType == 0x2800 || q.attributeType == 0x2801:
            for h in r.handlesInformationList { services[h.foundAttributeHandle] = (q.attributeValue, h.groupEndHandle, q.attributeType == 0x2800) }
        case let (.readByTypeRequest(q), .readByTypeResponse(r)):
            for d in r.attributeDataList {
                if q.attributeType == .include || q.attributeType == .characteristic {
                    declarations[d.handle] = (q.attributeType, d.value)
                } else {
                    types[d.handle] = q.attributeType
                    reads[d.handle, default: []].append(d.value)
                }
            }
        case let (.findInformationRequest, .findInformationResponse(r)):
            for i in r.information { types[i.handle] = i.uuid }
        case let (.readRequest(q), .readResponse(r)):
            reads[q.handle, default: []].append(r.value)
        case let (.readBlobRequest(q), .readBlobResponse(r)):
            // A long read continues the value its Read Request began.
            var list = reads[q.handle] ?? [[]]
            var v = list.removeLast()
            if v.count >= Int(q.offset) { v = Array(v.prefix(Int(q.offset))) + r.partValue }
            list.append(v)
            reads[q.handle] = list
        case let (.exchangeMTURequest, .exchangeMTUResponse(r)):
            serverMTU = r.serverRxMTU
        default:
            break
        }
    }
}

/// Walks the capture's packets.
struct CaptureParser {
    struct Link {
        var handle: UInt16
        var peer: BluetoothAddress
        /// 0: the capturing host was the central; 1: it was the peripheral.
        var role: UInt8
        var att = CapturedATT()
        var toHost = L2CAPRecombiner(maximumFrameLength: 65_535 + 4)
        var toController = L2CAPRecombiner(maximumFrameLength: 65_535 + 4)
    }
    var links: [Link] = []
    var open: [UInt16: Int] = [:]   // connection handle → index in links
    var advertising: [[UInt8]: [UInt8]] = [:]
    var scanResponses: [[UInt8]: [UInt8]] = [:]
    var advertisingTimes: [[UInt8]: [UInt64]] = [:]
    var ownAdvertising: [UInt8] = []
    var ownScanResponse: [UInt8] = []
    var origin: UInt64 = 0
    private var started = false

    mutating func feed(_ r: BTSnoopRecord) {
        if !started { origin = r.timestampMicros; started = true }
        switch r.packet.type {
        case .event:
            guard let e = try? HCIEvent.decode(r.packet) else { return }
            event(e, time: r.timestampMicros)
        case .command:
            guard let c = try? HCICommand.decode(r.packet) else { return }
            switch c {
            case let .leSetAdvertisingData(d): ownAdvertising = d
            case let .leSetScanResponseData(d): ownScanResponse = d
            default: break
            }
        case .acl:
            guard let acl = try? ACLPacket.decode(r.packet), let i = open[acl.handle] else { return }
            let boundary: L2CAPFragment.Boundary = acl.boundary == .continuing ? .continuing : .first
            let toHost = r.direction == .controllerToHost
            let frame: L2CAPFrame?
            if toHost { frame = try? links[i].toHost.append(acl.data, boundary: boundary) } else { frame = try? links[i].toController.append(acl.data, boundary: boundary) }
            guard let frame, frame.channelID == .att, let pdu = try? ATTPDU.decode(frame.payload) else { return }
            // The device's side: from the controller when the capturing host was the central.
            let fromDevice = toHost == (links[i].role == 0)
            if fromDevice { links[i].att.fromServer(pdu, time: r.timestampMicros) } else { links[i].att.fromClient(pdu, time: r.timestampMicros) }
        default:
            break
        }
    }

    private mutating func event(_ e: HCIEvent, time: UInt64) {
        switch e {
        case let .le(.advertisingReport(reports)):
            for a in reports {
                if a.eventType == .scanRsp {
                    scanResponses[a.address.bytes] = a.data
                } else {
                    advertising[a.address.bytes] = a.data
                    advertisingTimes[a.address.bytes, default: []].append(time)
                }
            }
        case let .le(.connectionComplete(c)) where c.status == .success:
            connected(c.connectionHandle, BluetoothAddress(bytes: c.peerAddress.bytes, type: c.peerAddressType & 1 == 1 ? .random : .public), c.role)
        case let .le(.enhancedConnectionComplete(c)) where c.status == .success:
            connected(c.connectionHandle, BluetoothAddress(bytes: c.peerAddress.bytes, type: c.peerAddressType & 1 == 1 ? .random : .public), c.role)
        case let .disconnectionComplete(status, handle, _) where status == .success:
            open[handle] = nil
        default:
            break
        }
    }

    private mutating func connected(_ handle: UInt16, _ peer: BluetoothAddress, _ role: UInt8) {
        links.append(Link(handle: handle, peer: peer, role: role))
        open[handle] = links.count - 1
    }
}
