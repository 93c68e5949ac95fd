// TCP listeners and connections for the peer session protocol, with TLS 1.3 (swift-nio-ssl) when asked.
// A listener serves both kinds: it looks at the first octet a client sends — 0x16 starts a TLS handshake —
// and installs the TLS server handler or not. Certificates are self-signed (or the app's); they are not
// verified by TLS: the session hands the peer's chain to the app (MCSessionDelegate's certificate
// callback), which decides.
import Foundation
import NIOCore
import NIOPosix
import NIOConcurrencyHelpers
import NIOTLS
import NIOSSL
import X509
import Crypto
import SwiftASN1
import PeerSession

/// A certificate and its key: what a side presents in TLS.
public struct PeerTLSIdentity: @unchecked Sendable {
    public let certificateChain: [NIOSSLCertificate]
    public let privateKey: NIOSSLPrivateKey
    /// DER of the leaf certificate.
    public let certificateDER: [UInt8]

    /// A new self-signed P-256 certificate for `commonName`, valid ten years.
    public static func selfSigned(commonName: String) throws -> PeerTLSIdentity {
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName { CommonName(commonName) }
        let now = Date()
        let cert = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(key.publicKey),
            notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(10 * 365 * 86_400),
            issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: Certificate.Extensions {}, issuerPrivateKey: .init(key))
        var serializer = DER.Serializer()
        try serializer.serialize(cert)
        let der = serializer.serializedBytes
        return PeerTLSIdentity(
            certificateChain: [try NIOSSLCertificate(bytes: der, format: .der)],
            privateKey: try NIOSSLPrivateKey(bytes: Array(key.pemRepresentation.utf8), format: .pem),
            certificateDER: der)
    }

    func serverContext() throws -> NIOSSLContext {
        var c = TLSConfiguration.makeServerConfiguration(certificateChain: certificateChain.map { .certificate($0) }, privateKey: .privateKey(privateKey))
        c.minimumTLSVersion = .tlsv13
        // Ask for the client's certificate; our callback accepts any and records it (the app decides later).
        c.certificateVerification = .noHostnameVerification
        return try NIOSSLContext(configuration: c)
    }

    func clientContext() throws -> NIOSSLContext {
        var c = TLSConfiguration.makeClientConfiguration()
        c.certificateChain = certificateChain.map { .certificate($0) }
        c.privateKey = .privateKey(privateKey)
        c.minimumTLSVersion = .tlsv13
        c.certificateVerification = .noHostnameVerification
        return try NIOSSLContext(configuration: c)
    }
}

/// Accepts peer connections on a TCP port.
public final class PeerListener: @unchecked Sendable {
    let channel: Channel
    public let port: UInt16
    init(channel: Channel) {
        self.channel = channel
        self.port = UInt16(channel.localAddress?.port ?? 0)
    }
    public func close() { channel.close(promise: nil) }
}

public enum PeerTransportError: Error, CustomStringConvertible {
    case cannotListen(String)
    case cannotConnect(String)
    public var description: String {
        switch self {
        case let .cannotListen(w): return "cannot listen: \(w)"
        case let .cannotConnect(w): return "cannot connect: \(w)"
        }
    }
}

public final class PeerTransport: @unchecked Sendable {
    /// One event loop for every session of the process (the work per frame is small).
    public static let shared = PeerTransport()
    public let group: MultiThreadedEventLoopGroup

    public init(threads: Int = 1) {
        group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
    }

    static func configure(_ ch: Channel) {
        // Back-pressure: writers hear "not writable" past 1 MB queued, "writable" again below 256 KB.
        _ = ch.setOption(ChannelOptions.writeBufferWaterMark, value: .init(low: 256 * 1024, high: 1024 * 1024))
        _ = ch.setOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
        // Reads of up to 1 MiB when the data is there (NIO's default stops at 64 KB): fewer system calls
        // and pipeline passes for bulk transfers; an idle link's buffer stays small (it adapts).
        _ = ch.setOption(ChannelOptions.recvAllocator, value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 2048, maximum: 1 << 20))
    }

    /// Listens on `port` (0 picks one) on every address; `tls` serves clients that start a handshake.
    public func listen(port: UInt16 = 0, tls: PeerTLSIdentity?, onLink: @escaping @Sendable (PeerLink) -> Void) throws -> PeerListener {
        let serverContext = try tls?.serverContext()
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { ch in
                Self.configure(ch)
                return ch.pipeline.addHandler(ProtocolSniffer(tls: serverContext, onLink: onLink))
            }
        do {
            let ch = try bootstrap.bind(host: "::", port: Int(port)).wait()
            return PeerListener(channel: ch)
        } catch {
            do {
                return PeerListener(channel: try bootstrap.bind(host: "0.0.0.0", port: Int(port)).wait())
            } catch {
                throw PeerTransportError.cannotListen("\(error)")
            }
        }
    }

    /// Adopts one end of a connected stream socket whose other end carries another transport (a Bluetooth
    /// L2CAP channel bridged through a socket pair) as a peer link named `remoteHost`. As the client, the
    /// link is TLS 1.3 from the first octet when `tls` is given; as the server it serves TLS or plaintext
    /// as a listener does. Takes ownership of `fd` (closed with the link, or at once on failure).
    public func adopt(
        socket fd: CInt, remoteHost: String, asClient: Bool, tls: PeerTLSIdentity?,
        completion: @escaping @Sendable (Result<PeerLink, PeerTransportError>) -> Void
    ) {
        let done = NIOLockedValueBox(false)
        let finish: @Sendable (Result<PeerLink, PeerTransportError>) -> Void = { r in
            let first = done.withLockedValue { d -> Bool in
                defer { d = true }; return !d
            }
            if first { completion(r) }
        }
        let context: NIOSSLContext?
        do { context = try asClient ? tls?.clientContext() : tls?.serverContext() } catch {
            close(fd)
            return completion(.failure(.cannotConnect("TLS: \(error)")))
        }
        ClientBootstrap(group: group)
            .channelInitializer { ch in
                Self.configure(ch)
                do {
                    if !asClient {
                        try ch.pipeline.syncOperations.addHandler(ProtocolSniffer(tls: context, remoteHost: remoteHost, onLink: { finish(.success($0)) }))
                        // A peer that closes before its first octet never became a link.
                        ch.closeFuture.whenComplete { _ in finish(.failure(.cannotConnect("\(remoteHost): closed before the first frame"))) }
                        return ch.eventLoop.makeSucceededVoidFuture()
                    }
                    let frames = PeerFrameHandler()
                    let link = PeerLink(channel: ch, encrypted: context != nil, remoteHost: remoteHost)
                    frames.link = link
                    try ch.pipeline.syncOperations.addHandler(HeardHandler(link: link))
                    if let context {
                        let certs = CertificateRecorder(link: link)
                        try ch.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: nil, customVerificationCallback: certs.verify))
                        try ch.pipeline.syncOperations.addHandler(HandshakeWaiter(link: link, done: done, completion: completion))
                    }
                    try ch.pipeline.syncOperations.addHandler(frames)
                    if context == nil { ch.eventLoop.execute { finish(.success(link)) } }
                    return ch.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return ch.eventLoop.makeFailedFuture(error)
                }
            }
            .withConnectedSocket(fd)
            .whenFailure { error in
                // The channel owns the descriptor and closed it on this failure: closing it here as well would
                // close whatever has reused the number meanwhile (another socket, a timerfd of Dispatch or NIO).
                finish(.failure(.cannotConnect("\(remoteHost): \(error)")))
            }
    }

    /// Connects to a peer; with `tls` the connection is TLS 1.3 from the first octet.
    public func connect(
        host: String, port: UInt16, tls: PeerTLSIdentity?, timeout: TimeAmount = .seconds(10),
        completion: @escaping @Sendable (Result<PeerLink, PeerTransportError>) -> Void
    ) {
        let clientContext: NIOSSLContext?
        do { clientContext = try tls?.clientContext() } catch { return completion(.failure(.cannotConnect("TLS: \(error)"))) }
        let done = NIOLockedValueBox(false)
        ClientBootstrap(group: group)
            .connectTimeout(timeout)
            .channelInitializer { ch in
                Self.configure(ch)
                let frames = PeerFrameHandler()
                let link = PeerLink(channel: ch, encrypted: clientContext != nil)
                frames.link = link
                do {
                    try ch.pipeline.syncOperations.addHandler(HeardHandler(link: link))
                    if let clientContext {
                        let certs = CertificateRecorder(link: link)
                        let ssl = try NIOSSLClientHandler(
                            context: clientContext, serverHostname: nil,
                            customVerificationCallback: certs.verify)
                        try ch.pipeline.syncOperations.addHandler(ssl)
                        try ch.pipeline.syncOperations.addHandler(HandshakeWaiter(link: link, done: done, completion: completion))
                    }
                    try ch.pipeline.syncOperations.addHandler(frames)
                    if clientContext == nil {
                        done.withLockedValue { $0 = true }
                        ch.eventLoop.execute { completion(.success(link)) }
                    }
                    return ch.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return ch.eventLoop.makeFailedFuture(error)
                }
            }
            .connect(host: host, port: Int(port))
            .whenFailure { error in
                let first = done.withLockedValue { d -> Bool in
                    defer { d = true }; return !d
                }
                if first { completion(.failure(.cannotConnect("\(host):\(port): \(error)"))) }
            }
    }
}

/// Records the peer's certificate chain and accepts it (the app judges it after the hello).
final class CertificateRecorder: @unchecked Sendable {
    weak var link: PeerLink?
    init(link: PeerLink?) { self.link = link }
    func verify(_ certs: [NIOSSLCertificate], _ promise: EventLoopPromise<NIOSSLVerificationResult>) {
        link?.peerCertificates = certs.compactMap { try? $0.toDERBytes() }
        promise.succeed(.certificateVerified)
    }
}

/// Completes a TLS connect once the handshake finished (or failed).
final class HandshakeWaiter: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    let link: PeerLink
    let done: NIOLockedValueBox<Bool>
    let completion: @Sendable (Result<PeerLink, PeerTransportError>) -> Void
    init(link: PeerLink, done: NIOLockedValueBox<Bool>, completion: @escaping @Sendable (Result<PeerLink, PeerTransportError>) -> Void) {
        self.link = link
        self.done = done
        self.completion = completion
    }
    private func finish(_ r: Result<PeerLink, PeerTransportError>) {
        let first = done.withLockedValue { d -> Bool in
            defer { d = true }; return !d
        }
        if first { completion(r) }
    }
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case TLSUserEvent.handshakeCompleted = event {
            finish(.success(link))
            context.pipeline.syncOperations.removeHandler(self, promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        finish(.failure(.cannotConnect("TLS handshake: \(error)")))
        context.fireErrorCaught(error)
    }
    func channelInactive(context: ChannelHandlerContext) {
        finish(.failure(.cannotConnect("closed during the TLS handshake")))
        context.fireChannelInactive()
    }
}

/// On an accepted connection: TLS if the first octet is a handshake record (0x16), plaintext otherwise.
final class ProtocolSniffer: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    let tls: NIOSSLContext?
    let remoteHost: String?
    let onLink: @Sendable (PeerLink) -> Void

    init(tls: NIOSSLContext?, remoteHost: String? = nil, onLink: @escaping @Sendable (PeerLink) -> Void) {
        self.tls = tls
        self.remoteHost = remoteHost
        self.onLink = onLink
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        guard let first = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else { return }
        let pipeline = context.pipeline
        let ch = context.channel
        let isTLS = first == 0x16
        if isTLS && tls == nil {
            PeerLog.warning("refusing a TLS connection from \(ch.remoteAddress?.description ?? "?"): no identity to serve it")
            context.close(promise: nil)
            return
        }
        let link = PeerLink(channel: ch, encrypted: isTLS, remoteHost: remoteHost)
        let frames = PeerFrameHandler()
        frames.link = link
        do {
            if isTLS, let tls {
                let certs = CertificateRecorder(link: link)
                try pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls, customVerificationCallback: certs.verify), position: .first)
                try pipeline.syncOperations.addHandler(TLSReady(link: link, onLink: onLink))
            }
            try pipeline.syncOperations.addHandler(HeardHandler(link: link), position: .first)
            try pipeline.syncOperations.addHandler(frames)
        } catch {
            context.close(promise: nil)
            return
        }
        pipeline.syncOperations.removeHandler(self, promise: nil)
        if !isTLS { onLink(link) }
        // Replay what arrived through the new handlers, from the head of the pipeline.
        pipeline.syncOperations.fireChannelRead(NIOAny(buffer))
    }
}

/// Hands an accepted TLS link over once its handshake completed.
final class TLSReady: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    let link: PeerLink
    let onLink: @Sendable (PeerLink) -> Void
    init(link: PeerLink, onLink: @escaping @Sendable (PeerLink) -> Void) { self.link = link; self.onLink = onLink }
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case TLSUserEvent.handshakeCompleted = event {
            onLink(link)
            context.pipeline.syncOperations.removeHandler(self, promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }
}
