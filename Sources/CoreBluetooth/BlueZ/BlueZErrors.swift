// A D-Bus error from bluetoothd (org.bluez.Error.*) as the CBError or CBATTError an iOS app would see for the same
// failure, BlueZ's own words kept in the description ("… (BlueZ: org.bluez.Error.NotPermitted: Read not permitted)").
//
// BlueZ turns an ATT error response into a D-Bus error in src/gatt-client.c (create_gatt_dbus_error): Read/Write not
// permitted → NotPermitted; insufficient authentication, encryption or key size → NotPermitted "Not paired" (older
// releases: NotPaired); invalid offset / length → InvalidArguments (older: InvalidOffset, InvalidValueLength);
// insufficient authorization → NotAuthorized; request not supported → NotSupported; any other code → Failed
// "Operation failed with ATT error: 0xNN" (older releases: the bare name org.bluez.Error).
import Foundation
import DBus

enum BlueZErrors {
    /// What failed, which decides between the GATT and the link reading of a name.
    enum Operation {
        case read, write, notify, connect, other
    }

    static func cbError(_ error: DBusError, during op: Operation) -> any Error {
        guard case let .remote(name, message) = error else {
            switch error {
            case .timedOut: return CBError(.connectionTimeout, userInfo: info(.connectionTimeout, error))
            case .disconnected: return CBError(.peripheralDisconnected, userInfo: info(.peripheralDisconnected, error))
            default: return CBError(.unknown, userInfo: info(.unknown, error))
            }
        }
        let short = name.hasPrefix("org.bluez.Error.") ? String(name.dropFirst("org.bluez.Error.".count)) : name
        func att(_ code: CBATTError.Code) -> any Error { CBATTError(code, userInfo: attInfo(code, error)) }
        func cb(_ code: CBError.Code) -> any Error { CBError(code, userInfo: info(code, error)) }
        let lower = message.lowercased()
        if let code = attCode(in: message) { return att(CBATTError.Code(rawValue: code) ?? .other(code)) }
        switch short {
        case "NotPermitted":
            if lower.contains("not paired") { return att(.insufficientAuthentication) }
            if lower.contains("write") { return att(.writeNotPermitted) }
            if lower.contains("read") { return att(.readNotPermitted) }
            return att(op == .write ? .writeNotPermitted : .readNotPermitted)
        case "ReadNotPermitted": return att(.readNotPermitted)
        case "WriteNotPermitted": return att(.writeNotPermitted)
        case "NotPaired": return att(.insufficientAuthentication)
        case "NotAuthorized": return att(.insufficientAuthorization)
        case "InvalidOffset": return att(.invalidOffset)
        case "InvalidValueLength": return att(.invalidAttributeValueLength)
        case "InvalidArguments":
            if lower.contains("offset") { return att(.invalidOffset) }
            if lower.contains("length") { return att(.invalidAttributeValueLength) }
            return cb(.invalidParameters)
        case "NotSupported": return op == .connect || op == .other ? cb(.operationNotSupported) : att(.requestNotSupported)
        case "NotConnected": return cb(.notConnected)
        case "DoesNotExist", "org.freedesktop.DBus.Error.UnknownObject", "org.freedesktop.DBus.Error.UnknownMethod":
            return op == .connect ? cb(.unknownDevice) : cb(.invalidHandle)
        case "AuthenticationFailed", "AuthenticationRejected", "AuthenticationCanceled", "AuthenticationTimeout":
            return op == .connect ? cb(.connectionFailed) : att(.insufficientAuthentication)
        case "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout":
            return cb(.connectionTimeout)
        case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
            return cb(op == .connect ? .connectionFailed : .peripheralDisconnected)
        default:
            if op == .connect {
                if lower.contains("timeout") || lower.contains("timed out") { return cb(.connectionTimeout) }
                if lower.contains("limit") { return cb(.connectionLimitReached) }
                return cb(.connectionFailed)
            }
            if lower.contains("not connected") || lower.contains("disconnected") { return cb(.peripheralDisconnected) }
            return cb(.unknown)
        }
    }

    /// A failed Device1.Connect as didFailToConnect's error (always a CBError).
    static func connectError(_ error: DBusError) -> CBError {
        cbError(error, during: .connect) as? CBError ?? CBError(.connectionFailed, userInfo: info(.connectionFailed, error))
    }

    /// The ATT code in BlueZ's "Operation failed with ATT error: 0x0e".
    static func attCode(in message: String) -> Int? {
        guard let r = message.range(of: "ATT error: 0x") else { return nil }
        let hex = message[r.upperBound...].prefix { $0.isHexDigit }
        return hex.isEmpty ? nil : Int(hex, radix: 16)
    }

    private static func info(_ code: CBError.Code, _ e: DBusError) -> [String: Any] {
        [NSLocalizedDescriptionKey: "\(CBError(code).localizedDescription) (BlueZ: \(e))", "OCBBlueZError": "\(e)"]
    }

    private static func attInfo(_ code: CBATTError.Code, _ e: DBusError) -> [String: Any] {
        [NSLocalizedDescriptionKey: "\(CBATTError(code).localizedDescription) (BlueZ: \(e))", "OCBBlueZError": "\(e)"]
    }
}
