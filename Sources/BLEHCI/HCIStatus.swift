// Controller error codes (Vol 1 Part F §1.3). Unknown codes are kept.

public struct HCIStatus: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let success = HCIStatus(rawValue: 0x00)
    public static let unknownCommand = HCIStatus(rawValue: 0x01)
    public static let unknownConnectionIdentifier = HCIStatus(rawValue: 0x02)
    public static let hardwareFailure = HCIStatus(rawValue: 0x03)
    public static let pageTimeout = HCIStatus(rawValue: 0x04)
    public static let authenticationFailure = HCIStatus(rawValue: 0x05)
    public static let pinOrKeyMissing = HCIStatus(rawValue: 0x06)
    public static let memoryCapacityExceeded = HCIStatus(rawValue: 0x07)
    public static let connectionTimeout = HCIStatus(rawValue: 0x08)
    public static let connectionLimitExceeded = HCIStatus(rawValue: 0x09)
    public static let aclConnectionAlreadyExists = HCIStatus(rawValue: 0x0B)
    public static let commandDisallowed = HCIStatus(rawValue: 0x0C)
    public static let rejectedLimitedResources = HCIStatus(rawValue: 0x0D)
    public static let rejectedSecurityReasons = HCIStatus(rawValue: 0x0E)
    public static let connectionAcceptTimeoutExceeded = HCIStatus(rawValue: 0x10)
    public static let unsupportedFeatureOrParameter = HCIStatus(rawValue: 0x11)
    public static let invalidParameters = HCIStatus(rawValue: 0x12)
    public static let remoteUserTerminated = HCIStatus(rawValue: 0x13)
    public static let remoteLowResources = HCIStatus(rawValue: 0x14)
    public static let remotePowerOff = HCIStatus(rawValue: 0x15)
    public static let connectionTerminatedByLocalHost = HCIStatus(rawValue: 0x16)
    public static let repeatedAttempts = HCIStatus(rawValue: 0x17)
    public static let pairingNotAllowed = HCIStatus(rawValue: 0x18)
    public static let unsupportedRemoteFeature = HCIStatus(rawValue: 0x1A)
    public static let invalidLMPParameters = HCIStatus(rawValue: 0x1E)
    public static let unspecifiedError = HCIStatus(rawValue: 0x1F)
    public static let unsupportedLMPParameterValue = HCIStatus(rawValue: 0x20)
    public static let lmpResponseTimeout = HCIStatus(rawValue: 0x22)
    public static let lmpErrorTransactionCollision = HCIStatus(rawValue: 0x23)
    public static let instantPassed = HCIStatus(rawValue: 0x28)
    public static let pairingWithUnitKeyNotSupported = HCIStatus(rawValue: 0x29)
    public static let differentTransactionCollision = HCIStatus(rawValue: 0x2A)
    public static let insufficientSecurity = HCIStatus(rawValue: 0x2F)
    public static let parameterOutOfRange = HCIStatus(rawValue: 0x30)
    public static let roleSwitchPending = HCIStatus(rawValue: 0x32)
    public static let controllerBusy = HCIStatus(rawValue: 0x3A)
    public static let unacceptableConnectionParameters = HCIStatus(rawValue: 0x3B)
    public static let advertisingTimeout = HCIStatus(rawValue: 0x3C)
    public static let connectionTerminatedMICFailure = HCIStatus(rawValue: 0x3D)
    public static let connectionFailedToBeEstablished = HCIStatus(rawValue: 0x3E)
    public static let unknownAdvertisingIdentifier = HCIStatus(rawValue: 0x42)
    public static let limitReached = HCIStatus(rawValue: 0x43)
    public static let operationCancelledByHost = HCIStatus(rawValue: 0x44)
    public static let packetTooLong = HCIStatus(rawValue: 0x45)

    private static let names: [UInt8: String] = [
        0x00: "Success", 0x01: "Unknown HCI Command", 0x02: "Unknown Connection Identifier", 0x03: "Hardware Failure",
        0x04: "Page Timeout", 0x05: "Authentication Failure", 0x06: "PIN or Key Missing", 0x07: "Memory Capacity Exceeded",
        0x08: "Connection Timeout", 0x09: "Connection Limit Exceeded", 0x0B: "ACL Connection Already Exists",
        0x0C: "Command Disallowed", 0x0D: "Connection Rejected due to Limited Resources",
        0x0E: "Connection Rejected due to Security Reasons", 0x10: "Connection Accept Timeout Exceeded",
        0x11: "Unsupported Feature or Parameter Value", 0x12: "Invalid HCI Command Parameters",
        0x13: "Remote User Terminated Connection", 0x14: "Remote Device Terminated Connection due to Low Resources",
        0x15: "Remote Device Terminated Connection due to Power Off", 0x16: "Connection Terminated By Local Host",
        0x17: "Repeated Attempts", 0x18: "Pairing Not Allowed", 0x1A: "Unsupported Remote Feature",
        0x1E: "Invalid LMP/LL Parameters", 0x1F: "Unspecified Error", 0x20: "Unsupported LMP/LL Parameter Value",
        0x22: "LMP/LL Response Timeout", 0x23: "LMP/LL Error Transaction Collision", 0x28: "Instant Passed",
        0x29: "Pairing With Unit Key Not Supported", 0x2A: "Different Transaction Collision", 0x2F: "Insufficient Security",
        0x30: "Parameter Out Of Mandatory Range", 0x32: "Role Switch Pending", 0x3A: "Controller Busy",
        0x3B: "Unacceptable Connection Parameters", 0x3C: "Advertising Timeout",
        0x3D: "Connection Terminated due to MIC Failure", 0x3E: "Connection Failed to be Established",
        0x42: "Unknown Advertising Identifier", 0x43: "Limit Reached", 0x44: "Operation Cancelled by Host",
        0x45: "Packet Too Long",
    ]

    public var description: String {
        let hex = "0x" + (rawValue < 16 ? "0" : "") + String(rawValue, radix: 16)
        return Self.names[rawValue].map { "\($0) (\(hex))" } ?? "HCI error \(hex)"
    }
}
