// HCI commands an LE host sends (Vol 4 Part E §7). Both directions are implemented: the host encodes,
// the virtual controller decodes. Commands this module does not model decode to `.unknown`, keeping
// their bytes.
import BLEWire

public enum HCICommand: Sendable, Equatable {
    case reset
    case readLocalVersionInformation
    case readBDADDR
    case readLocalSupportedCommands
    case readLocalSupportedFeatures
    case readBufferSize
    case setEventMask(UInt64)
    case setEventMaskPage2(UInt64)
    case leSetEventMask(UInt64)
    case leReadBufferSize
    case leReadLocalSupportedFeatures
    case leSetRandomAddress(BluetoothAddress)
    case leSetAdvertisingParameters(LESetAdvertisingParameters)
    case leReadAdvertisingPhysicalChannelTxPower
    /// The significant part (0…31 bytes); sent as a length and 31 zero-padded bytes (§7.8.7).
    case leSetAdvertisingData([UInt8])
    case leSetScanResponseData([UInt8])
    case leSetAdvertisingEnable(Bool)
    case leSetScanParameters(LESetScanParameters)
    case leSetScanEnable(enable: Bool, filterDuplicates: Bool)
    case leCreateConnection(LECreateConnection)
    case leCreateConnectionCancel
    /// The filter accept list (§7.8.14–7.8.17): the devices an initiator with filter policy 1 connects to.
    case leReadFilterAcceptListSize
    case leClearFilterAcceptList
    /// Address type from the address (public 0x00, random 0x01).
    case leAddDeviceToFilterAcceptList(BluetoothAddress)
    case leRemoveDeviceFromFilterAcceptList(BluetoothAddress)
    case disconnect(handle: UInt16, reason: HCIStatus)
    case leConnectionUpdate(LEConnectionUpdate)
    case leReadRemoteFeatures(handle: UInt16)
    case leSetDataLength(handle: UInt16, txOctets: UInt16, txTime: UInt16)
    case leReadSuggestedDefaultDataLength
    case leWriteSuggestedDefaultDataLength(txOctets: UInt16, txTime: UInt16)
    case leReadMaximumDataLength
    case leReadPHY(handle: UInt16)
    case leSetDefaultPHY(allPHYs: UInt8, txPHYs: UInt8, rxPHYs: UInt8)
    case leSetPHY(LESetPHY)
    case leRand
    /// Key and plaintext, 16 bytes each, most significant octet last as on the wire.
    case leEncrypt(key: [UInt8], plaintext: [UInt8])
    case leStartEncryption(handle: UInt16, random: UInt64, ediv: UInt16, ltk: [UInt8])
    case leLongTermKeyRequestReply(handle: UInt16, ltk: [UInt8])
    case leLongTermKeyRequestNegativeReply(handle: UInt16)
    case readRSSI(handle: UInt16)
    case readRemoteVersionInformation(handle: UInt16)
    /// Controller-to-host flow control (§7.3.38–§7.3.40, and §4.2): Flow_Control_Enable (0x00 off, 0x01 ACL on,
    /// 0x02 synchronous on, 0x03 both); the host's buffers; and the packets the host has finished with per
    /// handle. Host Number Of Completed Packets is sent without a command credit and normally gets no answer.
    case setControllerToHostFlowControl(UInt8)
    case hostBufferSize(HostBufferSize)
    case hostNumberOfCompletedPackets([CompletedPackets])
    // Extended advertising, scanning and initiating (§7.8.52–§7.8.66); see HCIExtendedAdvertising.swift.
    case leSetAdvertisingSetRandomAddress(handle: UInt8, address: BluetoothAddress)
    case leSetExtendedAdvertisingParameters(LESetExtendedAdvertisingParameters)
    case leSetExtendedAdvertisingData(LESetExtendedAdvertisingData)
    case leSetExtendedScanResponseData(LESetExtendedAdvertisingData)
    case leSetExtendedAdvertisingEnable(enable: Bool, sets: [LEExtendedAdvertisingSet])
    case leReadMaximumAdvertisingDataLength
    case leReadNumberOfSupportedAdvertisingSets
    case leRemoveAdvertisingSet(UInt8)
    case leClearAdvertisingSets
    case leSetExtendedScanParameters(LESetExtendedScanParameters)
    /// Filter_Duplicates 0 off, 1 on, 2 reset each period; duration in 10 ms and period in 1.28 s units, 0 = continuous.
    case leSetExtendedScanEnable(enable: Bool, filterDuplicates: UInt8, duration: UInt16, period: UInt16)
    case leExtendedCreateConnection(LEExtendedCreateConnection)
    case unknown(opcode: HCIOpcode, parameters: [UInt8])

    public var opcode: HCIOpcode {
        switch self {
        case .reset: return .reset
        case .readLocalVersionInformation: return .readLocalVersionInformation
        case .readBDADDR: return .readBDADDR
        case .readLocalSupportedCommands: return .readLocalSupportedCommands
        case .readLocalSupportedFeatures: return .readLocalSupportedFeatures
        case .readBufferSize: return .readBufferSize
        case .setEventMask: return .setEventMask
        case .setEventMaskPage2: return .setEventMaskPage2
        case .leSetEventMask: return .leSetEventMask
        case .leReadBufferSize: return .leReadBufferSize
        case .leReadLocalSupportedFeatures: return .leReadLocalSupportedFeatures
        case .leSetRandomAddress: return .leSetRandomAddress
        case .leSetAdvertisingParameters: return .leSetAdvertisingParameters
        case .leReadAdvertisingPhysicalChannelTxPower: return .leReadAdvertisingPhysicalChannelTxPower
        case .leSetAdvertisingData: return .leSetAdvertisingData
        case .leSetScanResponseData: return .leSetScanResponseData
        case .leSetAdvertisingEnable: return .leSetAdvertisingEnable
        case .leSetScanParameters: return .leSetScanParameters
        case .leSetScanEnable: return .leSetScanEnable
        case .leCreateConnection: return .leCreateConnection
        case .leCreateConnectionCancel: return .leCreateConnectionCancel
        case .leReadFilterAcceptListSize: return .leReadFilterAcceptListSize
        case .leClearFilterAcceptList: return .leClearFilterAcceptList
        case .leAddDeviceToFilterAcceptList: return .leAddDeviceToFilterAcceptList
        case .leRemoveDeviceFromFilterAcceptList: return .leRemoveDeviceFromFilterAcceptList
        case .disconnect: return .disconnect
        case .leConnectionUpdate: return .leConnectionUpdate
        case .leReadRemoteFeatures: return .leReadRemoteFeatures
        case .leSetDataLength: return .leSetDataLength
        case .leReadSuggestedDefaultDataLength: return .leReadSuggestedDefaultDataLength
        case .leWriteSuggestedDefaultDataLength: return .leWriteSuggestedDefaultDataLength
        case .leReadMaximumDataLength: return .leReadMaximumDataLength
        case .leReadPHY: return .leReadPHY
        case .leSetDefaultPHY: return .leSetDefaultPHY
        case .leSetPHY: return .leSetPHY
        case .leRand: return .leRand
        case .leEncrypt: return .leEncrypt
        case .leStartEncryption: return .leStartEncryption
        case .leLongTermKeyRequestReply: return .leLongTermKeyRequestReply
        case .leLongTermKeyRequestNegativeReply: return .leLongTermKeyRequestNegativeReply
        case .readRSSI: return .readRSSI
        case .readRemoteVersionInformation: return .readRemoteVersionInformation
        case .setControllerToHostFlowControl: return .setControllerToHostFlowControl
        case .hostBufferSize: return .hostBufferSize
        case .hostNumberOfCompletedPackets: return .hostNumberOfCompletedPackets
        case .leSetAdvertisingSetRandomAddress: return .leSetAdvertisingSetRandomAddress
        case .leSetExtendedAdvertisingParameters: return .leSetExtendedAdvertisingParameters
        case .leSetExtendedAdvertisingData: return .leSetExtendedAdvertisingData
        case .leSetExtendedScanResponseData: return .leSetExtendedScanResponseData
        case .leSetExtendedAdvertisingEnable: return .leSetExtendedAdvertisingEnable
        case .leReadMaximumAdvertisingDataLength: return .leReadMaximumAdvertisingDataLength
        case .leReadNumberOfSupportedAdvertisingSets: return .leReadNumberOfSupportedAdvertisingSets
        case .leRemoveAdvertisingSet: return .leRemoveAdvertisingSet
        case .leClearAdvertisingSets: return .leClearAdvertisingSets
        case .leSetExtendedScanParameters: return .leSetExtendedScanParameters
        case .leSetExtendedScanEnable: return .leSetExtendedScanEnable
        case .leExtendedCreateConnection: return .leExtendedCreateConnection
        case let .unknown(op, _): return op
        }
    }
}
