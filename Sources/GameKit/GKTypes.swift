// GameKit's peer-session enums (GKPublicConstants.h, GKPeerPickerController.h), with their raw values and
// the Swift names Xcode shows an iOS app.
@_exported import Foundation

public enum GKSessionMode: Int, Sendable {
    /// Advertises; receives connection requests.
    case server = 0
    /// Browses; sees servers as available or unavailable.
    case client = 1
    /// Both.
    case peer = 2
}

/// A peer's state as `session(_:peer:didChange:)` reports it (GKPeerConnectionState, whose Swift cases keep
/// the `state` prefix of GKPeerStateAvailable…).
public enum GKPeerConnectionState: Int, Sendable {
    case stateAvailable = 0
    case stateUnavailable = 1
    case stateConnected = 2
    case stateDisconnected = 3
    case stateConnecting = 4
    case stateConnectedRelay = 5
}

public enum GKSendDataMode: Int, Sendable {
    /// As soon as possible, fragmented and reassembled, in order; may stall under congestion.
    case reliable = 0
    /// Best effort and immediate: no delivery or order guarantee; never stalls.
    case unreliable = 1
}

/// The picker's connection types. Apple's Swift declaration is an enumeration (GKPeerPickerConnectionTypeOnline
/// = 1 << 0, …Nearby = 1 << 1), so an exhaustive `switch` needs no `default`. The mask of both types has no
/// case here (an imported C enum holds any raw value; a Swift one cannot): `GKPeerPickerConnectionType(rawValue: 3)`
/// is nil. Only `.nearby` connects on Linux, as on iOS since Game Center took over online play.
public enum GKPeerPickerConnectionType: UInt, Sendable {
    case online = 1
    case nearby = 2
}
