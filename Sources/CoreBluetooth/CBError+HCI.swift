// How link-layer outcomes read as Core Bluetooth errors.
import Foundation
import BLEHCI

extension CBError {
    /// The CBError an app sees for a connection that failed or dropped with an HCI reason. The HCI status
    /// itself is in the error's `userInfo` (failure reason, and `CBHCIStatusKey` as a number), so the real
    /// cause is never lost. iOS documents no mapping; this one follows the codes' meanings.
    package static func from(hciStatus status: HCIStatus, connecting: Bool) -> CBError {
        let code: Code
        switch status {
        case .connectionTimeout, .lmpResponseTimeout: code = .connectionTimeout
        case .remoteUserTerminated, .remoteLowResources, .remotePowerOff: code = .peripheralDisconnected
        case .connectionLimitExceeded, .limitReached: code = .connectionLimitReached
        case .memoryCapacityExceeded, .rejectedLimitedResources: code = .outOfSpace
        case .authenticationFailure, .pinOrKeyMissing: code = .peerRemovedPairingInformation
        case .connectionTerminatedMICFailure: code = .encryptionTimedOut
        case .connectionFailedToBeEstablished: code = .connectionFailed
        case .unsupportedRemoteFeature, .unsupportedFeatureOrParameter: code = .operationNotSupported
        case .operationCancelledByHost: code = .operationCancelled
        default: code = connecting ? .connectionFailed : .unknown
        }
        return CBError(
            code,
            userInfo: [
                NSLocalizedFailureReasonErrorKey: "HCI status 0x\(String(status.rawValue, radix: 16, uppercase: true)): \(status)",
                CBHCIStatusKey: NSNumber(value: status.rawValue),
            ])
    }
}

/// `userInfo` key of connection errors: the HCI status (an NSNumber) the controller reported.
/// (Not an Apple key: iOS keeps the controller's reason to itself.)
public let CBHCIStatusKey = "OCBHCIStatus"

#if !canImport(Darwin)
/// Seconds since 2001-01-01, as Core Foundation counts them.
public typealias CFAbsoluteTime = Double

/// The current time in seconds since 2001-01-01 (Linux addition: Core Foundation provides it on Apple platforms).
@discardableResult
public func CFAbsoluteTimeGetCurrent() -> CFAbsoluteTime {
    Date().timeIntervalSinceReferenceDate
}
#endif
