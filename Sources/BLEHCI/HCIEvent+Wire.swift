// Event packet codec (Vol 4 Part E §5.4.4): event code (1), parameter total length (1), parameters.
import BLEWire

extension HCIEvent {
    public func encode() -> HCIPacket {
        var w = ByteWriter(capacity: 16)
        w.write(code)
        w.write(UInt8(0))
        switch self {
        case let .commandComplete(n, op, ret):
            w.write(n); w.write(op.rawValue); w.write(contentsOf: ret)
        case let .commandStatus(st, n, op):
            w.write(st.rawValue); w.write(n); w.write(op.rawValue)
        case let .disconnectionComplete(st, h, reason):
            w.write(st.rawValue); w.write(h); w.write(reason.rawValue)
        case let .numberOfCompletedPackets(list):
            // Arrays interleave element by element (Vol 4 Part E §5.2): handle, count, handle, count…
            w.write(UInt8(list.count))
            for e in list { w.write(e.handle); w.write(e.count) }
        case let .encryptionChange(st, h, en):
            w.write(st.rawValue); w.write(h); w.write(en)
        case let .encryptionKeyRefreshComplete(st, h):
            w.write(st.rawValue); w.write(h)
        case let .readRemoteVersionInformationComplete(st, h, v, c, s):
            w.write(st.rawValue); w.write(h); w.write(v); w.write(c); w.write(s)
        case let .hardwareError(c), let .dataBufferOverflow(c):
            w.write(c)
        case let .le(meta):
            meta.encode(into: &w)
        case let .unknown(_, p):
            w.write(contentsOf: p)
        }
        let length = w.count - 2
        precondition(length <= 255, "HCI event parameters exceed 255 bytes")
        w.bytes[1] = UInt8(length)
        return HCIPacket(type: .event, bytes: w.bytes)
    }

    public static func decode(_ packet: HCIPacket) throws -> HCIEvent {
        guard packet.type == .event else { throw HCIDecodeError("not an event packet") }
        var r = ByteReader(packet.bytes)
        let code = try r.readUInt8()
        let length = Int(try r.readUInt8())
        guard r.remaining == length else {
            throw HCIDecodeError("event 0x\(String(code, radix: 16)): parameter length \(length) but \(r.remaining) bytes follow")
        }
        do {
            let e = try decodeParameters(code, &r)
            try r.expectEnd()
            return e
        } catch let e as WireError {
            throw HCIDecodeError("event 0x\(String(code, radix: 16)): \(e)")
        }
    }

    static func decodeParameters(_ code: UInt8, _ r: inout ByteReader) throws -> HCIEvent {
        switch code {
        case 0x0E:
            return .commandComplete(
                numHCICommandPackets: try r.readUInt8(), opcode: HCIOpcode(rawValue: try r.readUInt16()),
                returnParameters: r.readRemaining())
        case 0x0F:
            return .commandStatus(
                status: HCIStatus(rawValue: try r.readUInt8()), numHCICommandPackets: try r.readUInt8(),
                opcode: HCIOpcode(rawValue: try r.readUInt16()))
        case 0x05:
            return .disconnectionComplete(
                status: HCIStatus(rawValue: try r.readUInt8()), handle: try r.readUInt16(),
                reason: HCIStatus(rawValue: try r.readUInt8()))
        case 0x13:
            let n = Int(try r.readUInt8())
            var list: [CompletedPackets] = []
            for _ in 0..<n { list.append(CompletedPackets(handle: try r.readUInt16(), count: try r.readUInt16())) }
            return .numberOfCompletedPackets(list)
        case 0x08:
            return .encryptionChange(status: HCIStatus(rawValue: try r.readUInt8()), handle: try r.readUInt16(), enabled: try r.readUInt8())
        case 0x30:
            return .encryptionKeyRefreshComplete(status: HCIStatus(rawValue: try r.readUInt8()), handle: try r.readUInt16())
        case 0x0C:
            return .readRemoteVersionInformationComplete(
                status: HCIStatus(rawValue: try r.readUInt8()), handle: try r.readUInt16(),
                version: try r.readUInt8(), companyIdentifier: try r.readUInt16(),
                subversion: try r.readUInt16())
        case 0x10: return .hardwareError(try r.readUInt8())
        case 0x1A: return .dataBufferOverflow(try r.readUInt8())
        case 0x3E: return .le(try LEMetaEvent.decode(&r))
        default: return .unknown(code: code, parameters: r.readRemaining())
        }
    }
}

extension LEMetaEvent {
    func encode(into w: inout ByteWriter) {
        w.write(subevent)
        switch self {
        case let .connectionComplete(e):
            w.write(e.status.rawValue); w.write(e.connectionHandle); w.write(e.role); w.write(e.peerAddressType)
            w.write(e.peerAddress); w.write(e.connectionInterval); w.write(e.peripheralLatency)
            w.write(e.supervisionTimeout); w.write(e.centralClockAccuracy)
        case let .enhancedConnectionComplete(e):
            w.write(e.status.rawValue); w.write(e.connectionHandle); w.write(e.role); w.write(e.peerAddressType)
            w.write(e.peerAddress); w.write(e.localResolvablePrivateAddress); w.write(e.peerResolvablePrivateAddress)
            w.write(e.connectionInterval); w.write(e.peripheralLatency); w.write(e.supervisionTimeout); w.write(e.centralClockAccuracy)
        case let .advertisingReport(reports):
            // One report after another (arrays interleave element by element, Vol 4 Part E §5.2), as
            // controllers send them and Linux and Bumble read them.
            w.write(UInt8(reports.count))
            for x in reports {
                w.write(x.eventType.rawValue); w.write(x.addressType); w.write(x.address)
                w.write(UInt8(x.data.count)); w.write(contentsOf: x.data); w.write(x.rssi)
            }
        case let .connectionUpdateComplete(e):
            w.write(e.status.rawValue); w.write(e.connectionHandle); w.write(e.connectionInterval)
            w.write(e.peripheralLatency); w.write(e.supervisionTimeout)
        case let .readRemoteFeaturesComplete(st, h, f):
            w.write(st.rawValue); w.write(h); w.write(f)
        case let .longTermKeyRequest(h, rand, ediv):
            w.write(h); w.write(rand); w.write(ediv)
        case let .remoteConnectionParameterRequest(h, mn, mx, lat, to):
            w.write(h); w.write(mn); w.write(mx); w.write(lat); w.write(to)
        case let .dataLengthChange(e):
            w.write(e.connectionHandle); w.write(e.maxTxOctets); w.write(e.maxTxTime); w.write(e.maxRxOctets); w.write(e.maxRxTime)
        case let .phyUpdateComplete(st, h, tx, rx):
            w.write(st.rawValue); w.write(h); w.write(tx); w.write(rx)
        case let .extendedAdvertisingReport(reports):
            w.write(UInt8(reports.count))
            for x in reports {
                w.write(x.eventType.rawValue); w.write(x.addressType); w.write(x.address); w.write(x.primaryPHY); w.write(x.secondaryPHY)
                w.write(x.advertisingSID); w.write(x.txPower); w.write(x.rssi); w.write(x.periodicAdvertisingInterval)
                w.write(x.directAddressType); w.write(x.directAddress); w.write(UInt8(x.data.count)); w.write(contentsOf: x.data)
            }
        case let .advertisingSetTerminated(e):
            w.write(e.status.rawValue); w.write(e.advertisingHandle); w.write(e.connectionHandle); w.write(e.numCompletedExtendedAdvertisingEvents)
        case let .unknown(_, p):
            w.write(contentsOf: p)
        }
    }

    static func decode(_ r: inout ByteReader) throws -> LEMetaEvent {
        let sub = try r.readUInt8()
        switch sub {
        case LESubevent.connectionComplete:
            return .connectionComplete(
                LEConnectionComplete(
                    status: HCIStatus(rawValue: try r.readUInt8()), connectionHandle: try r.readUInt16(), role: try r.readUInt8(),
                    peerAddressType: try r.readUInt8(), peerAddress: try r.readAddressTypedByPreviousOctet(), connectionInterval: try r.readUInt16(),
                    peripheralLatency: try r.readUInt16(), supervisionTimeout: try r.readUInt16(), centralClockAccuracy: try r.readUInt8()))
        case LESubevent.enhancedConnectionComplete:
            return .enhancedConnectionComplete(
                LEEnhancedConnectionComplete(
                    status: HCIStatus(rawValue: try r.readUInt8()), connectionHandle: try r.readUInt16(), role: try r.readUInt8(),
                    peerAddressType: try r.readUInt8(), peerAddress: try r.readAddressTypedByPreviousOctet(),
                    localResolvablePrivateAddress: try r.readAddress(type: .random), peerResolvablePrivateAddress: try r.readAddress(type: .random),
                    connectionInterval: try r.readUInt16(), peripheralLatency: try r.readUInt16(), supervisionTimeout: try r.readUInt16(),
                    centralClockAccuracy: try r.readUInt8()))
        case LESubevent.advertisingReport:
            let n = Int(try r.readUInt8())
            guard n >= 1 && n <= 0x19 else { throw WireError.invalidValue("Num_Reports \(n)") }
            var reports: [LEAdvertisingReport] = []
            for _ in 0..<n {
                let type = try r.readUInt8()
                let addrType = try r.readUInt8()
                let address = try r.readAddress(type: AddressType(hciAddressType: addrType))
                let l = Int(try r.readUInt8())
                guard l <= 31 else { throw WireError.invalidValue("advertising data length \(l) > 31") }
                reports.append(
                    LEAdvertisingReport(
                        eventType: LEAdvertisingReportType(rawValue: type), addressType: addrType,
                        address: address, data: try r.readBytes(l), rssi: try r.readInt8()))
            }
            return .advertisingReport(reports)
        case LESubevent.connectionUpdateComplete:
            return .connectionUpdateComplete(
                LEConnectionUpdateComplete(
                    status: HCIStatus(rawValue: try r.readUInt8()), connectionHandle: try r.readUInt16(), connectionInterval: try r.readUInt16(),
                    peripheralLatency: try r.readUInt16(), supervisionTimeout: try r.readUInt16()))
        case LESubevent.readRemoteFeaturesComplete:
            return .readRemoteFeaturesComplete(status: HCIStatus(rawValue: try r.readUInt8()), handle: try r.readUInt16(), features: try r.readUInt64())
        case LESubevent.longTermKeyRequest:
            return .longTermKeyRequest(handle: try r.readUInt16(), random: try r.readUInt64(), ediv: try r.readUInt16())
        case LESubevent.remoteConnectionParameterRequest:
            return .remoteConnectionParameterRequest(
                handle: try r.readUInt16(), intervalMin: try r.readUInt16(), intervalMax: try r.readUInt16(),
                maxLatency: try r.readUInt16(), timeout: try r.readUInt16())
        case LESubevent.dataLengthChange:
            return .dataLengthChange(
                LEDataLengthChange(
                    connectionHandle: try r.readUInt16(), maxTxOctets: try r.readUInt16(),
                    maxTxTime: try r.readUInt16(), maxRxOctets: try r.readUInt16(), maxRxTime: try r.readUInt16()))
        case LESubevent.phyUpdateComplete:
            return .phyUpdateComplete(
                status: HCIStatus(rawValue: try r.readUInt8()), handle: try r.readUInt16(),
                txPHY: try r.readUInt8(), rxPHY: try r.readUInt8())
        case LESubevent.extendedAdvertisingReport:
            let n = Int(try r.readUInt8())
            guard n >= 1 && n <= 0x0A else { throw WireError.invalidValue("Num_Reports \(n)") }
            var reports: [LEExtendedAdvertisingReport] = []
            for _ in 0..<n {
                let type = LEExtendedAdvertisingEventType(rawValue: try r.readUInt16())
                let addrType = try r.readUInt8()
                let address = try r.readAddress(type: AddressType(hciAddressType: addrType))
                let primary = try r.readUInt8(), secondary = try r.readUInt8(), sid = try r.readUInt8()
                let tx = try r.readInt8(), rssi = try r.readInt8(), periodic = try r.readUInt16()
                let directType = try r.readUInt8()
                let direct = try r.readAddress(type: AddressType(hciAddressType: directType))
                let l = Int(try r.readUInt8())
                guard l <= 229 else { throw WireError.invalidValue("extended advertising data length \(l) > 229") }
                reports.append(
                    LEExtendedAdvertisingReport(
                        eventType: type, addressType: addrType, address: address, primaryPHY: primary,
                        secondaryPHY: secondary, advertisingSID: sid, txPower: tx, rssi: rssi,
                        periodicAdvertisingInterval: periodic, directAddressType: directType,
                        directAddress: direct, data: try r.readBytes(l)))
            }
            return .extendedAdvertisingReport(reports)
        case LESubevent.advertisingSetTerminated:
            return .advertisingSetTerminated(
                LEAdvertisingSetTerminated(
                    status: HCIStatus(rawValue: try r.readUInt8()), advertisingHandle: try r.readUInt8(), connectionHandle: try r.readUInt16(),
                    numCompletedExtendedAdvertisingEvents: try r.readUInt8()))
        default:
            return .unknown(subevent: sub, parameters: r.readRemaining())
        }
    }
}
