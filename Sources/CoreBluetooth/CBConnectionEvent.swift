// Connection events and their matching options (CBCentralManager.h, CBCentralManagerConstants.h).

/// The kind of event reported by `centralManager(_:connectionEventDidOccur:for:)`.
public enum CBConnectionEvent: Int, Sendable {
    case peerDisconnected = 0
    case peerConnected = 1
}

/// Keys of the options dictionary passed to `registerForConnectionEvents(options:)`.
public struct CBConnectionEventMatchingOption: RawRepresentable, Hashable, Sendable {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }

    /// An array of `CBUUID` (at most 4): match peripherals exposing any of these services.
    public static let serviceUUIDs = CBConnectionEventMatchingOption(rawValue: "kCBConnectionEventMatchingOptionServiceUUIDs")
    /// An array of `UUID`: match peripherals with these identifiers.
    public static let peripheralUUIDs = CBConnectionEventMatchingOption(rawValue: "kCBConnectionEventMatchingOptionPeripheralUUIDs")
}
