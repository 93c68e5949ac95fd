// Legacy or extended: the GAP commands for this controller. A controller that supports extended advertising
// (LE feature bit 12 and the commands, ControllerInfo.supportsExtendedAdvertising) gets only the extended
// advertising, scanning and initiating commands for the whole session, as a 5.x controller refuses to mix
// them (Vol 4 Part E §3.1.1, Vol 6 Part B §4.4.2.10); other controllers get only the legacy ones. Extended
// scanning reports devices that advertise with extended PDUs only (longer data, a secondary PHY), and
// LE Extended Create Connection connects to them.
import BLEWire
import BLEHCI

extension LEHost {
    /// Advertising handle of the one set the host uses.
    static let advertisingHandle: UInt8 = 0

    // MARK: Scanning

    func scanParametersCommand(active: Bool, interval: UInt16, window: UInt16) -> HCICommand {
        let type: LEScanType = active ? .active : .passive
        guard usesExtendedAdvertising else {
            return .leSetScanParameters(
                LESetScanParameters(
                    scanType: type, scanInterval: interval, scanWindow: window,
                    ownAddressType: ownAddressType, scanningFilterPolicy: 0))
        }
        // LE 1M, and LE Coded when the controller has it (long-range advertisers use it as primary PHY).
        var phys: UInt8 = 0x01
        var list = [LEExtendedScanPHY(scanType: type, scanInterval: interval, scanWindow: window)]
        if controllerInfoSnapshot.withLock({ $0?.supportsLECoded }) == true {
            phys |= 0x04
            list.append(LEExtendedScanPHY(scanType: type, scanInterval: interval, scanWindow: window))
        }
        return .leSetExtendedScanParameters(LESetExtendedScanParameters(ownAddressType: ownAddressType, scanningPHYs: phys, phys: list))
    }

    func scanEnableCommand(_ on: Bool, filterDuplicates: Bool = false) -> HCICommand {
        usesExtendedAdvertising
            ? .leSetExtendedScanEnable(enable: on, filterDuplicates: filterDuplicates ? 1 : 0, duration: 0, period: 0)
            : .leSetScanEnable(enable: on, filterDuplicates: filterDuplicates)
    }

    // MARK: Advertising

    func advertisingEnableCommand(_ on: Bool) -> HCICommand {
        usesExtendedAdvertising
            ? .leSetExtendedAdvertisingEnable(enable: on, sets: [LEExtendedAdvertisingSet(advertisingHandle: Self.advertisingHandle)])
            : .leSetAdvertisingEnable(on)
    }

    /// The longest advertising data `startAdvertising` accepts on this controller.
    public var maximumAdvertisingDataLength: Int {
        guard usesExtendedAdvertising else { return 31 }
        return Int(controllerInfoSnapshot.withLock { $0?.maxAdvertisingDataLength } ?? 31)
    }

    /// The commands that configure advertising for `config` (everything but the enable), or why it cannot be done.
    func advertisingSetupCommands(_ config: AdvertisingConfiguration) -> Result<[HCICommand], HostError> {
        let fitsLegacy = config.data.count <= 31 && config.scanResponse.count <= 31
        guard usesExtendedAdvertising else {
            guard fitsLegacy else { return .failure(.invalidParameters("legacy advertising data is limited to 31 bytes")) }
            let params = LESetAdvertisingParameters(
                advertisingIntervalMin: config.interval, advertisingIntervalMax: config.interval,
                advertisingType: config.connectable ? .connectableUndirected : (config.scanResponse.isEmpty ? .nonConnectableUndirected : .scannableUndirected),
                ownAddressType: ownAddressType, peerAddressType: 0, peerAddress: BluetoothAddress.zero,
                advertisingChannelMap: 0x07, advertisingFilterPolicy: 0)
            return .success([.leSetAdvertisingParameters(params), .leSetAdvertisingData(config.data), .leSetScanResponseData(config.scanResponse)])
        }
        // Legacy PDUs through the extended commands while the data fits them (every scanner sees those);
        // extended PDUs for more, which are connectable or scannable but not both (Vol 4 Part E §7.8.53).
        var properties: LEAdvertisingEventProperties
        if fitsLegacy {
            properties = config.connectable ? [.legacy, .connectable, .scannable] : (config.scanResponse.isEmpty ? [.legacy] : [.legacy, .scannable])
        } else {
            guard config.data.count <= maximumAdvertisingDataLength else {
                return .failure(.invalidParameters("advertising data is limited to \(maximumAdvertisingDataLength) bytes on this controller"))
            }
            guard config.scanResponse.isEmpty else {
                return .failure(.invalidParameters("extended advertising (data over 31 bytes) takes no scan response"))
            }
            properties = config.connectable ? [.connectable] : []
        }
        let params = LESetExtendedAdvertisingParameters(
            advertisingHandle: Self.advertisingHandle, eventProperties: properties, primaryIntervalMin: UInt32(config.interval),
            primaryIntervalMax: UInt32(config.interval), ownAddressType: ownAddressType)
        var commands: [HCICommand] = [.leSetExtendedAdvertisingParameters(params)]
        // A set's random address is its own (§7.8.52); LE Set Random Address does not reach it.
        if ownAddressType == 1, let a = currentPrivateAddress {
            commands.append(.leSetAdvertisingSetRandomAddress(handle: Self.advertisingHandle, address: a))
        }
        commands += LESetExtendedAdvertisingData.fragments(handle: Self.advertisingHandle, data: config.data).map { .leSetExtendedAdvertisingData($0) }
        if properties.contains(.scannable) {
            commands += LESetExtendedAdvertisingData.fragments(handle: Self.advertisingHandle, data: config.scanResponse)
                .map { .leSetExtendedScanResponseData($0) }
        }
        return .success(commands)
    }

    // MARK: Connecting

    func createConnectionCommand(_ p: LECreateConnection) -> HCICommand {
        usesExtendedAdvertising ? .leExtendedCreateConnection(LEExtendedCreateConnection(p)) : .leCreateConnection(p)
    }

    // MARK: Reports

    /// Extended Advertising Reports (§7.7.65.13): data that spans several reports (Data_Status 1) is put back
    /// together per advertiser and set; at most 16 advertisers and 1,650 octets each are held at once.
    func handleExtendedReports(_ reports: [LEExtendedAdvertisingReport]) {
        if followedPrivateTarget != nil {
            for r in reports where r.eventType.contains(.connectable) {
                followPrivateTarget(seenAt: BluetoothAddress(bytes: r.address.bytes, type: AddressType(rawValue: r.addressType) ?? .public))
            }
        }
        guard isScanning, let d = centralDelegate else { return }
        for r in reports {
            let key = "\(r.address.bytes)\(r.addressType)/\(r.advertisingSID)/\(r.eventType.contains(.scanResponse))"
            var data = r.data
            if let earlier = advertisingReassembly.removeValue(forKey: key) { data = earlier + data }
            if r.eventType.dataStatus == 1 {
                if data.count <= 1650 {
                    if advertisingReassembly.count >= 16 { advertisingReassembly.removeAll() }
                    advertisingReassembly[key] = data
                }
                continue
            }
            let t = r.eventType
            let kind: AdvertisingReport.Kind =
                t.contains(.scanResponse)
                ? .scanResponse
                : t.contains(.connectable)
                    ? (t.contains(.directed) ? .connectableDirected : .connectableUndirected)
                    : t.contains(.scannable) ? .scannableUndirected : .nonConnectable
            let addr = BluetoothAddress(bytes: r.address.bytes, type: AddressType(rawValue: r.addressType) ?? .public)
            d.host(self, didReceive: AdvertisingReport(kind: kind, address: addr, data: data, rssi: r.rssi))
        }
    }
}
