// The central side of the exploring commands (`gatt`, `read`, `write`, `subscribe`): find a device by
// address or by name, connect, and run GATT procedures on it one at a time, each waited for. Procedures
// that the device refuses for lack of security pair (or encrypt with the bond) and run again, through the
// host (HostConnection.gatt); the pairing prompts go through the terminal agent, as in `ble pair`.
//
// Threading: the public methods block the calling thread (the command's); everything touching the host
// runs on its loop, and the delegate callbacks arrive there.
import Foundation
import BLEWire
import BLEHCI
import BLEATT
import BLEGATT
import BLEGAP
import BLEHost
import BLESMP

/// What one device has advertised so far, advertising data and scan response kept apart.
struct DeviceRecord: Sendable {
    var address: BluetoothAddress
    var rssi: Int8
    var connectable: Bool
    var advertising: AdvertisingData?
    var scanResponse: AdvertisingData?
    var reports = 0

    var structures: [ADStructure] { (advertising?.structures ?? []) + (scanResponse?.structures ?? []) }
    var data: AdvertisingData { AdvertisingData(structures) }
    var name: String? { data.localName }
}

/// A device named on the command line: an address (AA:BB:CC:DD:EE:FF, optionally /P or /R) or a name.
struct DeviceTarget: Sendable, CustomStringConvertible {
    let text: String
    let address: BluetoothAddress?
    /// True when the address carries its type (/P or /R): it can be connected without scanning first.
    let typed: Bool

    init(_ text: String) {
        self.text = text
        address = BluetoothAddress(string: text)
        typed = address != nil && (text.hasSuffix("/P") || text.hasSuffix("/R"))
    }

    func matches(_ r: DeviceRecord) -> Bool {
        if let address { return address.bytes == r.address.bytes && (!typed || address.type.isRandom == r.address.type.isRandom) }
        return r.name == text
    }

    var description: String { address != nil ? text : "\"\(text)\"" }
}

final class DeviceLink: HostCentralDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private(set) var host: LEHost!
    private var records: [BluetoothAddress: DeviceRecord] = [:]
    private var connectWaiter: (BluetoothAddress, (Result<HostConnection, ToolError>) -> Void)?
    private(set) var connection: HostConnection?
    /// Called on the loop for every advertising report (after merging it into its record).
    var onReport: (@Sendable (DeviceRecord) -> Void)?
    /// Called on the loop for every notification and indication.
    var onValue: (@Sendable (UInt16, [UInt8], Bool) -> Void)?
    /// Called on the loop when the link goes down.
    var onDisconnect: (@Sendable (HCIStatus) -> Void)?

    /// Opens the controller as the "central" identity with a terminal pairing agent.
    init(io: IOArgument, yes: Bool, timeout: Double = Controller.defaultTimeout) throws {
        let agent = TerminalAgent(io.capability, autoAccept: yes)
        host = try Controller.open(name: "central", identity: "central", timeout: timeout) { [unowned self] h in
            h.centralDelegate = self
            h.pairingAgent = agent
        }
    }

    /// Wraps an open host (tests and commands that made their own).
    init(host: LEHost) {
        self.host = host
        host.loop.sync { host.centralDelegate = self }
    }

    // MARK: Finding

    func startScanning(active: Bool = true) throws {
        let done = DispatchSemaphore(value: 0)
        final class Box: @unchecked Sendable { var error: HostError? }
        let box = Box()
        host.loop.execute { [host] in
            host!.startScanning(active: active, filterDuplicates: false) { e in
                box.error = e; done.signal()
            }
        }
        done.wait()
        if let e = box.error { throw ToolError("cannot scan: \(e)") }
    }

    func stopScanning() {
        host.loop.sync { host.stopScanning() }
    }

    /// Scans until `target` advertises; returns its address with the type it advertises with.
    func find(_ target: DeviceTarget, timeout: Double) throws -> BluetoothAddress {
        if let a = target.address, target.typed { return a }
        let found = DispatchSemaphore(value: 0)
        final class Box: @unchecked Sendable { var address: BluetoothAddress? }
        let box = Box()
        let previous = onReport
        onReport = { r in
            previous?(r)
            guard box.address == nil, target.matches(r) else { return }
            box.address = r.address
            found.signal()
        }
        try startScanning()
        let result = found.wait(timeout: .now() + timeout)
        stopScanning()
        host.loop.sync { onReport = previous }
        guard result == .success, let a = host.loop.sync({ box.address }) else {
            if target.address != nil {
                throw ToolError(
                    "no device with the address \(target.text) advertised within \(formatSeconds(timeout)) (to connect without scanning, give its type: \(target.text)/P or \(target.text)/R)"
                )
            }
            throw ToolError("no device named \(target) advertised within \(formatSeconds(timeout))" + (Controller.virtualHint.map { " " + $0 } ?? ""))
        }
        return a
    }

    // MARK: Connecting

    /// Connects (finding the device first when needed) and exchanges the ATT MTU.
    @discardableResult
    func connect(_ target: DeviceTarget, timeout: Double) throws -> HostConnection {
        let address = try find(target, timeout: timeout)
        let done = DispatchSemaphore(value: 0)
        final class Box: @unchecked Sendable { var result: Result<HostConnection, ToolError>? }
        let box = Box()
        host.loop.execute { [self] in
            connectWaiter = (
                address,
                { r in
                    box.result = r; done.signal()
                }
            )
            host.connect(to: address)
        }
        if done.wait(timeout: .now() + timeout) == .timedOut {
            host.loop.sync { host.cancelConnect(to: address) }
            _ = done.wait(timeout: .now() + 2)
            throw ToolError("could not connect to \(address) within \(formatSeconds(timeout))")
        }
        let c = try host.loop.sync { box.result! }.get()
        let mtu = DispatchSemaphore(value: 0)
        host.loop.execute { c.exchangeMTU(517) { _ in mtu.signal() } }
        _ = mtu.wait(timeout: .now() + 30)
        return c
    }

    /// Runs a GATT procedure on the link and waits for its outcome.
    func gatt(_ p: GATTClient.Procedure) throws -> GATTClient.Outcome {
        guard let c = lock.withLock({ connection }) else { throw ToolError("not connected") }
        let done = DispatchSemaphore(value: 0)
        final class Box: @unchecked Sendable { var result: Result<GATTClient.Outcome, GATTClient.Failure>? }
        let box = Box()
        host.loop.execute {
            c.gatt(p) { r in
                box.result = r; done.signal()
            }
        }
        done.wait()
        switch host.loop.sync({ box.result! }) {
        case let .success(o): return o
        case let .failure(f): throw GATTFailure(f)
        }
    }

    /// Reads a value whole (Read, then Read Blob while parts come back full).
    func read(_ handle: UInt16) throws -> [UInt8] {
        guard case let .value(v) = try gatt(.readLong(handle: handle)) else { throw ToolError("unexpected answer to a read") }
        return v
    }

    /// Sends a Write Command, waiting for room in the controller's buffers when they are full.
    func writeWithoutResponse(_ handle: UInt16, _ value: [UInt8]) throws {
        guard let c = lock.withLock({ connection }) else { throw ToolError("not connected") }
        let mtu = host.loop.sync { () -> Int in Int(c.attMTU) }
        guard value.count <= mtu - 3 else {
            throw ToolError("\(value.count) octets do not fit a write without response (at most ATT_MTU − 3 = \(mtu - 3)); write with a response instead")
        }
        let deadline = Date().addingTimeInterval(10)
        while !host.loop.sync({ () -> Bool in c.isOpen ? c.writeWithoutResponse(handle: handle, value: value) : true }) {
            guard Date() < deadline else { throw ToolError("the controller had no room for the write for 10 s") }
            usleep(5_000)
        }
        guard host.loop.sync({ c.isOpen }) else { throw ToolError("the link went down") }
    }

    /// Disconnects (waiting up to two seconds for the link to go) and powers the host off.
    func close() {
        if let c = lock.withLock({ connection }) {
            let gone = DispatchSemaphore(value: 0)
            host.loop.execute { [self] in
                guard c.isOpen else { gone.signal(); return }
                // Our own disconnection is not news for the command's handler.
                onDisconnect = { _ in gone.signal() }
                c.disconnect()
            }
            _ = gone.wait(timeout: .now() + 2)
        }
        Controller.close(host)
    }

    // MARK: HostCentralDelegate (on the loop)

    func host(_ host: LEHost, didReceive report: AdvertisingReport) {
        let data = AdvertisingData(lenient: report.data)
        var r = records[report.address] ?? DeviceRecord(address: report.address, rssi: report.rssi, connectable: false)
        r.rssi = report.rssi
        r.reports += 1
        if report.kind == .scanResponse {
            r.scanResponse = data
        } else {
            r.advertising = data
            r.connectable = report.isConnectable
        }
        records[report.address] = r
        onReport?(r)
    }

    func host(_ host: LEHost, didConnect connection: HostConnection) {
        guard let (address, waiter) = connectWaiter, address.bytes == connection.peerAddress.bytes else { return }
        connectWaiter = nil
        lock.withLock { self.connection = connection }
        waiter(.success(connection))
    }

    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {
        guard let (wanted, waiter) = connectWaiter, wanted.bytes == address.bytes else { return }
        connectWaiter = nil
        waiter(.failure(ToolError("could not connect to \(address): \(status)")))
    }

    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) {
        guard lock.withLock({ self.connection === connection }) else { return }
        onDisconnect?(reason)
    }

    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {
        onValue?(handle, value, isIndication)
    }
}

/// A GATT procedure that failed, in words.
struct GATTFailure: Error, CustomStringConvertible {
    let failure: GATTClient.Failure
    init(_ f: GATTClient.Failure) { failure = f }

    var description: String {
        switch failure {
        case let .att(code, handle): return "\(code.name) (ATT error 0x\(String(format: "%02x", code.rawValue))) at handle 0x\(String(format: "%04x", handle))"
        case .timeout: return "no answer within 30 s (ATT transaction timeout)"
        case .disconnected: return "the link went down"
        case let .invalidResponse(why): return "invalid response: \(why)"
        case .bearerClosed: return "the ATT bearer is closed after an earlier timeout"
        case let .invalidRequest(why): return why
        }
    }
}
