// Command packet codec (Vol 4 Part E §5.4.1): opcode (2), parameter total length (1), parameters.
import BLEWire

extension HCICommand {
    /// Entries of one Host Number Of Completed Packets command: 1 + 4 × 63 = 253 parameter octets (at most 255).
    public static let maximumCompletedPacketsEntries = 63

    /// The complete command packet.
    public func encode() -> HCIPacket {
        var w = ByteWriter(capacity: 40)
        w.write(opcode.rawValue)
        w.write(UInt8(0))
        encodeParameters(into: &w)
        let length = w.count - 3
        precondition(length <= 255, "HCI command parameters exceed 255 bytes")
        w.bytes[2] = UInt8(length)
        return HCIPacket(type: .command, bytes: w.bytes)
    }

    func encodeParameters(into w: inout ByteWriter) {
        switch self {
        case .reset, .readLocalVersionInformation, .readBDADDR, .readLocalSupportedCommands, .readLocalSupportedFeatures,
            .readBufferSize, .leReadBufferSize, .leReadLocalSupportedFeatures, .leReadAdvertisingPhysicalChannelTxPower,
            .leCreateConnectionCancel, .leReadSuggestedDefaultDataLength, .leReadMaximumDataLength, .leRand,
            .leReadFilterAcceptListSize, .leClearFilterAcceptList, .leReadMaximumAdvertisingDataLength, .leReadNumberOfSupportedAdvertisingSets,
            .leClearAdvertisingSets:
            break
        case let .leSetAdvertisingSetRandomAddress(h, a):
            w.write(h); w.write(a)
        case let .leSetExtendedAdvertisingParameters(p):
            w.write(p.advertisingHandle); w.write(p.eventProperties.rawValue)
            w.writeUInt24(p.primaryIntervalMin); w.writeUInt24(p.primaryIntervalMax)
            w.write(p.primaryChannelMap); w.write(p.ownAddressType); w.write(p.peerAddressType); w.write(p.peerAddress)
            w.write(p.filterPolicy); w.write(p.txPower); w.write(p.primaryPHY); w.write(p.secondaryMaxSkip)
            w.write(p.secondaryPHY); w.write(p.advertisingSID); w.write(p.scanRequestNotificationEnable)
        case let .leSetExtendedAdvertisingData(d), let .leSetExtendedScanResponseData(d):
            let n = min(d.data.count, LESetExtendedAdvertisingData.maximumFragmentLength)
            w.write(d.advertisingHandle); w.write(d.operation.rawValue); w.write(d.fragmentPreference)
            w.write(UInt8(n)); w.write(contentsOf: d.data.prefix(n))
        case let .leSetExtendedAdvertisingEnable(on, sets):
            w.write(UInt8(on ? 1 : 0)); w.write(UInt8(sets.count))
            for s in sets { w.write(s.advertisingHandle); w.write(s.duration); w.write(s.maxExtendedAdvertisingEvents) }
        case let .leRemoveAdvertisingSet(h):
            w.write(h)
        case let .leSetExtendedScanParameters(p):
            w.write(p.ownAddressType); w.write(p.scanningFilterPolicy); w.write(p.scanningPHYs)
            for x in p.phys { w.write(x.scanType.rawValue); w.write(x.scanInterval); w.write(x.scanWindow) }
        case let .leSetExtendedScanEnable(on, dup, duration, period):
            w.write(UInt8(on ? 1 : 0)); w.write(dup); w.write(duration); w.write(period)
        case let .leExtendedCreateConnection(p):
            w.write(p.initiatorFilterPolicy); w.write(p.ownAddressType); w.write(p.peerAddressType); w.write(p.peerAddress)
            w.write(p.initiatingPHYs)
            for x in p.phys {
                w.write(x.scanInterval); w.write(x.scanWindow); w.write(x.connectionIntervalMin); w.write(x.connectionIntervalMax)
                w.write(x.maxLatency); w.write(x.supervisionTimeout); w.write(x.minCELength); w.write(x.maxCELength)
            }
        case let .leAddDeviceToFilterAcceptList(a), let .leRemoveDeviceFromFilterAcceptList(a):
            w.write(UInt8(a.type.isRandom ? 1 : 0)); w.write(a)
        case let .setEventMask(m), let .setEventMaskPage2(m), let .leSetEventMask(m):
            w.write(m)
        case let .leSetRandomAddress(a):
            w.write(a)
        case let .leSetAdvertisingParameters(p):
            w.write(p.advertisingIntervalMin); w.write(p.advertisingIntervalMax); w.write(p.advertisingType.rawValue)
            w.write(p.ownAddressType); w.write(p.peerAddressType); w.write(p.peerAddress)
            w.write(p.advertisingChannelMap); w.write(p.advertisingFilterPolicy)
        case let .leSetAdvertisingData(d), let .leSetScanResponseData(d):
            let n = min(d.count, 31)
            w.write(UInt8(n))
            w.write(contentsOf: d.prefix(31))
            w.write(contentsOf: repeatElement(UInt8(0), count: 31 - n))
        case let .leSetAdvertisingEnable(on):
            w.write(UInt8(on ? 1 : 0))
        case let .leSetScanParameters(p):
            w.write(p.scanType.rawValue); w.write(p.scanInterval); w.write(p.scanWindow)
            w.write(p.ownAddressType); w.write(p.scanningFilterPolicy)
        case let .leSetScanEnable(on, dup):
            w.write(UInt8(on ? 1 : 0)); w.write(UInt8(dup ? 1 : 0))
        case let .leCreateConnection(p):
            w.write(p.leScanInterval); w.write(p.leScanWindow); w.write(p.initiatorFilterPolicy)
            w.write(p.peerAddressType); w.write(p.peerAddress); w.write(p.ownAddressType)
            w.write(p.connectionIntervalMin); w.write(p.connectionIntervalMax); w.write(p.maxLatency)
            w.write(p.supervisionTimeout); w.write(p.minCELength); w.write(p.maxCELength)
        case let .disconnect(h, reason):
            w.write(h); w.write(reason.rawValue)
        case let .leConnectionUpdate(p):
            w.write(p.connectionHandle); w.write(p.connectionIntervalMin); w.write(p.connectionIntervalMax)
            w.write(p.maxLatency); w.write(p.supervisionTimeout); w.write(p.minCELength); w.write(p.maxCELength)
        case let .leReadRemoteFeatures(h), let .leLongTermKeyRequestNegativeReply(h), let .readRSSI(h), let .leReadPHY(h),
            let .readRemoteVersionInformation(h):
            w.write(h)
        case let .leSetDataLength(h, o, t):
            w.write(h); w.write(o); w.write(t)
        case let .leWriteSuggestedDefaultDataLength(o, t):
            w.write(o); w.write(t)
        case let .leSetDefaultPHY(all, tx, rx):
            w.write(all); w.write(tx); w.write(rx)
        case let .leSetPHY(p):
            w.write(p.connectionHandle); w.write(p.allPHYs); w.write(p.txPHYs); w.write(p.rxPHYs); w.write(p.phyOptions)
        case let .leEncrypt(key, plaintext):
            w.write(contentsOf: key); w.write(contentsOf: plaintext)
        case let .leStartEncryption(h, random, ediv, ltk):
            w.write(h); w.write(random); w.write(ediv); w.write(contentsOf: ltk)
        case let .leLongTermKeyRequestReply(h, ltk):
            w.write(h); w.write(contentsOf: ltk)
        case let .setControllerToHostFlowControl(enable):
            w.write(enable)
        case let .hostBufferSize(b):
            w.write(b.aclDataPacketLength); w.write(b.synchronousDataPacketLength)
            w.write(b.totalNumACLDataPackets); w.write(b.totalNumSynchronousDataPackets)
        case let .hostNumberOfCompletedPackets(list):
            // Num_Handles, then handle and count per entry: arrays interleave element by element (§5.2), as
            // in Number Of Completed Packets (Linux and Zephyr lay both out as handle/count pairs).
            precondition(list.count <= HCICommand.maximumCompletedPacketsEntries, "at most 63 handles fit one command")
            w.write(UInt8(list.count))
            for e in list { w.write(e.handle); w.write(e.count) }
        case let .unknown(_, params):
            w.write(contentsOf: params)
        }
    }

    /// Decodes a command packet. Known commands must have exactly their parameter length.
    public static func decode(_ packet: HCIPacket) throws -> HCICommand {
        guard packet.type == .command else { throw HCIDecodeError("not a command packet") }
        var r = ByteReader(packet.bytes)
        let opcode = HCIOpcode(rawValue: try r.readUInt16())
        let length = Int(try r.readUInt8())
        guard r.remaining == length else {
            throw HCIDecodeError("\(opcode): parameter length \(length) but \(r.remaining) bytes follow")
        }
        do {
            let c = try decodeParameters(opcode, &r)
            try r.expectEnd()
            return c
        } catch let e as WireError {
            throw HCIDecodeError("\(opcode): \(e)")
        }
    }

    private static func bytes16(_ r: inout ByteReader) throws -> [UInt8] { try r.readBytes(16) }

    static func decodeParameters(_ op: HCIOpcode, _ r: inout ByteReader) throws -> HCICommand {
        switch op {
        case .reset: return .reset
        case .readLocalVersionInformation: return .readLocalVersionInformation
        case .readBDADDR: return .readBDADDR
        case .readLocalSupportedCommands: return .readLocalSupportedCommands
        case .readLocalSupportedFeatures: return .readLocalSupportedFeatures
        case .readBufferSize: return .readBufferSize
        case .setEventMask: return .setEventMask(try r.readUInt64())
        case .setEventMaskPage2: return .setEventMaskPage2(try r.readUInt64())
        case .leSetEventMask: return .leSetEventMask(try r.readUInt64())
        case .leReadBufferSize: return .leReadBufferSize
        case .leReadLocalSupportedFeatures: return .leReadLocalSupportedFeatures
        case .leSetRandomAddress: return .leSetRandomAddress(try r.readAddress(type: .random))
        case .leSetAdvertisingParameters:
            return .leSetAdvertisingParameters(
                LESetAdvertisingParameters(
                    advertisingIntervalMin: try r.readUInt16(), advertisingIntervalMax: try r.readUInt16(),
                    advertisingType: LEAdvertisingType(rawValue: try r.readUInt8()), ownAddressType: try r.readUInt8(),
                    peerAddressType: try r.readUInt8(), peerAddress: try r.readAddressTypedByPreviousOctet(), advertisingChannelMap: try r.readUInt8(),
                    advertisingFilterPolicy: try r.readUInt8()))
        case .leReadAdvertisingPhysicalChannelTxPower: return .leReadAdvertisingPhysicalChannelTxPower
        case .leSetAdvertisingData, .leSetScanResponseData:
            let n = Int(try r.readUInt8())
            guard n <= 31 else { throw WireError.invalidValue("advertising data length \(n) > 31") }
            let all = try r.readBytes(31)
            let d = Array(all.prefix(n))
            return op == .leSetAdvertisingData ? .leSetAdvertisingData(d) : .leSetScanResponseData(d)
        case .leSetAdvertisingEnable: return .leSetAdvertisingEnable(try r.readUInt8() != 0)
        case .leSetScanParameters:
            guard let t = LEScanType(rawValue: try r.readUInt8()) else { throw WireError.invalidValue("LE_Scan_Type") }
            return .leSetScanParameters(
                LESetScanParameters(
                    scanType: t, scanInterval: try r.readUInt16(), scanWindow: try r.readUInt16(),
                    ownAddressType: try r.readUInt8(), scanningFilterPolicy: try r.readUInt8()))
        case .leSetScanEnable: return .leSetScanEnable(enable: try r.readUInt8() != 0, filterDuplicates: try r.readUInt8() != 0)
        case .leCreateConnection:
            return .leCreateConnection(
                LECreateConnection(
                    leScanInterval: try r.readUInt16(), leScanWindow: try r.readUInt16(), initiatorFilterPolicy: try r.readUInt8(),
                    peerAddressType: try r.readUInt8(), peerAddress: try r.readAddressTypedByPreviousOctet(), ownAddressType: try r.readUInt8(),
                    connectionIntervalMin: try r.readUInt16(), connectionIntervalMax: try r.readUInt16(), maxLatency: try r.readUInt16(),
                    supervisionTimeout: try r.readUInt16(), minCELength: try r.readUInt16(), maxCELength: try r.readUInt16()))
        case .leCreateConnectionCancel: return .leCreateConnectionCancel
        case .leReadFilterAcceptListSize: return .leReadFilterAcceptListSize
        case .leClearFilterAcceptList: return .leClearFilterAcceptList
        case .leAddDeviceToFilterAcceptList, .leRemoveDeviceFromFilterAcceptList:
            _ = try r.readUInt8()
            let a = try r.readAddressTypedByPreviousOctet()
            return op == .leAddDeviceToFilterAcceptList ? .leAddDeviceToFilterAcceptList(a) : .leRemoveDeviceFromFilterAcceptList(a)
        case .disconnect: return .disconnect(handle: try r.readUInt16(), reason: HCIStatus(rawValue: try r.readUInt8()))
        case .leConnectionUpdate:
            return .leConnectionUpdate(
                LEConnectionUpdate(
                    connectionHandle: try r.readUInt16(), connectionIntervalMin: try r.readUInt16(), connectionIntervalMax: try r.readUInt16(),
                    maxLatency: try r.readUInt16(), supervisionTimeout: try r.readUInt16(), minCELength: try r.readUInt16(),
                    maxCELength: try r.readUInt16()))
        case .leReadRemoteFeatures: return .leReadRemoteFeatures(handle: try r.readUInt16())
        case .leSetDataLength: return .leSetDataLength(handle: try r.readUInt16(), txOctets: try r.readUInt16(), txTime: try r.readUInt16())
        case .leReadSuggestedDefaultDataLength: return .leReadSuggestedDefaultDataLength
        case .leWriteSuggestedDefaultDataLength:
            return .leWriteSuggestedDefaultDataLength(txOctets: try r.readUInt16(), txTime: try r.readUInt16())
        case .leReadMaximumDataLength: return .leReadMaximumDataLength
        case .leReadPHY: return .leReadPHY(handle: try r.readUInt16())
        case .leSetDefaultPHY: return .leSetDefaultPHY(allPHYs: try r.readUInt8(), txPHYs: try r.readUInt8(), rxPHYs: try r.readUInt8())
        case .leSetPHY:
            return .leSetPHY(
                LESetPHY(
                    connectionHandle: try r.readUInt16(), allPHYs: try r.readUInt8(), txPHYs: try r.readUInt8(),
                    rxPHYs: try r.readUInt8(), phyOptions: try r.readUInt16()))
        case .leRand: return .leRand
        case .leEncrypt: return .leEncrypt(key: try bytes16(&r), plaintext: try bytes16(&r))
        case .leStartEncryption:
            return .leStartEncryption(handle: try r.readUInt16(), random: try r.readUInt64(), ediv: try r.readUInt16(), ltk: try bytes16(&r))
        case .leLongTermKeyRequestReply: return .leLongTermKeyRequestReply(handle: try r.readUInt16(), ltk: try bytes16(&r))
        case .leLongTermKeyRequestNegativeReply: return .leLongTermKeyRequestNegativeReply(handle: try r.readUInt16())
        case .readRSSI: return .readRSSI(handle: try r.readUInt16())
        case .readRemoteVersionInformation: return .readRemoteVersionInformation(handle: try r.readUInt16())
        case .setControllerToHostFlowControl: return .setControllerToHostFlowControl(try r.readUInt8())
        case .hostBufferSize:
            return .hostBufferSize(
                HostBufferSize(
                    aclDataPacketLength: try r.readUInt16(), synchronousDataPacketLength: try r.readUInt8(),
                    totalNumACLDataPackets: try r.readUInt16(), totalNumSynchronousDataPackets: try r.readUInt16()))
        case .hostNumberOfCompletedPackets:
            let n = Int(try r.readUInt8())
            var list: [CompletedPackets] = []
            for _ in 0..<n { list.append(CompletedPackets(handle: try r.readUInt16(), count: try r.readUInt16())) }
            return .hostNumberOfCompletedPackets(list)
        case .leSetAdvertisingSetRandomAddress:
            return .leSetAdvertisingSetRandomAddress(handle: try r.readUInt8(), address: try r.readAddress(type: .random))
        case .leSetExtendedAdvertisingParameters:
            return .leSetExtendedAdvertisingParameters(
                LESetExtendedAdvertisingParameters(
                    advertisingHandle: try r.readUInt8(), eventProperties: LEAdvertisingEventProperties(rawValue: try r.readUInt16()),
                    primaryIntervalMin: try r.readUInt24(), primaryIntervalMax: try r.readUInt24(), primaryChannelMap: try r.readUInt8(),
                    ownAddressType: try r.readUInt8(), peerAddressType: try r.readUInt8(), peerAddress: try r.readAddressTypedByPreviousOctet(),
                    filterPolicy: try r.readUInt8(), txPower: try r.readInt8(), primaryPHY: try r.readUInt8(), secondaryMaxSkip: try r.readUInt8(),
                    secondaryPHY: try r.readUInt8(), advertisingSID: try r.readUInt8(), scanRequestNotificationEnable: try r.readUInt8()))
        case .leSetExtendedAdvertisingData, .leSetExtendedScanResponseData:
            let h = try r.readUInt8()
            guard let o = LESetExtendedAdvertisingData.Operation(rawValue: try r.readUInt8()) else { throw WireError.invalidValue("Operation") }
            let pref = try r.readUInt8()
            let n = Int(try r.readUInt8())
            guard n <= LESetExtendedAdvertisingData.maximumFragmentLength else { throw WireError.invalidValue("data length \(n) > 251") }
            let d = LESetExtendedAdvertisingData(advertisingHandle: h, operation: o, fragmentPreference: pref, data: try r.readBytes(n))
            return op == .leSetExtendedAdvertisingData ? .leSetExtendedAdvertisingData(d) : .leSetExtendedScanResponseData(d)
        case .leSetExtendedAdvertisingEnable:
            let on = try r.readUInt8() != 0
            let n = Int(try r.readUInt8())
            var sets: [LEExtendedAdvertisingSet] = []
            for _ in 0..<n {
                sets.append(
                    LEExtendedAdvertisingSet(
                        advertisingHandle: try r.readUInt8(), duration: try r.readUInt16(),
                        maxExtendedAdvertisingEvents: try r.readUInt8()))
            }
            return .leSetExtendedAdvertisingEnable(enable: on, sets: sets)
        case .leReadMaximumAdvertisingDataLength: return .leReadMaximumAdvertisingDataLength
        case .leReadNumberOfSupportedAdvertisingSets: return .leReadNumberOfSupportedAdvertisingSets
        case .leRemoveAdvertisingSet: return .leRemoveAdvertisingSet(try r.readUInt8())
        case .leClearAdvertisingSets: return .leClearAdvertisingSets
        case .leSetExtendedScanParameters:
            let own = try r.readUInt8(), policy = try r.readUInt8(), phys = try r.readUInt8()
            var list: [LEExtendedScanPHY] = []
            for _ in 0..<phys.nonzeroBitCount {
                guard let t = LEScanType(rawValue: try r.readUInt8()) else { throw WireError.invalidValue("Scan_Type") }
                list.append(LEExtendedScanPHY(scanType: t, scanInterval: try r.readUInt16(), scanWindow: try r.readUInt16()))
            }
            return .leSetExtendedScanParameters(LESetExtendedScanParameters(ownAddressType: own, scanningFilterPolicy: policy, scanningPHYs: phys, phys: list))
        case .leSetExtendedScanEnable:
            return .leSetExtendedScanEnable(
                enable: try r.readUInt8() != 0, filterDuplicates: try r.readUInt8(),
                duration: try r.readUInt16(), period: try r.readUInt16())
        case .leExtendedCreateConnection:
            let policy = try r.readUInt8(), own = try r.readUInt8(), peerType = try r.readUInt8()
            let peer = try r.readAddressTypedByPreviousOctet()
            let phys = try r.readUInt8()
            var list: [LEExtendedInitiatingPHY] = []
            for _ in 0..<phys.nonzeroBitCount {
                list.append(
                    LEExtendedInitiatingPHY(
                        scanInterval: try r.readUInt16(), scanWindow: try r.readUInt16(),
                        connectionIntervalMin: try r.readUInt16(), connectionIntervalMax: try r.readUInt16(),
                        maxLatency: try r.readUInt16(), supervisionTimeout: try r.readUInt16(),
                        minCELength: try r.readUInt16(), maxCELength: try r.readUInt16()))
            }
            return .leExtendedCreateConnection(
                LEExtendedCreateConnection(
                    initiatorFilterPolicy: policy, ownAddressType: own, peerAddressType: peerType,
                    peerAddress: peer, initiatingPHYs: phys, phys: list))
        default: return .unknown(opcode: op, parameters: r.readRemaining())
        }
    }
}
