// Copyright 2026 the OpenCoreBluetooth authors
// SPDX-License-Identifier: Apache-2.0
//
// The stack's diagnostics go through swift-log: one logger label per layer, so that an application routes,
// filters and levels them in whatever backend it bootstraps (`LoggingSystem.bootstrap`). The library never
// writes to standard error itself; the `ble` tool bootstraps a standard-error handler when `BLE_LOG` is set.
//
// Levels as the Swift server ecosystem uses them: `trace` for every packet and PDU, `debug` for procedures
// and state changes, `info` for rare life-cycle events, `notice`/`warning` for what an operator should see
// (a peer that broke a protocol, a controller lost, a file that could not be written), `error` for a
// component that stopped working. Messages and metadata are autoclosures: nothing is built below the level.
import Logging

/// The layers of OpenCoreBluetooth that log, each with its swift-log label.
public enum StackLogLabel: String, CaseIterable, Sendable {
    /// HCI packets, commands and events; the controller's start-up.
    case hci = "opencorebluetooth.hci"
    /// L2CAP frames, signalling and credit-based channels.
    case l2cap = "opencorebluetooth.l2cap"
    /// ATT PDUs and GATT procedures, client and server.
    case att = "opencorebluetooth.att"
    /// The Security Manager: pairing, keys, encryption.
    case smp = "opencorebluetooth.smp"
    /// Advertising, scanning, connections, private addresses.
    case gap = "opencorebluetooth.gap"
    /// The host core: power, the bond store.
    case host = "opencorebluetooth.host"
    /// A controller's transport: opened, refused, lost.
    case transport = "opencorebluetooth.transport"
    /// The Core Bluetooth façade: Apple's API MISUSE and warning lines.
    case coreBluetooth = "opencorebluetooth.corebluetooth"
    /// The mDNS/DNS-SD responder and querier.
    case mdns = "opencorebluetooth.mdns"
    /// Multipeer Connectivity: sessions, invitations, the peer transports.
    case multipeer = "opencorebluetooth.multipeer"
    /// GameKit peer sessions.
    case gameKit = "opencorebluetooth.gamekit"
}

extension Logger {
    /// A logger for one layer of the stack, made by the backend `LoggingSystem` has at this moment.
    public init(_ layer: StackLogLabel) {
        self.init(label: layer.rawValue)
    }
}
