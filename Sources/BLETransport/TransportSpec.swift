// Transport names, as Bumble spells them: `virtual`, `tcp-client:HOST:PORT`, `tcp-server:PORT`,
// `serial:PATH[,BAUD]`, `hci-socket:N`, `unix:PATH`. `BLE_TRANSPORT` holds one of these.

public enum TransportSpec: Equatable, Sendable, CustomStringConvertible {
    case virtual
    case tcpClient(host: String, port: UInt16)
    case tcpServer(port: UInt16)
    case serial(path: String, baud: Int)
    case hciSocket(index: Int)
    case unix(path: String)

    public static let environmentVariable = "BLE_TRANSPORT"

    /// Parses a transport name; throws `TransportError.invalidSpec` with the reason.
    public init(parsing text: String) throws {
        let s = text.trimmingCharacters(in: .whitespaces)
        if s.isEmpty || s == "virtual" { self = .virtual; return }
        guard let colon = s.firstIndex(of: ":") else {
            throw TransportError.invalidSpec("\"\(s)\": expected virtual, tcp-client:HOST:PORT, tcp-server:PORT, serial:PATH[,BAUD], hci-socket:N or unix:PATH")
        }
        let kind = s[..<colon]
        let rest = String(s[s.index(after: colon)...])
        switch kind {
        case "tcp-client":
            guard let c = rest.lastIndex(of: ":"), let port = UInt16(rest[rest.index(after: c)...]), port > 0 else {
                throw TransportError.invalidSpec("\"\(s)\": tcp-client needs HOST:PORT")
            }
            var host = String(rest[..<c])
            if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            if host.isEmpty { host = "127.0.0.1" }
            self = .tcpClient(host: host, port: port)
        case "tcp-server":
            let portText = rest.split(separator: ":").last.map(String.init) ?? rest
            guard let port = UInt16(portText) else { throw TransportError.invalidSpec("\"\(s)\": tcp-server needs a port") }
            self = .tcpServer(port: port)
        case "serial":
            let parts = rest.split(separator: ",", maxSplits: 1).map(String.init)
            guard let path = parts.first, !path.isEmpty else { throw TransportError.invalidSpec("\"\(s)\": serial needs a path") }
            var baud = 1_000_000
            if parts.count == 2 {
                guard let b = Int(parts[1]), b > 0 else { throw TransportError.invalidSpec("\"\(s)\": bad baud rate \(parts[1])") }
                baud = b
            }
            self = .serial(path: path, baud: baud)
        case "hci-socket":
            guard let n = Int(rest), n >= 0 else { throw TransportError.invalidSpec("\"\(s)\": hci-socket needs an adapter index") }
            self = .hciSocket(index: n)
        case "unix":
            guard !rest.isEmpty else { throw TransportError.invalidSpec("\"\(s)\": unix needs a path") }
            self = .unix(path: rest)
        default:
            throw TransportError.invalidSpec("\"\(s)\": unknown transport kind \"\(kind)\"")
        }
    }

    /// The spec from `BLE_TRANSPORT`, `virtual` when unset.
    public static func fromEnvironment() throws -> TransportSpec {
        guard let v = getenv(environmentVariable) else { return .virtual }
        return try TransportSpec(parsing: String(cString: v))
    }

    public var description: String {
        switch self {
        case .virtual: return "virtual"
        case let .tcpClient(h, p): return "tcp-client:\(h):\(p)"
        case let .tcpServer(p): return "tcp-server:\(p)"
        case let .serial(path, baud): return "serial:\(path),\(baud)"
        case let .hciSocket(i): return "hci-socket:\(i)"
        case let .unix(path): return "unix:\(path)"
        }
    }
}

#if canImport(Glibc)
import Glibc
#endif
import Foundation
