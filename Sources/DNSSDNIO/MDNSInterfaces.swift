// The machine's interfaces as mDNS sees them: which are up and running, their IPv4 addresses
// (getifaddrs) and their IPv6 addresses with the kernel's flags (/proc/net/if_inet6, which shows the
// calling process's network namespace), so that an address still in duplicate address detection
// (tentative) is not used yet: sending from it fails with EADDRNOTAVAIL.
import DNSSD
import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct MDNSInterface: Equatable, Sendable {
    var index: UInt32
    var name: String
    /// IFF_* flags (net/if.h).
    var flags: UInt32
    var ipv4: [[UInt8]] = []
    /// Usable IPv6 addresses (not tentative, DAD not failed).
    var ipv6: [[UInt8]] = []

    var isLoopback: Bool { flags & UInt32(IFF_LOOPBACK) != 0 }
    var isUpAndRunning: Bool { flags & UInt32(IFF_UP) != 0 && flags & UInt32(IFF_RUNNING) != 0 }
    var supportsMulticast: Bool { flags & UInt32(IFF_MULTICAST) != 0 }
    /// IPv6 mDNS (ff02::fb) is link-local: only an interface with a usable fe80::/10 address can send it.
    var hasUsableLinkLocal: Bool { ipv6.contains { $0[0] == 0xFE && $0[1] & 0xC0 == 0x80 } }
}

enum MDNSInterfaces {
    /// IFA_F_* flags of /proc/net/if_inet6 (linux/if_addr.h).
    static let dadFailed: UInt32 = 0x08
    static let tentative: UInt32 = 0x40

    /// Every interface now, by index.
    static func current() -> [MDNSInterface] {
        var byName: [String: MDNSInterface] = [:]
        var list: UnsafeMutablePointer<ifaddrs>?
        if getifaddrs(&list) == 0, let first = list {
            defer { freeifaddrs(list) }
            var p: UnsafeMutablePointer<ifaddrs>? = first
            while let ifa = p {
                defer { p = ifa.pointee.ifa_next }
                guard let cName = ifa.pointee.ifa_name else { continue }
                let name = String(cString: cName)
                let index = if_nametoindex(cName)
                guard index != 0 else { continue }
                var entry = byName[name] ?? MDNSInterface(index: index, name: name, flags: 0)
                entry.flags = UInt32(ifa.pointee.ifa_flags)
                if let sa = ifa.pointee.ifa_addr, sa.pointee.sa_family == sa_family_t(AF_INET) {
                    let bytes = sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                        withUnsafeBytes(of: sin.pointee.sin_addr) { Array($0) }
                    }
                    if !entry.ipv4.contains(bytes) { entry.ipv4.append(bytes) }
                }
                byName[name] = entry
            }
        }
        // IPv6 from procfs: "<32 hex address> <ifindex> <prefix len> <scope> <flags> <name>", all hex.
        if let text = try? String(contentsOfFile: "/proc/net/if_inet6", encoding: .utf8) {
            for line in text.split(separator: "\n") {
                let f = line.split(separator: " ", omittingEmptySubsequences: true)
                guard f.count >= 6, f[0].count == 32, let flags = UInt32(f[4], radix: 16), let index = UInt32(f[1], radix: 16) else { continue }
                guard flags & (tentative | dadFailed) == 0 else { continue }
                var bytes: [UInt8] = []
                var i = f[0].startIndex
                while i < f[0].endIndex {
                    let j = f[0].index(i, offsetBy: 2)
                    bytes.append(UInt8(f[0][i..<j], radix: 16) ?? 0)
                    i = j
                }
                let name = String(f[5])
                var entry = byName[name] ?? MDNSInterface(index: index, name: name, flags: 0)
                if !entry.ipv6.contains(bytes) { entry.ipv6.append(bytes) }
                byName[name] = entry
            }
        }
        return byName.values.sorted { $0.index < $1.index }
    }

    /// The interfaces mDNS should use: the named ones when given; otherwise every interface that is up,
    /// running (carrier) and multicast-capable except loopback, or loopback when no other is usable (a
    /// machine, or a namespace, with nothing else).
    static func chosen(from all: [MDNSInterface], wanted: [String]?) -> [MDNSInterface] {
        let live = all.filter(\.isUpAndRunning)
        if let wanted { return live.filter { wanted.contains($0.name) } }
        let real = live.filter { !$0.isLoopback && $0.supportsMulticast && (!$0.ipv4.isEmpty || !$0.ipv6.isEmpty) }
        return real.isEmpty ? live.filter(\.isLoopback) : real
    }
}
