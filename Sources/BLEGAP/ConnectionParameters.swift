// Connection parameter ranges (Vol 4 Part E §7.8.12; Vol 3 Part A §4.20).

public enum ConnectionParameters {
    /// Interval in 1.25 ms units (6…3200), latency 0…499, supervision timeout in 10 ms units (10…3200), and the
    /// timeout longer than (1 + latency) × interval × 2.
    public static func isValid(minInterval: UInt16, maxInterval: UInt16, latency: UInt16, supervisionTimeout: UInt16) -> Bool {
        guard (0x0006...0x0C80).contains(minInterval), (0x0006...0x0C80).contains(maxInterval), minInterval <= maxInterval,
            latency <= 0x01F3, (0x000A...0x0C80).contains(supervisionTimeout)
        else { return false }
        // timeout × 10 ms > (1 + latency) × maxInterval × 1.25 ms × 2, in units of 0.25 ms: 40·t > 10·(1+l)·i
        return Int(supervisionTimeout) * 40 > (1 + Int(latency)) * Int(maxInterval) * 10
    }
}
