// An outgoing resource's file is read by the pump on its link's event loop. Cancelling the resource from another
// thread while the pump has taken the file's descriptor and not yet read it must leave the file open until the
// pump is done with it: closed at once, its number could go to a file opened meanwhile, and the pump would send
// that file's octets to the peer. Over a socket pair (no network, so these run anywhere): the session's link on
// one end, a bare link standing for the peer on the other.
import Foundation
import NIOCore
import PeerSession
import Synchronization
import Testing
@testable import MultipeerConnectivity
@testable import PeerTransport

/// Holds the sending link's event loop at two points, where the test acts from its own thread: at the first
/// resource chunk written, then at the first `data` frame written while the pump runs. That frame is one the
/// test queued in the link's outbox meanwhile: the pump writes it out as it starts its next chunk, after taking
/// the file's descriptor and before reading it. (A write can carry several frames: the outbox gathers them.)
private final class PumpGate: ChannelOutboundHandler, @unchecked Sendable {
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let atFirstChunk = DispatchSemaphore(value: 0)
    let pastFirstChunk = DispatchSemaphore(value: 0)
    let beforeRead = DispatchSemaphore(value: 0)
    let pastRead = DispatchSemaphore(value: 0)
    private let pumping: () -> Bool
    private let dataType = PeerMessage.data(id: 0, final: true, unreliable: true, chunk: []).frame.type
    private var stage = 0   // event loop only

    init(pumping: @escaping () -> Bool) { self.pumping = pumping }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let types = Self.frameTypes(in: unwrapOutboundIn(data))
        if stage == 0 && types.contains(PeerMessage.resourceChunkType) {
            stage = 1
            atFirstChunk.signal()
            _ = pastFirstChunk.wait(timeout: .now() + 10)
        } else if stage == 1 && types.contains(dataType) && pumping() {
            stage = 2
            beforeRead.signal()
            _ = pastRead.wait(timeout: .now() + 10)
        }
        context.write(data, promise: promise)
    }

    static func frameTypes(in buffer: ByteBuffer) -> [UInt8] {
        var types: [UInt8] = []
        var at = buffer.readerIndex
        while let type = buffer.getInteger(at: at, as: UInt8.self),
            let length = buffer.getInteger(at: at + 4, endianness: .little, as: UInt32.self)
        {
            types.append(type)
            at += PeerFrame.headerLength + Int(length)
        }
        return types
    }

    /// Lets the loop go on whatever happened (a test that failed half-way must not leave it held).
    func release() {
        pastFirstChunk.signal()
        pastRead.signal()
    }
}

/// What the bare link at the peer's end received: messages, and each resource's octets.
private final class PeerEnd: @unchecked Sendable {
    let lock = NSLock()
    var messages: [PeerMessage] = []
    var resources: [UInt32: [UInt8]] = [:]
    let link: PeerLink

    init(_ link: PeerLink) {
        self.link = link
        link.onMessage = { [weak self] m in
            guard let self else { return }
            lock.withLock { messages.append(m) }
            // Acknowledged as a session would once the file is whole.
            if case let .resourceEnd(id) = m { link.send(.resourceAck(id: id)) }
        }
        link.onResourceChunk = { [weak self] id, chunk in
            guard let self else { return }
            let bytes = chunk.withUnsafeBytes { Array($0) }
            lock.withLock { resources[id, default: []] += bytes }
        }
    }

    func received(_ m: PeerMessage) -> Bool { lock.withLock { messages.contains(m) } }
}

/// Makes a link of each end of a connected socket pair (the first named as a Bluetooth link: 64 KB pieces).
private func linkedPair() throws -> (PeerLink, PeerLink) {
    var ends: [Int32] = [0, 0]
    guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
        throw TestFailure("socketpair: \(errno)")
    }
    let links = Mutex<[Int: PeerLink]>([:])
    let done = DispatchSemaphore(value: 0)
    for (i, name) in ["ble:session", "peer"].enumerated() {
        PeerTransport.shared.adopt(socket: ends[i], remoteHost: name, asClient: true, tls: nil) { r in
            if case let .success(link) = r { links.withLock { $0[i] = link } }
            done.signal()
        }
    }
    for _ in 0..<2 { _ = done.wait(timeout: .now() + 10) }
    guard let a = links.withLock({ $0[0] }), let b = links.withLock({ $0[1] }) else {
        links.withLock { $0.values.forEach { $0.close() } }
        throw TestFailure("the socket pair did not become two links")
    }
    return (a, b)
}

/// The descriptors of this process open on `path` (from /proc/self/fd).
private func descriptors(openOn path: String) -> [Int32] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return names.compactMap { name in
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)")) == path ? Int32(name) : nil
    }
}

/// Waits until every task queued on the link's event loop so far has run, and the tasks those queued.
private func drainLoop(of link: PeerLink) {
    for _ in 0..<3 {
        let ran = DispatchSemaphore(value: 0)
        link.execute { ran.signal() }
        _ = ran.wait(timeout: .now() + 10)
    }
}

/// A session ("B") in which peer "A" is connected over `link`.
private func sessionConnected(over link: PeerLink) throws -> (MCSession, MCPeerID, PeerConnection) {
    let session = MCSession(peer: MCPeerID(displayName: "B"), securityIdentity: nil, encryptionPreference: .none, transports: [])
    let a = MCPeerID(displayName: "A")
    guard let c = session.adopt(link, peer: a, memberPort: 0) else {
        session.disconnect()
        throw TestFailure("the session did not adopt the link")
    }
    session.lock.withLock { c.connected = true }
    return (session, a, c)
}

/// A new directory for one test's files (the test removes it).
private func freshDirectory() throws -> URL {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("mc-file-\(UUID().uuidString)")
        .resolvingSymlinksInPath()
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    return dir
}

@Suite(.serialized, .timeLimit(.minutes(1)))
struct ResourceFileTests {
    /// A resource or a stream the app starts on a peer whose link has just gone (its transfers failed, the peer not yet
    /// out of the session's list: the window between a send's look-up and its adding the transfer) fails at once with
    /// notConnected, and the resource's file is closed. Before, the resource was added after the failing: its
    /// completion never ran and its file stayed open as long as the connection object lived.
    @Test func aTransferStartedOnAPeerWhoseTransfersFailedFailsAtOnce() throws {
        let dir = try freshDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("late.bin")
        try Data(repeating: 0x4C, count: 10_000).write(to: file)

        let (link, peerLink) = try linkedPair()
        defer { peerLink.close() }
        let (session, a, c) = try sessionConnected(over: link)
        defer { session.disconnect() }
        session.failTransfers(of: c)

        // (An NSLock, as in the test below: ThreadSanitizer does not see Synchronization.Mutex's futex as ordering.)
        let outcome = NSLock()
        var results: [(any Error)?] = []
        let progress = session.sendResource(at: file, withName: "late.bin", toPeer: a) { e in outcome.withLock { results.append(e) } }
        #expect(progress == nil)
        try waitFor("the completion") { outcome.withLock { !results.isEmpty } }
        #expect((outcome.withLock { results[0] } as? MCError)?.code == .notConnected)
        #expect(descriptors(openOn: file.path).isEmpty, "the resource's file was left open")
        #expect(session.lock.withLock { c.outgoingResources.isEmpty })
        do {
            _ = try session.startStream(withName: "late", toPeer: a)
            Issue.record("a stream opened on a peer whose transfers had failed")
        } catch {
            #expect((error as? MCError)?.code == .notConnected)
        }
        #expect(session.lock.withLock { c.outgoingStreams.isEmpty })
    }

    @Test func cancellingFromAnotherThreadMidReadLeavesTheFileToThePumpAndClosesItOnce() throws {
        let dir = try freshDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("big.bin")
        let content = (0..<1_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        try Data(content).write(to: file)

        let (link, peerLink) = try linkedPair()
        let peer = PeerEnd(peerLink)
        defer { peerLink.close() }
        let (session, a, c) = try sessionConnected(over: link)
        defer { session.disconnect() }
        let gate = PumpGate { c.pumping }
        defer { gate.release() }
        try link.channel.pipeline.addHandler(gate).wait()

        let outcome = NSLock()
        var results: [Error?] = []
        let progress = try #require(session.sendResource(at: file, withName: "big.bin", toPeer: a) { e in outcome.withLock { results.append(e) } })
        let opened = descriptors(openOn: file.path)
        try #require(opened.count == 1)
        try #require(gate.atFirstChunk.wait(timeout: .now() + 10) == .success)
        // Queued in the outbox while the loop is held: the pump's next chunk writes it out first.
        link.send(.data(id: 99, final: true, unreliable: true, chunk: Array("marker".utf8)))
        gate.pastFirstChunk.signal()
        try #require(gate.beforeRead.wait(timeout: .now() + 10) == .success)

        // The pump holds the descriptor and is about to read it. The app cancels, from this thread.
        progress.cancel()
        try waitFor("the cancelled completion") { outcome.withLock { !results.isEmpty } }
        #expect((outcome.withLock { results[0] } as? MCError)?.code == .cancelled)
        #expect(descriptors(openOn: file.path) == opened, "the file was closed while the pump was about to read it")
        // A file opened now takes whatever number is free: had the resource's file been closed, its number.
        let sentinel = dir.appendingPathComponent("sentinel")
        try Data(repeating: 0x53, count: 4096).write(to: sentinel)
        let other = open(sentinel.path, O_RDONLY | O_CLOEXEC)
        try #require(other >= 0)
        defer { close(other) }
        gate.pastRead.signal()
        drainLoop(of: link)

        // The pump read the resource's own file, not the one opened meanwhile, and then closed the file once.
        #expect(lseek(other, 0, SEEK_CUR) == 0)
        try waitFor("the peer told of the cancel") { peer.received(.resourceCancel(id: 1)) }
        let sent = peer.lock.withLock { peer.resources[1] ?? [] }
        #expect(sent.count >= 2 * PeerConnection.chunk && sent[...] == content[..<sent.count], "the peer got octets that are not the file's")
        try waitFor("the file closed") { descriptors(openOn: file.path).isEmpty }
        // Nothing closes or reads its number again: a file that takes it now stays open and unread.
        let next = open(sentinel.path, O_RDONLY | O_CLOEXEC)
        try #require(next >= 0)
        defer { close(next) }
        drainLoop(of: link)
        #expect(fcntl(next, F_GETFD) >= 0 && lseek(next, 0, SEEK_CUR) == 0)
        #expect(outcome.withLock { results.count } == 1)

        // The session goes on: a message, and a whole resource whose file is closed once it is sent.
        try session.send(Data("after".utf8), toPeers: [a], with: .reliable)
        try waitFor("the message") { peer.received(.data(id: 1, final: true, unreliable: false, chunk: Array("after".utf8))) }
        let small = dir.appendingPathComponent("small.bin")
        try Data(content[..<300_000]).write(to: small)
        _ = try #require(session.sendResource(at: small, withName: "small.bin", toPeer: a) { e in outcome.withLock { results.append(e) } })
        try waitFor("the second resource") { outcome.withLock { results.count } == 2 }
        #expect(outcome.withLock { results[1] } == nil)
        #expect(peer.lock.withLock { peer.resources[2] } == Array(content[..<300_000]))
        try waitFor("the second file closed") { descriptors(openOn: small.path).isEmpty }
        #expect(session.connectedPeers == [a])
    }
}
