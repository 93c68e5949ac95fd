// `ble serve FILE.json`: advertises and serves a GATT database described in JSON (see GATTDatabaseFile). A
// file that fixes every service's handles is served exactly as written, with a warning for each place where
// that departs from the specification.
import ArgumentParser
import Foundation
import BLEWire
import BLEHCI
import BLEGATT
import BLEGAP
import BLEHost
import BLETransport
import BLESMP

struct ServeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve", abstract: "Advertise and serve a GATT database described in a JSON file.")

    @Argument(help: "The database file (JSON).")
    var file: String

    @Option(help: "Send each notify/indicate characteristic's value to its subscribers every this many seconds (0: never).")
    var notifyEvery: Double = 0

    @Option(help: "Stop after this many seconds (0: run until killed).")
    var duration: Double = 0

    @Option(help: "Pairing: what this terminal can do (prompts appear here).")
    var io: IOArgument = .none

    @Flag(help: "Accept Just Works pairing and numeric comparisons without asking.")
    var yes = false

    @Option(help: "The name of the persistent identity used over ble radio, rootcanal and other emulators (one per server running at once).")
    var identity = "serve"

    func validate() throws {
        guard notifyEvery >= 0, duration >= 0 else { throw ValidationError("--notify-every and --duration must be 0 or more") }
        guard !identity.isEmpty, identity.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
            throw ValidationError("--identity: letters, digits, - and _ only")
        }
    }

    func run() throws {
        let description: GATTDatabaseFile
        let database: GATTDatabase
        if let bluez = BlueZTool.options {
            do { description = try GATTDatabaseFile(path: file) } catch { throw ToolError("\(file): \(error)") }
            return try BlueZTool.serve(bluez, self, description, file: file)
        }
        do {
            description = try GATTDatabaseFile(path: file)
            database = try description.makeDatabase(deviceName: description.advertise.name ?? "OpenCoreBluetooth")
        } catch {
            throw ToolError("\(file): \(error)")
        }
        // An exact layout copies a device as it is: where it departs from the specification, say so, change nothing.
        for w in description.warnings {
            FileHandle.standardError.write(Data("warning: \(file): \(w)\n".utf8))
        }
        let packed = AdvertisingPacker.pack(localName: description.advertise.name, serviceUUIDs: description.advertise.serviceUUIDs)
        let agent = TerminalAgent(io.capability, autoAccept: yes || io == .none)
        final class Holder: @unchecked Sendable { var server: Server? }
        let holder = Holder()
        AdapterWatch.keepRunning()   // and advertises again when the adapter is back (below)
        let host = try Controller.open(name: "serve", identity: identity) { host in
            let server = Server(host: host, database: database)
            holder.server = server
            host.useDatabase(database)
            host.peripheralDelegate = server
            host.pairingAgent = agent
            host.addSecurityObserver { c, e in
                switch e {
                case let .paired(r): print("paired with \(c.identityAddress): \(r.method), \(r.secureConnections ? "Secure Connections" : "legacy")\(r.bonded ? ", bonded" : "")")
                case let .pairingFailed(err): print("pairing with \(c.peerAddress) failed: \(err)")
                case let .encryptionChanged(s): print("link to \(c.peerAddress): \(s)")
                case .bondRemoved: break
                }
                fflush(nil)
            }
        }
        let server = holder.server!
        let name = description.advertise.name ?? "(no name)"
        host.loop.execute {
            let advertise = {
                host.startAdvertising(AdvertisingConfiguration(data: packed.advertisingData, scanResponse: packed.scanResponseData)) { e in
                    let own = host.currentPrivateAddress ?? host.localAddress
                    say(e.map { "advertising failed: \($0)" } ?? "advertising \"\(name)\" as \(own) on \(host.transport.name)")
                }
            }
            // A controller that comes back after a loss is advertised on again.
            host.addPowerObserver { state in
                say("controller \(state)")
                if state == .on { advertise() }
            }
            advertise()
        }
        if notifyEvery > 0 {
            let interval = LoopTime.seconds(notifyEvery)
            host.loop.execute { server.tick(every: interval) }
        }
        if duration > 0 { DispatchQueue.main.asyncAfter(deadline: .now() + duration) { Foundation.exit(0) } }
        dispatchMain()
    }
}

/// Logs what clients do and sends periodic updates.
final class Server: HostPeripheralDelegate, @unchecked Sendable {
    let host: LEHost
    let database: GATTDatabase
    var counter: UInt8 = 0

    init(host: LEHost, database: GATTDatabase) {
        self.host = host
        self.database = database
    }

    func say(_ s: String) { print(s); fflush(nil) }

    func host(_ host: LEHost, didConnect connection: HostConnection) { say("connected: \(connection.peerAddress)") }
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) { say("disconnected: \(connection.peerAddress) (\(reason))") }
    func host(_ host: LEHost, didReceiveRead request: HostReadRequest) {
        host.respondToRead(id: request.id, result: .failure(.readNotPermitted))
    }
    func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) {
        for i in request.items { say("write 0x\(String(i.attributeHandle, radix: 16)) offset \(i.offset): \(i.value.hexString)") }
        host.respondToWrite(id: request.id, error: nil)
    }
    func host(_ host: LEHost, connection: HostConnection, didWriteStoredValue value: [UInt8], forHandle handle: UInt16) {
        say("write 0x\(String(handle, radix: 16)) (stored): \(value.hexString)")
    }
    func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {
        say("subscription 0x\(String(valueHandle, radix: 16)): notify \(notify) indicate \(indicate)")
    }
    func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) { say("mtu \(mtu)") }

    /// Sends every notify/indicate characteristic's stored value (with a counter octet) to its subscribers. Service
    /// Changed is the host's own (its value is a handle range): indicating it each tick made BlueZ rediscover the
    /// database every second, and its pending writes never went out (issue 27).
    func tick(every interval: LoopTime) {
        counter &+= 1
        for c in database.characteristics where !c.properties.isDisjoint(with: [.notify, .indicate]) && c.uuid != .serviceChanged {
            let value = (host.storedValue(at: c.valueHandle) ?? []) + [counter]
            _ = host.updateValue(value, forHandle: c.valueHandle)
        }
        host.loop.schedule(after: interval) { [weak self] in self?.tick(every: interval) }
    }
}
