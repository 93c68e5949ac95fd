// Command handling of the virtual controller: the answer each command gets (Command Complete with its
// return parameters, or Command Status and a later event), with the spec's error codes for bad
// parameters and bad timing.
import Foundation
import BLEWire
import BLEHCI
import BLETransport
import BLECrypto

extension VirtualController {
    func complete(_ op: HCIOpcode, _ ret: some HCIReturnParameters) {
        deliver(.commandComplete(numHCICommandPackets: 1, opcode: op, returnParameters: ret.encode()))
    }

    func complete(_ op: HCIOpcode, _ status: HCIStatus = .success) {
        complete(op, StatusReturn(status: status))
    }

    func status(_ op: HCIOpcode, _ status: HCIStatus = .success) {
        deliver(.commandStatus(status: status, numHCICommandPackets: 1, opcode: op))
    }

    /// The commands this controller implements, as the Supported_Commands bit map (Vol 4 Part E §6.27).
    static let supportedCommands: [UInt8] = {
        var m = [UInt8](repeating: 0, count: 64)
        func set(_ octet: Int, _ bit: Int) { m[octet] |= 1 << bit }
        set(0, 5)   // Disconnect
        set(2, 7)   // Read Remote Version Information
        set(5, 6); set(5, 7)   // Set Event Mask, Reset
        set(10, 5); set(10, 6); set(10, 7)   // Set Controller To Host Flow Control, Host Buffer Size, Host Number Of Completed Packets
        set(14, 3); set(14, 5); set(14, 7)   // Read Local Version, Read Local Supported Features, Read Buffer Size
        set(15, 1); set(15, 5)   // Read BD_ADDR, Read RSSI
        for b in [0, 1, 2, 4, 5, 6, 7] { set(25, b) }   // LE Set Event Mask … LE Set Advertising Data
        for b in 0...3 { set(26, b) }; set(26, 4); set(26, 5)   // scan response … LE Create Connection Cancel
        set(27, 2); set(27, 5); set(27, 6); set(27, 7)   // LE Connection Update, Read Remote Features, Encrypt, Rand
        set(28, 0); set(28, 1); set(28, 2)   // LE Enable Encryption, LTK Request Reply / Negative Reply
        set(33, 6); set(33, 7); set(34, 0)   // LE Set Data Length, Read/Write Suggested Default Data Length
        set(35, 3); set(35, 4); set(35, 5); set(35, 6)   // LE Read Maximum Data Length, Read PHY, Set Default PHY, Set PHY
        return m
    }()

    func handle(command: HCICommand) {
        let op = command.opcode
        switch command {
        case .reset:
            resetState()
            complete(op)
        case .readLocalVersionInformation:
            complete(
                op,
                ReadLocalVersionReturn(
                    status: .success, hciVersion: 0x0C, hciSubversion: 0x0001, lmpVersion: 0x0C,
                    companyIdentifier: 0xFFFF, lmpSubversion: 0x0001))
        case .readBDADDR:
            complete(op, ReadBDADDRReturn(status: .success, address: BluetoothAddress(bytes: address.bytes)))
        case .readLocalSupportedCommands:
            var map = Self.supportedCommands
            if !supportsHostFlowControl { map[10] &= ~0xE0 }
            complete(op, ReadLocalSupportedCommandsReturn(status: .success, supportedCommands: map))
        case .readLocalSupportedFeatures:
            // LMP features: bit 38 "LE Supported (Controller)", bit 37 "BR/EDR Not Supported".
            complete(op, ReadLocalSupportedFeaturesReturn(status: .success, features: 1 << 38 | 1 << 37))
        case .readBufferSize:
            complete(
                op,
                ReadBufferSizeReturn(
                    status: .success, aclDataPacketLength: aclBufferSize, syncDataPacketLength: 0,
                    totalNumACLDataPackets: UInt16(aclBufferCount), totalNumSyncDataPackets: 0))
        case let .setEventMask(m):
            eventMask = m
            complete(op)
        case let .hostBufferSize(b):
            hostBufferSize(b, op: op)   // VirtualController+HostFlow.swift
        case let .setControllerToHostFlowControl(enable):
            setControllerToHostFlowControl(enable, op: op)
        case let .hostNumberOfCompletedPackets(list):
            hostNumberOfCompletedPackets(list, op: op)
        case let .leSetEventMask(m):
            leEventMask = m
            complete(op)
        case .leReadBufferSize:
            complete(op, LEReadBufferSizeReturn(status: .success, aclDataPacketLength: aclBufferSize, totalNumACLDataPackets: aclBufferCount))
        case .leReadLocalSupportedFeatures:
            complete(op, ReadLocalSupportedFeaturesReturn(status: .success, features: Self.leFeatures.rawValue))
        case let .leSetRandomAddress(a):
            guard !advertising, !scanning, initiating == nil else { return complete(op, .commandDisallowed) }
            randomAddress = BluetoothAddress(bytes: a.bytes, type: .random)
            complete(op)
        case let .leSetAdvertisingParameters(p):
            guard !advertising else { return complete(op, .commandDisallowed) }
            let directed = p.advertisingType == .connectableDirectedHighDuty || p.advertisingType == .connectableDirectedLowDuty
            guard p.advertisingType.rawValue <= 4, p.advertisingChannelMap & 0x07 != 0, p.advertisingChannelMap <= 0x07,
                directed
                    || (p.advertisingIntervalMin >= 0x0020 && p.advertisingIntervalMin <= p.advertisingIntervalMax
                        && p.advertisingIntervalMax <= 0x4000)
            else {
                return complete(op, .invalidParameters)
            }
            advertisingParameters = p
            complete(op)
        case .leReadAdvertisingPhysicalChannelTxPower:
            complete(op, LEReadAdvertisingTxPowerReturn(status: .success, txPowerLevel: Int8((airRef?.txPower ?? 0))))
        case let .leSetAdvertisingData(d):
            advertisingData = d
            complete(op)
        case let .leSetScanResponseData(d):
            scanResponseData = d
            complete(op)
        case let .leSetAdvertisingEnable(on):
            if on && !advertising {
                advertising = true
                scheduleAdvertisingEvent(first: true)
            } else if !on {
                advertising = false
                loop.cancel(advertisingTimer)
                advertisingTimer = nil
            }
            complete(op)
        case let .leSetScanParameters(p):
            guard !scanning else { return complete(op, .commandDisallowed) }
            guard p.scanInterval >= 4, p.scanWindow >= 4, p.scanWindow <= p.scanInterval, p.scanInterval <= 0x4000 else {
                return complete(op, .invalidParameters)
            }
            scanParameters = p
            complete(op)
        case let .leSetScanEnable(on, dup):
            if on && !scanning { reportedDuplicates.removeAll() }
            scanning = on
            filterDuplicates = dup
            complete(op)
        case .leReadFilterAcceptListSize:
            guard reportsFilterAcceptListSize else { return complete(op, .unknownCommand) }
            complete(op, LEReadFilterAcceptListSizeReturn(status: .success, size: UInt8(clamping: filterAcceptListCapacity)))
        case .leClearFilterAcceptList:
            // The list may not change while an initiator uses it (Vol 4 Part E §7.8.15).
            guard initiating?.initiatorFilterPolicy != 1 else { return complete(op, .commandDisallowed) }
            filterAcceptList.removeAll()
            complete(op)
        case let .leAddDeviceToFilterAcceptList(a):
            guard initiating?.initiatorFilterPolicy != 1 else { return complete(op, .commandDisallowed) }
            if !filterAcceptList.contains(where: { $0.bytes == a.bytes && $0.type.isRandom == a.type.isRandom }) {
                guard filterAcceptList.count < filterAcceptListCapacity else { return complete(op, .memoryCapacityExceeded) }
                filterAcceptList.append(a)
            }
            complete(op)
        case let .leRemoveDeviceFromFilterAcceptList(a):
            guard initiating?.initiatorFilterPolicy != 1 else { return complete(op, .commandDisallowed) }
            filterAcceptList.removeAll { $0.bytes == a.bytes && $0.type.isRandom == a.type.isRandom }
            complete(op)
        case let .leCreateConnection(p):
            guard initiating == nil else { return status(op, .commandDisallowed) }
            guard ConnectionParametersCheck.valid(p) else { return status(op, .invalidParameters) }
            if p.initiatorFilterPolicy != 1, links.values.contains(where: { $0.peer?.address.bytes == p.peerAddress.bytes && !$0.lost }) {
                return status(op, .aclConnectionAlreadyExists)
            }
            initiating = p
            status(op)
        case .leCreateConnectionCancel:
            guard initiating != nil else { return complete(op, .commandDisallowed) }
            initiating = nil
            complete(op)
            sendConnectionComplete(status: .unknownConnectionIdentifier, handle: 0, role: 0, peer: .zero, interval: 0, latency: 0, timeout: 0)
        case let .disconnect(handle, reason):
            guard let link = links[handle] else { return status(op, .unknownConnectionIdentifier) }
            status(op)
            links[handle] = nil
            loop.cancel(link.lossTimer)
            deliver(.disconnectionComplete(status: .success, handle: handle, reason: .connectionTerminatedByLocalHost))
            if !link.lost, let peer = link.peer { peer.remoteDisconnected(link.peerHandle, reason: reason) }
        case let .leConnectionUpdate(p):
            guard let link = links[p.connectionHandle] else { return status(op, .unknownConnectionIdentifier) }
            status(op)
            link.interval = p.connectionIntervalMax
            link.latency = p.maxLatency
            link.timeout = p.supervisionTimeout
            let e = LEConnectionUpdateComplete(
                status: .success, connectionHandle: link.handle, connectionInterval: link.interval,
                peripheralLatency: link.latency, supervisionTimeout: link.timeout)
            deliver(.le(.connectionUpdateComplete(e)))
            if let peer = link.peer, let pl = peer.links[link.peerHandle] {
                pl.interval = link.interval; pl.latency = link.latency; pl.timeout = link.timeout
                var pe = e
                pe.connectionHandle = pl.handle
                peer.deliver(.le(.connectionUpdateComplete(pe)))
            }
        case let .leReadRemoteFeatures(h):
            guard let link = links[h] else { return status(op, .unknownConnectionIdentifier) }
            status(op)
            deliver(.le(.readRemoteFeaturesComplete(status: .success, handle: link.handle, features: Self.leFeatures.rawValue)))
        case let .readRemoteVersionInformation(h):
            guard links[h] != nil else { return status(op, .unknownConnectionIdentifier) }
            status(op)
            deliver(.readRemoteVersionInformationComplete(status: .success, handle: h, version: 0x0C, companyIdentifier: 0xFFFF, subversion: 1))
        case let .leSetDataLength(h, octets, time):
            guard let link = links[h] else { return complete(op, ConnectionHandleReturn(status: .unknownConnectionIdentifier, handle: h)) }
            guard (27...251).contains(octets), (328...17040).contains(time) else {
                return complete(op, ConnectionHandleReturn(status: .invalidParameters, handle: h))
            }
            complete(op, ConnectionHandleReturn(status: .success, handle: h))
            link.dataLength = Int(octets)
            if let peer = link.peer, let pl = peer.links[link.peerHandle] { pl.dataLength = Int(octets) }
            let change = LEDataLengthChange(connectionHandle: h, maxTxOctets: octets, maxTxTime: time, maxRxOctets: octets, maxRxTime: time)
            deliver(.le(.dataLengthChange(change)))
            if let peer = link.peer {
                var pc = change
                pc.connectionHandle = link.peerHandle
                peer.deliver(.le(.dataLengthChange(pc)))
            }
        case .leReadSuggestedDefaultDataLength:
            complete(op, LEReadSuggestedDefaultDataLengthReturn(status: .success, suggestedMaxTxOctets: 251, suggestedMaxTxTime: 2120))
        case .leWriteSuggestedDefaultDataLength:
            complete(op)
        case .leReadMaximumDataLength:
            complete(
                op,
                LEReadMaximumDataLengthReturn(
                    status: .success, supportedMaxTxOctets: 251, supportedMaxTxTime: 17040,
                    supportedMaxRxOctets: 251, supportedMaxRxTime: 17040))
        case let .leReadPHY(h):
            guard links[h] != nil else { return complete(op, LEReadPHYReturn(status: .unknownConnectionIdentifier, handle: h, txPHY: 0, rxPHY: 0)) }
            let phy = links[h]!.phy.hciValue
            complete(op, LEReadPHYReturn(status: .success, handle: h, txPHY: phy, rxPHY: phy))
        case .leSetDefaultPHY:
            complete(op)
        case let .leSetPHY(p):
            guard let link = links[p.connectionHandle] else { return status(op, .unknownConnectionIdentifier) }
            status(op)
            // LE 2M when asked for, else LE Coded (S=8 unless the options prefer S=2), else LE 1M.
            let chosen: LEPHY = p.txPHYs & 0x02 != 0 ? .le2M : p.txPHYs & 0x04 != 0 ? (p.phyOptions == 1 ? .codedS2 : .codedS8) : .le1M
            link.phy = chosen
            if let peer = link.peer, let pl = peer.links[link.peerHandle] { pl.phy = chosen }
            let phy = chosen.hciValue
            deliver(.le(.phyUpdateComplete(status: .success, handle: link.handle, txPHY: phy, rxPHY: phy)))
            link.peer?.deliver(.le(.phyUpdateComplete(status: .success, handle: link.peerHandle, txPHY: phy, rxPHY: phy)))
        case .leRand:
            complete(op, LERandReturn(status: .success, randomNumber: airRef?.rng.next() ?? UInt64(truncatingIfNeeded: loop.now)))
        case let .readRSSI(h):
            guard let link = links[h], let peer = link.peer, let air = airRef else {
                return complete(op, ReadRSSIReturn(status: .unknownConnectionIdentifier, handle: h, rssi: 127))
            }
            complete(op, ReadRSSIReturn(status: .success, handle: h, rssi: air.rssi(from: peer, to: self)))
        case let .leStartEncryption(h, random, ediv, ltk):
            guard let link = links[h], link.role == 0, let peer = link.peer, let pl = peer.links[link.peerHandle] else {
                return status(op, .unknownConnectionIdentifier)
            }
            status(op)
            pl.pendingLTK = ltk
            peer.deliver(.le(.longTermKeyRequest(handle: pl.handle, random: random, ediv: ediv)))
        case let .leLongTermKeyRequestReply(h, ltk):
            guard let link = links[h], let expected = link.pendingLTK, let peer = link.peer, let cl = peer.links[link.peerHandle] else {
                return complete(op, ConnectionHandleReturn(status: .unknownConnectionIdentifier, handle: h))
            }
            complete(op, ConnectionHandleReturn(status: .success, handle: h))
            link.pendingLTK = nil
            if ltk == expected {
                // On a link that was already encrypted this is a key refresh (Vol 4 Part E §7.7.39).
                let refresh = link.encrypted && cl.encrypted
                link.encrypted = true
                cl.encrypted = true
                if refresh {
                    deliver(.encryptionKeyRefreshComplete(status: .success, handle: h))
                    peer.deliver(.encryptionKeyRefreshComplete(status: .success, handle: cl.handle))
                } else {
                    deliver(.encryptionChange(status: .success, handle: h, enabled: 1))
                    peer.deliver(.encryptionChange(status: .success, handle: cl.handle, enabled: 1))
                }
            } else {
                // Different keys on each side: the first encrypted packet fails its MIC and the link drops.
                links[h] = nil
                peer.links[cl.handle] = nil
                deliver(.disconnectionComplete(status: .success, handle: h, reason: .connectionTerminatedMICFailure))
                peer.deliver(.disconnectionComplete(status: .success, handle: cl.handle, reason: .connectionTerminatedMICFailure))
            }
        case let .leLongTermKeyRequestNegativeReply(h):
            guard let link = links[h] else { return complete(op, ConnectionHandleReturn(status: .unknownConnectionIdentifier, handle: h)) }
            complete(op, ConnectionHandleReturn(status: .success, handle: h))
            link.pendingLTK = nil
            if let peer = link.peer { peer.deliver(.encryptionChange(status: .pinOrKeyMissing, handle: link.peerHandle, enabled: 0)) }
        case let .leEncrypt(key, plaintext):
            // HCI carries both little-endian; AES works most significant octet first (Vol 4 Part E §7.8.22).
            guard let out = try? SMPCrypto.e(key.reversed(), plaintext.reversed()) else {
                return complete(op, LEEncryptReturn(status: .invalidParameters, encryptedData: [UInt8](repeating: 0, count: 16)))
            }
            complete(op, LEEncryptReturn(status: .success, encryptedData: out.reversed()))
        case .setEventMaskPage2, .unknown, .leSetAdvertisingSetRandomAddress, .leSetExtendedAdvertisingParameters,
            .leSetExtendedAdvertisingData, .leSetExtendedScanResponseData, .leSetExtendedAdvertisingEnable,
            .leReadMaximumAdvertisingDataLength, .leReadNumberOfSupportedAdvertisingSets, .leRemoveAdvertisingSet,
            .leClearAdvertisingSets, .leSetExtendedScanParameters, .leSetExtendedScanEnable, .leExtendedCreateConnection:
            // A legacy-advertising controller: the extended commands are not in its supported-commands map.
            complete(op, .unknownCommand)
        }
    }

    /// The peer disconnected with `reason`.
    func remoteDisconnected(_ handle: UInt16, reason: HCIStatus) {
        guard let link = links.removeValue(forKey: handle) else { return }
        loop.cancel(link.lossTimer)
        deliver(.disconnectionComplete(status: .success, handle: handle, reason: reason))
    }
}

/// LE Create Connection parameter ranges (Vol 4 Part E §7.8.12).
enum ConnectionParametersCheck {
    static func valid(_ p: LECreateConnection) -> Bool {
        (0x0004...0x4000).contains(p.leScanInterval) && (0x0004...0x4000).contains(p.leScanWindow) && p.leScanWindow <= p.leScanInterval
            && (0x0006...0x0C80).contains(p.connectionIntervalMin) && (0x0006...0x0C80).contains(p.connectionIntervalMax)
            && p.connectionIntervalMin <= p.connectionIntervalMax && p.maxLatency <= 0x01F3
            && (0x000A...0x0C80).contains(p.supervisionTimeout)
            && Int(p.supervisionTimeout) * 40 > (1 + Int(p.maxLatency)) * Int(p.connectionIntervalMax) * 10
    }
}
