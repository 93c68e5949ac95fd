// Pairing prompts on BlueZ (BLE_TRANSPORT=bluez[:hciN]): the manager's CBPairingAgent answers bluetoothd's
// questions through an org.bluez.Agent1 object this process exports (doc/org.bluez.Agent.rst) and registers with
// org.bluez.AgentManager1 (RegisterAgent with the agent's IO capability, then RequestDefaultAgent, so that pairings
// the kernel starts on its own — a read refused for lack of encryption, a central pairing with us — come to it too).
// An agent registered without RequestDefaultAgent (`asDefault` false: `ble pair`) answers only the pairings its own
// process starts with Device1.Pair (bluetoothd asks the caller's agent first, agent_get(sender)); the default agent
// (the desktop's, or a `ble serve` on another adapter of the same bluetoothd) keeps answering the rest.
//
//   RequestConfirmation(device, passkey)     confirm(number:with:)          numeric comparison
//   RequestPasskey(device) → passkey          passkey(for:)                  passkey entry, we type
//   DisplayPasskey(device, passkey, entered)  display(passkey:for:)          passkey entry, the peer types (once per
//                                                                            passkey: BlueZ calls again per keypress)
//   RequestAuthorization(device)              shouldPair(with:)              Just Works a peer started
//   AuthorizeService(device, uuid)            accepted                       (BR/EDR profiles; not asked on LE)
//   RequestPinCode / DisplayPinCode           Rejected                       (BR/EDR legacy PIN; not LE)
//   Cancel, Release                           the prompt is dropped / the registration is gone
//
// A refusal (false, nil, a passkey past 999999) is org.bluez.Error.Rejected, which BlueZ turns into a failed pairing.
// Without an agent the system's default agent (the desktop's) keeps answering, as before.
//
// Threading: calls arrive on the session's queue (the bus's handler queue); each prompt asks the app's agent in a
// task of its own and sends the answer from there, so nothing waits on the queue while the user types.
import Foundation
import DBus

final class BlueZAgent: @unchecked Sendable {
    let agent: any CBPairingAgent
    let path: String
    private weak var session: BlueZCentral?
    /// The CBPeer for a device path (on the session's queue).
    private let peer: @Sendable (String) -> CBPeer?
    /// Whether registering also makes it bluetoothd's default agent.
    let asDefault: Bool

    // Queue-confined.
    private(set) var registered = false
    private var displayed: [String: UInt32] = [:]

    private static let counter = CBMutex(0)

    init(agent: any CBPairingAgent, session: BlueZCentral, asDefault: Bool = true, peer: @escaping @Sendable (String) -> CBPeer?) {
        self.agent = agent
        self.asDefault = asDefault
        self.session = session
        self.peer = peer
        let n = Self.counter.withLock { v -> Int in
            v += 1
            return v
        }
        path = "/org/opencorebluetooth/p\(getpid())_agent\(n)"
    }

    /// AgentManager1's name for an IO capability.
    static func capability(_ io: CBPairingIOCapability) -> String {
        switch io {
        case .noInputNoOutput: return "NoInputNoOutput"
        case .displayOnly: return "DisplayOnly"
        case .displayYesNo: return "DisplayYesNo"
        case .keyboardOnly: return "KeyboardOnly"
        case .keyboardDisplay: return "KeyboardDisplay"
        }
    }

    /// Exports the object and registers it, as the default agent unless `asDefault` is false (on the session's queue,
    /// with bluetoothd on the bus).
    /// `done` runs on the queue with nil or the failure.
    func register(_ done: (@Sendable (DBusError?) -> Void)? = nil) {
        guard let session, let bus = session.bus else { done?(.disconnected("no connection to the system bus")); return }
        bus.export(path: path) { [weak self] call in
            guard let self else { return call.errorReply(name: "org.bluez.Error.Rejected", message: "the agent is gone") }
            return self.answer(call)   // nil: answered later, once the app's agent has
        }
        let path = path
        session.call("/org/bluez", "org.bluez.AgentManager1", "RegisterAgent", [.objectPath(path), .string(Self.capability(agent.ioCapability))]) {
            [weak self] r in
            guard let self, let session = self.session else { return }
            if case let .failure(e) = r {
                // Already registered on this connection (bluetoothd kept it): make it the default all the same.
                guard case let .remote(name, _) = e, name == "org.bluez.Error.AlreadyExists" else {
                    CBLog.warning("BlueZ backend: RegisterAgent failed: \(e); pairing prompts go to the system's agent")
                    return done?(e) ?? ()
                }
            }
            self.registered = true
            guard self.asDefault else { return done?(nil) ?? () }
            session.call("/org/bluez", "org.bluez.AgentManager1", "RequestDefaultAgent", [.objectPath(path)]) { r in
                if case let .failure(e) = r {
                    CBLog.warning("BlueZ backend: RequestDefaultAgent failed: \(e); only pairings this process starts reach its agent")
                }
                done?(nil)
            }
        }
    }

    /// Unregisters (bluetoothd then returns to the previous default agent) and stops answering (on the queue).
    func unregister() {
        guard let session else { return }
        if registered {
            session.call("/org/bluez", "org.bluez.AgentManager1", "UnregisterAgent", [.objectPath(path)]) { r in
                if case let .failure(e) = r { CBLog.warning("BlueZ backend: UnregisterAgent failed: \(e)") }
            }
        }
        registered = false
        session.bus?.unexport(path: path)
    }

    /// bluetoothd left the bus or the connection ended: the registration is gone with it.
    func forgetRegistration() {
        registered = false
        displayed.removeAll()
    }

    // MARK: Calls from bluetoothd

    private func answer(_ call: DBusMessage) -> DBusMessage? {
        guard call.interface == "org.bluez.Agent1", let member = call.member else {
            return call.errorReply(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "\(call.interface ?? "").\(call.member ?? "") is not here")
        }
        let device = call.body.first?.string ?? ""
        switch member {
        case "Release":
            registered = false
            return call.reply()
        case "Cancel":
            displayed.removeAll()
            return call.reply()
        case "RequestPinCode", "DisplayPinCode":
            return Self.rejected(call, "a PIN code is BR/EDR pairing, which this agent does not do")
        case "AuthorizeService":
            return call.reply()
        case "DisplayPasskey":
            guard call.body.count >= 2, let v = call.body[1].integer, (0...999_999).contains(v) else { return Self.invalid(call) }
            // BlueZ calls again with each digit the peer's user types (`entered`): show the passkey once.
            guard displayed[device] != UInt32(v) else { return call.reply() }
            displayed[device] = UInt32(v)
            ask(call, device) { agent, who in
                await agent.display(passkey: UInt32(v), for: who)
                return nil
            }
            return call.reply()
        case "RequestConfirmation":
            guard call.body.count >= 2, let v = call.body[1].integer, (0...999_999).contains(v) else { return Self.invalid(call) }
            ask(call, device) { agent, who in
                await agent.confirm(number: UInt32(v), with: who) ? call.reply() : Self.rejected(call, "the user did not confirm \(v)")
            }
            return nil
        case "RequestPasskey":
            ask(call, device) { agent, who in
                guard let v = await agent.passkey(for: who) else { return Self.rejected(call, "no passkey given") }
                guard v <= 999_999 else { return Self.rejected(call, "the passkey \(v) has more than six digits") }
                return call.reply([.uint32(v)])
            }
            return nil
        case "RequestAuthorization":
            ask(call, device) { agent, who in
                await agent.shouldPair(with: who) ? call.reply() : Self.rejected(call, "pairing refused")
            }
            return nil
        default:
            return call.errorReply(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "org.bluez.Agent1.\(member) is not here")
        }
    }

    /// Asks the app's agent in a task of its own and sends what `prompt` returns (nil: nothing to send).
    private func ask(_ call: DBusMessage, _ device: String, _ prompt: @escaping @Sendable (any CBPairingAgent, CBPeer?) async -> DBusMessage?) {
        guard let bus = session?.bus else { return }
        let who = UncheckedBox(peer(device))
        let agent = agent
        Task.detached {
            guard let answer = await prompt(agent, who.value) else { return }
            _ = try? bus.send(answer)
        }
    }

    private static func rejected(_ call: DBusMessage, _ why: String) -> DBusMessage {
        call.errorReply(name: "org.bluez.Error.Rejected", message: why)
    }

    private static func invalid(_ call: DBusMessage) -> DBusMessage {
        call.errorReply(name: "org.bluez.Error.InvalidArguments", message: "Invalid arguments in method call")
    }
}

extension BlueZCentral {
    /// Installs (or, with nil, removes) the app's pairing agent; `peer` names the CBPeer of a device path.
    func setPairingAgent(
        _ agent: (any CBPairingAgent)?, asDefault: Bool = true, peer: @escaping @Sendable (String) -> CBPeer?, done: (@Sendable (DBusError?) -> Void)? = nil
    ) {
        queue.async { [self] in
            pairing?.unregister()
            pairing = agent.map { BlueZAgent(agent: $0, session: self, asDefault: asDefault, peer: peer) }
            guard let pairing else { return done?(nil) ?? () }
            if bus != nil, bluezReady { pairing.register(done) } else { pendingAgentDone = done }
        }
    }

    /// The CBPeripheral for a device path, made if needed (central role; on the queue).
    func peripheralPeer(forDevice path: String) -> CBPeer? { peripheral(forDevice: path) }

    /// A CBCentral for a device path: the identifier the device has on this adapter (peripheral role; on the queue).
    func centralPeer(forDevice path: String) -> CBPeer? {
        guard let props = tree[path, BlueZObjectTree.deviceInterface], let address = BlueZAdvertisement.address(props) else { return nil }
        return CBCentral(identifier: BlueZAdvertisement.identifier(for: address, adapter: options.adapter ?? ""))
    }
}
