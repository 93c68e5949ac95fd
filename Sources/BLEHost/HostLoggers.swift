// Copyright 2026 the OpenCoreBluetooth authors
// SPDX-License-Identifier: Apache-2.0
//
// The host's loggers (`HostLoggers`, in StackLog, re-exported here so that `import BLEHost` names them), and
// what a trace line says of an HCI packet.
@_exported import StackLog
import Logging
import BLEHCI
import BLEWire

extension HCIPacket {
    /// What a trace line says of a packet: its type and length, and the octets of commands and events. ACL
    /// data is not written out: it carries pairing values and distributed keys (a btsnoop capture has them).
    var logMetadata: Logger.Metadata {
        var m: Logger.Metadata = ["type": "\(type)", "length": "\(bytes.count)"]
        if type == .command || type == .event { m["octets"] = "\(bytes.hexString)" }
        return m
    }
}
