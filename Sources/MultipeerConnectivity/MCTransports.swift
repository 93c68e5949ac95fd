// Which transports Multipeer uses on Linux (an addition to Apple's API: iOS picks Wi-Fi, peer-to-peer Wi-Fi
// and Bluetooth itself). `.network` is mDNS discovery with TCP/TLS sessions; `.bluetooth` is discovery over
// LE advertising with sessions over L2CAP credit-based channels, on the controller `BLE_TRANSPORT` names.
import Foundation
import PeerBluetooth

/// Which transports a session, an advertiser or a browser uses (Linux addition: iOS chooses among Wi-Fi,
/// peer-to-peer Wi-Fi and Bluetooth itself). The default comes from `MC_TRANSPORTS`, else the network, plus
/// Bluetooth when `BLE_TRANSPORT` is set.
public struct MCTransports: OptionSet, Sendable, CustomStringConvertible {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// The local network: our mDNS/DNS-SD responder for discovery, TCP (TLS 1.3 by default) for sessions.
    public static let network = MCTransports(rawValue: 1)
    /// Bluetooth LE through this package's own stack: LE adverts for discovery, L2CAP credit-based channels for sessions.
    public static let bluetooth = MCTransports(rawValue: 2)

    /// `MC_TRANSPORTS` (`network`, `bluetooth` or `network,bluetooth`; `tcp`/`ble` also read) when set;
    /// otherwise the network, plus Bluetooth when `BLE_TRANSPORT` names a controller. (With `BLE_TRANSPORT`
    /// unset the controller would be the in-process virtual radio, which reaches only peers of the same
    /// process: ask for it with `MC_TRANSPORTS=bluetooth` or `transports`.)
    public static var `default`: MCTransports {
        let env = ProcessInfo.processInfo.environment
        if let text = env["MC_TRANSPORTS"], let parsed = MCTransports(parsing: text) { return parsed }
        return env["BLE_TRANSPORT"].map { $0.isEmpty ? .network : [.network, .bluetooth] } ?? .network
    }

    /// Parses `network`, `bluetooth`, `tcp`, `ble`, `both`, comma-separated; nil for anything else.
    public init?(parsing text: String) {
        var t: MCTransports = []
        for word in text.lowercased().split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) {
            switch word {
            case "network", "tcp", "wifi", "lan": t.insert(.network)
            case "bluetooth", "ble": t.insert(.bluetooth)
            case "both", "all": t.formUnion([.network, .bluetooth])
            default: return nil
            }
        }
        guard !t.isEmpty else { return nil }
        self = t
    }

    public var description: String {
        [contains(.network) ? "network" : nil, contains(.bluetooth) ? "bluetooth" : nil].compactMap { $0 }.joined(separator: ",")
    }
}
