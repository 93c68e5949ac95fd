// How long LE packets take on the air, and how much data a connection can move (Core Spec Vol 6 Part B).
//
// Packet durations (§2.1, §2.2): on the uncoded PHYs a packet is preamble (1 octet on LE 1M, 2 on LE 2M),
// access address (4), PDU header (2), payload, MIC (4, when encrypted) and CRC (3), at 1 µs (1M) or 0.5 µs
// (2M) per bit. On LE Coded the preamble takes 80 µs, FEC block 1 (access address, coding indicator,
// TERM1: 37 bits) is always coded S=8 (296 µs), and FEC block 2 (PDU, CRC, TERM2) is coded S=2 or S=8.
// Packets in a connection event alternate central → peripheral, peripheral → central, separated by
// T_IFS = 150 µs (§4.1.1); the receiver acknowledges with its next packet, empty when it has nothing to
// send (§4.5.6); More Data keeps the event open (§4.5.6) while the event length allows, and the last
// packet must end at least T_IFS before the next anchor point (§4.5.1).
//
// Checked against published measurements of a real controller: Nordic's S132/S140 SoftDevice
// Specification ("Bluetooth Low Energy data throughput") gives, for GATT notifications with ATT_MTU 247,
// LE Data Length 251, connection interval = event length = 50 ms: 702.8 kbit/s on LE 1M and 1327.5 kbit/s
// on LE 2M. The specification-ideal model (every exchange that fits before the next anchor) gives 780.8
// (+11 %) and 1366.4 (+2.9 %): the controller keeps part of each event for its own scheduling. With that
// reserve as a parameter (`controllerReserveMicroseconds`, 3.6 ms fitted for the SoftDevice:
// `AirtimeModel.nordicSoftDevice`) the model gives 702.7 and 1288.3 kbit/s (0 %, −3.0 %). One reserve fitted
// to two points is a calibration, not an independent check; figures at other intervals extrapolate it.
import BLETransport

/// The LE physical layers (Vol 6 Part A §3.2).
public enum LEPHY: String, Sendable, CaseIterable, Codable {
    case le1M = "1m", le2M = "2m", codedS2 = "coded-s2", codedS8 = "coded-s8"

    /// The HCI PHY code (1 = LE 1M, 2 = LE 2M, 3 = LE Coded).
    public var hciValue: UInt8 {
        switch self {
        case .le1M: return 1
        case .le2M: return 2
        case .codedS2, .codedS8: return 3
        }
    }
}

/// A connection's timing on the air.
public struct AirtimeModel: Sendable, Equatable {
    public var phy: LEPHY
    /// Maximum LL data PDU payload (LE Data Length), 27…251 octets.
    public var dataLength: Int
    /// Connection interval in microseconds (7.5 ms … 4 s).
    public var connectionIntervalMicroseconds: Double
    /// Connection event length; nil lets the event run to the next anchor (event length extension).
    public var eventLengthMicroseconds: Double?
    /// Links encrypted with AES-CCM carry a 4-octet MIC in every non-empty PDU.
    public var encrypted: Bool
    /// Probability that a data packet is lost (then sent again in the next exchange).
    public var lossRate: Double
    /// Time at the end of every connection event that the controller keeps for itself (scheduling, radio
    /// set-up); 0 is the specification's ideal.
    public var controllerReserveMicroseconds: Double = 0

    /// Nordic's SoftDevice, fitted to its published throughput (see the top of this file).
    public static func nordicSoftDevice(phy: LEPHY, dataLength: Int, connectionIntervalMilliseconds: Double) -> AirtimeModel {
        var m = AirtimeModel(phy: phy, dataLength: dataLength, connectionIntervalMilliseconds: connectionIntervalMilliseconds)
        m.controllerReserveMicroseconds = 3600
        return m
    }

    public static let interFrameSpace: Double = 150   // T_IFS, µs

    public init(
        phy: LEPHY = .le1M, dataLength: Int = 27, connectionIntervalMilliseconds: Double = 7.5,
        eventLengthMilliseconds: Double? = nil, encrypted: Bool = false, lossRate: Double = 0
    ) {
        self.phy = phy
        self.dataLength = min(max(dataLength, 27), 251)
        self.connectionIntervalMicroseconds = connectionIntervalMilliseconds * 1000
        self.eventLengthMicroseconds = eventLengthMilliseconds.map { $0 * 1000 }
        self.encrypted = encrypted
        self.lossRate = min(max(lossRate, 0), 0.99)
    }

    /// Airtime of one LL data packet with `payload` octets (0 for an empty packet), in µs (Vol 6 Part B §2).
    public func packetDuration(payload: Int) -> Double {
        let mic = encrypted && payload > 0 ? 4 : 0
        let pduBits = Double(8 * (2 + payload + mic))
        switch phy {
        case .le1M: return Double(8 * (1 + 4 + 3)) + pduBits   // preamble, AA, CRC + PDU, 1 µs/bit
        case .le2M: return (Double(8 * (2 + 4 + 3)) + pduBits) / 2   // 0.5 µs/bit
        case .codedS2, .codedS8:
            let s: Double = phy == .codedS2 ? 2 : 8
            return 80 + 296 + (pduBits + 24 + 3) * s   // preamble, FEC block 1, FEC block 2
        }
    }

    /// One exchange: our packet, T_IFS, the peer's acknowledging packet, T_IFS.
    public func exchangeDuration(payload: Int, reply: Int = 0) -> Double {
        packetDuration(payload: payload) + Self.interFrameSpace + packetDuration(payload: reply) + Self.interFrameSpace
    }

    var eventBudget: Double {
        min(eventLengthMicroseconds ?? connectionIntervalMicroseconds, connectionIntervalMicroseconds - controllerReserveMicroseconds)
    }

    /// LL payloads carrying one ATT notification or Write Command of `attPayload` octets (L2CAP header 4,
    /// ATT header 3), cut at the data length.
    public func fragments(attPayload: Int) -> [Int] {
        var left = attPayload + 7
        var out: [Int] = []
        while left > 0 {
            out.append(min(left, dataLength))
            left -= dataLength
        }
        return out
    }

    /// The most application data a one-way stream of `attPayload`-octet notifications (or Write Commands)
    /// can move, in octets per second, with no loss: every event filled with exchanges as long as the
    /// next one (and T_IFS after it) fits before the event ends.
    public func theoreticalThroughput(attPayload: Int) -> Double {
        let frags = fragments(attPayload: attPayload)
        // Simulate enough intervals for the fragment pattern to average out.
        let intervals = 64
        var sentFragments = 0
        for _ in 0..<intervals {
            var elapsed = 0.0
            while true {
                let size = frags[sentFragments % frags.count]
                let d = exchangeDuration(payload: size)
                guard elapsed + d <= eventBudget else { break }
                elapsed += d
                sentFragments += 1
            }
        }
        let pdus = Double(sentFragments / frags.count) + Double(sentFragments % frags.count) / Double(frags.count)
        let seconds = Double(intervals) * connectionIntervalMicroseconds / 1_000_000
        return pdus * Double(attPayload) / seconds
    }

    /// The link's own ceiling: LL payload octets per second when every event is filled with full-length
    /// data packets (what an L2CAP channel could carry if headers cost nothing).
    public var linkPayloadThroughput: Double {
        theoreticalThroughput(attPayload: dataLength - 7) * Double(dataLength) / Double(dataLength - 7)
    }

    /// The ATT payload that makes the best use of the data length (one full LL PDU): data length − 7.
    public var bestATTPayload: Int { dataLength - 7 }
}
