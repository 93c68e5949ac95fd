// The UDP edge: port 5353 on IPv4 (224.0.0.251) and IPv6 (ff02::fb), shared with avahi-daemon through
// SO_REUSEADDR and SO_REUSEPORT, joined on each chosen interface, multicast loopback on (so two processes
// on one host hear each other), TTL / hop limit 255 (RFC 6762 §11). Multicast is sent once per interface
// by pointing IP_MULTICAST_IF / IPV6_MULTICAST_IF at it before each write.
import DNSSD
import NIOCore
import NIOPosix
#if canImport(Glibc)
import Glibc
#endif

final class MDNSSockets: @unchecked Sendable {
    let loop: EventLoop
    let v4: Channel?
    let v6: Channel?
    let v4Interfaces: [NIONetworkDevice]
    let v6Interfaces: [NIONetworkDevice]
    let ourAddresses: [IPAddress]
    let ipv6ScopeID: UInt32
    let ipv6ScopeName: String?
    let log: @Sendable (String) -> Void

    static let groupV4 = try! SocketAddress(ipAddress: "224.0.0.251", port: 5353)
    static let groupV6 = try! SocketAddress(ipAddress: "ff02::fb", port: 5353)

    private init(loop: EventLoop, v4: Channel?, v6: Channel?, v4Interfaces: [NIONetworkDevice], v6Interfaces: [NIONetworkDevice],
                 ourAddresses: [IPAddress], log: @escaping @Sendable (String) -> Void) {
        self.loop = loop; self.v4 = v4; self.v6 = v6
        self.v4Interfaces = v4Interfaces; self.v6Interfaces = v6Interfaces
        self.ourAddresses = ourAddresses; self.log = log
        self.ipv6ScopeID = UInt32(v6Interfaces.first?.interfaceIndex ?? 0)
        self.ipv6ScopeName = v6Interfaces.first?.name
    }

    /// Picks interfaces, binds, joins. Throws `.socketUnavailable` when neither family could be opened.
    static func open(on loop: EventLoop, interfaces wanted: [String]?, ipv4: Bool, ipv6: Bool,
                     log: @escaping @Sendable (String) -> Void,
                     receive: @escaping @Sendable ([UInt8], MDNSPeer) -> Void) throws(MDNSError) -> MDNSSockets {
        let devices: [NIONetworkDevice]
        do { devices = try System.enumerateDevices() } catch { throw .socketUnavailable(reason: "cannot list interfaces: \(error)") }
        func chosen(_ family: Int32) -> [NIONetworkDevice] {
            let all = devices.filter { $0.address?.protocol.rawValue == family }
            if let wanted { return all.filter { wanted.contains($0.name) } }
            let real = all.filter { $0.multicastSupported && $0.name != "lo" }
            return real.isEmpty ? all.filter { $0.name == "lo" } : real
        }
        var v4Devices = ipv4 ? chosen(AF_INET) : []
        // One membership per interface index (a device appears once per address).
        // IPv6 mDNS is link-local (ff02::fb): only interfaces with a fe80:: address can send it; sending
        // elsewhere (loopback) fails with ENETUNREACH, which makes NIO close the socket.
        func linkLocal(_ d: NIONetworkDevice) -> Bool {
            guard let a = d.address, case .v6(let x) = a else { return false }
            let b = withUnsafeBytes(of: x.address.sin6_addr) { Array($0) }
            return b[0] == 0xFE && b[1] & 0xC0 == 0x80
        }
        var v6Devices = ipv6 ? chosen(AF_INET6).filter(linkLocal) : []
        var seen = Set<Int>()
        v6Devices = v6Devices.filter { seen.insert($0.interfaceIndex).inserted }
        var seen4 = Set<Int>()
        let addresses4 = v4Devices.compactMap { d -> IPAddress? in
            guard let a = d.address, case .v4(let x) = a else { return nil }
            return .v4(withUnsafeBytes(of: x.address.sin_addr) { Array($0) })
        }
        let addresses6 = (ipv6 ? chosen(AF_INET6) : []).compactMap { d -> IPAddress? in
            guard let a = d.address, case .v6(let x) = a else { return nil }
            return .v6(withUnsafeBytes(of: x.address.sin6_addr) { Array($0) })
        }
        v4Devices = v4Devices.filter { seen4.insert($0.interfaceIndex).inserted }

        func bootstrap() -> DatagramBootstrap {
            DatagramBootstrap(group: loop)
                .channelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
                .channelOption(ChannelOptions.Types.SocketOption(level: .socket, name: .init(rawValue: SO_REUSEPORT)), value: 1)
                .channelInitializer { channel in
                    channel.pipeline.addHandler(Receiver(receive: receive))
                }
        }
        var errors: [String] = []
        var v4: Channel?
        if !v4Devices.isEmpty {
            do {
                let channel = try bootstrap().bind(host: "0.0.0.0", port: 5353).wait()
                let mc = channel as! MulticastChannel
                for d in v4Devices { try mc.joinGroup(groupV4, device: d).wait() }
                if let opts = channel as? SocketOptionProvider {
                    try opts.setIPMulticastTTL(255).wait()
                    try opts.setIPMulticastLoop(1).wait()
                }
                v4 = channel
            } catch { errors.append("IPv4: \(error)"); v4Devices = [] }
        }
        var v6: Channel?
        if !v6Devices.isEmpty {
            do {
                let channel = try bootstrap()
                    .channelOption(ChannelOptions.Types.SocketOption(level: .ipv6, name: .init(rawValue: IPV6_V6ONLY)), value: 1)
                    .bind(host: "::", port: 5353).wait()
                let mc = channel as! MulticastChannel
                for d in v6Devices { try mc.joinGroup(groupV6, device: d).wait() }
                if let opts = channel as? SocketOptionProvider {
                    try opts.setIPv6MulticastHops(255).wait()
                    try opts.setIPv6MulticastLoop(1).wait()
                }
                v6 = channel
            } catch { errors.append("IPv6: \(error)"); v6Devices = [] }
        }
        if v4 == nil && v6 == nil {
            throw .socketUnavailable(reason: errors.isEmpty ? "no suitable interface" : errors.joined(separator: "; "))
        }
        for e in errors { log("mDNS: \(e) (continuing without it)") }
        return MDNSSockets(loop: loop, v4: v4, v6: v6, v4Interfaces: v4Devices, v6Interfaces: v6Devices,
                           ourAddresses: (v4 != nil ? addresses4 : []) + (v6 != nil ? addresses6 : []), log: log)
    }

    /// Must run on `loop`.
    func send(_ bytes: [UInt8], to destination: MDNSDestination) {
        var buffer = ByteBuffer()
        buffer.writeBytes(bytes)
        switch destination {
        case .multicast:
            if let v4, let opts = v4 as? SocketOptionProvider {
                for d in v4Interfaces {
                    guard let a = d.address, case .v4(let x) = a else { continue }
                    _ = opts.setIPMulticastIF(x.address.sin_addr)
                    write(v4, buffer, to: MDNSSockets.groupV4)
                }
            }
            if let v6, let opts = v6 as? SocketOptionProvider {
                for d in v6Interfaces {
                    _ = opts.setIPv6MulticastIF(CUnsignedInt(d.interfaceIndex))
                    write(v6, buffer, to: MDNSSockets.groupV6)
                }
            }
        case .unicast(let peer):
            switch peer.address {
            case .v4(let b):
                if let v4, let sa = try? SocketAddress(ipAddress: IPAddress.v4(b).description, port: Int(peer.port)) { write(v4, buffer, to: sa) }
            case .v6(let b):
                if let v6 { write(v6, buffer, to: MDNSSockets.socketAddress(v6: b, port: peer.port, scope: peer.scopeID)) }
            }
        }
    }

    private func write(_ channel: Channel, _ buffer: ByteBuffer, to address: SocketAddress) {
        let log = self.log
        channel.writeAndFlush(AddressedEnvelope(remoteAddress: address, data: buffer)).whenFailure { error in
            log("mDNS: send to \(address) failed: \(error)")
        }
    }

    func close() {
        try? v4?.close().wait()
        try? v6?.close().wait()
    }

    static func socketAddress(v6 bytes: [UInt8], port: UInt16, scope: UInt32) -> SocketAddress {
        var sa = sockaddr_in6()
        sa.sin6_family = sa_family_t(AF_INET6)
        sa.sin6_port = port.bigEndian
        sa.sin6_scope_id = scope
        withUnsafeMutableBytes(of: &sa.sin6_addr) { raw in for i in 0..<16 { raw[i] = bytes[i] } }
        return SocketAddress(sa, host: IPAddress.v6(bytes).description)
    }
}

/// Turns datagrams into (bytes, source) for the engine.
private final class Receiver: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let receive: @Sendable ([UInt8], MDNSPeer) -> Void
    init(receive: @escaping @Sendable ([UInt8], MDNSPeer) -> Void) { self.receive = receive }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        let bytes = Array(envelope.data.readableBytesView)
        let peer: MDNSPeer
        switch envelope.remoteAddress {
        case .v4(let a):
            peer = MDNSPeer(address: .v4(withUnsafeBytes(of: a.address.sin_addr) { Array($0) }), port: UInt16(bigEndian: a.address.sin_port))
        case .v6(let a):
            peer = MDNSPeer(address: .v6(withUnsafeBytes(of: a.address.sin6_addr) { Array($0) }), port: UInt16(bigEndian: a.address.sin6_port),
                            scopeID: a.address.sin6_scope_id)
        default:
            return
        }
        receive(bytes, peer)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // A UDP socket error (e.g. ICMP unreachable) must not close the shared socket.
    }
}
