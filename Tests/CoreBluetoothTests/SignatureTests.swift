// Source compatibility with Apple's SDK, checked by the compiler itself: a file written against the SDK's
// declarations (importing CoreBluetooth alone) is type-checked with warnings as errors, so a missing
// member, a signature that differs, a result that must be discardable (Objective-C methods are imported
// with @discardableResult) or a non-failable `Code(rawValue:)` fails the test.
import Foundation
import Testing

@Suite(.serialized) struct SignatureTests {
    /// The directory with the package's built modules: next to the test bundle (`.build/<config>/Modules`).
    static var modulesDirectory: String? {
        var candidates: [URL] = []
        let exe = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var dir = exe.deletingLastPathComponent()
        for _ in 0..<4 {
            candidates.append(dir.appendingPathComponent("Modules"))
            dir = dir.deletingLastPathComponent()
        }
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(repo.appendingPathComponent(".build/debug/Modules"))
        return candidates.first { FileManager.default.fileExists(atPath: $0.appendingPathComponent("CoreBluetooth.swiftmodule").path) }?.path
    }

    /// Type-checks `source` against the built CoreBluetooth module; returns the compiler's diagnostics and status.
    /// The compiler runs on a thread of its own, so the test does not hold one of Swift concurrency's few
    /// threads (other tests' timing depends on them) for the second it takes.
    static func typecheck(_ source: String, flags: [String] = []) async throws -> (status: Int32, output: String) {
        try await withCheckedThrowingContinuation { done in
            Thread.detachNewThread {
                done.resume(with: Result { try typecheckBlocking(source, flags: flags) })
            }
        }
    }

    static func typecheckBlocking(_ source: String, flags: [String] = []) throws -> (status: Int32, output: String) {
        guard let modules = modulesDirectory else {
            throw TypecheckSetupError(what: "the built CoreBluetooth module was not found next to the test bundle")
        }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ocb-signature-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("App.swift")
        try source.write(to: file, atomically: true, encoding: .utf8)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments =
            ["swiftc", "-typecheck", "-warnings-as-errors", "-I", modules, "-module-cache-path", dir.appendingPathComponent("mc").path]
            + flags + [file.path]
        let pipe = Pipe()
        p.standardOutput = pipe
        p.standardError = pipe
        try p.run()
        let out = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: out, as: UTF8.self))
    }

    struct TypecheckSetupError: Error, CustomStringConvertible {
        let what: String
        var description: String { what }
    }

    @Test func codeWrittenAgainstTheSDKCompilesWithoutWarnings() async throws {
        let r = try await Self.typecheck(Self.appleSurface, flags: ["-swift-version", "5"])
        #expect(r.status == 0, "\(r.output)")
    }

    /// The check has teeth: an ignored result of a method without @discardableResult is refused.
    @Test func anIgnoredNonDiscardableResultFails() async throws {
        let r = try await Self.typecheck(
            """
            import CoreBluetooth
            func f(_ p: CBPeripheral) { p.services?.count }
            """)
        #expect(r.status != 0)
        #expect(r.output.contains("unused"))
    }

    static let appleSurface = #"""
        // Compiled by SignatureTests with `swiftc -typecheck -warnings-as-errors`: code written against Apple's
        // Core Bluetooth SDK (Swift 5 mode, as most apps are), importing CoreBluetooth alone. Every line uses a
        // member the way the SDK declares it; a missing member, a wrong signature or a warning fails the test.
        import CoreBluetooth

        final class SurfaceCentral: NSObject, CBCentralManagerDelegate, CBPeripheralDelegate {
            var central: CBCentralManager!
            var kept: [CBPeripheral] = []
            let queue = DispatchQueue(label: "surface")

            func start() {
                central = CBCentralManager(delegate: self, queue: queue, options: [
                    CBCentralManagerOptionShowPowerAlertKey: true,
                    CBCentralManagerOptionRestoreIdentifierKey: "surface",
                ])
                let other = CBCentralManager()
                other.delegate = self
                _ = CBCentralManager(delegate: nil, queue: nil)
                let auth: CBManagerAuthorization = CBManager.authorization
                if auth == .denied || auth == .restricted || auth == .notDetermined { return }
                if CBCentralManager.supports(.extendedScanAndConnect) { print("extended") }
                CBCentralManager.supports([])
            }

            func centralManagerDidUpdateState(_ central: CBCentralManager) {
                switch central.state {
                case .poweredOn:
                    central.scanForPeripherals(withServices: [CBUUID(string: "180D")], options: [
                        CBCentralManagerScanOptionAllowDuplicatesKey: NSNumber(value: false),
                        CBCentralManagerScanOptionSolicitedServiceUUIDsKey: [CBUUID(string: "180A")],
                    ])
                case .poweredOff, .resetting, .unauthorized, .unknown, .unsupported: break
                @unknown default: break
                }
                if central.isScanning { central.stopScan() }
                // Results apps ignore: no warning, as with the Objective-C originals.
                central.retrievePeripherals(withIdentifiers: [UUID()])
                central.retrieveConnectedPeripherals(withServices: [CBUUID(string: "180D")])
                central.registerForConnectionEvents(options: [.serviceUUIDs: [CBUUID(string: "180D")], .peripheralUUIDs: [UUID()]])
                central.registerForConnectionEvents(options: nil)
            }

            func centralManager(_ central: CBCentralManager, willRestoreState dict: [String: Any]) {
                let peripherals = dict[CBCentralManagerRestoredStatePeripheralsKey] as? [CBPeripheral] ?? []
                let services = dict[CBCentralManagerRestoredStateScanServicesKey] as? [CBUUID]
                let options = dict[CBCentralManagerRestoredStateScanOptionsKey] as? [String: Any]
                print(peripherals.count, services?.count ?? 0, options?.count ?? 0)
            }

            func centralManager(_ central: CBCentralManager, didDiscover peripheral: CBPeripheral,
                                advertisementData: [String: Any], rssi RSSI: NSNumber) {
                let name = advertisementData[CBAdvertisementDataLocalNameKey] as? String
                let uuids = advertisementData[CBAdvertisementDataServiceUUIDsKey] as? [CBUUID]
                let data = advertisementData[CBAdvertisementDataManufacturerDataKey] as? Data
                let serviceData = advertisementData[CBAdvertisementDataServiceDataKey] as? [CBUUID: Data]
                let tx = advertisementData[CBAdvertisementDataTxPowerLevelKey] as? NSNumber
                let connectable = (advertisementData[CBAdvertisementDataIsConnectable] as? NSNumber)?.boolValue
                let overflow = advertisementData[CBAdvertisementDataOverflowServiceUUIDsKey] as? [CBUUID]
                let solicited = advertisementData[CBAdvertisementDataSolicitedServiceUUIDsKey] as? [CBUUID]
                print(name ?? "", uuids ?? [], data ?? Data(), serviceData ?? [:], tx ?? 0, connectable ?? false, overflow ?? [], solicited ?? [], RSSI.intValue)
                kept.append(peripheral)
                central.connect(peripheral, options: [
                    CBConnectPeripheralOptionNotifyOnConnectionKey: true,
                    CBConnectPeripheralOptionNotifyOnDisconnectionKey: true,
                    CBConnectPeripheralOptionNotifyOnNotificationKey: true,
                    CBConnectPeripheralOptionStartDelayKey: NSNumber(value: 0),
                    CBConnectPeripheralOptionEnableAutoReconnect: true,
                    CBConnectPeripheralOptionEnableTransportBridgingKey: false,
                    CBConnectPeripheralOptionRequiresANCS: false,
                ])
            }

            func centralManager(_ central: CBCentralManager, didConnect peripheral: CBPeripheral) {
                peripheral.delegate = self
                peripheral.discoverServices(nil)
                peripheral.maximumWriteValueLength(for: .withoutResponse)
                let id: UUID = peripheral.identifier
                let state: CBPeripheralState = peripheral.state
                print(id, state == .connected, peripheral.name ?? "", peripheral.canSendWriteWithoutResponse, peripheral.ancsAuthorized)
                peripheral.readRSSI()
            }

            func centralManager(_ central: CBCentralManager, didFailToConnect peripheral: CBPeripheral, error: Error?) {
                if let e = error as? CBError, e.code == .connectionFailed || e.code == .connectionTimeout { return }
            }

            func centralManager(_ central: CBCentralManager, didDisconnectPeripheral peripheral: CBPeripheral,
                                timestamp: CFAbsoluteTime, isReconnecting: Bool, error: Error?) {
                if !isReconnecting { central.cancelPeripheralConnection(peripheral) }
            }

            func centralManager(_ central: CBCentralManager, connectionEventDidOccur event: CBConnectionEvent, for peripheral: CBPeripheral) {
                print(event == .peerConnected || event == .peerDisconnected)
            }

            func centralManager(_ central: CBCentralManager, didUpdateANCSAuthorizationFor peripheral: CBPeripheral) {}

            func peripheral(_ peripheral: CBPeripheral, didDiscoverServices error: Error?) {
                for service in peripheral.services ?? [] {
                    print(service.isPrimary, service.uuid.uuidString, service.peripheral?.identifier ?? UUID())
                    peripheral.discoverIncludedServices(nil, for: service)
                    peripheral.discoverCharacteristics([CBUUID(string: "2A37")], for: service)
                }
            }

            func peripheral(_ peripheral: CBPeripheral, didDiscoverIncludedServicesFor service: CBService, error: Error?) {
                print(service.includedServices?.count ?? 0)
            }

            func peripheral(_ peripheral: CBPeripheral, didDiscoverCharacteristicsFor service: CBService, error: Error?) {
                for c in service.characteristics ?? [] {
                    if c.properties.contains(.notify) { peripheral.setNotifyValue(true, for: c) }
                    if c.properties.contains(.read) { peripheral.readValue(for: c) }
                    if c.properties.contains(.writeWithoutResponse), peripheral.canSendWriteWithoutResponse {
                        peripheral.writeValue(Data([1]), for: c, type: .withoutResponse)
                    }
                    peripheral.discoverDescriptors(for: c)
                    print(c.isNotifying, c.value ?? Data(), c.descriptors?.count ?? 0)
                }
            }

            func peripheral(_ peripheral: CBPeripheral, didDiscoverDescriptorsFor characteristic: CBCharacteristic, error: Error?) {
                for d in characteristic.descriptors ?? [] where d.uuid == CBUUID(string: CBUUIDCharacteristicUserDescriptionString) {
                    peripheral.readValue(for: d)
                    print(d.characteristic?.uuid ?? CBUUID(string: "2902"), d.value as? String ?? "")
                }
            }

            func peripheral(_ peripheral: CBPeripheral, didUpdateValueFor characteristic: CBCharacteristic, error: Error?) {
                // characteristic.service?.peripheral: real libraries walk back up this way.
                guard let owner = characteristic.service?.peripheral else { return }
                if let error = error as? CBATTError {
                    guard let code = CBATTError.Code(rawValue: error.errorCode) else { return }
                    if code == .insufficientAuthentication || error.code == .insufficientEncryption { return }
                }
                if let raw = (error as NSError?)?.code, let code = CBError.Code(rawValue: raw), code == .peripheralDisconnected { return }
                owner.writeValue(characteristic.value ?? Data(), for: characteristic, type: .withResponse)
            }

            func peripheral(_ peripheral: CBPeripheral, didWriteValueFor characteristic: CBCharacteristic, error: Error?) {}
            func peripheral(_ peripheral: CBPeripheral, didUpdateNotificationStateFor characteristic: CBCharacteristic, error: Error?) {}
            func peripheral(_ peripheral: CBPeripheral, didUpdateValueFor descriptor: CBDescriptor, error: Error?) {}
            func peripheral(_ peripheral: CBPeripheral, didWriteValueFor descriptor: CBDescriptor, error: Error?) {}
            func peripheralIsReady(toSendWriteWithoutResponse peripheral: CBPeripheral) {}
            func peripheralDidUpdateName(_ peripheral: CBPeripheral) {}
            func peripheral(_ peripheral: CBPeripheral, didModifyServices invalidatedServices: [CBService]) {}
            func peripheral(_ peripheral: CBPeripheral, didReadRSSI RSSI: NSNumber, error: Error?) {}
            func peripheral(_ peripheral: CBPeripheral, didOpen channel: CBL2CAPChannel?, error: Error?) {
                guard let channel else { return }
                let psm: CBL2CAPPSM = channel.psm
                print(psm, channel.peer.identifier, channel.inputStream != nil, channel.outputStream != nil)
                peripheral.openL2CAPChannel(psm)
            }
        }

        final class SurfacePeripheral: NSObject, CBPeripheralManagerDelegate {
            var manager: CBPeripheralManager!
            let characteristic = CBMutableCharacteristic(type: CBUUID(string: "2A37"), properties: [.notify, .read],
                                                         value: nil, permissions: [.readable, .readEncryptionRequired])

            func start() {
                manager = CBPeripheralManager(delegate: self, queue: nil, options: [
                    CBPeripheralManagerOptionShowPowerAlertKey: true,
                    CBPeripheralManagerOptionRestoreIdentifierKey: "surface",
                ])
                _ = CBPeripheralManager()
                _ = CBPeripheralManager(delegate: self, queue: DispatchQueue.main)
            }

            func peripheralManagerDidUpdateState(_ peripheral: CBPeripheralManager) {
                guard peripheral.state == .poweredOn else { return }
                let service = CBMutableService(type: CBUUID(string: "180D"), primary: true)
                let described = CBMutableDescriptor(type: CBUUID(string: CBUUIDCharacteristicUserDescriptionString), value: "Heart rate")
                characteristic.descriptors = [described]
                service.characteristics = [characteristic]
                service.includedServices = []
                peripheral.add(service)
                peripheral.startAdvertising([CBAdvertisementDataLocalNameKey: "Surface",
                                             CBAdvertisementDataServiceUUIDsKey: [service.uuid]])
                peripheral.publishL2CAPChannel(withEncryption: false)
            }

            func peripheralManager(_ peripheral: CBPeripheralManager, willRestoreState dict: [String: Any]) {
                print(dict[CBPeripheralManagerRestoredStateServicesKey] as? [CBMutableService] ?? [],
                      dict[CBPeripheralManagerRestoredStateAdvertisementDataKey] as? [String: Any] ?? [:])
            }

            func peripheralManager(_ peripheral: CBPeripheralManager, didAdd service: CBService, error: Error?) {}
            func peripheralManagerDidStartAdvertising(_ peripheral: CBPeripheralManager, error: Error?) {
                if peripheral.isAdvertising { peripheral.stopAdvertising() }
            }

            func peripheralManager(_ peripheral: CBPeripheralManager, central: CBCentral, didSubscribeTo characteristic: CBCharacteristic) {
                // The Bool apps ignore (Apple's "Transferring Data" sample does): no warning.
                peripheral.updateValue(Data([0, 72]), for: self.characteristic, onSubscribedCentrals: [central])
                peripheral.updateValue(Data([0, 72]), for: self.characteristic, onSubscribedCentrals: nil)
                peripheral.setDesiredConnectionLatency(.low, for: central)
                print(central.maximumUpdateValueLength, central.identifier, self.characteristic.subscribedCentrals?.count ?? 0)
            }

            func peripheralManager(_ peripheral: CBPeripheralManager, central: CBCentral, didUnsubscribeFrom characteristic: CBCharacteristic) {}

            func peripheralManager(_ peripheral: CBPeripheralManager, didReceiveRead request: CBATTRequest) {
                guard request.offset <= 2 else { return peripheral.respond(to: request, withResult: .invalidOffset) }
                request.value = Data([0, 72]).subdata(in: request.offset..<2)
                peripheral.respond(to: request, withResult: .success)
            }

            func peripheralManager(_ peripheral: CBPeripheralManager, didReceiveWrite requests: [CBATTRequest]) {
                guard let first = requests.first else { return }
                print(first.central.identifier, first.characteristic.uuid, first.value ?? Data())
                peripheral.respond(to: first, withResult: .writeNotPermitted)
            }

            func peripheralManagerIsReady(toUpdateSubscribers peripheral: CBPeripheralManager) {}
            func peripheralManager(_ peripheral: CBPeripheralManager, didPublishL2CAPChannel PSM: CBL2CAPPSM, error: Error?) {
                peripheral.unpublishL2CAPChannel(PSM)
            }
            func peripheralManager(_ peripheral: CBPeripheralManager, didUnpublishL2CAPChannel PSM: CBL2CAPPSM, error: Error?) {}
            func peripheralManager(_ peripheral: CBPeripheralManager, didOpen channel: CBL2CAPChannel?, error: Error?) {}

            func stop() {
                manager.removeAllServices()
                let copy = CBUUID(string: "180D").copy()
                print(copy, CBUUID(data: Data([0x0D, 0x18])).data, CBUUID(nsuuid: UUID()).uuidString)
                print(CBErrorDomain, CBATTErrorDomain, CBError.errorDomain, CBATTError.errorDomain)
                print(CBAttributePermissions.writeable, CBCharacteristicProperties.indicateEncryptionRequired)
                print(CBUUIDClientCharacteristicConfigurationString, CBUUIDL2CAPPSMCharacteristicString, CBUUIDCharacteristicFormatString)
                CFAbsoluteTimeGetCurrent()
            }
        }
        """#
}
