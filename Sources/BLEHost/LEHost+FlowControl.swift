// Controller-to-host ACL flow control (Vol 4 Part E §4.2, §7.3.38–§7.3.40).
//
// Without it a controller sends ACL data to the host as fast as it arrives over the air, and whatever sits
// between them (a kernel socket's receive queue, a UART buffer) overflows when the host falls behind: on the
// HCI user channel the kernel drops such packets silently. With it the controller keeps at most
// `announcedHostBuffers.totalNumACLDataPackets` packets outstanding at the host and holds the rest (its link layer then
// stops acknowledging the peer, which slows the peer down); the host reports each packet it has finished
// with in Host Number Of Completed Packets.
//
// Start-up (LEHost+Startup.swift) turns it on after Host Buffer Size when the controller lists all three
// commands, the host wants it (`wantsControllerToHostFlowControl`), and the controller is not known to list
// it without implementing it (rootcanal). A controller without it works as before: nothing here runs.
//
// A packet is finished once `handleACL` has dispatched it: recombined, and handed to the protocol machines and
// the delegates, all synchronously on the loop. Finished packets are counted per handle and reported once the
// loop has done the work at hand (`whenIdle`), so a burst costs one command however many turns it takes. The
// command goes to the controller at once, outside the command queue: it takes no command credit and normally
// gets no answer (§7.3.40); an error answer (Invalid HCI Command Parameters) is logged by the command layer as
// unasked-for.
// Counts are kept on the connection the packet went to; those of a link that closed are dropped, never reported
// (the controller forgot them with the link, §4.3), and packets for a handle the host does not know (or
// malformed ones) are not counted.
//
// Threading: loop only, like the rest of the host.
import BLEHCI
import BLETransport

extension LEHost {
    /// What the host announces with Host Buffer Size, and why:
    /// - 1021 octets per packet: above the longest LE data PDU (251), so a controller never fragments for us;
    ///   1021 is also the ACL length most dual-mode controllers report for themselves, so no controller is asked
    ///   for anything unusual. The recombiner takes any size; nothing is allocated ahead per buffer.
    /// - 64 packets: enough that flow control never limits LE throughput (64 packets per report round trip is
    ///   32,000 packets a second at a 2 ms round trip, far above what LE air carries), and few enough that 64
    ///   full packets (about 150 KB as kernel socket buffers) fit even the user channel's default receive
    ///   queue (about 212 KB) without the 8 MB widening.
    public static let hostACLBuffers = HostBufferSize(aclDataPacketLength: 1021, totalNumACLDataPackets: 64)

    /// Whether start-up asks this controller for flow control.
    var shouldEnableControllerToHostFlowControl: Bool {
        wantsControllerToHostFlowControl && startupInfo.supportsControllerToHostFlowControl && !startupInfo.listsFlowControlItLacks
    }

    /// A packet of `c` has been dispatched: count it, and report once the loop has finished the work at hand: a
    /// burst read over several turns costs one command, and a Disconnection Complete read in the same burst
    /// comes before the report, which then leaves that link out. The loop cannot stay busy with our link's data
    /// for long without reporting, because the controller sends no more than the announced buffers meanwhile.
    func finished(on c: HostConnection) {
        guard c.isOpen else { return }
        c.unreportedPackets += 1
        if c.unreportedPackets == 1 { hostCompletions.append(c) }
        guard !hostCompletionsFlushScheduled else { return }
        hostCompletionsFlushScheduled = true
        // Strong: a host let go meanwhile (a test dropping it, a manager deallocated) still reports, and is
        // released after. On a virtual clock `advance(by:)` is one turn; idleness is still reached within it.
        loop.whenIdle { [self] in
            hostCompletionsFlushScheduled = false
            reportHostCompletions()
        }
    }

    /// Sends what was finished since the last report, for links still open, 63 entries per command at most;
    /// each command is built in place (one array): opcode, length, Num_Handles, then handle and count per entry.
    func reportHostCompletions() {
        guard !hostCompletions.isEmpty else { return }
        var b = [UInt8]()
        func flush() {
            guard b.count > 4 else { return }
            b[2] = UInt8(b.count - 3)
            b[3] = UInt8((b.count - 4) / 4)
            if loggers.hciTraces { loggers.hci.trace("command out", metadata: ["command": "\(HCIOpcode.hostNumberOfCompletedPackets)", "parameters": "\(b[3...])"]) }
            transport.send(HCIPacket(type: .command, bytes: b))
        }
        for c in hostCompletions {
            var n = c.unreportedPackets
            c.unreportedPackets = 0
            guard c.isOpen, controllerToHostFlowControl else { continue }
            while n > 0 {
                if b.count >= 4 + 4 * HCICommand.maximumCompletedPacketsEntries { flush(); b.removeAll(keepingCapacity: true) }
                if b.isEmpty {
                    b.reserveCapacity(4 + 4 * min(hostCompletions.count, HCICommand.maximumCompletedPacketsEntries))
                    b.append(UInt8(HCIOpcode.hostNumberOfCompletedPackets.rawValue & 0xFF)); b.append(UInt8(HCIOpcode.hostNumberOfCompletedPackets.rawValue >> 8))
                    b.append(0); b.append(0)
                }
                let part = min(n, Int(UInt16.max))
                b.append(UInt8(c.handle & 0xFF)); b.append(UInt8(c.handle >> 8))
                b.append(UInt8(part & 0xFF)); b.append(UInt8(part >> 8))
                n -= part
            }
        }
        hostCompletions.removeAll(keepingCapacity: true)
        flush()
    }

    /// A link closed: what it had finished is not reported (Vol 4 Part E §4.3: the controller frees its buffers).
    func forgetHostCompletions(of c: HostConnection) {
        c.unreportedPackets = 0
    }
}
