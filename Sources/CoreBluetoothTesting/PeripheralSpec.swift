// PeripheralSpec: what a simulated peripheral is, declared in the manner of CoreBluetoothMock's
// CBMPeripheralSpec — advertising (data, interval, delay, also when connected), connectable with services
// (Core Bluetooth's own CBMutableService/CBMutableCharacteristic), connection interval and MTU — plus the
// handlers that answer reads, writes, subscriptions and L2CAP channels with data, an ATT error, a delay or
// silence. A spec can also come from a `ble serve` JSON file (PeripheralSpec+File.swift) or from a btsnoop
// capture of a real device (CapturedDevice.swift).
import Foundation
import BLEWire
import BLEATT
import BLEGATT
import BLEGAP
@preconcurrency import CoreBluetooth

/// How far a simulated peripheral is from the phone, as CoreBluetoothMock's CBMProximity.
public enum Proximity: Sendable, Equatable {
    /// About 1 m away: RSSI about −40 dBm.
    case immediate
    /// About 30 m away: RSSI about −70 dBm.
    case near
    /// About 300 m away, at the edge of range: RSSI about −90 dBm.
    case far
    /// Out of range: no advertisement is received, a connection cannot be made, and a link is lost after its
    /// supervision timeout.
    case outOfRange

    /// The distance from the phone, in metres (log-distance path loss, 40 dB at 1 m, exponent 2).
    public var distance: Double {
        switch self {
        case .immediate: return 1
        case .near: return 31.6
        case .far: return 316
        case .outOfRange: return 1_000_000
        }
    }
}

/// A read a simulated peripheral received.
public struct SimulatedReadRequest: Sendable {
    public let service: CBUUID
    public let characteristic: CBUUID
    /// The value attribute's handle.
    public let handle: UInt16
    /// The offset of a long read (Read Blob); 0 for a plain read.
    public let offset: Int
    /// The value the peripheral holds now.
    public let currentValue: Data
}

/// How a simulated peripheral answers a read.
public enum SimulatedReadResponse: Sendable {
    /// This value (the part from the request's offset on is sent).
    case value(Data)
    /// An ATT error response.
    case error(CBATTError.Code)
    /// The answer, after this many seconds of virtual time.
    indirect case delayed(TimeInterval, SimulatedReadResponse)
    /// No answer at all: the central's ATT transaction times out after 30 s and the link is dropped.
    case noResponse
}

/// A write a simulated peripheral received.
public struct SimulatedWriteRequest: Sendable {
    public let service: CBUUID
    public let characteristic: CBUUID
    public let handle: UInt16
    public let offset: Int
    public let value: Data
    /// False for a write without response (a Write Command): whatever the handler answers is not sent.
    public let withResponse: Bool
}

/// How a simulated peripheral answers a write.
public enum SimulatedWriteResponse: Sendable {
    /// Accepted (the value is stored).
    case success
    /// Refused with an ATT error.
    case error(CBATTError.Code)
    indirect case delayed(TimeInterval, SimulatedWriteResponse)
    case noResponse
}

/// How a simulated peripheral answers an L2CAP channel opened to one of its PSMs.
public enum SimulatedChannelResponse: Sendable {
    /// Accept; the closure gets the open channel.
    case accept
    /// Accept after this many seconds (the opener waits).
    case delayed(TimeInterval)
}

public struct PeripheralSpec: Sendable {
    /// Advertising as CBMAdvertisementConfig describes it.
    public struct Advertising: Sendable {
        /// The advertising PDU's data and the scan response, as sent on the air.
        public var data: [UInt8]
        public var scanResponse: [UInt8]
        /// Seconds between advertising events (20 ms … 10.24 s).
        public var interval: TimeInterval
        /// Seconds before the first advertisement.
        public var delay: TimeInterval
        /// Keep advertising (connectable) while connected.
        public var alsoWhenConnected: Bool
        public var isConnectable: Bool
    }

    public typealias ReadHandler = @Sendable (SimulatedReadRequest) -> SimulatedReadResponse
    public typealias WriteHandler = @Sendable (SimulatedWriteRequest) -> SimulatedWriteResponse
    public typealias SubscriptionHandler = @Sendable (_ characteristic: CBUUID, _ enabled: Bool) -> Void
    public typealias ChannelHandler = @Sendable (SimulatedL2CAPChannel) -> Void

    /// The GAP device name (the Device Name characteristic; nil: "Simulated").
    public var name: String?
    /// The device's public address; nil makes one.
    public var address: BluetoothAddress?
    public var proximity: Proximity = .immediate
    public var advertising: Advertising?
    public var isConnectable = false
    /// The services, in database order (handles may be fixed, as a capture's or a file's are).
    public var services: [GATTServiceDefinition] = []
    /// Put the GAP (0x1800) and GATT (0x1801) services first, as every device has them; a capture's
    /// database already holds them.
    public var includesDefaultServices = true
    /// The connection interval the peripheral asks for once connected (seconds); nil keeps the central's.
    public var connectionInterval: TimeInterval?
    /// The peripheral's ATT_MTU (23…517).
    public var mtu: UInt16 = 517
    public var onRead: ReadHandler?
    public var onWrite: WriteHandler?
    public var onSubscriptionChange: SubscriptionHandler?
    /// L2CAP channels: the PSMs published and what happens on each channel opened to them.
    public var channels: [(psm: UInt16, response: SimulatedChannelResponse, handler: ChannelHandler)] = []
    /// Values a capture recorded: each read of a handle returns its next value (the last one repeats).
    public var recordedValues: [UInt16: [[UInt8]]] = [:]
    /// Notifications and indications a capture recorded, per value handle, with their time after the
    /// subscription: replayed to a central that subscribes.
    public var recordedUpdates: [UInt16: [(after: TimeInterval, value: [UInt8], indication: Bool)]] = [:]

    public init() {}

    /// Starts a spec in CoreBluetoothMock's words: `PeripheralSpec.simulatePeripheral(proximity: .near)
    /// .advertising(…).connectable(…).build()`.
    public static func simulatePeripheral(address: String? = nil, proximity: Proximity = .immediate) -> Builder {
        var s = PeripheralSpec()
        s.address = address.flatMap { BluetoothAddress(string: $0) }
        s.proximity = proximity
        return Builder(spec: s)
    }

    public struct Builder: Sendable {
        public var spec: PeripheralSpec

        /// Advertises `advertisementData` (Core Bluetooth's keys: local name, service UUIDs, manufacturer
        /// data, service data, TX power level, solicited services) every `interval` seconds, starting after
        /// `delay`.
        public func advertising(
            advertisementData: [String: Any], withInterval interval: TimeInterval = 0.1, delay: TimeInterval = 0,
            alsoWhenConnected: Bool = false
        ) -> Builder {
            let packed = AdvertisementEncoder.encode(advertisementData, connectable: true)
            return advertising(
                data: packed.data, scanResponse: packed.scanResponse, withInterval: interval, delay: delay,
                alsoWhenConnected: alsoWhenConnected)
        }

        /// Advertises exactly these bytes (a capture's advertising, say).
        public func advertising(
            data: [UInt8], scanResponse: [UInt8] = [], withInterval interval: TimeInterval = 0.1,
            delay: TimeInterval = 0, alsoWhenConnected: Bool = false
        ) -> Builder {
            var b = self
            b.spec.advertising = Advertising(
                data: data, scanResponse: scanResponse, interval: interval, delay: delay,
                alsoWhenConnected: alsoWhenConnected, isConnectable: true)
            return b
        }

        /// Makes the peripheral connectable with these services (published in order), a preferred connection
        /// interval (seconds) and ATT_MTU.
        public func connectable(
            name: String, services: [CBMutableService], connectionInterval: TimeInterval? = nil,
            mtu: UInt16 = 517
        ) -> Builder {
            var b = self
            b.spec.name = name
            b.spec.isConnectable = true
            b.spec.services = services.map(GATTServiceDefinition.init(simulating:))
            b.spec.connectionInterval = connectionInterval
            b.spec.mtu = mtu
            b.spec.advertising?.isConnectable = true
            return b
        }

        /// Advertises but cannot be connected (a beacon).
        public func nonConnectable(name: String? = nil) -> Builder {
            var b = self
            b.spec.name = name
            b.spec.isConnectable = false
            b.spec.advertising?.isConnectable = false
            return b
        }

        /// Answers every read of a characteristic value (the default answers with the stored value).
        public func onRead(_ handler: @escaping ReadHandler) -> Builder { var b = self; b.spec.onRead = handler; return b }
        /// Answers every write (the default stores the value).
        public func onWrite(_ handler: @escaping WriteHandler) -> Builder { var b = self; b.spec.onWrite = handler; return b }
        /// Told when a central subscribes or unsubscribes.
        public func onSubscriptionChange(_ handler: @escaping SubscriptionHandler) -> Builder {
            var b = self; b.spec.onSubscriptionChange = handler; return b
        }
        /// Publishes an L2CAP PSM; `handler` gets each channel opened to it (on the air's loop).
        public func l2capChannel(
            psm: UInt16, response: SimulatedChannelResponse = .accept,
            _ handler: @escaping ChannelHandler
        ) -> Builder {
            var b = self; b.spec.channels.append((psm, response, handler)); return b
        }

        public func build() -> PeripheralSpec { spec }
    }
}

extension GATTServiceDefinition {
    /// A service definition from Core Bluetooth's mutable service, with the rules CBPeripheralManager
    /// applies (encryption permissions, notify/indicate-encryption-required subscriptions).
    init(simulating service: CBMutableService) {
        let characteristics = (service.characteristics ?? []).compactMap { $0 as? CBMutableCharacteristic }.map { c -> GATTCharacteristicDefinition in
            var p: AttributePermissions = []
            if c.permissions.contains(.readable) { p.insert(.readable) }
            if c.permissions.contains(.writeable) { p.insert(.writeable) }
            if c.permissions.contains(.readEncryptionRequired) { p.formUnion([.readable, .readEncryptionRequired]) }
            if c.permissions.contains(.writeEncryptionRequired) { p.formUnion([.writeable, .writeEncryptionRequired]) }
            // A characteristic readable by its properties but with no permissions given reads as readable.
            if p.isEmpty {
                if c.properties.contains(.read) { p.insert(.readable) }
                if !c.properties.isDisjoint(with: [.write, .writeWithoutResponse]) { p.insert(.writeable) }
            }
            var descriptors = (c.descriptors ?? []).map { d in
                GATTDescriptorDefinition(uuid: d.uuid.bluetoothUUID, permissions: .readable, value: CBDescriptor.wireValue(of: d.value))
            }
            var wire = GATTCharacteristicProperties(rawValue: UInt8(truncatingIfNeeded: c.properties.rawValue))
            if c.properties.contains(.notifyEncryptionRequired) { wire.insert(.notify) }
            if c.properties.contains(.indicateEncryptionRequired) { wire.insert(.indicate) }
            if !c.properties.isDisjoint(with: [.notifyEncryptionRequired, .indicateEncryptionRequired]) {
                descriptors.append(
                    GATTDescriptorDefinition(
                        uuid: .clientCharacteristicConfiguration,
                        permissions: [.readable, .writeable, .writeEncryptionRequired], value: nil))
            }
            return GATTCharacteristicDefinition(
                uuid: c.uuid.bluetoothUUID, properties: wire, permissions: p,
                value: c.value.map { [UInt8]($0) } ?? [], descriptors: descriptors)
        }
        self.init(uuid: service.uuid.bluetoothUUID, isPrimary: service.isPrimary, characteristics: characteristics)
    }
}

/// Advertising data from Core Bluetooth's advertisement dictionary, packed into an advertising PDU and a
/// scan response of 31 octets each (Vol 3 Part C §11): flags, service UUIDs, TX power, service data,
/// solicited services and manufacturer data go first; the local name goes where it fits (shortened as a
/// last resort, as iOS does); what fits nowhere is left out.
enum AdvertisementEncoder {
    static func encode(_ ad: [String: Any], connectable: Bool) -> (data: [UInt8], scanResponse: [UInt8]) {
        var structures: [ADStructure] = []
        if connectable { structures.append(ADStructure(type: .flags, data: [0x06])) }
        let uuids = ((ad[CBAdvertisementDataServiceUUIDsKey] as? [CBUUID]) ?? []).map(\.bluetoothUUID)
        let u16 = uuids.compactMap(\.uuid16), u128 = uuids.filter { $0.uuid16 == nil }
        if !u16.isEmpty { structures.append(ADStructure(type: .completeList16, data: u16.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] })) }
        if !u128.isEmpty { structures.append(ADStructure(type: .completeList128, data: u128.flatMap(\.littleEndianBytes))) }
        if let tx = ad[CBAdvertisementDataTxPowerLevelKey] as? NSNumber {
            structures.append(ADStructure(type: .txPowerLevel, data: [UInt8(bitPattern: Int8(clamping: tx.intValue))]))
        }
        for (uuid, data) in ((ad[CBAdvertisementDataServiceDataKey] as? [CBUUID: Data]) ?? [:]).sorted(by: { $0.key.uuidString < $1.key.uuidString }) {
            let u = uuid.bluetoothUUID
            if let s = u.uuid16 {
                structures.append(ADStructure(type: .serviceData16, data: [UInt8(s & 0xFF), UInt8(s >> 8)] + data))
            } else {
                structures.append(ADStructure(type: .serviceData128, data: u.littleEndianBytes + data))
            }
        }
        let solicited = ((ad[CBAdvertisementDataSolicitedServiceUUIDsKey] as? [CBUUID]) ?? []).map(\.bluetoothUUID)
        let s16 = solicited.compactMap(\.uuid16), s128 = solicited.filter { $0.uuid16 == nil }
        if !s16.isEmpty { structures.append(ADStructure(type: .solicited16, data: s16.flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] })) }
        if !s128.isEmpty { structures.append(ADStructure(type: .solicited128, data: s128.flatMap(\.littleEndianBytes))) }
        if let m = ad[CBAdvertisementDataManufacturerDataKey] as? Data { structures.append(ADStructure(type: .manufacturerSpecificData, data: [UInt8](m))) }

        var adv: [ADStructure] = [], rsp: [ADStructure] = []
        func size(_ list: [ADStructure]) -> Int { list.reduce(0) { $0 + 2 + $1.data.count } }
        for s in structures {
            if size(adv) + 2 + s.data.count <= 31 { adv.append(s) } else if size(rsp) + 2 + s.data.count <= 31 { rsp.append(s) }
        }
        if let name = ad[CBAdvertisementDataLocalNameKey] as? String {
            let bytes = Array(name.utf8)
            if size(adv) + 2 + bytes.count <= 31 {
                adv.append(ADStructure(type: .completeLocalName, data: bytes))
            } else if size(rsp) + 2 + bytes.count <= 31 {
                rsp.append(ADStructure(type: .completeLocalName, data: bytes))
            } else if 31 - size(rsp) > 2 {
                rsp.append(ADStructure(type: .shortenedLocalName, data: Array(bytes.prefix(31 - size(rsp) - 2))))
            }
        }
        return (AdvertisingData(adv).encode(), AdvertisingData(rsp).encode())
    }
}
