// ACL data packets (Vol 4 Part E §5.4.2): handle (12 bits) with PB and BC flags, data total length, data.
import BLEWire

/// Packet_Boundary_Flag (Vol 4 Part E §5.4.2).
public enum ACLPacketBoundary: UInt8, Sendable {
    case firstNonFlushable = 0
    case continuing = 1
    case firstFlushable = 2
    case complete = 3
}

public struct ACLPacket: Sendable, Equatable {
    public var handle: UInt16
    public var boundary: ACLPacketBoundary
    public var broadcast: UInt8
    public var data: [UInt8]

    public init(handle: UInt16, boundary: ACLPacketBoundary, broadcast: UInt8 = 0, data: [UInt8]) {
        self.handle = handle
        self.boundary = boundary
        self.broadcast = broadcast
        self.data = data
    }

    public func encode() -> HCIPacket {
        var b = [UInt8]()
        b.reserveCapacity(4 + data.count)
        let first = (handle & 0x0FFF) | UInt16(boundary.rawValue) << 12 | UInt16(broadcast & 0x3) << 14
        b.append(UInt8(first & 0xFF)); b.append(UInt8(first >> 8))
        b.append(UInt8(data.count & 0xFF)); b.append(UInt8(data.count >> 8))
        b.append(contentsOf: data)
        return HCIPacket(type: .acl, bytes: b)
    }

    /// The 4-octet header alone (handle with its flags, data total length), checked against what follows, so
    /// that a reader can take the data without copying it first.
    public struct Header: Sendable, Equatable {
        public var handle: UInt16
        public var boundary: ACLPacketBoundary
        public var broadcast: UInt8
        public var length: Int

        public static func decode(_ b: [UInt8]) throws -> Header {
            guard b.count >= 4 else { throw HCIDecodeError("ACL header truncated (\(b.count) bytes)") }
            let first = UInt16(b[0]) | UInt16(b[1]) << 8
            let length = Int(b[2]) | Int(b[3]) << 8
            guard b.count - 4 == length else { throw HCIDecodeError("ACL length \(length) but \(b.count - 4) bytes follow") }
            return Header(
                handle: first & 0x0FFF, boundary: ACLPacketBoundary(rawValue: UInt8((first >> 12) & 0x3))!,
                broadcast: UInt8(first >> 14), length: length)
        }
    }

    public static func decode(_ packet: HCIPacket) throws -> ACLPacket {
        guard packet.type == .acl else { throw HCIDecodeError("not an ACL packet") }
        let h = try Header.decode(packet.bytes)
        return ACLPacket(handle: h.handle, boundary: h.boundary, broadcast: h.broadcast, data: Array(packet.bytes[4...]))
    }
}
