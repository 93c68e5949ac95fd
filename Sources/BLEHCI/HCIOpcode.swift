// Command opcodes (Vol 4 Part E §5.4.1): OGF in the upper 6 bits, OCF in the lower 10.

public struct HCIOpcode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public init(ogf: UInt8, ocf: UInt16) { rawValue = UInt16(ogf) << 10 | (ocf & 0x03FF) }

    public var ogf: UInt8 { UInt8(rawValue >> 10) }
    public var ocf: UInt16 { rawValue & 0x03FF }

    // Link Control (OGF 0x01)
    public static let disconnect = HCIOpcode(ogf: 0x01, ocf: 0x0006)
    public static let readRemoteVersionInformation = HCIOpcode(ogf: 0x01, ocf: 0x001D)
    // Controller & Baseband (OGF 0x03)
    public static let setEventMask = HCIOpcode(ogf: 0x03, ocf: 0x0001)
    public static let reset = HCIOpcode(ogf: 0x03, ocf: 0x0003)
    public static let readTransmitPowerLevel = HCIOpcode(ogf: 0x03, ocf: 0x002D)
    /// Controller-to-host flow control (§7.3.38–§7.3.40).
    public static let setControllerToHostFlowControl = HCIOpcode(ogf: 0x03, ocf: 0x0031)
    public static let hostBufferSize = HCIOpcode(ogf: 0x03, ocf: 0x0033)
    public static let hostNumberOfCompletedPackets = HCIOpcode(ogf: 0x03, ocf: 0x0035)
    public static let setEventMaskPage2 = HCIOpcode(ogf: 0x03, ocf: 0x0063)
    public static let writeLEHostSupport = HCIOpcode(ogf: 0x03, ocf: 0x006D)
    // Informational (OGF 0x04)
    public static let readLocalVersionInformation = HCIOpcode(ogf: 0x04, ocf: 0x0001)
    public static let readLocalSupportedCommands = HCIOpcode(ogf: 0x04, ocf: 0x0002)
    public static let readLocalSupportedFeatures = HCIOpcode(ogf: 0x04, ocf: 0x0003)
    public static let readBufferSize = HCIOpcode(ogf: 0x04, ocf: 0x0005)
    public static let readBDADDR = HCIOpcode(ogf: 0x04, ocf: 0x0009)
    // Status (OGF 0x05)
    public static let readRSSI = HCIOpcode(ogf: 0x05, ocf: 0x0005)
    // LE Controller (OGF 0x08)
    public static let leSetEventMask = HCIOpcode(ogf: 0x08, ocf: 0x0001)
    public static let leReadBufferSize = HCIOpcode(ogf: 0x08, ocf: 0x0002)
    public static let leReadLocalSupportedFeatures = HCIOpcode(ogf: 0x08, ocf: 0x0003)
    public static let leSetRandomAddress = HCIOpcode(ogf: 0x08, ocf: 0x0005)
    public static let leSetAdvertisingParameters = HCIOpcode(ogf: 0x08, ocf: 0x0006)
    public static let leReadAdvertisingPhysicalChannelTxPower = HCIOpcode(ogf: 0x08, ocf: 0x0007)
    public static let leSetAdvertisingData = HCIOpcode(ogf: 0x08, ocf: 0x0008)
    public static let leSetScanResponseData = HCIOpcode(ogf: 0x08, ocf: 0x0009)
    public static let leSetAdvertisingEnable = HCIOpcode(ogf: 0x08, ocf: 0x000A)
    public static let leSetScanParameters = HCIOpcode(ogf: 0x08, ocf: 0x000B)
    public static let leSetScanEnable = HCIOpcode(ogf: 0x08, ocf: 0x000C)
    public static let leCreateConnection = HCIOpcode(ogf: 0x08, ocf: 0x000D)
    public static let leCreateConnectionCancel = HCIOpcode(ogf: 0x08, ocf: 0x000E)
    public static let leReadFilterAcceptListSize = HCIOpcode(ogf: 0x08, ocf: 0x000F)
    public static let leClearFilterAcceptList = HCIOpcode(ogf: 0x08, ocf: 0x0010)
    public static let leAddDeviceToFilterAcceptList = HCIOpcode(ogf: 0x08, ocf: 0x0011)
    public static let leRemoveDeviceFromFilterAcceptList = HCIOpcode(ogf: 0x08, ocf: 0x0012)
    public static let leConnectionUpdate = HCIOpcode(ogf: 0x08, ocf: 0x0013)
    public static let leReadRemoteFeatures = HCIOpcode(ogf: 0x08, ocf: 0x0016)
    public static let leEncrypt = HCIOpcode(ogf: 0x08, ocf: 0x0017)
    public static let leRand = HCIOpcode(ogf: 0x08, ocf: 0x0018)
    public static let leStartEncryption = HCIOpcode(ogf: 0x08, ocf: 0x0019)
    public static let leLongTermKeyRequestReply = HCIOpcode(ogf: 0x08, ocf: 0x001A)
    public static let leLongTermKeyRequestNegativeReply = HCIOpcode(ogf: 0x08, ocf: 0x001B)
    public static let leReadSupportedStates = HCIOpcode(ogf: 0x08, ocf: 0x001C)
    public static let leRemoteConnectionParameterRequestReply = HCIOpcode(ogf: 0x08, ocf: 0x0020)
    public static let leRemoteConnectionParameterRequestNegativeReply = HCIOpcode(ogf: 0x08, ocf: 0x0021)
    public static let leSetDataLength = HCIOpcode(ogf: 0x08, ocf: 0x0022)
    public static let leReadSuggestedDefaultDataLength = HCIOpcode(ogf: 0x08, ocf: 0x0023)
    public static let leWriteSuggestedDefaultDataLength = HCIOpcode(ogf: 0x08, ocf: 0x0024)
    public static let leReadMaximumDataLength = HCIOpcode(ogf: 0x08, ocf: 0x002F)
    public static let leReadPHY = HCIOpcode(ogf: 0x08, ocf: 0x0030)
    public static let leSetDefaultPHY = HCIOpcode(ogf: 0x08, ocf: 0x0031)
    public static let leSetPHY = HCIOpcode(ogf: 0x08, ocf: 0x0032)
    public static let leSetAdvertisingSetRandomAddress = HCIOpcode(ogf: 0x08, ocf: 0x0035)
    public static let leSetExtendedAdvertisingParameters = HCIOpcode(ogf: 0x08, ocf: 0x0036)
    public static let leSetExtendedAdvertisingData = HCIOpcode(ogf: 0x08, ocf: 0x0037)
    public static let leSetExtendedScanResponseData = HCIOpcode(ogf: 0x08, ocf: 0x0038)
    public static let leSetExtendedAdvertisingEnable = HCIOpcode(ogf: 0x08, ocf: 0x0039)
    public static let leReadMaximumAdvertisingDataLength = HCIOpcode(ogf: 0x08, ocf: 0x003A)
    public static let leReadNumberOfSupportedAdvertisingSets = HCIOpcode(ogf: 0x08, ocf: 0x003B)
    public static let leRemoveAdvertisingSet = HCIOpcode(ogf: 0x08, ocf: 0x003C)
    public static let leClearAdvertisingSets = HCIOpcode(ogf: 0x08, ocf: 0x003D)
    public static let leSetExtendedScanParameters = HCIOpcode(ogf: 0x08, ocf: 0x0041)
    public static let leSetExtendedScanEnable = HCIOpcode(ogf: 0x08, ocf: 0x0042)
    public static let leExtendedCreateConnection = HCIOpcode(ogf: 0x08, ocf: 0x0043)
    // Zephyr vendor commands (OGF 0x3F; zephyr/include/zephyr/bluetooth/hci_vs.h)
    public static let zephyrReadVersionInformation = HCIOpcode(ogf: 0x3F, ocf: 0x0001)
    public static let zephyrReadSupportedCommands = HCIOpcode(ogf: 0x3F, ocf: 0x0002)
    public static let zephyrReadStaticAddresses = HCIOpcode(ogf: 0x3F, ocf: 0x0009)

    private static let names: [UInt16: String] = [
        disconnect.rawValue: "HCI_Disconnect", readRemoteVersionInformation.rawValue: "HCI_Read_Remote_Version_Information",
        setEventMask.rawValue: "HCI_Set_Event_Mask", reset.rawValue: "HCI_Reset",
        readTransmitPowerLevel.rawValue: "HCI_Read_Transmit_Power_Level", setEventMaskPage2.rawValue: "HCI_Set_Event_Mask_Page_2",
        writeLEHostSupport.rawValue: "HCI_Write_LE_Host_Support",
        readLocalVersionInformation.rawValue: "HCI_Read_Local_Version_Information",
        readLocalSupportedCommands.rawValue: "HCI_Read_Local_Supported_Commands",
        readLocalSupportedFeatures.rawValue: "HCI_Read_Local_Supported_Features", readBufferSize.rawValue: "HCI_Read_Buffer_Size",
        readBDADDR.rawValue: "HCI_Read_BD_ADDR", readRSSI.rawValue: "HCI_Read_RSSI",
        leSetEventMask.rawValue: "HCI_LE_Set_Event_Mask", leReadBufferSize.rawValue: "HCI_LE_Read_Buffer_Size",
        leReadLocalSupportedFeatures.rawValue: "HCI_LE_Read_Local_Supported_Features",
        leSetRandomAddress.rawValue: "HCI_LE_Set_Random_Address",
        leSetAdvertisingParameters.rawValue: "HCI_LE_Set_Advertising_Parameters",
        leReadAdvertisingPhysicalChannelTxPower.rawValue: "HCI_LE_Read_Advertising_Physical_Channel_Tx_Power",
        leSetAdvertisingData.rawValue: "HCI_LE_Set_Advertising_Data", leSetScanResponseData.rawValue: "HCI_LE_Set_Scan_Response_Data",
        leSetAdvertisingEnable.rawValue: "HCI_LE_Set_Advertising_Enable", leSetScanParameters.rawValue: "HCI_LE_Set_Scan_Parameters",
        leSetScanEnable.rawValue: "HCI_LE_Set_Scan_Enable", leCreateConnection.rawValue: "HCI_LE_Create_Connection",
        leCreateConnectionCancel.rawValue: "HCI_LE_Create_Connection_Cancel",
        leReadFilterAcceptListSize.rawValue: "HCI_LE_Read_Filter_Accept_List_Size",
        leClearFilterAcceptList.rawValue: "HCI_LE_Clear_Filter_Accept_List",
        leAddDeviceToFilterAcceptList.rawValue: "HCI_LE_Add_Device_To_Filter_Accept_List",
        leRemoveDeviceFromFilterAcceptList.rawValue: "HCI_LE_Remove_Device_From_Filter_Accept_List",
        leConnectionUpdate.rawValue: "HCI_LE_Connection_Update", leReadRemoteFeatures.rawValue: "HCI_LE_Read_Remote_Features",
        leEncrypt.rawValue: "HCI_LE_Encrypt", leRand.rawValue: "HCI_LE_Rand", leStartEncryption.rawValue: "HCI_LE_Enable_Encryption",
        leLongTermKeyRequestReply.rawValue: "HCI_LE_Long_Term_Key_Request_Reply",
        leLongTermKeyRequestNegativeReply.rawValue: "HCI_LE_Long_Term_Key_Request_Negative_Reply",
        leReadSupportedStates.rawValue: "HCI_LE_Read_Supported_States",
        leRemoteConnectionParameterRequestReply.rawValue: "HCI_LE_Remote_Connection_Parameter_Request_Reply",
        leRemoteConnectionParameterRequestNegativeReply.rawValue: "HCI_LE_Remote_Connection_Parameter_Request_Negative_Reply",
        leSetDataLength.rawValue: "HCI_LE_Set_Data_Length",
        leReadSuggestedDefaultDataLength.rawValue: "HCI_LE_Read_Suggested_Default_Data_Length",
        leWriteSuggestedDefaultDataLength.rawValue: "HCI_LE_Write_Suggested_Default_Data_Length",
        leReadMaximumDataLength.rawValue: "HCI_LE_Read_Maximum_Data_Length", leReadPHY.rawValue: "HCI_LE_Read_PHY",
        leSetDefaultPHY.rawValue: "HCI_LE_Set_Default_PHY", leSetPHY.rawValue: "HCI_LE_Set_PHY",
        leSetAdvertisingSetRandomAddress.rawValue: "HCI_LE_Set_Advertising_Set_Random_Address",
        leSetExtendedAdvertisingParameters.rawValue: "HCI_LE_Set_Extended_Advertising_Parameters",
        leSetExtendedAdvertisingData.rawValue: "HCI_LE_Set_Extended_Advertising_Data",
        leSetExtendedScanResponseData.rawValue: "HCI_LE_Set_Extended_Scan_Response_Data",
        leSetExtendedAdvertisingEnable.rawValue: "HCI_LE_Set_Extended_Advertising_Enable",
        leReadMaximumAdvertisingDataLength.rawValue: "HCI_LE_Read_Maximum_Advertising_Data_Length",
        leReadNumberOfSupportedAdvertisingSets.rawValue: "HCI_LE_Read_Number_of_Supported_Advertising_Sets",
        leRemoveAdvertisingSet.rawValue: "HCI_LE_Remove_Advertising_Set", leClearAdvertisingSets.rawValue: "HCI_LE_Clear_Advertising_Sets",
        leSetExtendedScanParameters.rawValue: "HCI_LE_Set_Extended_Scan_Parameters",
        leSetExtendedScanEnable.rawValue: "HCI_LE_Set_Extended_Scan_Enable",
        leExtendedCreateConnection.rawValue: "HCI_LE_Extended_Create_Connection",
        zephyrReadVersionInformation.rawValue: "Zephyr_Read_Version_Information",
        zephyrReadSupportedCommands.rawValue: "Zephyr_Read_Supported_Commands",
        zephyrReadStaticAddresses.rawValue: "Zephyr_Read_Static_Addresses",
    ]

    public var description: String {
        Self.names[rawValue] ?? "HCI opcode 0x" + String(rawValue, radix: 16)
    }
}
