// Copyright 2026 the OpenCoreBluetooth authors
// SPDX-License-Identifier: Apache-2.0
//
// A host's swift-log loggers, one per layer (labels in StackLog). They are made when the host is, from the
// backend `LoggingSystem` has then, and carry the host's name as metadata, so that the logs of several hosts
// in one process (the virtual radio's devices) stay apart. An application may replace them.
import Logging
import StackLog
import BLEHCI
import BLEWire

/// The loggers a host writes to, one per layer, each with the metadata `host` (the host's name).
///
/// Linux addition. Packets and PDUs are logged at `trace`, procedures at `debug`, and what an operator
/// should see (a malformed packet, a timeout, a controller lost) at `notice` or `warning`.
public struct HostLoggers: Sendable {
    /// `opencorebluetooth.hci`: HCI packets in and out, commands, events.
    public var hci: Logger
    /// `opencorebluetooth.l2cap`: frames, signalling, credit-based channels.
    public var l2cap: Logger
    /// `opencorebluetooth.att`: ATT PDUs, GATT client and server.
    public var att: Logger
    /// `opencorebluetooth.smp`: pairing, keys and encryption.
    public var smp: Logger
    /// `opencorebluetooth.gap`: advertising, scanning, connections, private addresses.
    public var gap: Logger
    /// `opencorebluetooth.host`: start-up, power, the bond store.
    public var host: Logger
    /// `opencorebluetooth.transport`: the controller's transport opened, refused or lost.
    public var transport: Logger

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
    }
}

extension HCIPacket {
    /// What a trace line says of a packet: its type and length, and the octets of commands and events. ACL
    /// data is not written out: it carries pairing values and distributed keys (a btsnoop capture has them).
    var logMetadata: Logger.Metadata {
        var m: Logger.Metadata = ["type": "\(type)", "length": "\(bytes.count)"]
        if type == .command || type == .event { m["octets"] = "\(bytes.hexString)" }
        return m
    }
}
