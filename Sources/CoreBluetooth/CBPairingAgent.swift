// Pairing prompts (an OpenCoreBluetooth addition). On iOS the system shows the pairing dialog; Linux has
// none, so an application that wants more than Just Works gives its manager an agent that can show a
// passkey, ask for one, or have the user compare numbers. Without one, pairing accepts Just Works only,
// as a device with no display and no keyboard would.
//
// Pairing itself stays invisible, as on iOS: a read, write or subscription that the peer refuses for lack
// of encryption or authentication pairs (or encrypts with the stored bond) and is retried; the app sees
// the final result. Bonds are kept (for real controllers) in the state directory and reused.
import Foundation
import BLEHost
import BLESMP

/// What the user interface of this device can do, which decides the pairing method (Core Spec Vol 3 Part H §2.3.5.1).
public enum CBPairingIOCapability: Sendable {
    case noInputNoOutput, displayOnly, displayYesNo, keyboardOnly, keyboardDisplay

    var smp: IOCapability {
        switch self {
        case .noInputNoOutput: return .noInputNoOutput
        case .displayOnly: return .displayOnly
        case .displayYesNo: return .displayYesNo
        case .keyboardOnly: return .keyboardOnly
        case .keyboardDisplay: return .keyboardDisplay
        }
    }
}

/// Answers pairing prompts for a manager. Methods may take their time (the user is typing); pairing fails
/// after 30 seconds without an answer. `peer` is the CBPeripheral (central role) or CBCentral (peripheral role).
public protocol CBPairingAgent: AnyObject, Sendable {
    var ioCapability: CBPairingIOCapability { get }
    /// Just Works: accept pairing with this device?
    func shouldPair(with peer: CBPeer?) async -> Bool
    /// Show this six-digit passkey; the other device's user types it.
    func display(passkey: UInt32, for peer: CBPeer?) async
    /// The passkey the other device shows, or nil to cancel.
    func passkey(for peer: CBPeer?) async -> UInt32?
    /// Do both devices show this number?
    func confirm(number: UInt32, with peer: CBPeer?) async -> Bool
}

public extension CBPairingAgent {
    func shouldPair(with peer: CBPeer?) async -> Bool { true }
    func display(passkey: UInt32, for peer: CBPeer?) async {}
    func passkey(for peer: CBPeer?) async -> UInt32? { nil }
    func confirm(number: UInt32, with peer: CBPeer?) async -> Bool { false }
}

/// Bridges a CBPairingAgent to the host's prompts.
final class PairingAgentBridge: PairingAgent, @unchecked Sendable {
    let agent: any CBPairingAgent
    let peer: @Sendable (HostConnection) -> CBPeer?
    init(agent: any CBPairingAgent, peer: @escaping @Sendable (HostConnection) -> CBPeer?) {
        self.agent = agent
        self.peer = peer
    }
    var ioCapability: IOCapability { agent.ioCapability.smp }

    func pairing(_ connection: HostConnection, prompt: PairingPrompt, answer: @escaping @Sendable (PairingAnswer) -> Void) {
        let who = UncheckedBox(peer(connection))
        let agent = agent
        Task.detached {
            switch prompt {
            case .acceptPairing: answer(.accept(await agent.shouldPair(with: who.value)))
            case let .displayPasskey(v): await agent.display(passkey: v, for: who.value)
            case .enterPasskey: answer(.passkey(await agent.passkey(for: who.value)))
            case let .confirmNumber(n): answer(.accept(await agent.confirm(number: n, with: who.value)))
            }
        }
    }
}

extension CBManager {
    /// Stores the agent and gives the host its bridge (or the Just Works default); `peer` names the CBPeer of a link.
    func installPairingAgent(_ agent: (any CBPairingAgent)?, on host: LEHost?, peer: @escaping @Sendable (HostConnection) -> CBPeer?) {
        managerLock.withLock { storedPairingAgent = agent }
        guard let host else { return }
        let bridge: any PairingAgent = agent.map { PairingAgentBridge(agent: $0, peer: peer) } ?? JustWorksAgent()
        host.loop.execute { host.pairingAgent = bridge }
    }
}

extension CBCentralManager {
    /// The agent that answers pairing prompts for links this manager makes; nil accepts Just Works only.
    public var pairingAgent: (any CBPairingAgent)? {
        get { managerLock.withLock { storedPairingAgent } }
        set {
            // A shared link's peer: this manager's peripheral for it, else another manager's.
            installPairingAgent(newValue, on: leHost) { [weak self] c in
                let all = SharedLink.existing(c)?.peripherals ?? []
                return all.first { $0.manager === self } ?? all.first
            }
            // BLE_TRANSPORT=bluez: bluetoothd asks through an Agent1 of ours (BlueZAgent).
            bluez?.setPairingAgent(newValue) { [weak bluez] path in bluez?.peripheralPeer(forDevice: path) }
        }
    }
}

extension CBPeripheralManager {
    /// The agent that answers pairing prompts when centrals pair with us; nil accepts Just Works only.
    public var pairingAgent: (any CBPairingAgent)? {
        get { managerLock.withLock { storedPairingAgent } }
        set {
            installPairingAgent(newValue, on: leHost) { [weak self] c in self?.central(for: c) }
            let session = bluez?.session
            session?.setPairingAgent(newValue) { [weak session] path in session?.centralPeer(forDevice: path) }
        }
    }
}
