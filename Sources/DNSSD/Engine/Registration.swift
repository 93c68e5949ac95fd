// One advertised service and its life cycle (RFC 6762 §8, §9, §10.1).
//
//   register ─► waitingToProbe ─► probing(1…3, 250 ms apart) ─► announcing(1…2, 1 s apart) ─► established
//                    ▲                  │ conflict: rename "Name (2)"       │ conflict (§9)        │
//                    └──────────────────┴───────────────────────────────────┴──────────────────────┘
//                    probing ─ lost simultaneous-probe tie-break (§8.2) ─► deferred (1 s) ─► probing
//
// The records (RFC 6763 §4–§6): PTR <type> → <instance> (shared, 4500 s), SRV <instance> (unique, 120 s),
// TXT <instance> (unique, 4500 s), and PTR _services._dns-sd._udp.local. → <type> (shared, §9).

/// TTLs from RFC 6762 §10.
public enum MDNSTTL {
    /// Records that name a host: A, AAAA, SRV.
    public static let hostRecord: UInt32 = 120
    /// Everything else: PTR, TXT.
    public static let other: UInt32 = 4500
}

struct Registration {
    enum State: Equatable {
        /// Waiting the initial random 0–250 ms (§8.1) before the first probe.
        case waitingToProbe(until: MDNSInstant)
        /// `sent` probes have gone out; the next one (or the end of probing) is due at `next`.
        case probing(sent: Int, next: MDNSInstant)
        /// Lost a simultaneous-probe tie-break (§8.2): wait one second, then probe again.
        case deferredAfterTieBreak(until: MDNSInstant)
        /// `sent` announcements have gone out; the next is due at `next` (§8.3).
        case announcing(sent: Int, next: MDNSInstant)
        /// Announced; answering queries and defending the name.
        case established
    }

    static let probeCount = 3
    static let probeInterval: Int64 = 250
    static let announceCount = 2
    static let announceInterval: Int64 = 1000
    /// After this many renames we give up (RFC 6762 §9 expects "Name (2)", "(3)" …; a hundred is plenty).
    static let maxRenames = 100

    let id: RegistrationID
    /// The name the caller asked for.
    let requestedName: String
    /// The last name we reported (requested name until a rename is reported).
    var reportedName: String
    var instanceLabel: String
    let serviceType: DNSName
    let port: UInt16
    let txt: TXTRecord
    var state: State
    var renames = 0
    /// Probing records conflicted this many times in a row without a rename limit reached.
    var conflictsInWindow: [MDNSInstant] = []

    var instanceName: DNSName { (try? serviceType.prepending(instanceLabel)) ?? serviceType }

    /// True once the records may be used to answer (§8.3: after probing).
    var isAnnounced: Bool {
        switch state {
        case .announcing, .established: return true
        case .waitingToProbe, .probing, .deferredAfterTieBreak: return false
        }
    }

    var isProbing: Bool {
        switch state {
        case .probing, .waitingToProbe, .deferredAfterTieBreak: return true
        case .announcing, .established: return false
        }
    }

    /// The unique records (probed and defended): SRV and TXT of the instance.
    func uniqueRecords(host: DNSName) -> [DNSRecord] {
        [
            DNSRecord(
                name: instanceName, type: .srv, cacheFlush: true, ttl: MDNSTTL.hostRecord,
                rdata: .srv(priority: 0, weight: 0, port: port, target: host)),
            DNSRecord(name: instanceName, type: .txt, cacheFlush: true, ttl: MDNSTTL.other, rdata: txt.rdata),
        ]
    }

    /// The shared records: the browse PTR and the service-enumeration PTR (RFC 6763 §9).
    func sharedRecords() -> [DNSRecord] {
        [
            DNSRecord(name: serviceType, type: .ptr, ttl: MDNSTTL.other, rdata: .ptr(instanceName)),
            DNSRecord(name: MDNSEngine.servicesEnumeration, type: .ptr, ttl: MDNSTTL.other, rdata: .ptr(serviceType)),
        ]
    }

    /// The next instance label after a conflict: "Name" → "Name (2)" → "Name (3)" (RFC 6762 §9; RFC 6763 §4.1.1
    /// keeps labels ≤ 63 bytes, so the base is shortened on a character boundary if needed).
    static func nextName(after label: String) -> String {
        var base = label
        var n = 2
        if label.hasSuffix(")"), let open = label.lastIndex(of: "("), open > label.startIndex,
            label[label.index(before: open)] == " ",
            let value = Int(label[label.index(after: open)..<label.index(before: label.endIndex)]), value >= 2
        {
            base = String(label[..<label.index(before: open)])
            n = value + 1
        }
        let suffix = " (\(n))"
        while base.utf8.count + suffix.utf8.count > 63, !base.isEmpty { base.removeLast() }
        return base + suffix
    }

    /// The instant of this registration's next scheduled step, if any.
    var deadline: MDNSInstant? {
        switch state {
        case .waitingToProbe(let t), .deferredAfterTieBreak(let t): return t
        case .probing(_, let t), .announcing(_, let t): return t
        case .established: return nil
        }
    }
}
