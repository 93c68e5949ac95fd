// Internal: the engine and the sockets behind MDNSService, confined to one event loop.
//
// States: idle ─start()─► running ─shutdown()─► shutDown;  idle ─start() fails─► failed(error) (retried on
// the next start). In `running`, every engine call and every action happens on `loop`.
import DNSSD
import Foundation
import Logging
import NIOCore
import NIOPosix
import StackLog

final class MDNSCore: @unchecked Sendable {
    enum State {
        case idle
        case running(MDNSSockets)
        case shutDown
    }

    let hostNameString: String
    let interfaces: [String]?
    let ipv4: Bool
    let ipv6: Bool
    let log: @Sendable (String) -> Void

    private let lock = NSLock()
    private var state: State = .idle   // guarded by `lock`
    /// Serialises opening the sockets. Not `lock`: while they open, the loop may already deliver a packet,
    /// and `received` takes `lock` on the loop, which must not wait for the opener's `wait()` on that loop.
    private let opening = NSLock()
    private var group: MultiThreadedEventLoopGroup?

    // Loop-confined once running.
    private var engine: MDNSEngine?
    private var origin = NIODeadline.now()
    private var wake: Scheduled<Void>?
    private var nextToken = 1
    private var registrationIDs: [Int: RegistrationID] = [:]
    private var registrationHandlers: [RegistrationID: @Sendable (RegistrationEvent) -> Void] = [:]
    private var browseIDs: [Int: BrowseID] = [:]
    private var browseHandlers: [BrowseID: (type: String, handler: @Sendable (BrowseEvent) -> Void)] = [:]

    init(interfaces: [String]?, ipv4: Bool, ipv6: Bool, hostName: String?, log: (@Sendable (String) -> Void)?) {
        self.hostNameString = hostName ?? "\(UUID().uuidString).local."
        self.interfaces = interfaces
        self.ipv4 = ipv4
        self.ipv6 = ipv6
        self.log = log ?? { line in Logger(.mdns).notice("\(line)") }
    }

    // MARK: Life cycle

    func start() throws(MDNSError) {
        _ = try running()
    }

    /// The sockets, opening them on first use.
    private func running() throws(MDNSError) -> MDNSSockets {
        opening.lock()
        defer { opening.unlock() }
        let (current, existingGroup): (State, MultiThreadedEventLoopGroup?) = lock.withLock { (self.state, self.group) }
        switch current {
        case .running(let sockets): return sockets
        case .shutDown: throw .shutDown
        case .idle: break
        }
        let group = existingGroup ?? MultiThreadedEventLoopGroup(numberOfThreads: 1)
        lock.withLock { self.group = group }
        let loop = group.next()
        let sockets = try MDNSSockets.open(
            on: loop, interfaces: interfaces, ipv4: ipv4, ipv6: ipv6, log: log,
            receive: { [weak self] bytes, peer in self?.received(bytes, from: peer) },
            changed: { [weak self] change in self?.networkChanged(change) })
        let host = (try? DNSName(hostNameString)) ?? (try! DNSName("linux.local"))
        let seed = UInt64.random(in: 0...UInt64.max)
        try? loop.submit {
            self.engine = MDNSEngine(hostName: host, addresses: sockets.ourAddresses, seed: seed)
            self.origin = .now()
        }.wait()
        let shutDownMeanwhile = lock.withLock { () -> Bool in
            if case .shutDown = state { return true }
            state = .running(sockets)
            return false
        }
        if shutDownMeanwhile {
            sockets.close()
            throw .shutDown
        }
        return sockets
    }

    func shutdown() {
        lock.lock()
        let current = state
        state = .shutDown
        let group = self.group
        lock.unlock()
        if case .running(let sockets) = current {
            try? sockets.loop.submit {
                if var engine = self.engine {
                    let actions = engine.goodbyeAll(now: self.now())
                    self.engine = engine
                    self.perform(actions, sockets: sockets)
                }
                self.wake?.cancel()
                self.registrationHandlers.removeAll()
                self.browseHandlers.removeAll()
            }.wait()
            sockets.close()
        }
        try? group?.syncShutdownGracefully()
    }

    // MARK: API

    func register(
        serviceType: String, instanceName: String, port: UInt16, txt: [String: String],
        onEvent: @escaping @Sendable (RegistrationEvent) -> Void
    ) -> MDNSRegistration {
        let type: DNSName
        let record: TXTRecord
        do {
            type = try MDNSCore.parseServiceType(serviceType)
            guard !instanceName.isEmpty, instanceName.utf8.count <= 63 else { throw MDNSError.invalidInstanceName(instanceName) }
            for key in txt.keys where !TXTRecord.isValidKey(key) { throw MDNSError.invalidTXT("bad key '\(key)'") }
            do { record = try TXTRecord(txt) } catch { throw MDNSError.invalidTXT("\(error)") }
        } catch let error as MDNSError {
            onEvent(.failed(error)); return MDNSRegistration(cancel: {})
        } catch { onEvent(.failed(.invalidTXT("\(error)"))); return MDNSRegistration(cancel: {}) }
        let sockets: MDNSSockets
        do { sockets = try running() } catch { onEvent(.failed(error)); return MDNSRegistration(cancel: {}) }
        let token = lock.withLock { () -> Int in
            nextToken += 1; return nextToken
        }
        sockets.loop.execute {
            guard var engine = self.engine else { return }
            let (id, actions) = engine.register(instanceName: instanceName, serviceType: type, port: port, txt: record, now: self.now())
            self.engine = engine
            self.registrationIDs[token] = id
            self.registrationHandlers[id] = onEvent
            self.perform(actions, sockets: sockets)
        }
        return MDNSRegistration(cancel: { [weak self] in
            sockets.loop.execute { [weak self] in
                guard let self, let id = self.registrationIDs.removeValue(forKey: token), var engine = self.engine else { return }
                self.registrationHandlers[id] = nil
                let actions = engine.unregister(id, now: self.now())
                self.engine = engine
                self.perform(actions, sockets: sockets)
            }
        })
    }

    func browse(serviceType: String, onEvent: @escaping @Sendable (BrowseEvent) -> Void) -> MDNSBrowse {
        let type: DNSName
        do { type = try MDNSCore.parseServiceType(serviceType) } catch { onEvent(.failed(error)); return MDNSBrowse(cancel: {}) }
        let sockets: MDNSSockets
        do { sockets = try running() } catch { onEvent(.failed(error)); return MDNSBrowse(cancel: {}) }
        let token = lock.withLock { () -> Int in
            nextToken += 1; return nextToken
        }
        let display = DNSName(labelsDropLast: type).descriptionWithoutDot
        sockets.loop.execute {
            guard var engine = self.engine else { return }
            // Register the handler before the engine can report cached services.
            let (id, actions) = engine.startBrowsing(serviceType: type, now: self.now())
            self.engine = engine
            self.browseIDs[token] = id
            self.browseHandlers[id] = (display, onEvent)
            self.perform(actions, sockets: sockets)
        }
        return MDNSBrowse(cancel: { [weak self] in
            sockets.loop.execute { [weak self] in
                guard let self, let id = self.browseIDs.removeValue(forKey: token), var engine = self.engine else { return }
                self.browseHandlers[id] = nil
                let actions = engine.stopBrowsing(id, now: self.now())
                self.engine = engine
                self.perform(actions, sockets: sockets)
            }
        })
    }

    /// `_foo._tcp` or `_foo._tcp.local.` → `_foo._tcp.local.`; the name part must pass Bonjour rules.
    static func parseServiceType(_ text: String) throws(MDNSError) -> DNSName {
        var t = text
        if t.hasSuffix(".") { t.removeLast() }
        if t.lowercased().hasSuffix(".local") { t.removeLast(6) }
        let parts = t.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 2, parts[0].hasPrefix("_"), parts[1] == "_tcp" || parts[1] == "_udp",
            BonjourServiceType.isValid(String(parts[0].dropFirst())),
            let name = try? DNSName(labelStrings: [parts[0], parts[1], "local"])
        else {
            throw .invalidServiceType(text)
        }
        return name
    }

    // MARK: Loop-confined

    private func now() -> MDNSInstant {
        MDNSInstant(milliseconds: (NIODeadline.now() - origin).nanoseconds / 1_000_000)
    }

    private func received(_ bytes: [UInt8], from peer: MDNSPeer) {
        guard case .running(let sockets) = lock.withLock({ state }), var engine = self.engine else { return }
        let actions = engine.receive(bytes, from: peer, now: now())
        self.engine = engine
        perform(actions, sockets: sockets)
    }

    /// Interfaces or addresses changed (on the loop): withdraw addresses we lost and announce the new
    /// ones, announce our records again on interfaces gained, forget what was learnt on interfaces lost.
    private func networkChanged(_ change: MDNSNetworkChange) {
        guard case .running(let sockets) = lock.withLock({ state }), var engine = self.engine else { return }
        var actions = engine.setAddresses(change.addresses, now: now())
        actions += engine.interfacesChanged(added: change.added, removed: change.removed, now: now())
        self.engine = engine
        perform(actions, sockets: sockets)
    }

    private func timerFired(sockets: MDNSSockets) {
        guard var engine = self.engine else { return }
        let actions = engine.timerFired(now: now())
        self.engine = engine
        perform(actions, sockets: sockets)
    }

    private func perform(_ actions: [MDNSAction], sockets: MDNSSockets) {
        for action in actions {
            switch action {
            case .send(let bytes, let destination):
                sockets.send(bytes, to: destination)
            case .wakeUp(let at):
                wake?.cancel()
                let deadline = origin + .milliseconds(at.milliseconds)
                wake = sockets.loop.scheduleTask(deadline: deadline) { [weak self] in self?.timerFired(sockets: sockets) }
            case .log(let line):
                log(line)
            case .event(let event):
                deliver(event, sockets: sockets)
            }
        }
    }

    private func deliver(_ event: MDNSEvent, sockets: MDNSSockets) {
        switch event {
        case .registered(let id, let name): registrationHandlers[id]?(.registered(name: name))
        case .renamed(let id, let from, let to): registrationHandlers[id]?(.renamed(from: from, to: to))
        case .registrationFailed(let id, let reason): registrationHandlers[id]?(.failed(.nameConflict(reason)))
        case .found(let id, let s):
            if let b = browseHandlers[id] { b.handler(.found(discovered(s, type: b.type, sockets: sockets))) }
        case .updated(let id, let s):
            if let b = browseHandlers[id] { b.handler(.updated(discovered(s, type: b.type, sockets: sockets))) }
        case .lost(let id, let name): browseHandlers[id]?.handler(.lost(instanceName: name))
        }
    }

    private func discovered(_ s: ResolvedService, type: String, sockets: MDNSSockets) -> DiscoveredService {
        var texts: [String] = []
        var socketAddresses: [SocketAddress] = []
        for address in s.addresses {
            switch address {
            case .v4:
                texts.append(address.description)
                if let sa = try? SocketAddress(ipAddress: address.description, port: Int(s.port)) { socketAddresses.append(sa) }
            case .v6(let bytes):
                // A link-local address is reachable through the interface it was learnt on.
                let linkLocal = bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80
                let scope = linkLocal ? (s.interfaces[address] ?? 0) : 0
                texts.append(address.description + (scope != 0 ? "%\(MDNSSockets.name(of: scope) ?? String(scope))" : ""))
                socketAddresses.append(MDNSSockets.socketAddress(v6: bytes, port: s.port, scope: scope))
            }
        }
        return DiscoveredService(
            instanceName: s.instanceName, serviceType: type, txt: s.txt.dictionary,
            hostName: s.host.description, port: s.port, addresses: texts, socketAddresses: socketAddresses)
    }
}

extension DNSName {
    /// `_foo._tcp.local.` → `_foo._tcp` (drops the domain).
    init(labelsDropLast name: DNSName) {
        self = (try? DNSName(labels: Array(name.labels.dropLast()))) ?? name
    }
    var descriptionWithoutDot: String { String(description.dropLast()) }
}
