// How link-layer outcomes read as Core Bluetooth errors.
import Foundation
import BLEHCI

extension CBError {
    /// The CBError an app sees for a connection that failed or dropped with an HCI reason.
    package static func from(hciStatus status: HCIStatus, connecting: Bool) -> CBError {
        if connecting { return CBError(.connectionFailed) }
        switch status {
        case .connectionTimeout, .lmpResponseTimeout: return CBError(.connectionTimeout)
        case .remoteUserTerminated, .remoteLowResources, .remotePowerOff: return CBError(.peripheralDisconnected)
        case .connectionFailedToBeEstablished: return CBError(.connectionFailed)
        case .authenticationFailure, .pinOrKeyMissing: return CBError(.peerRemovedPairingInformation)
        case .connectionTerminatedMICFailure: return CBError(.encryptionTimedOut)
        default: return CBError(.unknown)
        }
    }
}

#if !canImport(Darwin)
/// Seconds since 2001-01-01, as Core Foundation counts them.
public typealias CFAbsoluteTime = Double

@discardableResult
public func CFAbsoluteTimeGetCurrent() -> CFAbsoluteTime {
    Date().timeIntervalSinceReferenceDate
}
#endif
