// Snippets written the way iOS apps use these types; they must compile unchanged and behave as on iOS.
import CoreBluetooth
import Foundation
import Testing

@Suite struct SourceCompatibilityTests {
    /// A heart-rate peripheral set up as in Apple's sample code.
    @Test func peripheralSetupSnippet() {
        let heartRateServiceUUID = CBUUID(string: "180D")
        let measurementUUID = CBUUID(string: "2A37")
        let measurement = CBMutableCharacteristic(type: measurementUUID, properties: [.notify], value: nil, permissions: [])
        let location = CBMutableCharacteristic(
            type: CBUUID(string: "2A38"), properties: .read,
            value: Data([1]), permissions: .readable)
        let userDescription = CBMutableDescriptor(
            type: CBUUID(string: CBUUIDCharacteristicUserDescriptionString),
            value: "Body Sensor Location")
        location.descriptors = [userDescription]
        let service = CBMutableService(type: heartRateServiceUUID, primary: true)
        service.characteristics = [measurement, location]
        let advertisement: [String: Any] = [
            CBAdvertisementDataLocalNameKey: "HRM",
            CBAdvertisementDataServiceUUIDsKey: [heartRateServiceUUID],
        ]
        #expect((advertisement[CBAdvertisementDataServiceUUIDsKey] as? [CBUUID])?.first == CBUUID(string: "0000180D-0000-1000-8000-00805F9B34FB"))
        #expect(service.characteristics?.map(\.uuid) == [measurementUUID, CBUUID(string: "2A38")])
        #expect(location.descriptors?.first?.uuid.uuidString == "2901")
    }

    /// Central-side checks apps commonly write.
    @Test func centralSnippets() {
        func describe(_ state: CBManagerState) -> String {
            switch state {
            case .poweredOn: return "on"
            case .poweredOff, .resetting, .unauthorized, .unsupported, .unknown: return "not on"
            @unknown default: return "future"
            }
        }
        #expect(describe(.poweredOn) == "on")
        #expect(describe(.resetting) == "not on")
        let properties: CBCharacteristicProperties = [.read, .notify, .indicate]
        let writeType: CBCharacteristicWriteType = properties.contains(.writeWithoutResponse) ? .withoutResponse : .withResponse
        #expect(writeType == .withResponse)
        let serviceData: [CBUUID: Data] = [CBUUID(string: "FEAA"): Data([0x10])]
        #expect(serviceData[CBUUID(string: "0000FEAA")] == Data([0x10]))
        let scanOptions: [String: Any] = [CBCentralManagerScanOptionAllowDuplicatesKey: NSNumber(value: true)]
        #expect((scanOptions[CBCentralManagerScanOptionAllowDuplicatesKey] as? NSNumber)?.boolValue == true)
    }

    /// Error handling the way apps write it.
    @Test func errorHandlingSnippets() {
        func disconnectReason(_ error: Error?) -> String {
            guard let error else { return "cancelled" }
            if let cbError = error as? CBError {
                switch cbError.code {
                case .peripheralDisconnected: return "remote"
                case .connectionTimeout: return "timeout"
                default: return "cb \(cbError.code.rawValue)"
                }
            }
            if error.localizedDescription == "The specified device has disconnected from us." { return "remote (text)" }
            return "other"
        }
        #expect(disconnectReason(nil) == "cancelled")
        #expect(disconnectReason(CBError(.peripheralDisconnected)) == "remote")
        #expect(disconnectReason(CBError(.connectionTimeout)) == "timeout")
        #expect(disconnectReason(CBError(.connectionFailed)) == "cb 10")
        let nsError: Error = CBError(.peripheralDisconnected) as NSError
        #expect(disconnectReason(nsError) == "remote (text)")
        let attError: Error = CBATTError(.insufficientAuthentication)
        if let att = attError as? CBATTError, att.code == .insufficientAuthentication || att.code == .insufficientEncryption {
            #expect((attError as NSError).code == 5)
        } else {
            Issue.record("CBATTError did not cast back")
        }
    }
}
