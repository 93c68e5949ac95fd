// Internal: the engine and sockets behind MDNSService (being written).
import DNSSD
import NIOCore
import Foundation

final class MDNSCore: @unchecked Sendable {
    let hostNameString: String
    init(interfaces: [String]?, ipv4: Bool, ipv6: Bool, hostName: String?, log: (@Sendable (String) -> Void)?) {
        self.hostNameString = hostName ?? "\(UUID().uuidString).local."
    }
    func register(serviceType: String, instanceName: String, port: UInt16, txt: [String: String],
                  onEvent: @escaping @Sendable (RegistrationEvent) -> Void) -> MDNSRegistration {
        onEvent(.failed(.socketUnavailable(reason: "not implemented yet")))
        return MDNSRegistration(cancel: {})
    }
    func browse(serviceType: String, onEvent: @escaping @Sendable (BrowseEvent) -> Void) -> MDNSBrowse {
        onEvent(.failed(.socketUnavailable(reason: "not implemented yet")))
        return MDNSBrowse(cancel: {})
    }
    func start() throws(MDNSError) { throw .socketUnavailable(reason: "not implemented yet") }
    func shutdown() {}
}
