// CBCentralManager.Feature (CBCentralManager.h). Apple nests it in CBCentralManager; it lives here at the
// top level so that the manager can declare `public typealias Feature = CBCentralManagerFeature`.

/// Features that `CBCentralManager.supports(_:)` can be asked about.
public struct CBCentralManagerFeature: OptionSet, Hashable, Sendable {
    public let rawValue: UInt

    public init(rawValue: UInt) { self.rawValue = rawValue }

    /// Extended scanning and connecting (LE Extended Advertising, Core Spec 5.0).
    public static let extendedScanAndConnect = CBCentralManagerFeature(rawValue: 1 << 0)
}

/// An L2CAP Protocol/Service Multiplexer value (LE dynamic PSMs are 0x0080–0x00FF).
public typealias CBL2CAPPSM = UInt16
