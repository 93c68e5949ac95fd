// Makes a host for a transport name (`BLE_TRANSPORT`). `virtual` gives every host its own controller on
// the process-wide virtual air, so a central and a peripheral manager in one process are two devices that
// can see each other; `tcp-client:` opens one controller connection per host (rootcanal and `ble radio`
// create a device per connection). `BLE_SNOOP=FILE` records every packet of every host to a btsnoop file.
import BLEWire
import BLETransport
import BLEVirtualRadio
import BLETransportLinux

public enum HostFactory {
    private static let snoop = Locked<BTSnoopWriter?>(nil)
    private static let counter = Locked(0)
    private static let provider = Locked<(@Sendable (String) throws -> LEHost?)?>(nil)

    /// While set, `virtual` hosts (managers created with no host while `BLE_TRANSPORT` is unset or `virtual`)
    /// are first asked of this closure, given the host's name; nil from it means the process-wide air as usual.
    /// The test kit (CoreBluetoothTesting) installs one to put an app's managers on its own air and clock.
    public static var virtualHostProvider: (@Sendable (String) throws -> LEHost?)? {
        get { provider.withLock { $0 } }
        set { provider.withLock { $0 = newValue } }
    }

    /// A host for `spec`, not yet powered on. Its loop is the virtual air's loop for `virtual`, its own otherwise.
    public static func makeHost(spec: TransportSpec, name: String? = nil) throws -> LEHost {
        let n = counter.withLock { c -> Int in
            c += 1; return c
        }
        let hostName = name ?? "host\(n)"
        let transport: any HCITransport
        let loop: EventLoop
        switch spec {
        case .virtual:
            if let make = virtualHostProvider, let host = try make(hostName) { return host }
            let air = VirtualAir.shared
            let controller = air.addController()
            transport = controller
            loop = air.loop
            let host = LEHost(transport: try snooping(transport), loop: loop, name: hostName)
            watchPower(controller, host)
            return host
        case let .tcpClient(host, port):
            transport = StreamTransport.tcpClient(host: host, port: port)
            loop = EventLoop(label: "ble.\(hostName)")
        case let .unix(path):
            transport = StreamTransport.unix(path: path)
            loop = EventLoop(label: "ble.\(hostName)")
        case let .serial(path, baud):
            transport = StreamTransport.serial(path: path, baud: baud)
            loop = EventLoop(label: "ble.\(hostName)")
        case let .hciSocket(index):
            transport = HCISocketTransport(index: index)
            loop = EventLoop(label: "ble.\(hostName)")
        case let .tcpServer(port):
            transport = TCPServerTransport(port: port)
            loop = EventLoop(label: "ble.\(hostName)")
        }
        let host = LEHost(transport: try snooping(transport), loop: loop, name: hostName)
        // A real controller keeps its address across runs, so its bonds are kept on disk.
        host.bondStoreDirectory = HostStateDirectory.url
        return host
    }

    /// A host on a given virtual air (tests build their own air, often with a virtual clock).
    /// With `capture`, this host's packets are recorded to that btsnoop file.
    /// With `address`, the controller has that public address (a device that comes back in a later "run").
    public static func makeHost(
        on air: VirtualAir, name: String? = nil, position: VirtualPosition? = nil, capture: String? = nil,
        address: BluetoothAddress? = nil
    ) throws -> LEHost {
        let controller = air.addController(address: address, position: position)
        let transport: any HCITransport = try capture.map { SnoopingTransport(controller, writer: try BTSnoopWriter(path: $0)) } ?? snooping(controller)
        let host = LEHost(transport: transport, loop: air.loop, name: name ?? "host")
        watchPower(controller, host)
        return host
    }

    /// A virtual controller switched back on brings its host back at once.
    private static func watchPower(_ controller: VirtualController, _ host: LEHost) {
        controller.onPowerChange = { [weak host] on in
            guard on, let host else { return }
            host.loop.execute { host.reconnectNow() }
        }
    }

    /// A host for `BLE_TRANSPORT` (virtual when unset).
    public static func makeHostFromEnvironment(name: String? = nil) throws -> LEHost {
        try makeHost(spec: try TransportSpec.fromEnvironment(), name: name)
    }

    private struct WeakHost: Sendable { weak var host: LEHost? }
    private static let shared = Locked<[String: WeakHost]>([:])

    /// The one host of this process on the controller `spec` names, as on an iPhone: every caller gets the
    /// same host while it is alive (one serial port or HCI channel is opened once), and both roles run on
    /// it. `virtual` makes a new host (a new device on the process-wide air) every time, so tests get a
    /// device per manager; to put several managers on one virtual device, give them the same host.
    public static func sharedHost(spec: TransportSpec, name: String? = nil) throws -> LEHost {
        if case .virtual = spec { return try makeHost(spec: spec, name: name) }
        return try shared.withLock { table in
            let key = spec.description
            if let h = table[key]?.host { return h }
            let h = try makeHost(spec: spec, name: "host")
            table = table.filter { $0.value.host != nil }
            table[key] = WeakHost(host: h)
            return h
        }
    }

    /// The shared host for `spec` if one is alive, without making one.
    public static func runningSharedHost(spec: TransportSpec) -> LEHost? {
        if case .virtual = spec { return nil }
        return shared.withLock { $0[spec.description]?.host }
    }

    /// `sharedHost(spec:)` for `BLE_TRANSPORT` (virtual when unset).
    public static func sharedHostFromEnvironment(name: String? = nil) throws -> LEHost {
        try sharedHost(spec: try TransportSpec.fromEnvironment(), name: name)
    }

    private static func snooping(_ t: any HCITransport) throws -> any HCITransport {
        guard let path = getenv("BLE_SNOOP").map({ String(cString: $0) }), !path.isEmpty else { return t }
        let writer = try snoop.withLock { w -> BTSnoopWriter in
            if let w { return w }
            let nw = try BTSnoopWriter(path: path)
            w = nw
            return nw
        }
        return SnoopingTransport(t, writer: writer)
    }
}

#if canImport(Glibc)
import Glibc
#endif
