// What a Multipeer peer puts on the air (docs/multipeer-protocol.md, "Discovery over Bluetooth LE"): one
// legacy advertisement of exactly 31 octets,
//
//   Flags (LE General Discoverable, BR/EDR not supported)            3 octets
//   Service Data – 128-bit UUID: UUID | token u64 | SPSM u16          28 octets
//
// The UUID names the service type (a hash of it, so browsers filter on it as they would on a service
// UUID), the token is the peer's identity (MCPeerID), the SPSM is where its channels are accepted. The scan
// response carries the display name for ordinary scanners; browsers learn the full name and the
// discoveryInfo over a channel (`infoRequest`), since neither fits in 31 octets.
import Foundation
import Crypto
import BLEGAP

public struct PeerAdvert: Sendable, Equatable {
    /// The service UUID in wire order (least significant octet first).
    public var service: [UInt8]
    public var token: UInt64
    public var psm: UInt16

    public init(service: [UInt8], token: UInt64, psm: UInt16) {
        self.service = service
        self.token = token
        self.psm = psm
    }

    /// The UUID browsers of `serviceType` look for: the first 16 octets of SHA-256("MC:v1:" + serviceType),
    /// with the RFC 9562 version 8 (custom) and variant bits, in wire order.
    public static func serviceUUID(forServiceType serviceType: String) -> [UInt8] {
        uuid(from: "MC:v1:" + serviceType)
    }

    /// The UUID a session member advertises while it is in a session (so new members can connect to it);
    /// no browser looks for it.
    public static let memberUUID: [UInt8] = uuid(from: "MC:v1:member")

    static func uuid(from text: String) -> [UInt8] {
        var b = Array(SHA256.hash(data: Array(text.utf8)).prefix(16))
        b[6] = (b[6] & 0x0F) | 0x80
        b[8] = (b[8] & 0x3F) | 0x80
        return b.reversed()
    }

    /// The UUID as text ("8-4-4-4-12"), for logs and docs.
    public static func uuidString(_ wire: [UInt8]) -> String {
        let be = wire.reversed().map { $0 < 16 ? "0" + String($0, radix: 16, uppercase: true) : String($0, radix: 16, uppercase: true) }
        return [be[0..<4], be[4..<6], be[6..<8], be[8..<10], be[10..<16]].map { $0.joined() }.joined(separator: "-")
    }

    /// What follows the UUID in the Service Data structure (token u64, SPSM u16, little-endian): the value of
    /// BlueZ's `ServiceData` entry for the UUID, both when we advertise through LEAdvertisingManager1 and when
    /// Device1 reports a peer.
    public var serviceDataPayload: [UInt8] {
        var out: [UInt8] = []
        withUnsafeBytes(of: token.littleEndian) { out += $0 }
        out += [UInt8(psm & 0xFF), UInt8(psm >> 8)]
        return out
    }

    /// From a Service Data entry: the UUID (wire order) and its payload; nil unless the payload is exactly a
    /// token and a non-zero SPSM.
    public init?(service: [UInt8], serviceDataPayload body: [UInt8]) {
        guard service.count == 16, body.count == 10 else { return nil }
        var token: UInt64 = 0
        for k in 0..<8 { token |= UInt64(body[k]) << (8 * k) }
        let psm = UInt16(body[8]) | UInt16(body[9]) << 8
        guard psm != 0 else { return nil }
        self.init(service: service, token: token, psm: psm)
    }

    /// The wire-order UUID of a UUID as BlueZ writes it ("0000180d-0000-…", either case); nil for anything else.
    public static func uuid(bluezString s: String) -> [UInt8]? {
        let hex = s.replacingOccurrences(of: "-", with: "")
        guard s.count == 36, hex.count == 32 else { return nil }
        var out: [UInt8] = []
        var i = hex.startIndex
        while i < hex.endIndex {
            let j = hex.index(i, offsetBy: 2)
            guard let b = UInt8(hex[i..<j], radix: 16) else { return nil }
            out.append(b)
            i = j
        }
        return out.reversed()
    }

    public var advertisingData: [UInt8] {
        var out: [UInt8] = [2, ADType.flags.rawValue, ADFlags([.leGeneralDiscoverable, .brEdrNotSupported]).rawValue]
        out += [27, ADType.serviceData128.rawValue] + service + serviceDataPayload
        return out
    }

    /// Finds our Service Data structure in an advertisement; nil for anything else (other devices, damaged
    /// data, a zero SPSM).
    public init?(advertisingData data: [UInt8]) {
        var i = 0
        while i < data.count {
            let len = Int(data[i])
            guard len > 0 else { return nil }
            guard i + 1 + len <= data.count else { return nil }
            if data[i + 1] == ADType.serviceData128.rawValue && len == 27 {
                let body = Array(data[(i + 2)..<(i + 1 + len)])
                self.init(service: Array(body[0..<16]), serviceDataPayload: Array(body[16...]))
                return
            }
            i += 1 + len
        }
        return nil
    }

    /// A scan response with the display name: complete when it fits in 29 octets, else shortened at a
    /// character boundary.
    public static func scanResponse(name: String) -> [UInt8] {
        let utf8 = Array(name.utf8)
        if utf8.count <= 29 { return [UInt8(utf8.count + 1), ADType.completeLocalName.rawValue] + utf8 }
        var cut = ""
        for ch in name {
            if cut.utf8.count + String(ch).utf8.count > 29 { break }
            cut.append(ch)
        }
        let b = Array(cut.utf8)
        return [UInt8(b.count + 1), ADType.shortenedLocalName.rawValue] + b
    }
}
