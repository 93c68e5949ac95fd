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
    struct Plan: Sendable {
        let address: BluetoothAddress
        let bondFile: URL

        /// Before power-on: bonds from the identity's own file.
        func prepare(_ host: LEHost) {
            let file = bondFile
            host.loop.sync {
                host.bondStoreDirectory = nil
                host.bondStore = BondStore(fileURL: file)
            }
        }

        /// Once the controller is up: advertise, scan and connect from the identity's address.
        func apply(_ host: LEHost) throws {
            let done = DispatchSemaphore(value: 0)
            final class Box: @unchecked Sendable { var error: HostError? }
            let box = Box()
            let address = address
            host.loop.execute {
                host.setStaticRandomAddress(address) { e in box.error = e; done.signal() }
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

    /// The plan for `name` on `spec`, or nil where the controller's own address is kept. The identity is
    /// created on first use; a file that cannot be written leaves a fresh address for this run only.
    static func plan(for spec: TransportSpec, name: String, directory: URL = HostStateDirectory.url) -> Plan? {
        guard needsIdentity(spec) else { return nil }
        let address = loadOrCreate(name: name, directory: directory)
        let file = directory.appendingPathComponent("bonds-" + address.string.replacingOccurrences(of: ":", with: "") + ".json")
        return Plan(address: address, bondFile: file)
    }

    static func file(name: String, directory: URL) -> URL {
        directory.appendingPathComponent("identity-\(name).json")
    }

    static func loadOrCreate(name: String, directory: URL) -> BluetoothAddress {
        let url = file(name: name, directory: directory)
        if let data = try? Data(contentsOf: url),
           let o = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
           let s = o["address"] as? String, let a = BluetoothAddress(string: s, type: .random), a.randomKind == .staticAddress {
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
            let rest = b[0..<5] + [b[5] & 0x3F]
            if rest.allSatisfy({ $0 == 0 }) || rest.enumerated().allSatisfy({ $0.offset == 5 ? $0.element == 0x3F : $0.element == 0xFF }) { continue }
            return BluetoothAddress(bytes: b, type: .random)
        }
    }
}
