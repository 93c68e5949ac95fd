// A TCP port for a test that must name its port before something listens on it (a server transport given a
// port, a peer process told where to connect). A port found by binding port 0 and closing comes from the kernel's
// ephemeral range, and the next bind to port 0 anywhere (another test's listener, a connect's own end) may get it
// in the meantime: then one test's client reaches another test's listener. Under load a test once waited on such
// a stray connection for ever. These ports come from below the ephemeral range, which port 0 never hands out.
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A loopback TCP port below the kernel's ephemeral range that nobody listens on now (bound and closed to check).
public func reservedPort() -> UInt16 {
    let low = 20_000
    var lowestEphemeral = 32_768
    if let range = try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8),
        let first = range.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first.flatMap({ Int($0) }),
        first > low + 1_000
    {
        lowestEphemeral = first
    }
    while true {
        let port = UInt16(Int.random(in: low..<lowestEphemeral))
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { continue }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if bound == 0 { return port }
    }
}
