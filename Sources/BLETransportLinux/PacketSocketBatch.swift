// Many HCI packets per system call on a packet socket (the HCI user channel; tests use a SOCK_SEQPACKET pair),
// where each message is one whole H4 packet and a read or write never carries two.
// - `PacketSocketReceiver` takes every message the socket holds, up to `slots`, with one recvmmsg(2) into buffers
//   of its own, made once.
// - `sendPacket` sends one packet as one message, gathered from the indicator and the packet's own array (the HCI
//   socket refuses sendmmsg's batches: see there).
// A message larger than a slot arrives cut short (MSG_TRUNC): it is dropped and counted, never delivered partly.
#if canImport(Glibc)
import Glibc
#endif
import BLEHCI

/// glibc's recvmmsg and `struct mmsghdr`, which Swift's Glibc module leaves out (they need _GNU_SOURCE): the
/// function is looked up by name, and each header is laid out here as C lays it out, a `msghdr` followed by
/// the `unsigned int` length the kernel fills in, padded to the `msghdr`'s alignment.
enum MultipleMessages {
    typealias Call = @convention(c) (Int32, UnsafeMutableRawPointer?, UInt32, Int32, UnsafeMutableRawPointer?) -> Int32
    /// nil where the C library cannot be searched (a wholly static binary): one recvmsg per message then.
    static let receive: Call? = dlsym(nil, "recvmmsg").map { unsafeBitCast($0, to: Call.self) }

    static let lengthOffset = MemoryLayout<msghdr>.size
    static let stride =
        (MemoryLayout<msghdr>.size + MemoryLayout<UInt32>.size + MemoryLayout<msghdr>.alignment - 1)
        / MemoryLayout<msghdr>.alignment * MemoryLayout<msghdr>.alignment

    static func header(_ base: UnsafeMutableRawPointer, _ i: Int) -> UnsafeMutablePointer<msghdr> {
        (base + i * stride).bindMemory(to: msghdr.self, capacity: 1)
    }
    static func length(_ base: UnsafeMutableRawPointer, _ i: Int) -> Int {
        Int(base.load(fromByteOffset: i * stride + lengthOffset, as: UInt32.self))
    }
    /// Message `i`'s header: no name, no control data, one vector.
    static func set(_ base: UnsafeMutableRawPointer, _ i: Int, vector: UnsafeMutablePointer<iovec>) {
        var h = msghdr()
        h.msg_iov = vector
        h.msg_iovlen = 1
        header(base, i).pointee = h
        base.storeBytes(of: 0, toByteOffset: i * stride + lengthOffset, as: UInt32.self)
    }
}

/// What one recvmmsg brought.
enum PacketSocketRead {
    /// `count` messages are in the slots (some may be cut short: see `message(_:)`).
    case messages(Int)
    /// Nothing is waiting (EAGAIN) or the call was interrupted: wait and try again.
    case nothing
    /// The socket has ended: a message of no octets (the other end of a socket pair closed).
    case endOfFile
    case failed(Int32)
}

final class PacketSocketReceiver {
    let slots: Int
    let slotSize: Int
    private let storage: UnsafeMutableRawPointer
    private let vectors: UnsafeMutablePointer<iovec>
    private let headers: UnsafeMutableRawPointer

    init(slots: Int = 16, slotSize: Int = 4096) {
        precondition(slots > 0 && slotSize > 1)
        self.slots = slots
        self.slotSize = slotSize
        storage = .allocate(byteCount: slots * slotSize, alignment: 16)
        vectors = .allocate(capacity: slots)
        headers = .allocate(byteCount: slots * MultipleMessages.stride, alignment: MemoryLayout<msghdr>.alignment)
        for i in 0..<slots {
            vectors[i] = iovec(iov_base: storage + i * slotSize, iov_len: slotSize)
        }
    }

    deinit {
        storage.deallocate()
        vectors.deallocate()
        headers.deallocate()
    }

    /// Takes what `fd` holds now, without waiting.
    func receive(_ fd: Int32) -> PacketSocketRead {
        for i in 0..<slots { MultipleMessages.set(headers, i, vector: vectors + i) }
        let n: Int32
        if let call = MultipleMessages.receive {
            n = call(fd, headers, UInt32(slots), Int32(MSG_DONTWAIT), nil)
        } else {
            let one = recvmsg(fd, MultipleMessages.header(headers, 0), Int32(MSG_DONTWAIT))
            if one >= 0 { headers.storeBytes(of: UInt32(one), toByteOffset: MultipleMessages.lengthOffset, as: UInt32.self) }
            n = one < 0 ? -1 : 1
        }
        if n < 0 {
            let e = errno
            return e == EAGAIN || e == EWOULDBLOCK || e == EINTR ? .nothing : .failed(e)
        }
        if n == 0 || MultipleMessages.length(headers, 0) == 0 { return .endOfFile }
        // A message of no octets after others: the end comes after them (the next call reports it).
        var count = Int(n)
        for i in 1..<max(count, 1) where MultipleMessages.length(headers, i) == 0 {
            count = i
            break
        }
        return .messages(count)
    }

    /// Message `i` of the last `receive`: its octets (H4 indicator first), or nil when it was cut short.
    func message(_ i: Int) -> UnsafeRawBufferPointer? {
        if MultipleMessages.header(headers, i).pointee.msg_flags & Int32(MSG_TRUNC) != 0 { return nil }
        return UnsafeRawBufferPointer(start: storage + i * slotSize, count: MultipleMessages.length(headers, i))
    }
}

/// Sends one packet as one message, its H4 indicator and its octets gathered from where they lie (sendmsg(2) with two
/// vectors: no copy, no array). Returns the octets sent, or -1 with `errno` set.
///
/// One call per packet, never sendmmsg(2): the kernel gives every message of a sendmmsg but the last the flag
/// MSG_BATCH, and the HCI socket refuses a message with any flag other than MSG_DONTWAIT, MSG_NOSIGNAL and
/// MSG_ERRQUEUE (EINVAL). A batch sent that way lost all its packets but the last: in a guest, 60 of the 2,930 ACL
/// packets of a 1 MB L2CAP transfer (bench-hci-socket), while a SOCK_SEQPACKET pair, which takes MSG_BATCH, passed.
func sendPacket(_ packet: HCIPacket, on fd: Int32) -> Int {
    var indicator = packet.type.rawValue
    return withUnsafeMutablePointer(to: &indicator) { indicator in
        packet.bytes.withUnsafeBytes { body in
            var vectors = (
                iovec(iov_base: UnsafeMutableRawPointer(indicator), iov_len: 1),
                iovec(iov_base: UnsafeMutableRawPointer(mutating: body.baseAddress), iov_len: body.count)
            )
            return withUnsafeMutableBytes(of: &vectors) { v in
                var message = msghdr()
                message.msg_iov = v.baseAddress!.assumingMemoryBound(to: iovec.self)
                message.msg_iovlen = 2
                // MSG_NOSIGNAL: a controller that went away (unplugged) is an error, never a SIGPIPE.
                return sendmsg(fd, &message, Int32(MSG_NOSIGNAL))
            }
        }
    }
}
