// A persistent identity for hosts whose controller is new on every run. `ble radio`, rootcanal and other
// emulators (tcp-client, tcp-server and unix transports) give each connection a fresh controller with a
// fresh public address, so a device would be a stranger to itself from run to run: bonds made by `ble pair`
// would be filed under an address never seen again, and a file would pile up per run. Such a host instead
// uses a static random address (Vol 6 Part B §1.3.2.1) created once and kept in the state directory, as a
// device without a public address does, and keeps its bonds under that address. Real controllers
// (hci-socket, serial) keep their own address. The identity is per name ("central" for the commands that
// connect, "serve" for `ble serve`), so a server and a client on one air never share an address.
import Foundation
import BLEWire
import BLEHost
import BLETransport

enum ToolIdentity {
    /// What a host on such a transport does; nothing is written until the controller is up.
    struct Plan: Sendable {
        let name: String
        let directory: URL

        /// Before power-on: no bond file named after the controller's own (throwaway) address.
        func prepare(_ host: LEHost) {
            host.loop.sync { host.bondStoreDirectory = nil }
        }

        /// Once the controller is up: the identity (created on first use), its bonds, and its address
        /// for advertising, scanning and connecting.
        func apply(_ host: LEHost) throws {
            let address = ToolIdentity.loadOrCreate(name: name, directory: directory)
            let file = ToolIdentity.bondFile(for: address, directory: directory)
            let done = DispatchSemaphore(value: 0)
            final class Box: @unchecked Sendable { var error: HostError? }
            let box = Box()
            host.loop.execute {
                host.bondStore = BondStore(fileURL: file)
                host.setStaticRandomAddress(address) { e in
                    box.error = e; done.signal()
                }
            }
            guard done.wait(timeout: .now() + 10) == .success else { throw ToolError("setting the address \(address) timed out") }
            if let e = box.error { throw ToolError("cannot use the address \(address): \(e)") }
        }
    }

    /// Whether the transport's controllers change address from run to run.
    static func needsIdentity(_ spec: TransportSpec) -> Bool {
        switch spec {
        case .tcpClient, .tcpServer, .unix: return true
        case .virtual, .serial, .hciSocket: return false
        }
    }

    /// The plan for `name` on `spec`, or nil where the controller's own address is kept.
    static func plan(for spec: TransportSpec, name: String, directory: URL = HostStateDirectory.url) -> Plan? {
        needsIdentity(spec) ? Plan(name: name, directory: directory) : nil
    }

    static func file(name: String, directory: URL) -> URL {
        directory.appendingPathComponent("identity-\(name).json")
    }

    static func bondFile(for address: BluetoothAddress, directory: URL) -> URL {
        directory.appendingPathComponent("bonds-" + address.string.replacingOccurrences(of: ":", with: "") + ".json")
    }

    /// The identity's address; a new one is created and saved on first use (a file that cannot be
    /// written leaves a fresh address for this run only).
    static func loadOrCreate(name: String, directory: URL) -> BluetoothAddress {
        let url = file(name: name, directory: directory)
        if let data = try? Data(contentsOf: url),
            let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let s = o["address"] as? String, let a = BluetoothAddress(string: s, type: .random), a.randomKind == .staticAddress
        {
            return a
        }
        let a = makeStaticAddress()
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let text = "{\"address\": \"\(a.string)\", \"kind\": \"static random\"}\n"
        try? Data(text.utf8).write(to: url, options: .atomic)
        return a
    }

    /// A static random address: the two most significant bits 1, the rest random and not all ones or zeros.
    static func makeStaticAddress() -> BluetoothAddress {
        var g = SystemRandomNumberGenerator()
        while true {
            var b = (0..<6).map { _ in UInt8.random(in: 0...255, using: &g) }
            b[5] |= 0xC0
            let rest = Array(b[0..<5]) + [b[5] & 0x3F]
            if rest.allSatisfy({ $0 == 0 }) || rest == [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x3F] { continue }
            return BluetoothAddress(bytes: b, type: .random)
        }
    }
}
