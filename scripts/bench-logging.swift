// Copyright 2026 the OpenCoreBluetooth authors
// SPDX-License-Identifier: Apache-2.0
//
// What logging costs on the packet path when it is off, release build. One "packet" here is the three trace
// lines the host writes for an inbound ATT PDU (HCI packet, L2CAP frame, ATT PDU), each with metadata that
// would format the packet, made through the host's real `HostLoggers` at the level swift-log's default
// handler has (info), against the same work with no log line at all:
//   guarded     as the host does: `if loggers.hciTraces { loggers.hci.trace(…) }`
//   unguarded   `loggers.hci.trace(…)` alone: swift-log's own level check behind the handler existential
// Built and run by scripts/bench-logging.
import Foundation
import Logging
import StackLog

struct Packet { var type: UInt8; var bytes: [UInt8] }

extension Packet {
    var logMetadata: Logger.Metadata {
        ["type": "\(type)", "length": "\(bytes.count)", "octets": "\(bytes.map { String($0, radix: 16) }.joined())"]
    }
}

final class Host {
    var loggers: HostLoggers
    var octets = 0
    init(level: Logger.Level) {
        loggers = HostLoggers(hostName: "bench") { label in
            var l = Logger(label: label)
            l.logLevel = level
            return l
        }
    }

    @inline(never) func bare(_ p: Packet) {
        octets &+= p.bytes.count
    }

    @inline(never) func guarded(_ p: Packet) {
        if loggers.hciTraces { loggers.hci.trace("packet in", metadata: p.logMetadata) }
        if loggers.l2capTraces { loggers.l2cap.trace("frame in", metadata: ["connection": "64", "cid": "4", "octets": "\(p.bytes.count - 4)"]) }
        if loggers.attTraces { loggers.att.trace("PDU in", metadata: ["connection": "64", "pdu": "\(p.bytes)"]) }
        octets &+= p.bytes.count
    }

    @inline(never) func unguarded(_ p: Packet) {
        loggers.hci.trace("packet in", metadata: p.logMetadata)
        loggers.l2cap.trace("frame in", metadata: ["connection": "64", "cid": "4", "octets": "\(p.bytes.count - 4)"])
        loggers.att.trace("PDU in", metadata: ["connection": "64", "pdu": "\(p.bytes)"])
        octets &+= p.bytes.count
    }
}

/// Nanoseconds per call, the best of `rounds` timings (the least disturbed by other processes).
func measure(_ n: Int, rounds: Int, _ body: () -> Void) -> Double {
    var best = Double.infinity
    for _ in 0..<rounds {
        let start = DispatchTime.now().uptimeNanoseconds
        for _ in 0..<n { body() }
        best = min(best, Double(DispatchTime.now().uptimeNanoseconds - start) / Double(n))
    }
    return best
}

let n = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1])! : 5_000_000
let packet = Packet(type: 2, bytes: [0x40, 0x20, 0x1B, 0x00, 0x17, 0x00, 0x04, 0x00, 0x1B, 0x2A, 0x00] + [UInt8](repeating: 0x5A, count: 20))
let host = Host(level: .info)
precondition(!host.loggers.hciTraces && !host.loggers.l2capTraces && !host.loggers.attTraces)
let bare = measure(n, rounds: 5) { host.bare(packet) }
let guarded = measure(n, rounds: 5) { host.guarded(packet) }
let unguarded = measure(n, rounds: 5) { host.unguarded(packet) }
print(String(format: "logging off (level info), best of 5 × %d packets, 3 trace lines each:", n))
print(String(format: "  no log lines      %7.2f ns per packet", bare))
print(String(format: "  guarded (host)    %7.2f ns per packet  (+%.2f ns)", guarded, guarded - bare))
print(String(format: "  unguarded         %7.2f ns per packet  (+%.2f ns)", unguarded, unguarded - bare))
precondition(host.octets > 0)
