// Controller-to-host flow control in the virtual controller (Vol 4 Part E §4.2, §7.3.38–§7.3.40).
//
// Once the host has given its buffers (Host Buffer Size) and turned flow control on for ACL data (Set
// Controller To Host Flow Control 0x01 or 0x03), this controller never has more ACL packets outstanding at the
// host than the host's Host_Total_Num_ACL_Data_Packets, across all handles, and never sends a packet longer than
// Host_ACL_Data_Packet_Length (it fragments: the first piece keeps its boundary flag, the rest are
// continuing fragments). Packets beyond that are held, in order, and go as Host Number Of Completed Packets
// frees buffers. A Disconnection Complete forgets the handle: its outstanding count and the packets held for it
// (the link's data is flushed, as a real controller's is; §4.3). Reset turns flow control off.
//
// Bounded memory: a host that never acknowledges must not make the controller grow. The controller holds at
// most `heldACLLimit` packets (its receive buffers); while they are full its link layer does not acknowledge
// the peer's data (Vol 6 Part B §4.5.9: a receiver that cannot take a PDU does not advance NESN), so the peer's
// controller keeps the packet and does not return its host's buffer credit. The peer's host then runs out of
// credits and its queue fills; its app is told the link is not ready (canSendWriteWithoutResponse, updateValue
// false). Without airtime the packet waits on the peer's link (`waitingForPeer`, at most the peer host's
// credits); with the airtime model the last fragment is simply not acknowledged and is sent again. Nothing is
// lost, and nothing grows beyond the two sides' buffers. The link stays up: a real link layer keeps exchanging
// empty packets while it withholds acknowledgements, so no supervision timeout fires.
//
// Host Number Of Completed Packets takes no command credit and gets no event when it is right (§7.3.40). When
// it is wrong — a bad length, a handle that is not a connection, or more packets than are outstanding — the
// controller answers Command Complete with Invalid HCI Command Parameters, as §7.3.40 says for invalid
// parameters, and applies the entries that are right (counts clamped to what is outstanding). Sent while flow
// control is off, it is ignored.
//
// Threading: the air's loop, like the rest of the controller.
import BLEWire
import BLEHCI
import BLETransport

/// What the host told the controller, and the ACL packets outstanding at it or held for it. A class, so that
/// the per-packet path updates it in place.
final class HostFlowState {
    var buffers: HostBufferSize?
    var aclOn = false
    /// The host's buffers (Host_Total_Num_ACL_Data_Packets) while flow control is on, else unlimited.
    var limit = Int.max
    /// Packets given to the host and not yet reported finished, per handle.
    var outstanding = ACLPacketsInFlight()
    var held = FIFO<HCIPacket>()
    /// A peer's controller keeps packets for us (`waitingForPeer` on its link): look there when room comes back.
    var peersWaiting = false

    /// No packet held, and a buffer free at the host (or flow control off): a packet may go straight on.
    var sendsNow: Bool { held.isEmpty && outstanding.total < limit }
}

/// A snapshot of the controller's side of flow control (for tests and diagnostics).
public struct VirtualHostFlowStatus: Sendable, Equatable {
    /// Flow control on for ACL data, with the host's buffers.
    public var enabled: Bool
    public var hostBuffers: UInt16
    /// Packets the host has not reported finished, per handle.
    public var outstanding: [UInt16: Int]
    /// Packets held for the host.
    public var held: Int
    /// Packets the peers' controllers keep because this one's buffers are full.
    public var waitingAtPeers: Int
}

extension VirtualController {
    /// Loop only.
    public var hostFlowStatus: VirtualHostFlowStatus {
        var waiting = 0
        for (_, link) in links {
            if let peer = link.peer, let pl = peer.links[link.peerHandle] { waiting += pl.waitingForPeer.count }
        }
        return VirtualHostFlowStatus(
            enabled: hostFlow.aclOn, hostBuffers: hostFlow.buffers?.totalNumACLDataPackets ?? 0,
            outstanding: hostFlow.outstanding.byHandle,
            held: hostFlow.held.count, waitingAtPeers: waiting)
    }

    /// Whether this controller's link layer takes another packet from a peer (its receive buffers have room).
    var acceptsFromAir: Bool {
        let f = hostFlow
        return !f.aclOn || f.held.count < heldACLLimit
    }

    // MARK: Commands

    func hostBufferSize(_ b: HostBufferSize, op: HCIOpcode) {
        guard supportsHostFlowControl else { return complete(op, .unknownCommand) }
        guard b.aclDataPacketLength > 0, b.totalNumACLDataPackets > 0 else { return complete(op, .invalidParameters) }
        hostFlow.buffers = b
        if hostFlow.aclOn { hostFlow.limit = Int(b.totalNumACLDataPackets) }
        complete(op)
        if hostFlow.aclOn { releaseHeld() }
    }

    func setControllerToHostFlowControl(_ enable: UInt8, op: HCIOpcode) {
        guard supportsHostFlowControl else { return complete(op, .unknownCommand) }
        guard enable <= 0x03 else { return complete(op, .invalidParameters) }
        let acl = enable & 0x01 != 0
        // Our choice: flow control cannot be honoured without the host's buffers, so it needs Host Buffer Size first.
        if acl && hostFlow.buffers == nil { return complete(op, .commandDisallowed) }
        hostFlow.aclOn = acl
        hostFlow.limit = acl ? Int(hostFlow.buffers!.totalNumACLDataPackets) : .max
        complete(op)
        if !acl {
            // Off: what was held goes now, and nothing is counted any more.
            hostFlow.outstanding.removeAll()
            releaseHeld()
            pullFromPeers()
        }
    }

    func hostNumberOfCompletedPackets(_ list: [CompletedPackets], op: HCIOpcode) {
        guard supportsHostFlowControl else { return complete(op, .unknownCommand) }
        guard hostFlow.aclOn else { return }
        var invalid = false
        for e in list {
            guard links[e.handle] != nil else {
                invalid = true
                continue
            }
            if hostFlow.outstanding.completed(Int(e.count), on: e.handle) < Int(e.count) { invalid = true }
        }
        if invalid { complete(op, .invalidParameters) }
        releaseHeld()
        pullFromPeers()
    }

    /// Host Number Of Completed Packets read in place (the command comes once per host loop turn while data
    /// flows): Num_Handles, then handle and count per entry. A length that disagrees is Invalid HCI Command
    /// Parameters, as for any malformed command.
    func hostNumberOfCompletedPackets(packet b: [UInt8]) {
        let op = HCIOpcode.hostNumberOfCompletedPackets
        guard supportsHostFlowControl else { return complete(op, .unknownCommand) }
        guard b.count >= 4, Int(b[2]) == b.count - 3, b.count == 4 + 4 * Int(b[3]) else { return complete(op, .invalidParameters) }
        guard hostFlow.aclOn else { return }
        var invalid = false
        var i = 4
        while i < b.count {
            let handle = UInt16(b[i]) | UInt16(b[i + 1]) << 8
            let n = Int(b[i + 2]) | Int(b[i + 3]) << 8
            i += 4
            if links[handle] == nil || hostFlow.outstanding.completed(n, on: handle) < n { invalid = true }
        }
        if invalid { complete(op, .invalidParameters) }
        releaseHeld()
        pullFromPeers()
    }

    // MARK: Data to the host

    /// An ACL packet for our host from the air: sent now while the host has buffers and nothing is held before it,
    /// else held.
    func deliverFromAir(_ packet: HCIPacket) {
        let f = hostFlow
        guard f.aclOn, let b = f.buffers else { return deliver(packet) }
        let maxLength = Int(b.aclDataPacketLength)
        if packet.bytes.count - 4 <= maxLength {
            if f.sendsNow {
                f.outstanding.sent(on: packet.handleField)
                deliver(packet)
            } else {
                f.held.append(packet)
            }
            return
        }
        // Longer than the host's buffers: fragments of at most its length (Vol 4 Part E §5.4.2).
        let first = UInt16(packet.bytes[0]) | UInt16(packet.bytes[1]) << 8
        let handleAndBroadcast = first & 0xCFFF
        var offset = 4
        var isFirst = true
        while offset < packet.bytes.count {
            let n = min(maxLength, packet.bytes.count - offset)
            let flags = isFirst ? first : handleAndBroadcast | UInt16(ACLPacketBoundary.continuing.rawValue) << 12
            var piece: [UInt8] = [UInt8(flags & 0xFF), UInt8(flags >> 8), UInt8(n & 0xFF), UInt8(n >> 8)]
            piece.append(contentsOf: packet.bytes[offset..<(offset + n)])
            deliverOrHold(HCIPacket(type: .acl, bytes: piece), limit: Int(b.totalNumACLDataPackets))
            offset += n
            isFirst = false
        }
    }

    private func deliverOrHold(_ packet: HCIPacket, limit: Int) {
        if hostFlow.held.isEmpty && hostFlow.outstanding.total < limit {
            sendCounted(packet)
        } else {
            hostFlow.held.append(packet)
        }
    }

    private func sendCounted(_ packet: HCIPacket) {
        hostFlow.outstanding.sent(on: packet.handleField)
        deliver(packet)
    }

    /// Sends held packets, oldest first, while the host has buffers (all of them when flow control is off).
    func releaseHeld() {
        while hostFlow.outstanding.total < hostFlow.limit, let p = hostFlow.held.popFirst() {
            if hostFlow.aclOn { sendCounted(p) } else { deliver(p) }
        }
    }

    /// Takes the packets our peers kept for us while our buffers were full, as room comes back, and returns
    /// their hosts' credits.
    func pullFromPeers() {
        guard hostFlow.peersWaiting, acceptsFromAir else { return }
        hostFlow.peersWaiting = false
        for (_, link) in links.sorted(by: { $0.key < $1.key }) {
            guard !link.lost, let peer = link.peer, let pl = peer.links[link.peerHandle] else { continue }
            while acceptsFromAir, let p = pl.waitingForPeer.popFirst() {
                deliverFromAir(p)
                peer.creditReturned(handle: pl.handle)
            }
            if !acceptsFromAir {
                hostFlow.peersWaiting = true
                return
            }
        }
    }

    /// A packet our host sent on `link` for `peer`'s host: it crosses when the peer's buffers have room and
    /// nothing of this link waits before it; otherwise it waits on the link and its credit is not returned.
    /// Returns whether it crossed.
    func forward(_ packet: HCIPacket, on link: VirtualLink, to peer: VirtualController) -> Bool {
        if link.waitingForPeer.isEmpty && peer.acceptsFromAir {
            peer.deliverFromAir(packet)
            return true
        }
        link.waitingForPeer.append(packet)
        peer.hostFlow.peersWaiting = true
        return false
    }

    /// Disconnection Complete for `handle` reached the host: the handle's count and held packets are forgotten.
    func hostFlowLinkEnded(_ handle: UInt16) {
        hostFlow.outstanding.remove(handle)
        hostFlow.held.removeAll { $0.handleField == handle }
        releaseHeld()
        pullFromPeers()
    }
}

extension HCIPacket {
    /// The Connection_Handle of an ACL packet (the first two octets without the flags).
    var handleField: UInt16 { bytes.count >= 2 ? (UInt16(bytes[0]) | UInt16(bytes[1]) << 8) & 0x0FFF : 0xFFFF }
}
