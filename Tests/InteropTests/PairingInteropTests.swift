// Pairing with Bumble over rootcanal, both roles: LE Secure Connections (Just Works, Numeric Comparison,
// Passkey Entry) and LE legacy pairing (Just Works, Passkey Entry); an encrypted characteristic read after
// the transparent pairing; reconnection with the stored bond and no second pairing. Also `bumble-pair`
// itself as the peripheral.
import Foundation
import Testing
import TestSupport
import BLEWire
import BLEHCI
import BLEGATT
import BLESMP
import BLETransport
@testable import BLEHost

/// Our side's agent: types what Bumble displays, shows what Bumble must type (through a file), accepts numbers.
final class RelayAgent: PairingAgent, @unchecked Sendable {
    let ioCapability: IOCapability
    let bumble: @Sendable () -> PeerProcess?
    let passkeyFile: URL
    let lock = NSLock()
    var prompts: [PairingPrompt] = []
    init(_ io: IOCapability, passkeyFile: URL, bumble: @escaping @Sendable () -> PeerProcess?) {
        ioCapability = io
        self.passkeyFile = passkeyFile
        self.bumble = bumble
    }
    func pairing(_ connection: HostConnection, prompt: PairingPrompt, answer: @escaping @Sendable (PairingAnswer) -> Void) {
        lock.withLock { prompts.append(prompt) }
        switch prompt {
        case .acceptPairing, .confirmNumber: answer(.accept(true))
        case let .displayPasskey(v): try? String(v).write(to: passkeyFile, atomically: true, encoding: .utf8)
        case .enterPasskey:
            let source = bumble
            Thread.detachNewThread {
                let deadline = Date().addingTimeInterval(20)
                while Date() < deadline {
                    if let n = source()?.events("display").last?["number"] as? Int { return answer(.passkey(UInt32(n))) }
                    if let text = source()?.events("log").compactMap({ $0["text"] as? String }).first(where: { $0.contains("PIN: ") }),
                        let n = UInt32(text.components(separatedBy: "PIN: ").last!.filter(\.isNumber))
                    {
                        return answer(.passkey(n))
                    }
                    usleep(20_000)
                }
                answer(.passkey(nil))
            }
        }
    }
}

final class SecurityRecorder: HostCentralDelegate, HostPeripheralDelegate, @unchecked Sendable {
    let lock = NSLock()
    var connections: [HostConnection] = []
    var disconnects = 0
    var events: [HostSecurityEvent] = []
    func host(_ host: LEHost, didReceive report: AdvertisingReport) {}
    func host(_ host: LEHost, didConnect connection: HostConnection) { lock.withLock { connections.append(connection) } }
    func host(_ host: LEHost, didFailToConnectTo address: BluetoothAddress, status: HCIStatus) {}
    func host(_ host: LEHost, didDisconnect connection: HostConnection, reason: HCIStatus) { lock.withLock { disconnects += 1 } }
    func host(_ host: LEHost, connection: HostConnection, didReceiveValue value: [UInt8], forHandle handle: UInt16, isIndication: Bool) {}
    func host(_ host: LEHost, didReceiveRead request: HostReadRequest) { host.respondToRead(id: request.id, result: .failure(.readNotPermitted)) }
    func host(_ host: LEHost, didReceiveWrite request: HostWriteRequest) { host.respondToWrite(id: request.id, error: nil) }
    func host(_ host: LEHost, connection: HostConnection, didChangeSubscriptionOf valueHandle: UInt16, notify: Bool, indicate: Bool) {}
    func host(_ host: LEHost, connection: HostConnection, didChangeMTU mtu: UInt16) {}
    var paired: [PairingResult] {
        lock.withLock {
            events.compactMap {
                if case let .paired(r) = $0 { return r }; return nil
            }
        }
    }
    var failures: [PairingError] {
        lock.withLock {
            events.compactMap {
                if case let .pairingFailed(e) = $0 { return e }; return nil
            }
        }
    }
    var encryptions: Int {
        lock.withLock {
            events.filter {
                if case .encryptionChanged = $0 { return true }; return false
            }.count
        }
    }
    var lastConnection: HostConnection? { lock.withLock { connections.last } }
}

let encryptedUUID = BluetoothUUID(0xFFE1), authenticatedUUID = BluetoothUUID(0xFFE2)

/// One folder per test process for the pairing peers' files, removed when the process exits.
let pairingTempDirectory: URL = {
    let dir = URL(fileURLWithPath: NSTemporaryDirectory() + "ocb-pair-\(getpid())")
    try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    atexit { try? FileManager.default.removeItem(atPath: NSTemporaryDirectory() + "ocb-pair-\(getpid())") }
    return dir
}()

func tempPath(_ name: String) -> URL {
    pairingTempDirectory.appendingPathComponent("\(UUID().uuidString)-\(name)")
}

/// Our host on rootcanal with a relay agent and a recorder.
func makeSecureHost(_ rc: RootCanal, io: IOCapability, sc: Bool, passkeyFile: URL, bumble: @escaping @Sendable () -> PeerProcess?) throws -> (LEHost, SecurityRecorder) {
    let host = try HostFactory.makeHost(spec: .tcpClient(host: "127.0.0.1", port: rc.hciPort), name: "ours")
    let rec = SecurityRecorder()
    host.loop.sync {
        host.centralDelegate = rec
        host.peripheralDelegate = rec
        host.pairingAgent = RelayAgent(io, passkeyFile: passkeyFile, bumble: bumble)
        host.securityConfiguration.secureConnections = sc
        host.bondStore = BondStore(fileURL: tempPath("bonds.json"))
        host.addSecurityObserver { _, e in rec.lock.withLock { rec.events.append(e) } }
        host.powerOn()
    }
    return (host, rec)
}

func readByUUID(_ host: LEHost, _ c: HostConnection, _ uuid: BluetoothUUID) async throws -> Result<GATTClient.Outcome, GATTClient.Failure> {
    let box = ResultBox()
    host.loop.sync { c.gatt(.readUsingCharacteristicUUID(start: 1, end: 0xFFFF, uuid: uuid)) { r in box.set(r) } }
    try await waitFor("read of \(uuid)", seconds: 40) { box.get() != nil }
    return box.get()!
}

final class ResultBox: @unchecked Sendable {
    let lock = NSLock()
    var value: Result<GATTClient.Outcome, GATTClient.Failure>?
    func set(_ v: Result<GATTClient.Outcome, GATTClient.Failure>) { lock.withLock { value = v } }
    func get() -> Result<GATTClient.Outcome, GATTClient.Failure>? { lock.withLock { value } }
}

func readValue(_ r: Result<GATTClient.Outcome, GATTClient.Failure>) -> [UInt8]? {
    if case let .success(.handleValues(list)) = r { return list.first?.value }
    return nil
}

struct PairingCase: Sendable, CustomStringConvertible {
    var ours: IOCapability, bumble: String, sc: Bool, method: PairingMethod
    var description: String { "\(sc ? "SC" : "legacy") \(method) (ours \(ours), Bumble \(bumble))" }
}

/// All cases, or only the one numbered in OCB_PAIRING_CASE (when debugging one).
let pairingCases: [PairingCase] = {
    guard let v = ProcessInfo.processInfo.environment["OCB_PAIRING_CASE"], let i = Int(v), allPairingCases.indices.contains(i) else { return allPairingCases }
    return [allPairingCases[i]]
}()

let allPairingCases: [PairingCase] = [
    PairingCase(ours: .noInputNoOutput, bumble: "none", sc: true, method: .justWorks),
    PairingCase(ours: .displayYesNo, bumble: "yesno", sc: true, method: .numericComparison),
    PairingCase(ours: .keyboardOnly, bumble: "display", sc: true, method: .passkeyEntry),
    PairingCase(ours: .displayOnly, bumble: "keyboard", sc: true, method: .passkeyEntry),
    PairingCase(ours: .noInputNoOutput, bumble: "none", sc: false, method: .justWorks),
    PairingCase(ours: .keyboardOnly, bumble: "display", sc: false, method: .passkeyEntry),
]

@Suite(.serialized, .timeLimit(.minutes(3))) struct PairingInteropTests {
    /// Our central, Bumble peripheral: the read of a protected characteristic pairs transparently; after a
    /// reconnection the bond encrypts the link without pairing again.
    @Test(arguments: pairingCases)
    func ourCentralPairsWithBumble(_ k: PairingCase) async throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let passkeyFile = tempPath("passkey")
        nonisolated(unsafe) var bumble: PeerProcess?
        bumble = try PeerProcess(
            script: "bumble_pairing.py",
            arguments: [
                "--transport", rc.transport, "--io", k.bumble, "--sc", k.sc ? "true" : "false",
                "--keystore", tempPath("bumble-keys.json").path, "--passkey-file", passkeyFile.path,
            ])
        defer { bumble?.stop() }
        let advertised = try await bumble!.waitFor("advertising")
        let bumbleAddress = try #require((advertised[0]["address"] as? String).flatMap { BluetoothAddress(string: $0) })
        let (host, rec) = try makeSecureHost(rc, io: k.ours, sc: k.sc, passkeyFile: passkeyFile, bumble: { bumble })
        try await waitFor("power", seconds: 20) { host.loop.sync { host.powerState == .on } }
        host.loop.sync { host.connect(to: bumbleAddress) }
        try await waitFor("connection", seconds: 30) { rec.lastConnection != nil }
        let target = k.method == .justWorks ? encryptedUUID : authenticatedUUID
        let link = try #require(rec.lastConnection)
        #expect(readValue(try await readByUUID(host, link, target)) == [k.method == .justWorks ? 0x5E : 0xA7], "\(rec.failures)")
        let result = try #require(rec.paired.first)
        #expect(result.method == k.method && result.secureConnections == k.sc && result.bonded)
        let bumblePaired = try await bumble!.waitFor("paired")
        #expect(bumblePaired[0]["sc"] as? Bool == k.sc && bumblePaired[0]["authenticated"] as? Bool == true, "\(bumblePaired)")
        // Both sides derived the same key: Bumble's LTK is the one in our bond (little-endian hex both).
        let bond = try #require(host.loop.sync { host.bondStore.bond(for: bumbleAddress) })
        if let ltk = bumblePaired[0]["ltk"] as? String, k.sc { #expect(bond.keys.secureConnectionsLTK?.key.hexString == ltk) }
        // Reconnect: encrypted with the stored key, no pairing on either side.
        host.loop.sync { link.disconnect() }
        try await waitFor("disconnect") { rec.lock.withLock { rec.disconnects } == 1 }
        host.loop.sync { host.connect(to: bumbleAddress) }
        try await waitFor("reconnection", seconds: 30) { rec.lock.withLock { rec.connections.count } == 2 }
        let again = try #require(rec.lastConnection)
        #expect(readValue(try await readByUUID(host, again, target)) != nil)
        #expect(rec.paired.count == 1 && bumble!.events("paired").count == 1)
        #expect(host.loop.sync { again.security.encrypted && again.security.authenticated == k.method.isAuthenticated })
        host.loop.sync { host.powerOff() }
    }

    /// Bumble central, our peripheral: Bumble pairs, reads our encrypted characteristic, reconnects and
    /// encrypts with the keys it stored; we find the bond by its identity.
    @Test(arguments: pairingCases)
    func bumbleCentralPairsWithUs(_ k: PairingCase) async throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let passkeyFile = tempPath("passkey")
        // The agent asks for the peer that starts later: a box, not a var mutated after capture.
        final class PeerBox: @unchecked Sendable { var peer: PeerProcess? }
        let box = PeerBox()
        let (host, rec) = try makeSecureHost(rc, io: k.ours, sc: k.sc, passkeyFile: passkeyFile, bumble: { box.peer })
        try await waitFor("power", seconds: 20) { host.loop.sync { host.powerState == .on } }
        try host.loop.sync {
            _ = try host.addService(
                GATTServiceDefinition(
                    uuid: BluetoothUUID(0xFFE0),
                    characteristics: [
                        GATTCharacteristicDefinition(uuid: encryptedUUID, properties: [.read], permissions: [.readable, .readEncryptionRequired], value: [0x5E]),
                        GATTCharacteristicDefinition(uuid: authenticatedUUID, properties: [.read], permissions: [.readable, .readAuthenticationRequired], value: [0xA7]),
                    ]))
            host.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6, 4, 9, 0x4F, 0x43, 0x42]))
        }
        let ours = host.loop.sync { host.localAddress }
        let read = k.method == .justWorks ? encryptedUUID : authenticatedUUID
        let bumble = try PeerProcess(
            script: "bumble_pairing.py",
            arguments: [
                "--transport", rc.transport, "--io", k.bumble, "--sc", k.sc ? "true" : "false",
                "--keystore", tempPath("bumble-keys.json").path, "--passkey-file", passkeyFile.path,
                "--connect", ours.description, "--read", "0000\(read.uuidString)-0000-1000-8000-00805F9B34FB",
            ])
        box.peer = bumble
        defer { bumble.stop() }
        try await bumble.waitFor("done", seconds: 60)
        let reads = bumble.events("read")
        let expected = k.method == .justWorks ? "5e" : "a7"
        #expect(reads.compactMap { ($0["values"] as? [String: String])?.values.first } == [expected, expected])
        #expect(bumble.events("paired").count == 1 && rec.paired.count == 1)
        let result = try #require(rec.paired.first)
        #expect(result.method == k.method && result.secureConnections == k.sc)
        #expect(rec.encryptions >= 2)
        #expect(host.loop.sync { host.bondStore.bonds.count } == 1)
        host.loop.sync { host.powerOff() }
    }

    /// `bumble-pair` itself, waiting as a peripheral with a display: our central reads its heart-rate
    /// measurement (which needs authentication), typing the PIN bumble-pair prints.
    @Test func bumblePairAsPeripheral() async throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let config = tempPath("device.json")
        try Data("{\"name\": \"Bumble Pair\", \"address\": \"F0:F1:F2:F3:F4:F5\"}".utf8).write(to: config)
        nonisolated(unsafe) var bumble: PeerProcess?
        bumble = try PeerProcess(
            script: "run_tool.py",
            arguments: [
                "bumble-pair", "--io", "display", "--linger", "--keystore-file", tempPath("keys.json").path, config.path, rc.transport,
            ])
        defer { bumble?.stop() }
        // bumble-pair says nothing more once it advertises and waits.
        try await bumble!.waitFor("log", seconds: 30) { ($0["text"] as? String)?.contains("<<< connected") ?? false }
        try await pause(nanoseconds: 1_500_000_000)
        let (host, rec) = try makeSecureHost(rc, io: .keyboardOnly, sc: true, passkeyFile: tempPath("unused"), bumble: { bumble })
        try await waitFor("power", seconds: 20) { host.loop.sync { host.powerState == .on } }
        host.loop.sync { host.connect(to: BluetoothAddress(string: "F0:F1:F2:F3:F4:F5", type: .random)!) }
        try await waitFor("connection", seconds: 30) { rec.lastConnection != nil }
        let link = try #require(rec.lastConnection)
        let r = try await readByUUID(host, link, BluetoothUUID(0x2A37))
        #expect(readValue(r) != nil, "\(r) \(rec.failures)\n\(bumble!.transcript)")
        #expect(rec.paired.first?.method == .passkeyEntry && rec.paired.first?.secureConnections == true)
        try await bumble!.waitFor("log") { ($0["text"] as? String)?.contains("Paired") ?? false }
        host.loop.sync { host.powerOff() }
    }

    /// `ble pair` against a Bumble peripheral: Just Works under Secure Connections, bond written owner-only.
    @Test func blePairCommand() async throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let bumble = try PeerProcess(
            script: "bumble_pairing.py",
            arguments: [
                "--transport", rc.transport, "--io", "none", "--keystore", tempPath("bumble-keys.json").path,
            ])
        defer { bumble.stop() }
        let advertised = try await bumble.waitFor("advertising")
        let address = try #require(advertised[0]["address"] as? String)
        let state = tempPath("state")
        let pair = Process()
        pair.executableURL = Interop.root.appendingPathComponent(".build/debug/ble")
        pair.arguments = ["pair", address, "--io", "none", "--yes", "--timeout", "30"]
        pair.environment = Interop.environment(["BLE_TRANSPORT": rc.transport, "OCB_STATE_DIR": state.path])
        let out = Pipe()
        pair.standardOutput = out
        pair.standardError = out
        try pair.run()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        pair.waitUntilExit()
        #expect(pair.terminationStatus == 0, "\(text)")
        #expect(text.contains("bonded with \(address)"), "\(text)")
        try await bumble.waitFor("paired")
        let files = try FileManager.default.contentsOfDirectory(atPath: state.path).filter { $0.hasPrefix("bonds-") }
        #expect(files.count == 1)
        let attributes = try FileManager.default.attributesOfItem(atPath: state.appendingPathComponent(files[0]).path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
    }

    /// `bumble-pair` as the central: it connects to our peripheral and pairs (Secure Connections, Just Works
    /// with our default agent); both sides report the bond.
    @Test func bumblePairAsCentral() async throws {
        let rc = try RootCanal()
        defer { rc.stop() }
        let (host, rec) = try makeSecureHost(rc, io: .noInputNoOutput, sc: true, passkeyFile: tempPath("unused"), bumble: { nil })
        try await waitFor("power", seconds: 20) { host.loop.sync { host.powerState == .on } }
        host.loop.sync { host.startAdvertising(AdvertisingConfiguration(data: [2, 1, 6, 4, 9, 0x4F, 0x43, 0x42])) }
        let ours = host.loop.sync { host.localAddress }
        let config = tempPath("device.json")
        try Data("{\"name\": \"Bumble Pair\", \"address\": \"F0:F1:F2:F3:F4:F5\"}".utf8).write(to: config)
        let bumble = try PeerProcess(
            script: "run_tool.py",
            arguments: [
                "bumble-pair", "--io", "none", "--keystore-file", tempPath("keys.json").path, config.path, rc.transport, ours.description,
            ])
        defer { bumble.stop() }
        try await bumble.waitFor("log", seconds: 40) { ($0["text"] as? String)?.contains("Paired") ?? false }
        try await waitFor("our side paired") { !rec.paired.isEmpty }
        let r = try #require(rec.paired.first)
        #expect(r.method == .justWorks && r.secureConnections && r.bonded)
        #expect(host.loop.sync { host.bondStore.bonds.count } == 1)
        host.loop.sync { host.powerOff() }
    }
}
