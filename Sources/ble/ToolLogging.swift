// Copyright 2026 the OpenCoreBluetooth authors
// SPDX-License-Identifier: Apache-2.0
//
// The tool's swift-log backend: lines on standard error. The library never prints; this is where `BLE_LOG`
// (and Multipeer's `MC_LOG`) decide what reaches the terminal.
//
//   BLE_LOG unset or 0   the Apple-API layers' warnings and notices (Core Bluetooth's API MISUSE lines,
//                        Multipeer, mDNS, GameKit), as before swift-log; the host's layers stay quiet
//   BLE_LOG=1            every layer at debug
//   BLE_LOG=LEVEL        every layer at LEVEL: trace (every packet and PDU), debug, info, notice, warning…
//   MC_LOG=1             Multipeer at debug
import Foundation
import Logging

enum ToolLogging {
    /// The level each label gets under `environment`.
    static func level(for label: String, environment: [String: String]) -> Logger.Level {
        if let v = environment["BLE_LOG"], !v.isEmpty, v != "0" {
            return Logger.Level(rawValue: v.lowercased()) ?? .debug
        }
        if label == "opencorebluetooth.multipeer", let v = environment["MC_LOG"], !v.isEmpty, v != "0" { return .debug }
        switch label {
        case "opencorebluetooth.corebluetooth", "opencorebluetooth.multipeer", "opencorebluetooth.mdns", "opencorebluetooth.gamekit":
            return .notice
        default:
            return .error
        }
    }

    /// Makes every logger of the process write to standard error at the level `BLE_LOG` asks for.
    static func bootstrap(environment: [String: String] = ProcessInfo.processInfo.environment) {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level(for: label, environment: environment)
            return handler
        }
    }
}
