// The messages of our peer session protocol, one per frame (docs/multipeer-protocol.md). Strings are UTF-8
// with a u16 length; integers little-endian. Unknown frame types are reported as `.unknown` and ignored
// by receivers (room for later versions); a known type with a bad body is a protocol error.
import BLEWire

public struct PeerIdentity: Sendable, Hashable {
    /// The peer's random 64-bit token (its identity; base36 of it names its mDNS instance).
    public var token: UInt64
    public var displayName: String
    public init(token: UInt64, displayName: String) {
        self.token = token
        self.displayName = displayName
    }
}

/// Where a mesh member accepts other members' connections.
public struct PeerMember: Sendable, Hashable {
    public var identity: PeerIdentity
    public var host: String
    public var port: UInt16
    public init(identity: PeerIdentity, host: String, port: UInt16) {
        self.identity = identity
        self.host = host
        self.port = port
    }
}

/// Where a peer accepts channels over Bluetooth LE: its device address and the L2CAP SPSM.
public struct PeerBluetoothEndpoint: Sendable, Hashable, CustomStringConvertible {
    /// The address in wire order (least significant octet first, as on the air).
    public var address: [UInt8]
    public var isRandom: Bool
    public var psm: UInt16
    public init(address: [UInt8], isRandom: Bool, psm: UInt16) {
        self.address = address
        self.isRandom = isRandom
        self.psm = psm
    }

    /// The host string members carry for it: `ble:C0:11:22:33:44:55/random` (port: the SPSM).
    public var host: String {
        "ble:" + address.reversed().map { String(format2: $0) }.joined(separator: ":") + (isRandom ? "/random" : "/public")
    }

    /// Parses `ble:AA:BB:CC:DD:EE:FF/random|public`.
    public init?(host: String, port: UInt16) {
        guard host.hasPrefix("ble:"), port != 0 else { return nil }
        let parts = host.dropFirst(4).split(separator: "/")
        guard parts.count == 2, parts[1] == "random" || parts[1] == "public" else { return nil }
        let octets = parts[0].split(separator: ":").compactMap { $0.count == 2 ? UInt8($0, radix: 16) : nil }
        guard octets.count == 6 else { return nil }
        self.init(address: octets.reversed(), isRandom: parts[1] == "random", psm: port)
    }

    public var description: String { "\(host) PSM 0x\(String(psm, radix: 16))" }
}

extension String {
    init(format2 v: UInt8) {
        let h = String(v, radix: 16, uppercase: true)
        self = h.count == 1 ? "0" + h : h
    }
}

public enum PeerMessage: Sendable, Equatable {
    /// First frame both ways: protocol version, who we are, the port our session accepts members on, and,
    /// when the session also accepts members over Bluetooth LE, that endpoint (9 optional trailing octets).
    case hello(version: UInt8, identity: PeerIdentity, port: UInt16, bluetooth: PeerBluetoothEndpoint? = nil)
    case invite(id: UInt32, mesh: UInt64, context: [UInt8]?)
    case inviteReply(id: UInt32, accepted: Bool)
    /// A member of mesh `mesh` connects to another member.
    case join(mesh: UInt64)
    case joinReply(accepted: Bool)
    /// The mesh and its other members, sent to a peer that just joined (it adopts the mesh and connects).
    case members(mesh: UInt64, [PeerMember])
    /// A message chunk; `final` ends message `id`. Unreliable messages are sent whole in one frame.
    case data(id: UInt32, final: Bool, unreliable: Bool, chunk: [UInt8])
    case resourceStart(id: UInt32, size: UInt64, name: String)
    case resourceChunk(id: UInt32, chunk: [UInt8])
    case resourceEnd(id: UInt32)
    case resourceCancel(id: UInt32)
    case resourceAck(id: UInt32)
    case streamOpen(id: UInt32, name: String)
    case streamData(id: UInt32, chunk: [UInt8])
    case streamCredit(id: UInt32, octets: UInt32)
    case streamClose(id: UInt32)
    case ping
    case pong
    /// The sender leaves the session with us.
    case bye
    /// Asks members to drop their link with this peer (GameKit's disconnectPeerFromAllPeers).
    case evict(token: UInt64)
    /// A browser that found an advertiser over Bluetooth asks for what mDNS's TXT record would carry.
    case infoRequest
    /// The advertiser's discoveryInfo (its display name came in its hello).
    case info([String: String])
    case unknown(type: UInt8)

    public static let version: UInt8 = 1

    enum Kind: UInt8 {
        case hello = 1, invite, inviteReply, join, joinReply, members, data, resourceStart, resourceChunk, resourceEnd,
            resourceCancel, resourceAck, streamOpen, streamData, streamCredit, streamClose, ping, pong, bye, evict,
            infoRequest, info
    }

    public var frame: PeerFrame {
        var w = ByteWriter()
        var flags: UInt8 = 0
        let kind: Kind
        switch self {
        case let .hello(v, id, port, bluetooth):
            kind = .hello; w.write(v); w.write(id.token); Self.write(id.displayName, &w); w.write(port)
            if let bluetooth, bluetooth.address.count == 6 {
                w.write(contentsOf: bluetooth.address); w.write(UInt8(bluetooth.isRandom ? 1 : 0)); w.write(bluetooth.psm)
            }
        case let .invite(id, mesh, context):
            kind = .invite; w.write(id); w.write(mesh)
            if let context { w.write(UInt8(1)); w.write(UInt32(context.count)); w.write(contentsOf: context) } else { w.write(UInt8(0)) }
        case let .inviteReply(id, ok):
            kind = .inviteReply; w.write(id); w.write(UInt8(ok ? 1 : 0))
        case let .join(mesh):
            kind = .join; w.write(mesh)
        case let .joinReply(ok):
            kind = .joinReply; w.write(UInt8(ok ? 1 : 0))
        case let .members(mesh, list):
            kind = .members; w.write(mesh); w.write(UInt16(list.count))
            for m in list { w.write(m.identity.token); Self.write(m.identity.displayName, &w); Self.write(m.host, &w); w.write(m.port) }
        case let .data(id, final, unreliable, chunk):
            kind = .data; flags = (final ? 1 : 0) | (unreliable ? 2 : 0); w.write(id); w.write(contentsOf: chunk)
        case let .resourceStart(id, size, name):
            kind = .resourceStart; w.write(id); w.write(size); Self.write(name, &w)
        case let .resourceChunk(id, chunk):
            kind = .resourceChunk; w.write(id); w.write(contentsOf: chunk)
        case let .resourceEnd(id): kind = .resourceEnd; w.write(id)
        case let .resourceCancel(id): kind = .resourceCancel; w.write(id)
        case let .resourceAck(id): kind = .resourceAck; w.write(id)
        case let .streamOpen(id, name): kind = .streamOpen; w.write(id); Self.write(name, &w)
        case let .streamData(id, chunk): kind = .streamData; w.write(id); w.write(contentsOf: chunk)
        case let .streamCredit(id, n): kind = .streamCredit; w.write(id); w.write(n)
        case let .streamClose(id): kind = .streamClose; w.write(id)
        case .ping: kind = .ping
        case .pong: kind = .pong
        case .bye: kind = .bye
        case let .evict(token): kind = .evict; w.write(token)
        case .infoRequest: kind = .infoRequest
        case let .info(txt):
            kind = .info
            let pairs = txt.sorted { $0.key < $1.key }
            w.write(UInt16(clamping: pairs.count))
            for (k, v) in pairs.prefix(65_535) { Self.write(k, &w); Self.write(v, &w) }
        case let .unknown(t): return PeerFrame(type: t, payload: [])
        }
        return PeerFrame(type: kind.rawValue, flags: flags, payload: w.bytes)
    }

    public init(frame: PeerFrame) throws(PeerProtocolError) {
        guard let kind = Kind(rawValue: frame.type) else { self = .unknown(type: frame.type); return }
        var r = ByteReader(frame.payload)
        do {
            switch kind {
            case .hello:
                let v = try r.readUInt8(), token = try r.readUInt64(), name = try Self.string(&r)
                let port = try r.readUInt16()
                var bluetooth: PeerBluetoothEndpoint?
                if r.remaining > 0 {
                    let address = try r.readBytes(6), type = try r.readUInt8(), psm = try r.readUInt16()
                    guard type <= 1 else { throw PeerProtocolError.malformed("address type \(type)") }
                    bluetooth = PeerBluetoothEndpoint(address: address, isRandom: type == 1, psm: psm)
                }
                self = .hello(version: v, identity: PeerIdentity(token: token, displayName: name), port: port, bluetooth: bluetooth)
            case .invite:
                let id = try r.readUInt32(), mesh = try r.readUInt64()
                let has = try r.readUInt8()
                var context: [UInt8]?
                if has == 1 { context = try r.readBytes(Int(try r.readUInt32())) } else if has != 0 { throw PeerProtocolError.malformed("context flag \(has)") }
                self = .invite(id: id, mesh: mesh, context: context)
            case .inviteReply: self = .inviteReply(id: try r.readUInt32(), accepted: try r.readUInt8() != 0)
            case .join: self = .join(mesh: try r.readUInt64())
            case .joinReply: self = .joinReply(accepted: try r.readUInt8() != 0)
            case .members:
                let mesh = try r.readUInt64()
                let n = Int(try r.readUInt16())
                guard n <= 32 else { throw PeerProtocolError.malformed("\(n) members") }
                var list: [PeerMember] = []
                for _ in 0..<n {
                    let token = try r.readUInt64(), name = try Self.string(&r), host = try Self.string(&r), port = try r.readUInt16()
                    list.append(PeerMember(identity: PeerIdentity(token: token, displayName: name), host: host, port: port))
                }
                self = .members(mesh: mesh, list)
            case .data:
                self = .data(id: try r.readUInt32(), final: frame.flags & 1 != 0, unreliable: frame.flags & 2 != 0, chunk: r.readRemaining())
            case .resourceStart:
                let id = try r.readUInt32(), size = try r.readUInt64()
                self = .resourceStart(id: id, size: size, name: try Self.string(&r))
            case .resourceChunk: self = .resourceChunk(id: try r.readUInt32(), chunk: r.readRemaining())
            case .resourceEnd: self = .resourceEnd(id: try r.readUInt32())
            case .resourceCancel: self = .resourceCancel(id: try r.readUInt32())
            case .resourceAck: self = .resourceAck(id: try r.readUInt32())
            case .streamOpen:
                let id = try r.readUInt32()
                self = .streamOpen(id: id, name: try Self.string(&r))
            case .streamData: self = .streamData(id: try r.readUInt32(), chunk: r.readRemaining())
            case .streamCredit: self = .streamCredit(id: try r.readUInt32(), octets: try r.readUInt32())
            case .streamClose: self = .streamClose(id: try r.readUInt32())
            case .ping: self = .ping
            case .pong: self = .pong
            case .bye: self = .bye
            case .evict: self = .evict(token: try r.readUInt64())
            case .infoRequest: self = .infoRequest
            case .info:
                let n = Int(try r.readUInt16())
                var txt: [String: String] = [:]
                for _ in 0..<n {
                    let k = try Self.string(&r)
                    guard txt[k] == nil else { throw PeerProtocolError.malformed("key \(k) twice") }
                    txt[k] = try Self.string(&r)
                }
                self = .info(txt)
            }
            switch kind {
            case .data, .resourceChunk, .streamData: break
            default: try r.expectEnd()
            }
        } catch let e as PeerProtocolError {
            throw e
        } catch {
            throw .malformed("\(kind): \(error)")
        }
    }

    static func write(_ s: String, _ w: inout ByteWriter) {
        let b = Array(s.utf8.prefix(65_535))
        w.write(UInt16(b.count))
        w.write(contentsOf: b)
    }

    static func string(_ r: inout ByteReader) throws -> String {
        let b = try r.readBytes(Int(try r.readUInt16()))
        guard let s = String(validating: b, as: UTF8.self) else { throw PeerProtocolError.malformed("string is not UTF-8") }
        return s
    }
}

// Bulk messages (data, resource and stream chunks) carry most octets; a transport can write and read them
// without assembling or slicing a payload array: their payload is always the id (u32) then the chunk.
extension PeerMessage {
    /// The frame type of `resourceChunk`.
    public static let resourceChunkType = Kind.resourceChunk.rawValue

    /// Whether frames of `type` carry a bulk message (payload: id u32, then the chunk).
    public static func isBulk(type: UInt8) -> Bool {
        type == Kind.data.rawValue || type == Kind.resourceChunk.rawValue || type == Kind.streamData.rawValue
    }

    /// A bulk message as its frame's parts; nil for every other message.
    public var bulkParts: (type: UInt8, flags: UInt8, id: UInt32, chunk: [UInt8])? {
        switch self {
        case let .data(id, final, unreliable, chunk): return (Kind.data.rawValue, (final ? 1 : 0) | (unreliable ? 2 : 0), id, chunk)
        case let .resourceChunk(id, chunk): return (Kind.resourceChunk.rawValue, 0, id, chunk)
        case let .streamData(id, chunk): return (Kind.streamData.rawValue, 0, id, chunk)
        default: return nil
        }
    }

    /// The bulk message of a frame of `type` (one `isBulk` accepts) whose payload was `id` then `chunk`: what
    /// `init(frame:)` decodes from the same frame.
    public init?(bulkType type: UInt8, flags: UInt8, id: UInt32, chunk: [UInt8]) {
        switch Kind(rawValue: type) {
        case .data?: self = .data(id: id, final: flags & 1 != 0, unreliable: flags & 2 != 0, chunk: chunk)
        case .resourceChunk?: self = .resourceChunk(id: id, chunk: chunk)
        case .streamData?: self = .streamData(id: id, chunk: chunk)
        default: return nil
        }
    }
}
