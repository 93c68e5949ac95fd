// Multipeer tests send real packets, so they run only inside a network namespace of their own:
// scripts/test runs this target under `unshare -n` with loopback up and multicast on (see
// scripts/netns-run). Anywhere else the networking tests are skipped with that explanation.
import Foundation
import Testing
@testable import MultipeerConnectivity

enum NetworkIsolation {
    /// True when this process sees no network interface but loopback (a namespace made for the tests).
    static let isolated: Bool = {
        // /proc/self/net/dev lists the interfaces of this process's own namespace (sysfs would show the host's).
        guard let text = try? String(contentsOfFile: "/proc/self/net/dev", encoding: .utf8) else { return false }
        let names = text.split(separator: "\n").dropFirst(2).compactMap { $0.split(separator: ":").first?.trimmingCharacters(in: .whitespaces) }
        return names == ["lo"]
    }()
    static let reason: Comment = "needs a private network namespace: run scripts/test (or scripts/netns-run swift test --filter MultipeerConnectivityTests)"
}

/// Records a session's delegate calls, with the thread they came on.
final class SessionRecorder: NSObject, MCSessionDelegate, @unchecked Sendable {
    let lock = NSLock()
    var states: [(String, MCSessionState)] = []
    var messages: [(String, Data)] = []
    var streams: [(String, InputStream)] = []
    var resourcesStarted: [(String, Progress)] = []
    var resourcesFinished: [(String, Data?, Error?)] = []
    var certificates: [[Any]?] = []
    var acceptCertificates = true
    var onMainThread = false
    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        lock.withLock {
            states.append((peerID.displayName, state)); if Thread.isMainThread { onMainThread = true }
        }
    }
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) { lock.withLock { messages.append((peerID.displayName, data)) } }
    func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {
        lock.withLock { streams.append((streamName, stream)) }
    }
    func session(_ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, with progress: Progress) {
        lock.withLock { resourcesStarted.append((resourceName, progress)) }
    }
    /// Where received resources are moved instead of being read into memory (large ones).
    var moveResourcesTo: URL?
    func session(_ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, at localURL: URL?, withError error: Error?) {
        if let dir = lock.withLock({ moveResourcesTo }), let localURL {
            try? FileManager.default.moveItem(at: localURL, to: dir.appendingPathComponent(resourceName))
            lock.withLock { resourcesFinished.append((resourceName, nil, error)) }
            return
        }
        let data = localURL.flatMap { try? Data(contentsOf: $0) }
        lock.withLock { resourcesFinished.append((resourceName, data, error)) }
    }
    /// How long the app takes over a certificate (0: it answers at once, on the delegate queue).
    var certificateDelay: Double = 0
    func session(_ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID, certificateHandler: @escaping (Bool) -> Void) {
        let (accept, delay) = lock.withLock { () -> (Bool, Double) in
            certificates.append(certificate)
            return (acceptCertificates, certificateDelay)
        }
        guard delay > 0 else { return certificateHandler(accept) }
        let answer = Unchecked(certificateHandler)
        DispatchQueue.global().asyncAfter(deadline: .now() + delay) { answer.value(accept) }
    }
    func connected(_ name: String) -> Bool { lock.withLock { states.last { $0.0 == name }?.1 == .connected } }
    func lastState(_ name: String) -> MCSessionState? { lock.withLock { states.last { $0.0 == name }?.1 } }
}

final class AdvertiserAnswer: NSObject, MCNearbyServiceAdvertiserDelegate, @unchecked Sendable {
    var session: MCSession?
    var answer: Bool? = true   // nil: never answer
    let lock = NSLock()
    var invitations: [(String, Data?)] = []
    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID, withContext context: Data?,
        invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        lock.withLock { invitations.append((peerID.displayName, context)) }
        guard let answer else { return }
        invitationHandler(answer, answer ? session : nil)
    }
}

final class BrowserRecorder: NSObject, MCNearbyServiceBrowserDelegate, @unchecked Sendable {
    let lock = NSLock()
    var found: [(MCPeerID, [String: String]?, Date)] = []
    var lost: [(MCPeerID, Date)] = []
    func browser(_ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?) {
        lock.withLock { found.append((peerID, info, Date())) }
    }
    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) { lock.withLock { lost.append((peerID, Date())) } }
    func peer(named n: String) -> MCPeerID? { lock.withLock { found.first { $0.0.displayName == n }?.0 } }
}

func waitFor(_ what: String, seconds: Double = 10, _ cond: () -> Bool) throws {
    let deadline = Date().addingTimeInterval(seconds)
    while !cond() {
        if Date() > deadline { throw TestFailure("timed out waiting for \(what)") }
        usleep(5_000)
    }
}

/// A child process started with its output and error in one pipe, read as it comes (a full pipe never
/// blocks the child), and bounded in time: `finish` waits for it to end and kills it after `seconds`.
final class ChildProcess: @unchecked Sendable {
    let process = Process()
    private let lock = NSLock()
    private var output = Data()
    private let drained = DispatchSemaphore(value: 0)

    init(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = environment }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let reader = pipe.fileHandleForReading
        Thread.detachNewThread { [self] in
            while true {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                lock.withLock { output.append(chunk) }
            }
            drained.signal()
        }
    }

    /// Waits up to `seconds` for the process to end (then SIGKILLs it) and returns everything it printed.
    func finish(within seconds: Double) -> (text: String, status: Int32, timedOut: Bool) {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        let timedOut = process.isRunning
        if timedOut { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        _ = drained.wait(timeout: .now() + 5)
        return (lock.withLock { String(decoding: output, as: UTF8.self) }, process.terminationStatus, timedOut)
    }

    deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// A connected pair over mDNS discovery and an invitation: `a` advertises, `b` browses and invites.
struct Pair {
    let a: MCSession, b: MCSession
    let ra = SessionRecorder(), rb = SessionRecorder()
    let advertiser: MCNearbyServiceAdvertiser
    let browser: MCNearbyServiceBrowser
    let answer = AdvertiserAnswer()
    let found = BrowserRecorder()
    let serviceType: String

    init(
        encryption: MCEncryptionPreference = .required, answer accept: Bool? = true, connect: Bool = true, context: Data? = nil,
        timeout: TimeInterval = 10, transports: MCTransports = .network, findWithin: Double = 30
    ) throws {
        serviceType = "t" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        a = MCSession(peer: MCPeerID(displayName: "A"), securityIdentity: nil, encryptionPreference: encryption, transports: transports)
        b = MCSession(peer: MCPeerID(displayName: "B"), securityIdentity: nil, encryptionPreference: encryption, transports: transports)
        a.delegate = ra
        b.delegate = rb
        answer.session = a
        answer.answer = accept
        advertiser = MCNearbyServiceAdvertiser(peer: a.myPeerID, discoveryInfo: ["room": "1"], serviceType: serviceType)
        advertiser.delegate = answer
        browser = MCNearbyServiceBrowser(peer: b.myPeerID, serviceType: serviceType)
        browser.delegate = found
        advertiser.transports = transports
        browser.transports = transports
        advertiser.startAdvertisingPeer()
        browser.startBrowsingForPeers()
        guard connect else { return }
        // `findWithin` only bounds a peer never found: how soon is the machine's business (over Bluetooth, under
        // ThreadSanitizer on a saturated machine, it took over 5 s).
        try waitFor("A found", seconds: findWithin) { found.peer(named: "A") != nil }
        browser.invitePeer(found.peer(named: "A")!, to: b, withContext: context, timeout: timeout)
        if accept == true {
            let (ra, rb) = (ra, rb)
            try waitFor("connected", seconds: 10) { rb.connected("A") && ra.connected("B") }
        }
    }

    func stop() {
        advertiser.stopAdvertisingPeer()
        browser.stopBrowsingForPeers()
        a.disconnect()
        b.disconnect()
    }
}

/// This process's resident memory now, in MB (/proc/self/statm).
func residentMegabytes() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
        let pages = text.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
    else { return 0 }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE))) / (1 << 20)
}

/// Writes `size` bytes of a fixed pattern in 1 MB pieces (each piece a different slice of one buffer).
func writePattern(_ url: URL, size: Int) throws {
    guard FileManager.default.createFile(atPath: url.path, contents: nil) else { throw TestFailure("cannot create \(url.path)") }
    let h = try FileHandle(forWritingTo: url)
    defer { try? h.close() }
    let base = Data((0..<((1 << 20) + 4096)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ ($0 >> 11)) })
    var left = size, piece = 0
    while left > 0 {
        let n = min(left, 1 << 20)
        let start = (piece &* 613) % 4096
        try h.write(contentsOf: base[start..<(start + n)])
        left -= n
        piece += 1
    }
}

/// Whether two files hold the same bytes (compared 1 MB at a time).
func sameContents(_ a: URL, _ b: URL) throws -> Bool {
    let ha = try FileHandle(forReadingFrom: a), hb = try FileHandle(forReadingFrom: b)
    defer { try? ha.close(); try? hb.close() }
    while true {
        let x = try ha.read(upToCount: 1 << 20) ?? Data(), y = try hb.read(upToCount: 1 << 20) ?? Data()
        if x != y { return false }
        if x.isEmpty { return true }
    }
}

/// Writes byte `pattern(i)` for every i from `alreadySent` to `total` into `out` while reading `input`,
/// until `total` bytes arrived or 30 s passed; returns what arrived.
func pumpStream(
    _ out: OutputStream, into input: InputStream, total: Int, alreadySent: Int = 0, chunk: Int,
    pattern: (Int) -> UInt8
) -> [UInt8] {
    var sent = alreadySent
    var received = [UInt8]()
    var buf = [UInt8](repeating: 0, count: 65_536)
    let end = Date().addingTimeInterval(30)
    while received.count < total && Date() < end {
        if sent < total {
            let piece = (0..<min(chunk, total - sent)).map { pattern(sent + $0) }
            let n = out.write(piece, maxLength: piece.count)
            if n > 0 { sent += n }
        }
        if input.hasBytesAvailable {
            let n = input.read(&buf, maxLength: buf.count)
            if n > 0 { received += buf[0..<n] }
        } else {
            usleep(500)
        }
    }
    return received
}

/// Two sessions' custom-discovery data for each other: (a's for b, b's for a).
func connectionData(_ a: MCSession, _ b: MCSession) throws -> (Data, Data) {
    let lock = NSLock()
    var da: Data?, db: Data?
    a.nearbyConnectionData(forPeer: b.myPeerID) { d, _ in lock.withLock { da = d } }
    b.nearbyConnectionData(forPeer: a.myPeerID) { d, _ in lock.withLock { db = d } }
    try waitFor("data") { lock.withLock { da != nil && db != nil } }
    return lock.withLock { (da!, db!) }
}

/// A third peer "C" that browses for the pair's service and invites A into its own session.
struct Newcomer {
    let session: MCSession
    let recorder = SessionRecorder()
    let browser: MCNearbyServiceBrowser
    let seen = BrowserRecorder()

    init(joining p: Pair, transports: MCTransports = .default, findWithin: Double = 30) throws {
        session = MCSession(peer: MCPeerID(displayName: "C"), securityIdentity: nil, encryptionPreference: .required, transports: transports)
        session.delegate = recorder
        browser = MCNearbyServiceBrowser(peer: session.myPeerID, serviceType: p.serviceType)
        browser.transports = transports
        browser.delegate = seen
        browser.startBrowsingForPeers()
        let seen = seen
        try waitFor("found by C", seconds: findWithin) { seen.peer(named: "A") != nil }
        browser.invitePeer(seen.peer(named: "A")!, to: session, withContext: nil, timeout: 10)
    }
}
