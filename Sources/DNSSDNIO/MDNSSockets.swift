// The UDP edge of mDNS, following the machine's network.
//
// Port 5353 on IPv4 (224.0.0.251) and IPv6 (ff02::fb), shared with avahi-daemon through SO_REUSEADDR and
// SO_REUSEPORT, multicast loopback on (two processes on one host hear each other), TTL / hop limit 255
// (RFC 6762 §11). One socket per family; the groups are joined on each interface in use, and multicast is
// sent once per interface by pointing IP_MULTICAST_IF / IPV6_MULTICAST_IF at it before each write.
//
// Following the network (as mDNSResponder and Avahi do): a netlink socket subscribed to RTMGRP_LINK,
// RTMGRP_IPV4_IFADDR and RTMGRP_IPV6_IFADDR tells us at once when a link goes up or down, loses its carrier,
// or gains, loses or finishes verifying an address. We do not parse those messages: each burst triggers,
// 100 ms later, a complete re-enumeration (getifaddrs and /proc/net/if_inet6), compared with what we use.
// One path for start-up and for every change, no incremental state to drift; the cost is a few system calls
// per change. Where netlink is not available (a sandbox refusing it) the same re-enumeration runs every 2 s;
// with netlink a slow one every 30 s guards against a lost notification (ENOBUFS).
// The differences go to the owner: interfaces gained (groups joined, records announced again), lost (groups
// left, records learnt there forgotten), and our address list (host records re-announced, old ones withdrawn).
//
// Sockets are plain non-blocking file descriptors, not NIO channels: NIO closes a datagram channel on
// any send error but ECONNREFUSED, and an interface whose IPv6 address is still tentative (the first seconds
// after a link comes up) makes sends fail with EADDRNOTAVAIL. Here a failed send is only a failed send:
// reported once through `log` (per family, interface and errno, until the interfaces change), and followed by
// a re-enumeration. IPv6 is used on an interface only once its link-local address is usable. A family the
// machine lacks (no IPv6 in the kernel, IPv6 disabled, no address) is skipped without a word.
//
// Threading contract: sends, re-enumeration and the callbacks run on `loop`. One reader thread polls the
// sockets, the netlink socket and a wake-up pipe, and hands datagrams (with the interface they arrived on,
// from IP_PKTINFO / IPV6_PKTINFO) to `loop`. `close()` stops the thread, then closes the descriptors.
import DNSSD
import Foundation
import NIOCore
#if canImport(Glibc)
import Glibc
#endif

/// struct sockaddr_nl (linux/netlink.h), which Glibc's module does not bring.
struct NetlinkAddress {
    var family: sa_family_t
    var pad: UInt16
    var pid: UInt32
    var groups: UInt32
}

/// What changed in the interfaces mDNS uses.
struct MDNSNetworkChange {
    var added: Set<UInt32>
    var removed: Set<UInt32>
    var addresses: [IPAddress]
}

final class MDNSSockets: @unchecked Sendable {
    let loop: EventLoop
    let log: @Sendable (String) -> Void
    private let wanted: [String]?
    private let v4: CInt
    private let v6: CInt
    private let netlink: CInt
    private let wake: (read: CInt, write: CInt)
    private let receive: @Sendable ([UInt8], MDNSPeer) -> Void
    private let changed: @Sendable (MDNSNetworkChange) -> Void

    // Loop-confined.
    private var active4: [MDNSInterface] = []
    private var active6: [MDNSInterface] = []
    private var joined4: Set<UInt32> = []
    private var joined6: Set<UInt32> = []
    private(set) var ourAddresses: [IPAddress] = []
    private var reported: Set<String> = []
    private var rescanScheduled = false
    private var closed = false

    private let readerDone = DispatchSemaphore(value: 0)

    // Linux socket option numbers (linux/in.h, linux/in6.h, linux/netlink.h, linux/rtnetlink.h).
    static let ipPktInfo: CInt = 8, ipMulticastIF: CInt = 32, ipMulticastTTL: CInt = 33, ipMulticastLoop: CInt = 34
    static let ipAddMembership: CInt = 35, ipDropMembership: CInt = 36
    static let ipv6MulticastIF: CInt = 17, ipv6MulticastHops: CInt = 18, ipv6MulticastLoop: CInt = 19
    static let ipv6AddMembership: CInt = 20, ipv6DropMembership: CInt = 21, ipv6V6Only: CInt = 26
    static let ipv6RecvPktInfo: CInt = 49, ipv6PktInfo: CInt = 50
    static let rtmgrpLink: UInt32 = 0x1, rtmgrpIPv4IfAddr: UInt32 = 0x10, rtmgrpIPv6IfAddr: UInt32 = 0x100

    static let group4: [UInt8] = [224, 0, 0, 251]
    static let group6: [UInt8] = [0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFB]

    private init(
        loop: EventLoop, wanted: [String]?, v4: CInt, v6: CInt, netlink: CInt, wake: (CInt, CInt),
        log: @escaping @Sendable (String) -> Void, receive: @escaping @Sendable ([UInt8], MDNSPeer) -> Void,
        changed: @escaping @Sendable (MDNSNetworkChange) -> Void
    ) {
        self.loop = loop; self.wanted = wanted; self.v4 = v4; self.v6 = v6; self.netlink = netlink; self.wake = wake
        self.log = log; self.receive = receive; self.changed = changed
    }

    /// Binds port 5353 in each wanted family, subscribes to netlink, joins the groups on the interfaces usable
    /// now and starts the reader. Throws `.socketUnavailable` only when no family could bind the port; having
    /// no usable interface yet is not an error (they are joined when they come).
    /// `receive` and `changed` run on `loop`.
    static func open(
        on loop: EventLoop, interfaces wanted: [String]?, ipv4: Bool, ipv6: Bool,
        log: @escaping @Sendable (String) -> Void,
        receive: @escaping @Sendable ([UInt8], MDNSPeer) -> Void,
        changed: @escaping @Sendable (MDNSNetworkChange) -> Void
    ) throws(MDNSError) -> MDNSSockets {
        var errors: [String] = []
        let v4 = ipv4 ? openSocket(family: AF_INET, errors: &errors) : -1
        let v6 = ipv6 ? openSocket(family: AF_INET6, errors: &errors) : -1
        if v4 < 0 && v6 < 0 {
            throw .socketUnavailable(reason: errors.isEmpty ? "neither IPv4 nor IPv6 is available" : errors.joined(separator: "; "))
        }
        for e in errors { log("mDNS: \(e) (continuing without it)") }
        var fds: [CInt] = [-1, -1]
        guard pipe(&fds) == 0 else {
            if v4 >= 0 { Glibc.close(v4) }
            if v6 >= 0 { Glibc.close(v6) }
            throw .socketUnavailable(reason: "pipe: \(String(cString: strerror(errno)))")
        }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
        let sockets = MDNSSockets(
            loop: loop, wanted: wanted, v4: v4, v6: v6, netlink: openNetlink(), wake: (fds[0], fds[1]),
            log: log, receive: receive, changed: changed)
        try? loop.submit { sockets.rescan(initial: true) }.wait()
        let thread = Thread { sockets.readLoop() }
        thread.name = "mDNS reader"
        thread.start()
        return sockets
    }

    /// A bound, non-blocking socket of `family` on port 5353, or -1 (with the reason in `errors`, except
    /// when the kernel has no such family: that is skipped quietly).
    private static func openSocket(family: CInt, errors: inout [String]) -> CInt {
        let fd = socket(family, CInt(SOCK_DGRAM.rawValue) | CInt(SOCK_NONBLOCK.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        let name = family == AF_INET ? "IPv4" : "IPv6"
        guard fd >= 0 else {
            if errno != EAFNOSUPPORT { errors.append("\(name): socket: \(String(cString: strerror(errno)))") }
            return -1
        }
        func set(_ level: CInt, _ option: CInt, _ value: CInt) {
            var v = value
            _ = setsockopt(fd, level, option, &v, socklen_t(MemoryLayout<CInt>.size))
        }
        set(SOL_SOCKET, SO_REUSEADDR, 1)
        set(SOL_SOCKET, SO_REUSEPORT, 1)
        var result: CInt
        if family == AF_INET {
            set(CInt(IPPROTO_IP), ipPktInfo, 1)
            set(CInt(IPPROTO_IP), ipMulticastTTL, 255)
            set(CInt(IPPROTO_IP), ipMulticastLoop, 1)
            var sa = sockaddr_in()
            sa.sin_family = sa_family_t(AF_INET)
            sa.sin_port = UInt16(5353).bigEndian
            result = withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        } else {
            set(CInt(IPPROTO_IPV6), ipv6V6Only, 1)
            set(CInt(IPPROTO_IPV6), ipv6RecvPktInfo, 1)
            set(CInt(IPPROTO_IPV6), ipv6MulticastHops, 255)
            set(CInt(IPPROTO_IPV6), ipv6MulticastLoop, 1)
            var sa = sockaddr_in6()
            sa.sin6_family = sa_family_t(AF_INET6)
            sa.sin6_port = UInt16(5353).bigEndian
            result = withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        }
        guard result == 0 else {
            let e = errno
            Glibc.close(fd)
            // IPv6 disabled in this namespace (no address to bind): quietly without it.
            if family == AF_INET6 && (e == EADDRNOTAVAIL || e == EAFNOSUPPORT) { return -1 }
            errors.append("\(name): bind port 5353: \(String(cString: strerror(e)))")
            return -1
        }
        return fd
    }

    /// A netlink socket that hears links and addresses change, or -1 (then we re-enumerate every 2 s).
    private static func openNetlink() -> CInt {
        let fd = socket(AF_NETLINK, CInt(SOCK_RAW.rawValue) | CInt(SOCK_NONBLOCK.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0 /* NETLINK_ROUTE */)
        guard fd >= 0 else { return -1 }
        var sa = NetlinkAddress(family: sa_family_t(AF_NETLINK), pad: 0, pid: 0, groups: rtmgrpLink | rtmgrpIPv4IfAddr | rtmgrpIPv6IfAddr)
        let r = withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<NetlinkAddress>.size)) } }
        guard r == 0 else { Glibc.close(fd); return -1 }
        return fd
    }

    // MARK: Following the network (loop)

    /// Asks for a re-enumeration `after` seconds from now (coalescing bursts of notifications).
    func scheduleRescan(after seconds: Double = 0.1) {
        guard !rescanScheduled, !closed else { return }
        rescanScheduled = true
        loop.scheduleTask(in: .milliseconds(Int64(seconds * 1000))) { [self] in
            rescanScheduled = false
            rescan(initial: false)
        }
    }

    /// Compares the interfaces now with those in use; joins and leaves groups; reports the difference.
    func rescan(initial: Bool) {
        guard !closed else { return }
        let chosen = MDNSInterfaces.chosen(from: MDNSInterfaces.current(), wanted: wanted)
        let want4 = v4 >= 0 ? chosen.filter { !$0.ipv4.isEmpty } : []
        let want6 = v6 >= 0 ? chosen.filter(\.hasUsableLinkLocal) : []
        let before = Set(active4.map(\.index)).union(active6.map(\.index))
        let previous4 = Dictionary(active4.map { ($0.index, $0) }, uniquingKeysWith: { a, _ in a })
        let previous6 = Dictionary(active6.map { ($0.index, $0) }, uniquingKeysWith: { a, _ in a })

        for index in joined4 where !want4.contains(where: { $0.index == index }) {
            _ = membership(v4, add: false, index: index)
            joined4.remove(index)
        }
        for index in joined6 where !want6.contains(where: { $0.index == index }) {
            _ = membership(v6, add: false, index: index)
            joined6.remove(index)
        }
        for i in want4 where !joined4.contains(i.index) {
            if membership(v4, add: true, index: i.index) { joined4.insert(i.index) } else { report("IPv4 join on \(i.name)") }
        }
        for i in want6 where !joined6.contains(i.index) {
            if membership(v6, add: true, index: i.index) { joined6.insert(i.index) } else { report("IPv6 join on \(i.name)") }
        }
        active4 = want4.filter { joined4.contains($0.index) }
        active6 = want6.filter { joined6.contains($0.index) }

        var addresses: [IPAddress] = []
        for i in active4 { for a in i.ipv4 where !addresses.contains(.v4(a)) { addresses.append(.v4(a)) } }
        for i in active6 { for a in i.ipv6 where !addresses.contains(.v6(a)) { addresses.append(.v6(a)) } }
        let after = Set(active4.map(\.index)).union(active6.map(\.index))
        // An interface counts as added when it is new to a family or its addresses changed there (the
        // records must go out on it again); as removed when no family uses it any more.
        var added = after.subtracting(before)
        for i in active4 where previous4[i.index]?.ipv4 != i.ipv4 { added.insert(i.index) }
        for i in active6 where previous6[i.index]?.ipv6 != i.ipv6 { added.insert(i.index) }
        let removed = before.subtracting(after)
        let addressesChanged = addresses != ourAddresses
        ourAddresses = addresses
        if initial { return }
        guard !added.isEmpty || !removed.isEmpty || addressesChanged else { return }
        reported.removeAll()   // a failure seen before the change may be reported again
        changed(MDNSNetworkChange(added: added, removed: removed, addresses: addresses))
    }

    private func membership(_ fd: CInt, add: Bool, index: UInt32) -> Bool {
        var r: CInt
        if fd == v4 {
            // struct ip_mreqn: multiaddr, address (any), ifindex.
            var m = ip_mreqn()
            withUnsafeMutableBytes(of: &m.imr_multiaddr) { for k in 0..<4 { $0[k] = Self.group4[k] } }
            m.imr_ifindex = CInt(index)
            r = setsockopt(fd, CInt(IPPROTO_IP), add ? Self.ipAddMembership : Self.ipDropMembership, &m, socklen_t(MemoryLayout<ip_mreqn>.size))
        } else {
            var m = ipv6_mreq()
            withUnsafeMutableBytes(of: &m.ipv6mr_multiaddr) { for k in 0..<16 { $0[k] = Self.group6[k] } }
            m.ipv6mr_interface = index
            r = setsockopt(fd, CInt(IPPROTO_IPV6), add ? Self.ipv6AddMembership : Self.ipv6DropMembership, &m, socklen_t(MemoryLayout<ipv6_mreq>.size))
        }
        // Already a member (the kernel kept it over a down/up): as good as joined.
        return r == 0 || (add && errno == EADDRINUSE)
    }

    /// Logs a failure once (per what and errno) until the interfaces change.
    private func report(_ what: String, errno e: CInt = errno) {
        let key = "\(what): \(e)"
        guard reported.insert(key).inserted else { return }
        log("mDNS: \(what) failed: \(String(cString: strerror(e)))")
    }

    // MARK: Sending (loop)

    func send(_ bytes: [UInt8], to destination: MDNSDestination) {
        guard !closed else { return }
        switch destination {
        case .multicast:
            for i in active4 {
                // The interface and our source address on it (with the index alone, Linux sends from
                // 0.0.0.0 on loopback, which avahi-daemon rightly drops).
                var m = ip_mreqn()
                m.imr_ifindex = CInt(i.index)
                if let source = i.ipv4.first { withUnsafeMutableBytes(of: &m.imr_address) { for k in 0..<4 { $0[k] = source[k] } } }
                _ = setsockopt(v4, CInt(IPPROTO_IP), Self.ipMulticastIF, &m, socklen_t(MemoryLayout<ip_mreqn>.size))
                send(v4, bytes, to: .v4(Self.group4), port: 5353, scope: 0, what: "IPv4 send on \(i.name)")
            }
            for i in active6 {
                var index = CInt(i.index)
                _ = setsockopt(v6, CInt(IPPROTO_IPV6), Self.ipv6MulticastIF, &index, socklen_t(MemoryLayout<CInt>.size))
                send(v6, bytes, to: .v6(Self.group6), port: 5353, scope: 0, what: "IPv6 send on \(i.name)")
            }
        case .unicast(let peer):
            switch peer.address {
            case .v4: if v4 >= 0 { send(v4, bytes, to: peer.address, port: peer.port, scope: 0, what: "IPv4 reply") }
            case .v6: if v6 >= 0 { send(v6, bytes, to: peer.address, port: peer.port, scope: peer.scopeID, what: "IPv6 reply") }
            }
        }
    }

    private func send(_ fd: CInt, _ bytes: [UInt8], to address: IPAddress, port: UInt16, scope: UInt32, what: String) {
        var storage = sockaddr_storage()
        let length: Int
        switch address {
        case .v4(let b):
            length = withUnsafeMutablePointer(to: &storage) { p in
                p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                    sin.pointee.sin_family = sa_family_t(AF_INET)
                    sin.pointee.sin_port = port.bigEndian
                    withUnsafeMutableBytes(of: &sin.pointee.sin_addr) { for k in 0..<4 { $0[k] = b[k] } }
                    return MemoryLayout<sockaddr_in>.size
                }
            }
        case .v6(let b):
            length = withUnsafeMutablePointer(to: &storage) { p in
                p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin in
                    sin.pointee.sin6_family = sa_family_t(AF_INET6)
                    sin.pointee.sin6_port = port.bigEndian
                    sin.pointee.sin6_scope_id = scope
                    withUnsafeMutableBytes(of: &sin.pointee.sin6_addr) { for k in 0..<16 { $0[k] = b[k] } }
                    return MemoryLayout<sockaddr_in6>.size
                }
            }
        }
        let sent = bytes.withUnsafeBytes { raw in
            withUnsafePointer(to: &storage) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, raw.baseAddress, raw.count, CInt(MSG_NOSIGNAL), $0, socklen_t(length)) }
            }
        }
        guard sent < 0 else { return }
        let e = errno
        report(what, errno: e)
        // An address gone or not ready, a link down: the interfaces are not what we think; look again.
        if e == EADDRNOTAVAIL || e == ENODEV || e == ENETDOWN || e == ENETUNREACH || e == ENXIO { scheduleRescan(after: 0.5) }
    }

    // MARK: Reading (reader thread)

    private func readLoop() {
        defer { readerDone.signal() }
        var fds = [pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)]
        if v4 >= 0 { fds.append(pollfd(fd: v4, events: Int16(POLLIN), revents: 0)) }
        if v6 >= 0 { fds.append(pollfd(fd: v6, events: Int16(POLLIN), revents: 0)) }
        if netlink >= 0 { fds.append(pollfd(fd: netlink, events: Int16(POLLIN), revents: 0)) }
        let period: UInt64 = netlink >= 0 ? 30_000 : 2_000   // ms
        var lastLook = DispatchTime.now().uptimeNanoseconds / 1_000_000
        var buffer = [UInt8](repeating: 0, count: 9000)
        var control = [UInt8](repeating: 0, count: 256)
        while true {
            // The periodic look happens on time even while packets keep the poll busy.
            let now = DispatchTime.now().uptimeNanoseconds / 1_000_000
            if now >= lastLook + period {
                lastLook = now
                loop.execute { [self] in rescan(initial: false) }
            }
            for k in fds.indices { fds[k].revents = 0 }
            let n = poll(&fds, nfds_t(fds.count), CInt(lastLook + period - now))
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return }
            if n == 0 { continue }
            if fds[0].revents != 0 { return }
            for k in fds.indices.dropFirst() where fds[k].revents != 0 {
                let fd = fds[k].fd
                if fd == netlink {
                    // Drain; the content does not matter, only that something changed (or ENOBUFS: we missed some).
                    while recv(fd, &buffer, buffer.count, CInt(MSG_DONTWAIT)) > 0 {}
                    loop.execute { [self] in scheduleRescan() }
                    continue
                }
                var batch: [([UInt8], MDNSPeer)] = []
                while batch.count < 64, let packet = readDatagram(fd, &buffer, &control) { batch.append(packet) }
                if !batch.isEmpty {
                    let packets = batch
                    loop.execute { [self] in
                        for (bytes, peer) in packets where accepts(peer) { receive(bytes, peer) }
                    }
                }
            }
        }
    }

    /// Only packets that arrived on an interface we use (when the kernel said which).
    private func accepts(_ peer: MDNSPeer) -> Bool {
        guard !closed else { return false }
        guard peer.interface != 0 else { return true }
        switch peer.address {
        case .v4: return active4.contains { $0.index == peer.interface }
        case .v6: return active6.contains { $0.index == peer.interface }
        }
    }

    /// One datagram with its source and arrival interface, or nil when none is waiting.
    private func readDatagram(_ fd: CInt, _ buffer: inout [UInt8], _ control: inout [UInt8]) -> ([UInt8], MDNSPeer)? {
        while true {
            var from = sockaddr_storage()
            var controlLength = 0
            var flags: CInt = 0
            let n: Int = buffer.withUnsafeMutableBytes { data in
                control.withUnsafeMutableBytes { ctl in
                    withUnsafeMutablePointer(to: &from) { fromPointer in
                        var iov = iovec(iov_base: data.baseAddress, iov_len: data.count)
                        return withUnsafeMutablePointer(to: &iov) { iovPointer in
                            var msg = msghdr()
                            msg.msg_name = UnsafeMutableRawPointer(fromPointer)
                            msg.msg_namelen = socklen_t(MemoryLayout<sockaddr_storage>.size)
                            msg.msg_iov = iovPointer
                            msg.msg_iovlen = 1
                            msg.msg_control = ctl.baseAddress
                            msg.msg_controllen = ctl.count
                            let r = recvmsg(fd, &msg, CInt(MSG_DONTWAIT))
                            controlLength = Int(msg.msg_controllen)
                            flags = msg.msg_flags
                            return r
                        }
                    }
                }
            }
            if n < 0 {
                if errno == EINTR { continue }
                return nil   // EAGAIN, or an error queued by an ICMP message: nothing to read now
            }
            if flags & CInt(MSG_TRUNC) != 0 { continue }   // larger than any mDNS datagram (RFC 6762 §17)
            let interface = Self.arrivalInterface(control, length: controlLength)
            let bytes = Array(buffer[0..<n])
            switch CInt(from.ss_family) {
            case AF_INET:
                let (address, port) = withUnsafeBytes(of: &from) { raw -> ([UInt8], UInt16) in
                    let sin = raw.load(as: sockaddr_in.self)
                    return (withUnsafeBytes(of: sin.sin_addr) { Array($0) }, UInt16(bigEndian: sin.sin_port))
                }
                return (bytes, MDNSPeer(address: .v4(address), port: port, interface: interface))
            case AF_INET6:
                let (address, port, scope) = withUnsafeBytes(of: &from) { raw -> ([UInt8], UInt16, UInt32) in
                    let sin = raw.load(as: sockaddr_in6.self)
                    return (withUnsafeBytes(of: sin.sin6_addr) { Array($0) }, UInt16(bigEndian: sin.sin6_port), sin.sin6_scope_id)
                }
                return (bytes, MDNSPeer(address: .v6(address), port: port, scopeID: scope, interface: interface != 0 ? interface : scope))
            default:
                continue
            }
        }
    }

    /// The interface index in an IP_PKTINFO (struct in_pktinfo: ifindex first) or IPV6_PKTINFO (struct
    /// in6_pktinfo: address, then ifindex) control message; 0 when there is none.
    static func arrivalInterface(_ control: [UInt8], length: Int) -> UInt32 {
        let header = MemoryLayout<cmsghdr>.size
        let align = MemoryLayout<Int>.size
        var offset = 0
        return control.withUnsafeBytes { raw -> UInt32 in
            while offset + header <= min(length, raw.count) {
                let h = raw.loadUnaligned(fromByteOffset: offset, as: cmsghdr.self)
                let len = Int(h.cmsg_len)
                guard len >= header, offset + len <= raw.count else { return 0 }
                if h.cmsg_level == CInt(IPPROTO_IP) && h.cmsg_type == ipPktInfo && len >= header + 4 {
                    return UInt32(bitPattern: raw.loadUnaligned(fromByteOffset: offset + header, as: Int32.self))
                }
                if h.cmsg_level == CInt(IPPROTO_IPV6) && h.cmsg_type == ipv6PktInfo && len >= header + 20 {
                    return raw.loadUnaligned(fromByteOffset: offset + header + 16, as: UInt32.self)
                }
                offset += (len + align - 1) / align * align
            }
            return 0
        }
    }

    // MARK: Closing

    /// Stops the reader and closes the descriptors (goodbyes must have been sent before). Not on `loop`.
    func close() {
        let first =
            (try? loop.submit { [self] () -> Bool in
                defer { closed = true }
                return !closed
            }.wait()) ?? true
        guard first else { return }
        var one: UInt8 = 1
        _ = write(wake.write, &one, 1)
        readerDone.wait()
        for fd in [v4, v6, netlink, wake.read, wake.write] where fd >= 0 { Glibc.close(fd) }
    }

    static func socketAddress(v6 bytes: [UInt8], port: UInt16, scope: UInt32) -> SocketAddress {
        var sa = sockaddr_in6()
        sa.sin6_family = sa_family_t(AF_INET6)
        sa.sin6_port = port.bigEndian
        sa.sin6_scope_id = scope
        withUnsafeMutableBytes(of: &sa.sin6_addr) { raw in for i in 0..<16 { raw[i] = bytes[i] } }
        return SocketAddress(sa, host: IPAddress.v6(bytes).description)
    }

    /// The name of interface `index` (for `%scope` in addresses shown to people).
    static func name(of index: UInt32) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
        guard if_indextoname(index, &buffer) != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
