// libFuzzer target: the whole host (BLEHost LEHost) fed an arbitrary controller byte stream over an
// in-process fake transport, on a virtual clock. Input: one octet of flags choosing what the host is asked
// to do once powered (advertise, scan, connect; as central it discovers and reads on each link), then an
// H4 stream of what the controller says. After the stream, virtual time runs 60 s (ATT and SMP timeouts)
// and the host powers off. A trap, a hang or unbounded memory is a finding; errors the host reports are not.
import BLEATT
import BLEGATT
import BLEHCI
import BLEHost
import BLETransport
import BLEVirtualRadio
import BLEWire
import Foundation
import FuzzSupport

/// A controller that accepts every packet the host sends and says nothing by itself.
final class SilentController: HCITransport, @unchecked Sendable {
    var sent = 0
    func open(sink: any HCITransportSink) throws {}
    func send(_ packet: HCIPacket) { sent += 1 }
    func close() {}
    var name: String { "fuzz" }
}

/// Answers every read and write, and as a central runs discovery and a read on each link.
final class Agent: HostCentralDelegate, HostPeripheralDelegate, @unchecked Sendable {
    func host(_ host: LEHost, didReceive report: AdvertisingReport) {}
    func host(_ host: LEHost, didConnect connection: HostConnection) {
        guard connection.role == .central else { return }
        connection.gatt(.exchangeMTU(clientRxMTU: 247)) { _ in }
        connection.gatt(.discoverAllPrimaryServices) { _ in }
        connection.gatt(.discoverCharacteristics(start: 1, end: 0xFFFF, uuid: nil)) { _ in }
        connection.gatt(.readLong(handle: 3)) { _ in }
    }
    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {}
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {}
    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {}
    func host(_ host: LEHost, didReceiveRead request: HostReadRequest) {
        host.respondToRead(id: request.id, result: .success([1, 2, 3]))
    }
    func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) {
        host.respondToWrite(id: request.id, error: nil)
    }
    func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {}
    func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {}
    func host(_ host: LEHost, connectionIsReadyToSendWriteWithoutResponse connection: HostConnection) {}
    func hostIsReadyToUpdateSubscribers(_ host: LEHost) {}
}

let peerAddress = BluetoothAddress(bytes: [0x55, 0x44, 0x33, 0x22, 0x11, 0xC0], type: .random)

/// Runs one input; returns whether the host was released afterwards (a host kept alive by a cycle leaks).
@discardableResult
func fuzzOne(_ data: [UInt8]) -> Bool {
    weak var released: LEHost?
    run(data) { released = $0 }
    return released == nil
}

func run(_ data: [UInt8], _ observe: (LEHost) -> Void) {
    guard let flags = data.first else { return }
    let loop = EventLoop(label: "fuzz.host", clock: .virtual)
    let controller = SilentController()
    let host = LEHost(transport: controller, loop: loop, name: "fuzz")
    let agent = Agent()
    observe(host)
    loop.sync {
        host.centralDelegate = agent
        host.peripheralDelegate = agent
        _ = try? host.addService(
            GATTServiceDefinition(
                uuid: BluetoothUUID(0x180D),
                characteristics: [
                    GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A37), properties: [.read, .write, .notify, .indicate], permissions: .readWrite, value: nil)
                ]))
        host.addPowerObserver { [unowned host] state in
            guard state == .on else { return }
            if flags & 1 != 0 { host.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6, 3, 3, 0x0D, 0x18])) }
            if flags & 2 != 0 { host.startScanning(active: true) }
            if flags & 4 != 0 { host.connect(to: peerAddress) }
        }
        host.powerOn()
    }
    var framer = H4Framer()
    framer.append(data.dropFirst())
    while let packet = try? framer.nextPacket() {
        loop.sync { host.transport(didReceive: packet) }
        loop.advance(by: .milliseconds(Double(flags >> 4)))
    }
    loop.advance(by: .seconds(60))
    loop.sync { host.powerOff() }
    loop.advance(by: .seconds(1))
}

/// Seeds: what the controllers said to a central and a peripheral host in a real session on the virtual
/// radio (power-on, advertising, scanning, connection, MTU exchange, discovery, reads, writes,
/// notifications), recorded with the btsnoop tap and turned back into H4 streams.
func seeds() throws -> [(String, [UInt8])] {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("fuzz-host-seeds-\(getpid())")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    let air = VirtualAir(loop: EventLoop(label: "seed", clock: .virtual))
    let central = try HostFactory.makeHost(on: air, name: "central", position: VirtualPosition(x: 0, y: 0), capture: dir.appendingPathComponent("c").path)
    let peripheral = try HostFactory.makeHost(on: air, name: "peripheral", position: VirtualPosition(x: 2, y: 0), capture: dir.appendingPathComponent("p").path)
    let agent = Agent()
    final class Links: HostCentralDelegate, @unchecked Sendable {
        var links: [HostConnection] = []
        var seen: BluetoothAddress?
        func host(_ host: LEHost, didReceive report: AdvertisingReport) { seen = seen ?? report.address }
        func host(_ host: LEHost, didConnect connection: HostConnection) { links.append(connection) }
        func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {}
        func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {}
        func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {}
    }
    let links = Links()
    let handles = try air.loop.sync { () throws -> GATTServiceHandles in
        central.centralDelegate = links
        peripheral.peripheralDelegate = agent
        central.powerOn()
        peripheral.powerOn()
        return try peripheral.addService(
            GATTServiceDefinition(
                uuid: BluetoothUUID(0x180D),
                characteristics: [
                    GATTCharacteristicDefinition(uuid: BluetoothUUID(0x2A37), properties: [.read, .write, .notify], permissions: .readWrite, value: nil)
                ]))
    }
    air.loop.advance(by: .milliseconds(10))
    air.loop.sync {
        peripheral.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6, 3, 3, 0x0D, 0x18], scanResponse: [4, 9, 0x4F, 0x43, 0x42]))
        central.startScanning(active: true)
    }
    air.loop.advance(by: .milliseconds(300))
    guard let target = links.seen else { throw CocoaError(.featureUnsupported) }
    air.loop.sync {
        central.stopScanning(); central.connect(to: target)
    }
    air.loop.advance(by: .milliseconds(300))
    if let link = links.links.first {
        let value = handles.characteristics[0].value
        air.loop.sync {
            link.gatt(.exchangeMTU(clientRxMTU: 247)) { _ in }
            link.gatt(.discoverAllPrimaryServices) { _ in }
            link.gatt(.discoverCharacteristics(start: 1, end: 0xFFFF, uuid: nil)) { _ in }
            link.gatt(.read(handle: value)) { _ in }
            link.gatt(.write(handle: value, value: [7, 7])) { _ in }
            link.gatt(.write(handle: value + 1, value: [1, 0])) { _ in }
        }
        air.loop.advance(by: .seconds(1))
        air.loop.sync { _ = peripheral.updateValue([9], forHandle: value) }
        air.loop.advance(by: .seconds(1))
        air.loop.sync { link.disconnect() }
        air.loop.advance(by: .seconds(1))
    }
    air.loop.sync {
        central.powerOff(); peripheral.powerOff()
    }
    func stream(_ name: String) throws -> [UInt8] {
        try BTSnoopReader.read(path: dir.appendingPathComponent(name).path)
            .filter { $0.direction == .controllerToHost }
            .flatMap { [$0.packet.type.rawValue] + $0.packet.bytes }
    }
    return [
        ("central-session", [0x16] + (try stream("c"))),
        ("peripheral-session", [0x11] + (try stream("p"))),
        ("power-on-only", [0x00] + (try stream("p")).prefix(200)),
    ]
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    _ = fuzzOne(count == 0 ? [] : Array(UnsafeBufferPointer(start: start, count: count)))
    return 0
}

#if FUZZING
@_cdecl("FuzzHost_main")
public func fuzzEntry(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    FuzzMain.libFuzzer(argc, argv, fuzzerTestOneInput)
}
#else
@main struct Main {
    static func main() {
        FuzzMain.run(
            name: "FuzzHost",
            test: { bytes in
                if !fuzzOne(bytes) { print("FuzzHost: the host was not released after power-off (a reference cycle)") }
            }, seeds: seeds)
    }
}
#endif
