// btsnoop capture files (the format Wireshark reads as "btsnoop", datalink 1002 = HCI UART H4).
//
// File header: "btsnoop\0", version 1, datalink 1002 (all big-endian). Each record: original length,
// included length, flags (bit 0: 1 = received by the host; bit 1: 1 = command/event), cumulative drops,
// timestamp in microseconds since 0000-01-01 (big-endian 64-bit), then the H4 packet.
import Foundation
import BLEHCI
import Synchronization

public final class BTSnoopWriter: @unchecked Sendable {
    private let handle: FileHandle
    private let lock = Mutex(())
    /// Microseconds between 0000-01-01 and 1970-01-01, as btsnoop counts.
    static let epochDelta: UInt64 = 0x00DC_DDB3_0F2F_8000

    public init(path: String) throws {
        guard FileManager.default.createFile(atPath: path, contents: nil) else {
            throw TransportError.io("cannot create capture file \(path)")
        }
        handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        var h: [UInt8] = Array("btsnoop".utf8) + [0]
        h += be32(1) + be32(1002)
        try handle.write(contentsOf: h)
    }

    public enum Direction: Sendable { case hostToController, controllerToHost }

    public func write(_ packet: HCIPacket, direction: Direction, date: Date = Date()) {
        let bytes = packet.h4Bytes
        var flags: UInt32 = direction == .controllerToHost ? 1 : 0
        if packet.type == .command || packet.type == .event { flags |= 2 }
        let micros = UInt64(max(0, date.timeIntervalSince1970) * 1_000_000) + Self.epochDelta
        var rec: [UInt8] = []
        rec.reserveCapacity(24 + bytes.count)
        rec += be32(UInt32(bytes.count)) + be32(UInt32(bytes.count)) + be32(flags) + be32(0)
        rec += be32(UInt32(micros >> 32)) + be32(UInt32(micros & 0xFFFF_FFFF))
        rec += bytes
        lock.withLock { _ in try? handle.write(contentsOf: rec) }
    }

    public func close() { lock.withLock { _ in try? handle.close() } }
}

private func be32(_ v: UInt32) -> [UInt8] {
    [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)]
}

/// A transport wrapper that records every packet to a btsnoop file.
public final class SnoopingTransport: HCITransport, HCITransportSink, @unchecked Sendable {
    public let inner: any HCITransport
    public let writer: BTSnoopWriter
    private weak var sink: (any HCITransportSink)?

    public init(_ inner: any HCITransport, writer: BTSnoopWriter) {
        self.inner = inner
        self.writer = writer
    }

    public var name: String { inner.name }

    public func open(sink: any HCITransportSink) throws {
        self.sink = sink
        try inner.open(sink: self)
    }

    public func send(_ packet: HCIPacket) {
        writer.write(packet, direction: .hostToController)
        inner.send(packet)
    }

    public var deliversOnReaderThread: Bool { inner.deliversOnReaderThread }
    /// The capture copies each packet as it goes; whether it is kept is the inner transport's matter.
    public var keepsSentPackets: Bool { inner.keepsSentPackets }

    public func send(batch packets: [HCIPacket]) {
        for p in packets { writer.write(p, direction: .hostToController) }
        inner.send(batch: packets)
    }

    public func close() { inner.close() }

    public func transport(didReceive packet: HCIPacket) {
        writer.write(packet, direction: .controllerToHost)
        sink?.transport(didReceive: packet)
    }

    public func transport(didReceivePackets packets: [HCIPacket]) {
        for p in packets { writer.write(p, direction: .controllerToHost) }
        sink?.transport(didReceivePackets: packets)
    }

    public var statistics: TransportStatistics? { inner.statistics }

    public func hostBacklogChanged(_ hasBacklog: Bool) { inner.hostBacklogChanged(hasBacklog) }

    public func transportDidClose(error: (any Error)?) { sink?.transportDidClose(error: error) }
}

/// Reads btsnoop files written by us or by other tools (datalink 1002, H4).
public struct BTSnoopRecord: Sendable, Equatable {
    public var packet: HCIPacket
    public var direction: BTSnoopWriter.Direction
    /// Microseconds since 1970-01-01.
    public var timestampMicros: UInt64
}

public enum BTSnoopReader {
    public static func read(path: String) throws -> [BTSnoopRecord] {
        guard let data = FileManager.default.contents(atPath: path) else { throw TransportError.io("cannot read \(path)") }
        return try parse([UInt8](data))
    }

    public static func parse(_ b: [UInt8]) throws -> [BTSnoopRecord] {
        func be32(_ i: Int) -> UInt32 { UInt32(b[i]) << 24 | UInt32(b[i + 1]) << 16 | UInt32(b[i + 2]) << 8 | UInt32(b[i + 3]) }
        guard b.count >= 16, Array(b[0..<8]) == Array("btsnoop\0".utf8) else { throw TransportError.io("not a btsnoop file") }
        guard be32(12) == 1002 else { throw TransportError.io("unsupported btsnoop datalink \(be32(12)) (only 1002, HCI UART H4)") }
        var out: [BTSnoopRecord] = []
        var i = 16
        while i + 24 <= b.count {
            let included = Int(be32(i + 4))
            let flags = be32(i + 8)
            let ts = UInt64(be32(i + 16)) << 32 | UInt64(be32(i + 20))
            guard i + 24 + included <= b.count else { throw TransportError.io("truncated record at offset \(i)") }
            let body = Array(b[(i + 24)..<(i + 24 + included)])
            i += 24 + included
            guard let first = body.first, let type = HCIPacketType(rawValue: first) else { continue }
            out.append(
                BTSnoopRecord(
                    packet: HCIPacket(type: type, bytes: Array(body.dropFirst())),
                    direction: flags & 1 == 1 ? .controllerToHost : .hostToController,
                    timestampMicros: ts &- BTSnoopWriter.epochDelta))
        }
        return out
    }
}
