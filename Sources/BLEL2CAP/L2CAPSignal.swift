// LE signalling channel commands (Vol 3 Part A §4): code (1), identifier (1), length (2), data.
// A C-frame on CID 0x0005 carries exactly one command on LE-U (§4), but decoding accepts several.
import BLEWire

/// Command codes (Vol 3 Part A §4, Table 4.2).
public enum L2CAPSignalCode {
    public static let commandReject: UInt8 = 0x01
    public static let disconnectionRequest: UInt8 = 0x06
    public static let disconnectionResponse: UInt8 = 0x07
    public static let connectionParameterUpdateRequest: UInt8 = 0x12
    public static let connectionParameterUpdateResponse: UInt8 = 0x13
    public static let leCreditBasedConnectionRequest: UInt8 = 0x14
    public static let leCreditBasedConnectionResponse: UInt8 = 0x15
    public static let flowControlCreditIndication: UInt8 = 0x16
    public static let creditBasedConnectionRequest: UInt8 = 0x17
    public static let creditBasedConnectionResponse: UInt8 = 0x18
    public static let creditBasedReconfigureRequest: UInt8 = 0x19
    public static let creditBasedReconfigureResponse: UInt8 = 0x1A
}

public enum L2CAPSignal: Sendable, Equatable {
    /// §4.1. Reason 0x0000 not understood, 0x0001 signalling MTU exceeded, 0x0002 invalid CID; `data` per reason.
    case commandReject(identifier: UInt8, reason: UInt16, data: [UInt8])
    /// §4.6
    case disconnectionRequest(identifier: UInt8, destinationCID: UInt16, sourceCID: UInt16)
    /// §4.7
    case disconnectionResponse(identifier: UInt8, destinationCID: UInt16, sourceCID: UInt16)
    /// §4.20. Intervals in 1.25 ms, timeout in 10 ms units.
    case connectionParameterUpdateRequest(identifier: UInt8, intervalMin: UInt16, intervalMax: UInt16, latency: UInt16, timeout: UInt16)
    /// §4.21. Result 0x0000 accepted, 0x0001 rejected.
    case connectionParameterUpdateResponse(identifier: UInt8, result: UInt16)
    /// §4.22
    case leCreditBasedConnectionRequest(identifier: UInt8, spsm: UInt16, sourceCID: UInt16, mtu: UInt16, mps: UInt16, initialCredits: UInt16)
    /// §4.23
    case leCreditBasedConnectionResponse(identifier: UInt8, destinationCID: UInt16, mtu: UInt16, mps: UInt16, initialCredits: UInt16, result: UInt16)
    /// §4.24
    case flowControlCreditIndication(identifier: UInt8, cid: UInt16, credits: UInt16)
    /// §4.25: up to 5 channels at once (Enhanced Credit Based Flow Control); MTU and MPS at least 64.
    case creditBasedConnectionRequest(identifier: UInt8, spsm: UInt16, mtu: UInt16, mps: UInt16, initialCredits: UInt16, sourceCIDs: [UInt16])
    /// §4.26: one destination CID per requested channel, 0x0000 for each one refused.
    case creditBasedConnectionResponse(identifier: UInt8, mtu: UInt16, mps: UInt16, initialCredits: UInt16, result: UInt16, destinationCIDs: [UInt16])
    /// §4.27: new MTU and MPS for the sender's receiving side of the listed channels (its own CIDs).
    case creditBasedReconfigureRequest(identifier: UInt8, mtu: UInt16, mps: UInt16, destinationCIDs: [UInt16])
    /// §4.28
    case creditBasedReconfigureResponse(identifier: UInt8, result: UInt16)
    case unknown(code: UInt8, identifier: UInt8, data: [UInt8])

    public var code: UInt8 {
        switch self {
        case .commandReject: return L2CAPSignalCode.commandReject
        case .disconnectionRequest: return L2CAPSignalCode.disconnectionRequest
        case .disconnectionResponse: return L2CAPSignalCode.disconnectionResponse
        case .connectionParameterUpdateRequest: return L2CAPSignalCode.connectionParameterUpdateRequest
        case .connectionParameterUpdateResponse: return L2CAPSignalCode.connectionParameterUpdateResponse
        case .leCreditBasedConnectionRequest: return L2CAPSignalCode.leCreditBasedConnectionRequest
        case .leCreditBasedConnectionResponse: return L2CAPSignalCode.leCreditBasedConnectionResponse
        case .flowControlCreditIndication: return L2CAPSignalCode.flowControlCreditIndication
        case .creditBasedConnectionRequest: return L2CAPSignalCode.creditBasedConnectionRequest
        case .creditBasedConnectionResponse: return L2CAPSignalCode.creditBasedConnectionResponse
        case .creditBasedReconfigureRequest: return L2CAPSignalCode.creditBasedReconfigureRequest
        case .creditBasedReconfigureResponse: return L2CAPSignalCode.creditBasedReconfigureResponse
        case let .unknown(c, _, _): return c
        }
    }

    public var identifier: UInt8 {
        switch self {
        case let .commandReject(i, _, _), let .disconnectionRequest(i, _, _), let .disconnectionResponse(i, _, _),
            let .connectionParameterUpdateRequest(i, _, _, _, _), let .connectionParameterUpdateResponse(i, _),
            let .leCreditBasedConnectionRequest(i, _, _, _, _, _), let .leCreditBasedConnectionResponse(i, _, _, _, _, _),
            let .flowControlCreditIndication(i, _, _), let .unknown(_, i, _),
            let .creditBasedConnectionRequest(i, _, _, _, _, _), let .creditBasedConnectionResponse(i, _, _, _, _, _),
            let .creditBasedReconfigureRequest(i, _, _, _), let .creditBasedReconfigureResponse(i, _):
            return i
        }
    }

    public func encode() -> [UInt8] {
        var w = ByteWriter(capacity: 16)
        w.write(code); w.write(identifier); w.write(UInt16(0))
        switch self {
        case let .commandReject(_, reason, data): w.write(reason); w.write(contentsOf: data)
        case let .disconnectionRequest(_, d, s), let .disconnectionResponse(_, d, s): w.write(d); w.write(s)
        case let .connectionParameterUpdateRequest(_, mn, mx, lat, to): w.write(mn); w.write(mx); w.write(lat); w.write(to)
        case let .connectionParameterUpdateResponse(_, result): w.write(result)
        case let .leCreditBasedConnectionRequest(_, spsm, scid, mtu, mps, cr): w.write(spsm); w.write(scid); w.write(mtu); w.write(mps); w.write(cr)
        case let .leCreditBasedConnectionResponse(_, dcid, mtu, mps, cr, result): w.write(dcid); w.write(mtu); w.write(mps); w.write(cr); w.write(result)
        case let .flowControlCreditIndication(_, cid, cr): w.write(cid); w.write(cr)
        case let .creditBasedConnectionRequest(_, spsm, mtu, mps, cr, cids):
            w.write(spsm); w.write(mtu); w.write(mps); w.write(cr); for c in cids { w.write(c) }
        case let .creditBasedConnectionResponse(_, mtu, mps, cr, result, cids):
            w.write(mtu); w.write(mps); w.write(cr); w.write(result); for c in cids { w.write(c) }
        case let .creditBasedReconfigureRequest(_, mtu, mps, cids):
            w.write(mtu); w.write(mps); for c in cids { w.write(c) }
        case let .creditBasedReconfigureResponse(_, result): w.write(result)
        case let .unknown(_, _, data): w.write(contentsOf: data)
        }
        w.patchUInt16(UInt16(w.count - 4), at: 2)
        return w.bytes
    }

    /// Decodes one command from the reader. Known commands must have exactly their length
    /// (Command Reject carries variable data).
    public static func decode(_ r: inout ByteReader) throws -> L2CAPSignal {
        let code = try r.readUInt8()
        let id = try r.readUInt8()
        let length = Int(try r.readUInt16())
        var d = ByteReader(try r.readSlice(length))
        let s: L2CAPSignal
        switch code {
        case L2CAPSignalCode.commandReject:
            s = .commandReject(identifier: id, reason: try d.readUInt16(), data: d.readRemaining())
        case L2CAPSignalCode.disconnectionRequest:
            s = .disconnectionRequest(identifier: id, destinationCID: try d.readUInt16(), sourceCID: try d.readUInt16())
        case L2CAPSignalCode.disconnectionResponse:
            s = .disconnectionResponse(identifier: id, destinationCID: try d.readUInt16(), sourceCID: try d.readUInt16())
        case L2CAPSignalCode.connectionParameterUpdateRequest:
            s = .connectionParameterUpdateRequest(
                identifier: id, intervalMin: try d.readUInt16(), intervalMax: try d.readUInt16(),
                latency: try d.readUInt16(), timeout: try d.readUInt16())
        case L2CAPSignalCode.connectionParameterUpdateResponse:
            s = .connectionParameterUpdateResponse(identifier: id, result: try d.readUInt16())
        case L2CAPSignalCode.leCreditBasedConnectionRequest:
            s = .leCreditBasedConnectionRequest(
                identifier: id, spsm: try d.readUInt16(), sourceCID: try d.readUInt16(), mtu: try d.readUInt16(),
                mps: try d.readUInt16(), initialCredits: try d.readUInt16())
        case L2CAPSignalCode.leCreditBasedConnectionResponse:
            s = .leCreditBasedConnectionResponse(
                identifier: id, destinationCID: try d.readUInt16(), mtu: try d.readUInt16(), mps: try d.readUInt16(),
                initialCredits: try d.readUInt16(), result: try d.readUInt16())
        case L2CAPSignalCode.flowControlCreditIndication:
            s = .flowControlCreditIndication(identifier: id, cid: try d.readUInt16(), credits: try d.readUInt16())
        case L2CAPSignalCode.creditBasedConnectionRequest:
            let spsm = try d.readUInt16(), mtu = try d.readUInt16(), mps = try d.readUInt16(), cr = try d.readUInt16()
            s = .creditBasedConnectionRequest(identifier: id, spsm: spsm, mtu: mtu, mps: mps, initialCredits: cr, sourceCIDs: try readCIDs(&d))
        case L2CAPSignalCode.creditBasedConnectionResponse:
            let mtu = try d.readUInt16(), mps = try d.readUInt16(), cr = try d.readUInt16(), result = try d.readUInt16()
            s = .creditBasedConnectionResponse(identifier: id, mtu: mtu, mps: mps, initialCredits: cr, result: result, destinationCIDs: try readCIDs(&d))
        case L2CAPSignalCode.creditBasedReconfigureRequest:
            let mtu = try d.readUInt16(), mps = try d.readUInt16()
            s = .creditBasedReconfigureRequest(identifier: id, mtu: mtu, mps: mps, destinationCIDs: try readCIDs(&d))
        case L2CAPSignalCode.creditBasedReconfigureResponse:
            s = .creditBasedReconfigureResponse(identifier: id, result: try d.readUInt16())
        default:
            s = .unknown(code: code, identifier: id, data: d.readRemaining())
        }
        try d.expectEnd()
        return s
    }

    /// The CID list that ends the enhanced credit-based commands: 1 to 5 CIDs (§4.25–4.28).
    static func readCIDs(_ d: inout ByteReader) throws -> [UInt16] {
        guard d.remaining % 2 == 0 else { throw WireError.invalidValue("odd CID list length") }
        let n = d.remaining / 2
        guard (1...5).contains(n) else { throw WireError.invalidValue("\(n) CIDs (1 to 5 allowed)") }
        return try (0..<n).map { _ in try d.readUInt16() }
    }

    /// Decodes every command of a C-frame payload.
    public static func decodeAll(_ bytes: [UInt8]) throws -> [L2CAPSignal] {
        var r = ByteReader(bytes)
        var out: [L2CAPSignal] = []
        while !r.isAtEnd { out.append(try decode(&r)) }
        return out
    }
}
