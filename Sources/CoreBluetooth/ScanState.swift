// The central's scan bookkeeping (host loop only): service filters, duplicate coalescing, and the merge
// of advertising data with scan responses into Core Bluetooth's advertisement dictionary.
import Foundation
import BLEWire
import BLEHost

struct ScanState {
    let services: Set<BluetoothUUID>?
    let solicited: Set<BluetoothUUID>
    let allowDuplicates: Bool

    /// What is known about each advertiser during this scan.
    struct Seen {
        var advertisingData: [UInt8]?
        var scanResponse: [UInt8]?
        var connectable = false
        var reported = false
        var reportedWithScanResponse = false
    }
    var seen: [BluetoothAddress: Seen] = [:]
    static let maximumTracked = 4096

    init(services: Set<BluetoothUUID>?, solicited: Set<BluetoothUUID>, allowDuplicates: Bool) {
        self.services = services
        self.solicited = solicited
        self.allowDuplicates = allowDuplicates
    }

    struct Decision {
        var advertisement: [String: Any]
    }

    /// Folds a report in; returns what to announce, or nil when the report is filtered or a duplicate.
    mutating func accept(_ report: AdvertisingReport) -> Decision? {
        // Bounded: a long scan among rotating private addresses meets a new address every few minutes per
        // device. Past the bound everything is forgotten at once; the cost is one repeated discovery per
        // device still around, which iOS's own duplicate filter also gives over long scans.
        if seen.count >= Self.maximumTracked, seen[report.address] == nil { seen.removeAll(keepingCapacity: true) }
        var s = seen[report.address] ?? Seen()
        if report.kind == .scanResponse {
            s.scanResponse = report.data
        } else {
            s.advertisingData = report.data
            s.connectable = report.isConnectable
        }
        seen[report.address] = s
        // A scan response alone (its advertisement lost) is not a discovery.
        guard let adv = s.advertisingData else { return nil }
        let fields = AdvertisementFields(advertisingData: adv, scanResponse: s.scanResponse)
        if let services {
            let advertised = Set(fields.serviceUUIDs + fields.overflowServiceUUIDs)
            let solicitedMatch = !solicited.isEmpty && !solicited.isDisjoint(with: fields.solicitedServiceUUIDs)
            guard !services.isDisjoint(with: advertised) || solicitedMatch else { return nil }
        } else if !solicited.isEmpty {
            // No service filter: everything is reported anyway.
        }
        if !allowDuplicates {
            let hasScanResponse = s.scanResponse != nil
            if s.reported && (s.reportedWithScanResponse || !hasScanResponse) { return nil }
            s.reported = true
            s.reportedWithScanResponse = hasScanResponse
            seen[report.address] = s
        }
        return Decision(advertisement: fields.dictionary(connectable: s.connectable))
    }
}
