// HCI packets and the H4 UART framing (Core Spec Vol 4 Part A §2: a one-octet packet indicator precedes
// each HCI packet).

/// The H4 packet indicator (Vol 4 Part A §2).
public enum HCIPacketType: UInt8, Sendable, Hashable, CustomStringConvertible {
    case command = 0x01
    case acl = 0x02
    case sco = 0x03
    case event = 0x04
    case iso = 0x05

    public var description: String {
        switch self {
        case .command: return "command"
        case .acl: return "ACL"
        case .sco: return "SCO"
        case .event: return "event"
        case .iso: return "ISO"
        }
    }
}

/// One HCI packet without its H4 indicator.
public struct HCIPacket: Sendable, Equatable {
    public var type: HCIPacketType
    public var bytes: [UInt8]

    public init(type: HCIPacketType, bytes: [UInt8]) {
        self.type = type
        self.bytes = bytes
    }

    /// The packet as sent over H4: indicator, then the packet.
    public var h4Bytes: [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(bytes.count + 1)
        out.append(type.rawValue)
        out.append(contentsOf: bytes)
        return out
    }
}

extension HCIPacket {
    /// Adds the Number Of Completed Packets event `next` (parameters as received) to this one, when both have one
    /// entry, for the same handle, and the counts add up to at most 0xFFFF (see `H4Framer.mergesCompletedPackets`):
    /// a transport whose packets come one to a message merges them this way. False (nothing changed) otherwise.
    public mutating func addCompletions(of next: UnsafeRawBufferPointer) -> Bool {
        guard type == .event, let n = Self.singleCompletion(next), let c = bytes.withUnsafeBytes({ Self.singleCompletion($0) }),
            n.low == c.low, n.high == c.high, c.count + n.count <= 0xFFFF
        else { return false }
        bytes[5] = UInt8((c.count + n.count) & 0xFF)
        bytes[6] = UInt8((c.count + n.count) >> 8)
        return true
    }

    /// The handle (its two octets) and the count of a Number Of Completed Packets event with one entry, given as its
    /// code, parameter length and parameters; nil for any other: the events that `addCompletions` and the framer's
    /// merged runs (`H4Framer.mergesCompletedPackets`) add up.
    static func singleCompletion(_ e: UnsafeRawBufferPointer) -> (low: UInt8, high: UInt8, count: Int)? {
        guard e.count == 7, e[0] == 0x13, e[1] == 5, e[2] == 1 else { return nil }
        return (e[3], e[4], Int(e[5]) | Int(e[6]) << 8)
    }
}

/// Packet arrays that their last user let go, kept to carry the next packets: a transport's reader and a host's
/// fragmenter each make one per packet, and give the arrays back once the packets are handled or written. A
/// packet array from the pool costs no allocation and, given back, no free (together about 450 instructions a
/// packet). An array that something else still holds when it is taken again is not overwritten: writing it
/// makes a new one (copy on write), so sharing is always safe, only slower.
public struct HCIPacketBufferPool: Sendable {
    private var spare: [[UInt8]] = []
    /// At most this many arrays are kept, each of at most `maximumCapacity` octets: the pool holds 256 KB at most.
    public static let limit = 64
    public static let maximumCapacity = 4096

    public init() {}

    /// Arrays waiting to be used again.
    public var count: Int { spare.count }

    /// How many of the arrays given back last are looked through for one of the size asked.
    static let sizeSearch = 4

    /// An array of `count` octets, written by `fill`. An array given back with that many octets is written over in
    /// place: neither emptied nor appended to, which cost more than the copy itself. A transport sees a few sizes in
    /// turn (over the HCI socket with 1021-octet buffers, each 1024-octet K-frame is a packet of 1025 octets, then
    /// one of 11, then a 10-octet one), so the last `sizeSearch` arrays given back are looked through for that size
    /// first: resizing the last one instead grew a 10-octet array to 1025 octets and shrank the next, for every frame.
    public mutating func make(count: Int, _ fill: (UnsafeMutableRawBufferPointer) -> Void) -> [UInt8] {
        let last = spare.count - 1
        if last >= 0 {
            // (Through a buffer pointer: no retain of the arrays looked at, no bounds checks.)
            spare.withUnsafeMutableBufferPointer { spare in
                guard spare[last].count != count else { return }
                var i = last - 1
                let stop = max(0, last - Self.sizeSearch + 1)
                while i >= stop {
                    if spare[i].count == count { return spare.swapAt(i, last) }
                    i -= 1
                }
            }
            var b = spare.removeLast()
            if b.count != count {
                if b.count > count {
                    b.removeLast(b.count - count)
                } else {
                    b.append(contentsOf: repeatElement(0, count: count - b.count))
                }
            }
            // Still held elsewhere: the write makes this array a copy of its own first (copy on write).
            b.withUnsafeMutableBytes(fill)
            return b
        }
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            fill(UnsafeMutableRawBufferPointer(buffer))
            initialized = count
        }
    }

    /// Keeps the arrays of `packets` (up to the limits) for later packets.
    @inline(__always)
    public mutating func recycle(_ packets: [HCIPacket]) {
        for p in packets where spare.count < Self.limit { recycle(p.bytes) }
    }

    /// Keeps one array for later packets.
    @inline(__always)
    public mutating func recycle(_ bytes: [UInt8]) {
        if spare.count < Self.limit && bytes.capacity <= Self.maximumCapacity { spare.append(bytes) }
    }
}

public enum H4Error: Error, Equatable, Sendable, CustomStringConvertible {
    case unknownPacketIndicator(UInt8)
    case packetTooLarge(Int)

    public var description: String {
        switch self {
        case let .unknownPacketIndicator(b): return "unknown H4 packet indicator 0x\(String(b, radix: 16))"
        case let .packetTooLarge(n): return "H4 packet of \(n) bytes exceeds the limit"
        }
    }
}

/// Streaming H4 deframer: append bytes as they arrive, then take packets out. `nextPacket` returns nil
/// when more bytes are needed. After an error the stream cannot be resynchronised (H4 has no framing
/// recovery, Vol 4 Part A §2): the transport must be reset.
///
/// A UART opened while the controller is mid-packet (or with line noise from power-up) starts with bytes
/// that are no packet's beginning. With `synchronizesOnReset`, the framer discards everything until the
/// controller's answer to HCI_Reset (Command Complete or Command Status for opcode 0x0C03), which the host
/// sends first on every open: that answer is the first packet returned, and framing is exact from there.
public struct H4Framer: Sendable {
    private var buffer: [UInt8] = []
    private var start = 0
    public let maxPacketSize: Int
    /// The last small event returned, whose bytes the next identical one shares (see `nextPacket`).
    private var lastSmallEvent: [UInt8] = []
    /// Events of at most this many octets (header included) are compared with the last one.
    static let sharedEventLimit = 16
    /// Whether a run of Number Of Completed Packets events for one connection handle, each with one entry and all
    /// whole in the buffer, comes out as one event whose count is their sum (Vol 4 Part E §7.7.19). A controller
    /// that reports every packet in an event of its own (rootcanal: 20 in a connection event) otherwise costs
    /// its host a packet to frame, hand over and handle for each. Off by default: a capture or a relay must see
    /// the events as they were sent. `framedCount` still counts every event.
    public var mergesCompletedPackets = false
    /// Whether the ACL continuation fragments (Packet_Boundary_Flag 01, Vol 4 Part E §5.4.2) that follow an ACL packet
    /// for the same handle, each whole in the buffer, come out as part of it: one packet with its header, the Data_Total_Length
    /// covering them all (at most 0xFFFF octets). The L2CAP frame a controller cuts into 27-octet fragments (39 for a
    /// 1 KB K-frame) then costs its host one packet instead of one each. Off by default: only a host that
    /// recombines, and does not count ACL packets for controller-to-host flow control, may ask for it.
    public var mergesACLContinuations = false
    /// Packets taken from the stream so far (each merged event counts as the events it stands for).
    public private(set) var framedCount = 0
    /// True until the Reset answer was found (only with `synchronizesOnReset`).
    public private(set) var awaitingSynchronization: Bool
    /// Bytes thrown away while synchronising.
    public private(set) var discardedCount = 0

    public init(maxPacketSize: Int = 65_539 + 4, synchronizesOnReset: Bool = false) {
        self.maxPacketSize = maxPacketSize
        self.awaitingSynchronization = synchronizesOnReset
    }

    /// H4 Command Complete for HCI_Reset (04 0E 04 ncmd 03 0C) and Command Status for it (04 0F 04 st ncmd 03 0C).
    private static let resetAnswers: [[UInt8?]] = [[0x04, 0x0E, 0x04, nil, 0x03, 0x0C], [0x04, 0x0F, 0x04, nil, nil, 0x03, 0x0C]]

    /// Drops bytes before the first Reset answer; false while none is buffered yet.
    private mutating func synchronize() -> Bool {
        let end = buffer.count
        var i = start
        while i < end {
            var partial = false
            for pattern in Self.resetAnswers {
                var matched = true
                for (k, b) in pattern.enumerated() {
                    if i + k >= end { partial = true; matched = false; break }
                    if let b, buffer[i + k] != b { matched = false; break }
                }
                if matched {
                    discardedCount += i - start
                    start = i
                    awaitingSynchronization = false
                    return true
                }
            }
            // A possible beginning of an answer at the end of what arrived: keep it for the next bytes.
            if partial && buffer[i] == 0x04 { break }
            i += 1
        }
        discardedCount += i - start
        start = i
        if start == buffer.count { buffer.removeAll(keepingCapacity: true); start = 0 }
        return false
    }

    public mutating func append<C: Collection>(_ bytes: C) where C.Element == UInt8 {
        if start > 0 && start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// Appends raw bytes (a transport's read buffer): a concrete overload, so a caller in another module does
    /// not go through the generic, unspecialised path above.
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        if start > 0 && start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// Whether `bytes` equals `buffer` from `offset` on, which holds at least as many (the generic elementsEqual
    /// over a slice cost about 180 instructions for an 8-octet event).
    private static func equal(_ bytes: [UInt8], _ buffer: [UInt8], at offset: Int) -> Bool {
        bytes.withUnsafeBufferPointer { a in
            buffer.withUnsafeBufferPointer { b in
                for k in 0..<a.count where a[k] != b[offset + k] { return false }
                return true
            }
        }
    }

    /// Arrays of packets already handled, for the next ones (see `recycle`).
    private var pool = HCIPacketBufferPool()

    /// Gives back the arrays of packets this framer returned, once their user is done with them (a transport's
    /// reader, after the host handled a read's packets): the next packets are built in them. Small events that
    /// share their bytes with the last one are not taken back.
    public mutating func recycle(_ packets: [HCIPacket]) {
        for p in packets where pool.count < HCIPacketBufferPool.limit { recycle(p) }
    }

    /// `recycle` for one packet.
    public mutating func recycle(_ packet: HCIPacket) {
        if packet.type != .event || packet.bytes.count > Self.sharedEventLimit { pool.recycle(packet.bytes) }
    }

    /// Arrays waiting to carry the next packets.
    public var recycledCount: Int { pool.count }

    /// Bytes buffered and not yet returned as packets.
    public var bufferedCount: Int { buffer.count - start }

    /// The fewest bytes that may still have to arrive before `nextPacket` can return a packet: what the packet
    /// begun in the buffer lacks (its header first), or 3 when nothing is begun (an indicator and the shortest
    /// header); 1 while the framer looks for the end of a reset. A reader that waits for more than one byte at a
    /// time (SO_RCVLOWAT) never waits for more than this.
    public var missingCount: Int {
        if awaitingSynchronization { return 1 }
        let available = buffer.count - start
        guard available >= 1 else { return 3 }
        guard let type = HCIPacketType(rawValue: buffer[start]) else { return 1 }
        let headerSize = Self.headerSize(type)
        guard available >= 1 + headerSize else { return 1 + headerSize - available }
        return max(1, 1 + headerSize + payloadLength(type, at: start + 1) - available)
    }

    /// Header octets after the indicator (Vol 4 Part E §5.4).
    private static func headerSize(_ type: HCIPacketType) -> Int {
        switch type {
        case .command, .sco: return 3
        case .event: return 2
        case .acl, .iso: return 4
        }
    }

    /// The length field of the header at `h`.
    private func payloadLength(_ type: HCIPacketType, at h: Int) -> Int {
        switch type {
        case .command, .sco: return Int(buffer[h + 2])
        case .event: return Int(buffer[h + 1])
        case .acl: return Int(buffer[h + 2]) | Int(buffer[h + 3]) << 8
        case .iso: return Int(buffer[h + 2]) | Int(buffer[h + 3] & 0x3F) << 8
        }
    }

    public mutating func nextPacket() throws -> HCIPacket? {
        if awaitingSynchronization && !synchronize() { return nil }
        // Zero octets between packets are padding (a host resynchronising a UART writes 258 of them before its
        // first command, see SerialTransport); 0x00 is no packet indicator, so nothing is lost by skipping them.
        while start < buffer.count && buffer[start] == 0 { start += 1; discardedCount += 1 }
        let available = buffer.count - start
        guard available >= 1 else { return nil }
        guard let type = HCIPacketType(rawValue: buffer[start]) else {
            throw H4Error.unknownPacketIndicator(buffer[start])
        }
        let headerSize = Self.headerSize(type)
        guard available >= 1 + headerSize else { return nil }
        let h = start + 1
        let total = headerSize + payloadLength(type, at: h)
        guard total <= maxPacketSize else { throw H4Error.packetTooLarge(total) }
        guard available >= 1 + total else { return nil }
        if mergesCompletedPackets && type == .event, let merged = mergedCompletions(at: h, total: total) {
            return merged
        }
        if mergesACLContinuations && type == .acl, let merged = mergedContinuations(at: h, total: total) {
            return merged
        }
        let packet: HCIPacket
        if type == .event && total <= Self.sharedEventLimit {
            // Controllers repeat small events byte for byte: rootcanal reports every packet the air carried in a
            // Number Of Completed Packets event of its own, 20 in a connection event, all alike. An event equal
            // to the last one shares its (immutable) bytes: no allocation, and no free when the host is done.
            if lastSmallEvent.count == total && Self.equal(lastSmallEvent, buffer, at: h) {
                packet = HCIPacket(type: .event, bytes: lastSmallEvent)
            } else {
                lastSmallEvent = Array(buffer[h..<h + total])
                packet = HCIPacket(type: .event, bytes: lastSmallEvent)
            }
        } else {
            let b = buffer.withUnsafeBytes { src in
                pool.make(count: total) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: src[h..<h + total])) }
            }
            packet = HCIPacket(type: type, bytes: b)
        }
        consumed(upTo: h + total, packets: 1)
        return packet
    }

    /// The packets before `end` have been taken.
    private mutating func consumed(upTo end: Int, packets: Int) {
        framedCount += packets
        start = end
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        } else if start > 4096 && start * 2 > buffer.count {
            buffer.removeFirst(start)
            start = 0
        }
    }

    /// The ACL packet at `h` (its header) and the continuations right after it (see `mergesACLContinuations`) as
    /// one packet; nil when no continuation follows whole.
    private mutating func mergedContinuations(at h: Int, total: Int) -> HCIPacket? {
        let handleLow = buffer[h]
        // The high four bits of the handle and the Broadcast_Flag must match; the Packet_Boundary_Flag must be 01.
        let expected = buffer[h + 1] & 0xCF | 0x10
        var length = total - 4
        var next = h + total
        var packets = 1
        let limit = min(0xFFFF, maxPacketSize - 4)
        buffer.withUnsafeBufferPointer { b in
            // 02 handle(2) length(2) data: the H4 indicator and the next packet, whole.
            while next + 5 <= b.count, b[next] == 0x02, b[next + 1] == handleLow, b[next + 2] == expected {
                let n = Int(b[next + 3]) | Int(b[next + 4]) << 8
                guard next + 5 + n <= b.count, length + n <= limit else { break }
                length += n
                next += 5 + n
                packets += 1
            }
        }
        guard packets > 1 else { return nil }
        let end = next
        let bytes = buffer.withUnsafeBytes { src in
            pool.make(count: 4 + length) { out in
                out[0] = src[h]
                out[1] = src[h + 1]
                out[2] = UInt8(length & 0xFF)
                out[3] = UInt8(length >> 8)
                var o = 4
                var from = h + 4, to = h + total
                while true {
                    let n = to - from
                    UnsafeMutableRawBufferPointer(rebasing: out[o..<o + n]).copyMemory(from: UnsafeRawBufferPointer(rebasing: src[from..<to]))
                    o += n
                    guard to < end else { break }
                    from = to + 5
                    to = from + (Int(src[to + 3]) | Int(src[to + 4]) << 8)
                }
            }
        }
        consumed(upTo: end, packets: packets)
        return HCIPacket(type: .acl, bytes: bytes)
    }

    /// The event at `h` (its code) and the Number Of Completed Packets events right after it, as one event, when
    /// it is one and at least one follows: each with one entry (parameter length 5, Num_Handles 1), for the same
    /// handle, whole in the buffer, and their counts adding up to at most 0xFFFF. Nil otherwise (the event goes
    /// out as it is, and the host judges it).
    private mutating func mergedCompletions(at h: Int, total: Int) -> HCIPacket? {
        var next = h + total
        var events = 1
        var count = 0
        var handle: (low: UInt8, high: UInt8) = (0, 0)
        buffer.withUnsafeBytes { b in
            guard total == 7, let first = HCIPacket.singleCompletion(UnsafeRawBufferPointer(rebasing: b[h..<h + 7])) else { return }
            handle = (first.low, first.high)
            count = first.count
            // The H4 indicator, then the next event, whole; the counts are added up here and written once.
            while next + 8 <= b.count, b[next] == 0x04, let e = HCIPacket.singleCompletion(UnsafeRawBufferPointer(rebasing: b[next + 1..<next + 8])),
                e.low == handle.low, e.high == handle.high, count + e.count <= 0xFFFF
            {
                count += e.count
                next += 8
                events += 1
            }
        }
        guard events > 1 else { return nil }
        // Written into the array of the last merged event: once its packet has been handled (the reader lets its
        // packets go before the next read), the array is ours alone again and no allocation is made.
        if mergedEvent.count != 7 { mergedEvent = [0x13, 5, 1, 0, 0, 0, 0] }
        mergedEvent.withUnsafeMutableBufferPointer { e in
            e[3] = handle.low
            e[4] = handle.high
            e[5] = UInt8(count & 0xFF)
            e[6] = UInt8(count >> 8)
        }
        consumed(upTo: next, packets: events)
        return HCIPacket(type: .event, bytes: mergedEvent)
    }

    /// The bytes of the last merged completion event (see `mergedCompletions`).
    private var mergedEvent: [UInt8] = []
}

/// Why a complete HCI packet could not be decoded.
public struct HCIDecodeError: Error, Equatable, Sendable, CustomStringConvertible {
    public var what: String
    public init(_ what: String) { self.what = what }
    public var description: String { "malformed HCI packet: \(what)" }
}
