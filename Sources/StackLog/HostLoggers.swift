// Copyright 2026 the OpenCoreBluetooth authors
// SPDX-License-Identifier: Apache-2.0
//
// A host's swift-log loggers, one per layer (labels in StackLog). They are made when the host is, from the
// backend `LoggingSystem` has then, and carry the host's name as metadata, so that the logs of several hosts
// in one process (the virtual radio's devices) stay apart. An application may replace them.
//
// The packet path asks `hciTraces` (and the other layers' flags) before it builds a trace line: a stored Bool,
// where a logger's own level sits behind its handler's existential, which costs tens of nanoseconds per
// line (scripts/bench-logging). The flags follow the loggers: they are recomputed whenever one is set.
import Logging

/// The loggers a host writes to, one per layer, each with the metadata `host` (the host's name).
///
/// Linux addition. Packets and PDUs are logged at `trace`, procedures at `debug`, and what an operator
/// should see (a malformed packet, a timeout, a controller lost) at `notice` or `warning`.
public struct HostLoggers: Sendable {
    /// `opencorebluetooth.hci`: HCI packets in and out, commands, events.
    public var hci: Logger { didSet { hciTraces = hci.logLevel <= .trace } }
    /// `opencorebluetooth.l2cap`: frames, signalling, credit-based channels.
    public var l2cap: Logger { didSet { l2capTraces = l2cap.logLevel <= .trace } }
    /// `opencorebluetooth.att`: ATT PDUs, GATT client and server.
    public var att: Logger { didSet { attTraces = att.logLevel <= .trace } }
    /// `opencorebluetooth.smp`: pairing, keys and encryption.
    public var smp: Logger { didSet { smpTraces = smp.logLevel <= .trace } }
    /// `opencorebluetooth.gap`: advertising, scanning, connections, private addresses.
    public var gap: Logger
    /// `opencorebluetooth.host`: start-up, power, the bond store.
    public var host: Logger
    /// `opencorebluetooth.transport`: the controller's transport opened, refused or lost.
    public var transport: Logger

    /// Whether `hci` logs packets (its level was `trace` when it was set; set it again after changing the
    /// level of a handler that the logger does not own).
    public private(set) var hciTraces: Bool
    /// Whether `l2cap` logs frames.
    public private(set) var l2capTraces: Bool
    /// Whether `att` logs PDUs.
    public private(set) var attTraces: Bool
    /// Whether `smp` logs PDUs.
    public private(set) var smpTraces: Bool

    /// Loggers for a host named `hostName`, each made by `make` from its label (by default with the
    /// backend that `LoggingSystem` has bootstrapped) and given the metadata `host`.
    public init(hostName: String, make: (String) -> Logger = { Logger(label: $0) }) {
        func logger(_ layer: StackLogLabel) -> Logger {
            var l = make(layer.rawValue)
            l[metadataKey: "host"] = "\(hostName)"
            return l
        }
        hci = logger(.hci)
        l2cap = logger(.l2cap)
        att = logger(.att)
        smp = logger(.smp)
        gap = logger(.gap)
        host = logger(.host)
        transport = logger(.transport)
        hciTraces = hci.logLevel <= .trace
        l2capTraces = l2cap.logLevel <= .trace
        attTraces = att.logLevel <= .trace
        smpTraces = smp.logLevel <= .trace
    }
}
