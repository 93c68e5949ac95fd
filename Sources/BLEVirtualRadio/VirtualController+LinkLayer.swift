// Advertising events, scanning and connection establishment on the simulated air (Vol 6 Part B §4.4).
//
// Each advertising event happens every advInterval + advDelay (0–10 ms, §4.4.2.2). At each event, every
// other controller that is initiating a connection to this advertiser connects (if the advertising is
// connectable), and every scanning controller gets an advertising report, plus a scan response when it
// scans actively and the advertising is scannable.
import Foundation
import BLEWire
import BLEHCI
import BLETransport

extension VirtualController {
    var ownAddress: BluetoothAddress {
        if advertisingParameters.ownAddressType & 1 == 1, let r = randomAddress { return r }
        return address
    }

    func scheduleAdvertisingEvent(first: Bool) {
        let units = UInt64(advertisingParameters.advertisingIntervalMin)
        let interval = units * 625_000
        guard let air = airRef else { return }
        let delay = air.rng.next(below: 10_000_001)
        // The first event comes soon after enabling, as real controllers do.
        let wait = first ? min(interval, 5_000_000) + delay / 10 : interval + delay
        advertisingTimer = loop.schedule(after: wait) { [weak self] in
            guard let self, self.advertising, self.isPoweredOn else { return }
            self.advertisingEvent()
            if self.advertising { self.scheduleAdvertisingEvent(first: false) }
        }
    }

    var reportType: LEAdvertisingReportType {
        switch advertisingParameters.advertisingType {
        case .connectableUndirected: return .advInd
        case .scannableUndirected: return .advScanInd
        case .nonConnectableUndirected: return .advNonconnInd
        default: return .advDirectInd
        }
    }

    var isConnectableAdvertising: Bool {
        let t = advertisingParameters.advertisingType
        return t == .connectableUndirected || t == .connectableDirectedHighDuty || t == .connectableDirectedLowDuty
    }

    var isScannableAdvertising: Bool {
        let t = advertisingParameters.advertisingType
        return t == .connectableUndirected || t == .scannableUndirected
    }

    func advertisingEvent() {
        guard let air = airRef else { return }
        let me = ownAddress
        let myType: UInt8 = me.type.isRandom ? 1 : 0
        for other in air.initiators where other !== self && other.isPoweredOn && air.delivers(from: self, to: other) {
            if let target = other.initiating, isConnectableAdvertising, other.initiates(to: me, type: myType, with: target) {
                connect(initiator: other, parameters: target)
                return   // advertising stopped with the connection
            }
        }
        for other in air.scanners where other !== self && other.isPoweredOn && other.scanning {
            guard air.delivers(from: self, to: other) else { continue }
            let rssi = air.rssi(from: self, to: other)
            other.report(LEAdvertisingReport(eventType: reportType, addressType: myType, address: me, data: advertisingData, rssi: rssi))
            if other.scanParameters.scanType == .active && isScannableAdvertising {
                other.report(LEAdvertisingReport(eventType: .scanRsp, addressType: myType, address: me, data: scanResponseData, rssi: rssi))
            }
        }
    }

    /// Whether an initiator with these parameters connects to an advertiser at `address`: the peer it names,
    /// or with filter policy 1 any device on its filter accept list not already connected to it.
    func initiates(to address: BluetoothAddress, type: UInt8, with p: LECreateConnection) -> Bool {
        if p.initiatorFilterPolicy == 1 {
            guard filterAcceptList.contains(where: { $0.bytes == address.bytes && ($0.type.isRandom ? 1 : 0) == type }) else { return false }
            return !links.values.contains { $0.peer?.address.bytes == address.bytes && !$0.lost }
        }
        return p.peerAddress.bytes == address.bytes && (p.peerAddressType & 1) == type
    }

    /// Delivers a report, applying duplicate filtering (Vol 4 Part E §7.8.11).
    func report(_ r: LEAdvertisingReport) {
        if filterDuplicates {
            let key = r.address.bytes + [r.addressType, r.eventType.rawValue]
            guard reportedDuplicates.insert(key).inserted else { return }
        }
        deliver(.le(.advertisingReport([r])))
    }

    /// The initiator caught our connectable advertising: both sides enter the connection state.
    func connect(initiator: VirtualController, parameters p: LECreateConnection) {
        initiator.initiating = nil
        advertising = false
        loop.cancel(advertisingTimer)
        advertisingTimer = nil
        let ch = initiator.allocateHandle()
        let ph = allocateHandle()
        let central = VirtualLink(
            handle: ch, role: 0, peer: self, peerHandle: ph, interval: p.connectionIntervalMax,
            latency: p.maxLatency, timeout: p.supervisionTimeout)
        let peripheral = VirtualLink(
            handle: ph, role: 1, peer: initiator, peerHandle: ch, interval: p.connectionIntervalMax,
            latency: p.maxLatency, timeout: p.supervisionTimeout)
        central.timed = airRef?.airtime != nil
        peripheral.timed = central.timed
        initiator.links[ch] = central
        links[ph] = peripheral
        let me = ownAddress
        let initiatorAddress = p.ownAddressType & 1 == 1 ? (initiator.randomAddress ?? initiator.address) : initiator.address
        initiator.sendConnectionComplete(
            status: .success, handle: ch, role: 0, peer: me, interval: p.connectionIntervalMax,
            latency: p.maxLatency, timeout: p.supervisionTimeout)
        sendConnectionComplete(
            status: .success, handle: ph, role: 1, peer: initiatorAddress, interval: p.connectionIntervalMax,
            latency: p.maxLatency, timeout: p.supervisionTimeout)
        initiator.startConnectionEvents(central)
    }

    func allocateHandle() -> UInt16 {
        while links[nextHandle] != nil { nextHandle = nextHandle >= 0x0EFF ? 0x0040 : nextHandle + 1 }
        let h = nextHandle
        nextHandle = nextHandle >= 0x0EFF ? 0x0040 : nextHandle + 1
        return h
    }

    /// LE Enhanced Connection Complete when the host unmasked it, else LE Connection Complete (§7.7.65.10).
    func sendConnectionComplete(
        status: HCIStatus, handle: UInt16, role: UInt8, peer: BluetoothAddress,
        interval: UInt16, latency: UInt16, timeout: UInt16
    ) {
        let peerType: UInt8 = peer.type.isRandom ? 1 : 0
        if leEventMask & (1 << 9) != 0 {
            deliver(
                .le(
                    .enhancedConnectionComplete(
                        LEEnhancedConnectionComplete(
                            status: status, connectionHandle: handle, role: role, peerAddressType: peerType, peerAddress: peer,
                            connectionInterval: interval, peripheralLatency: latency, supervisionTimeout: timeout, centralClockAccuracy: 0))))
        } else {
            deliver(
                .le(
                    .connectionComplete(
                        LEConnectionComplete(
                            status: status, connectionHandle: handle, role: role, peerAddressType: peerType, peerAddress: peer,
                            connectionInterval: interval, peripheralLatency: latency, supervisionTimeout: timeout, centralClockAccuracy: 0))))
        }
    }
}
