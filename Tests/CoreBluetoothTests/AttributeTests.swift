// The attribute hierarchy: mutable services, characteristics and descriptors, peers and requests.
import CoreBluetooth
import Foundation
import Testing

@Suite struct AttributeTests {
    @Test func mutableServiceProperties() {
        let service = CBMutableService(type: CBUUID(string: "180D"), primary: true)
        #expect(service.uuid == CBUUID(string: "180D"))
        #expect(service.isPrimary)
        #expect(service.characteristics == nil)
        #expect(service.includedServices == nil)
        let c = CBMutableCharacteristic(type: CBUUID(string: "2A37"), properties: [.notify], value: nil, permissions: [])
        service.characteristics = [c]
        #expect(service.characteristics?.first === c)
        let secondary = CBMutableService(type: CBUUID(string: "FFF0"), primary: false)
        #expect(!secondary.isPrimary)
        service.includedServices = [secondary]
        #expect(service.includedServices?.count == 1)
        service.characteristics = nil
        #expect(service.characteristics == nil)
        // A CBMutableService is a CBService.
        let base: CBService = service
        #expect(base.includedServices?.first === secondary)
    }

    @Test func mutableCharacteristicValueIsCopied() {
        var bytes = Data([1, 2, 3])
        let c = CBMutableCharacteristic(type: CBUUID(string: "2A19"), properties: [.read], value: bytes, permissions: [.readable])
        bytes[0] = 9
        #expect(c.value == Data([1, 2, 3]))
        var read = c.value!
        read[1] = 7
        #expect(c.value == Data([1, 2, 3]))
        c.value = Data([4])
        #expect(c.value == Data([4]))
        let base: CBCharacteristic = c
        #expect(base.value == Data([4]))
        c.value = nil
        #expect(base.value == nil)
    }

    @Test func mutableCharacteristicSettableMembers() {
        let c = CBMutableCharacteristic(
            type: CBUUID(string: "FFF1"), properties: [.read, .write], value: nil,
            permissions: [.readable, .writeable])
        #expect(c.properties == [.read, .write])
        #expect(c.permissions == [.readable, .writeable])
        #expect(c.subscribedCentrals == nil)
        #expect(!c.isNotifying)
        #expect(c.descriptors == nil)
        #expect(c.service == nil)
        c.properties = [.notify]
        c.permissions = [.readEncryptionRequired]
        #expect(c.properties == .notify && c.permissions == .readEncryptionRequired)
        let d = CBMutableDescriptor(type: CBUUID(string: CBUUIDCharacteristicUserDescriptionString), value: "Level")
        c.descriptors = [d]
        #expect(c.descriptors?.first === d)
    }

    @Test func cachedValueMustBeReadOnlyToPublish() {
        let ok = CBMutableCharacteristic(type: CBUUID(string: "2A29"), properties: [.read], value: Data("ACME".utf8), permissions: [.readable])
        #expect(ok.publicationProblem == nil)
        let dynamic = CBMutableCharacteristic(
            type: CBUUID(string: "FFF1"), properties: [.read, .write, .notify], value: nil,
            permissions: [.readable, .writeable])
        #expect(dynamic.publicationProblem == nil)
        let writable = CBMutableCharacteristic(type: CBUUID(string: "FFF2"), properties: [.read, .write], value: Data([1]), permissions: [.readable, .writeable])
        #expect(writable.publicationProblem == "Characteristics with cached values must be read-only")
        let notifying = CBMutableCharacteristic(type: CBUUID(string: "FFF3"), properties: [.read, .notify], value: Data([1]), permissions: [.readable])
        #expect(notifying.publicationProblem == "Characteristics with cached values must be read-only")
        let writePermission = CBMutableCharacteristic(type: CBUUID(string: "FFF4"), properties: [.read], value: Data([1]), permissions: [.readable, .writeable])
        #expect(writePermission.publicationProblem != nil)
        for forbidden in [CBCharacteristicProperties.broadcast, .extendedProperties] {
            let c = CBMutableCharacteristic(type: CBUUID(string: "FFF5"), properties: [.read, forbidden], value: nil, permissions: [.readable])
            #expect(c.publicationProblem != nil)
        }
    }

    @Test func mutableDescriptorSupportedTypes() {
        let user = CBMutableDescriptor(type: CBUUID(string: CBUUIDCharacteristicUserDescriptionString), value: "Heart rate")
        #expect(user.value as? String == "Heart rate")
        #expect(user.uuid.uuidString == "2901")
        #expect(user.publicationProblem == nil)
        let format = Data([0x04, 0x00, 0xAD, 0x27, 0x01, 0x00, 0x00])
        let fmt = CBMutableDescriptor(type: CBUUID(string: CBUUIDCharacteristicFormatString), value: format)
        #expect(fmt.value as? Data == format)
        #expect(fmt.publicationProblem == nil)
        // Long form of a supported UUID is the same type.
        #expect(CBMutableDescriptor.unsupportedTypeProblem(CBUUID(string: "00002901-0000-1000-8000-00805F9B34FB")) == nil)
    }

    @Test func mutableDescriptorUnsupportedTypes() {
        for s in [
            CBUUIDClientCharacteristicConfigurationString, CBUUIDCharacteristicExtendedPropertiesString,
            CBUUIDServerCharacteristicConfigurationString, CBUUIDCharacteristicAggregateFormatString,
            CBUUIDCharacteristicValidRangeString, "FFF0", "E20A39F4-73F5-4BC4-A12F-17D1AD07A961",
        ] {
            #expect(CBMutableDescriptor.unsupportedTypeProblem(CBUUID(string: s)) != nil, "\(s) must be refused")
        }
    }

    @Test func mutableDescriptorValueTypeChecks() {
        let wrongUser = CBMutableDescriptor(type: CBUUID(string: CBUUIDCharacteristicUserDescriptionString), value: Data([1]))
        #expect(wrongUser.publicationProblem != nil)
        let wrongFormat = CBMutableDescriptor(type: CBUUID(string: CBUUIDCharacteristicFormatString), value: "x")
        #expect(wrongFormat.publicationProblem != nil)
        let noValue = CBMutableDescriptor(type: CBUUID(string: CBUUIDCharacteristicUserDescriptionString), value: nil)
        #expect(noValue.publicationProblem != nil)
    }

    @Test func cccdDescriptorTraps() async {
        await #expect(processExitsWith: .failure) {
            _ = CBMutableDescriptor(type: CBUUID(string: CBUUIDClientCharacteristicConfigurationString), value: NSNumber(value: 1))
        }
    }

    @Test func discoveredAttributesAreUpdatedByTheHost() {
        let service = CBService(uuid: CBUUID(string: "180F"), isPrimary: true, handle: 1, endHandle: 5)
        let c = CBCharacteristic(
            uuid: CBUUID(string: "2A19"), properties: [.read, .notify], service: service,
            handle: 2, valueHandle: 3, endHandle: 5)
        let d = CBDescriptor(uuid: CBUUID(string: "2902"), characteristic: c, handle: 4)
        service._characteristics = [c]
        c._descriptors = [d]
        c._value = Data([0x64])
        c._isNotifying = true
        d._value = NSNumber(value: 1)
        #expect(service.characteristics?.first === c)
        #expect(c.service === service)
        #expect(c.value == Data([0x64]))
        #expect(c.isNotifying)
        #expect(c.descriptors?.first === d)
        #expect(d.characteristic === c)
        #expect((d.value as? NSNumber)?.intValue == 1)
        #expect(service.handle == 1 && service.endHandle == 5)
        #expect(c.handle == 2 && c.valueHandle == 3 && c.endHandle == 5 && d.handle == 4)
        // Two services with the same UUID are distinct objects.
        let other = CBService(uuid: CBUUID(string: "180F"), isPrimary: true, handle: 6, endHandle: 9)
        #expect(other !== service && !other.isEqual(service))
    }

    @Test func ownersAreWeak() {
        var service: CBService? = CBService(uuid: CBUUID(string: "180F"), isPrimary: true)
        let c = CBCharacteristic(uuid: CBUUID(string: "2A19"), properties: [.read], service: service)
        #expect(c.service != nil)
        service = nil
        #expect(c.service == nil)
        var owner: NSObject? = NSObject()
        let s = CBService(uuid: CBUUID(string: "180A"), isPrimary: true, peripheral: owner)
        #expect(s.peripheralRef != nil)
        owner = nil
        #expect(s.peripheralRef == nil)
    }

    @Test func peersAndRequests() {
        let id = UUID()
        let central = CBCentral(identifier: id, maximumUpdateValueLength: 182)
        #expect(central.identifier == id)
        #expect(central.maximumUpdateValueLength == 182)
        central._maximumUpdateValueLength = 20
        #expect(central.maximumUpdateValueLength == 20)
        #expect((central.copy() as? CBCentral) === central)
        #expect(CBCentral(identifier: id).maximumUpdateValueLength == 20)

        let c = CBMutableCharacteristic(type: CBUUID(string: "FFF1"), properties: [.read], value: nil, permissions: [.readable])
        let read = CBATTRequest(central: central, characteristic: c, offset: 22, value: nil)
        #expect(read.central === central && read.characteristic === c && read.offset == 22 && read.value == nil)
        read.value = Data([1, 2])
        #expect(read.value == Data([1, 2]))
    }

    @Test func concurrentValueUpdatesAreSafe() async {
        let c = CBMutableCharacteristic(type: CBUUID(string: "FFF1"), properties: [.read], value: nil, permissions: [.readable])
        await withTaskGroup(of: Void.self) { group in
            for i in 0..<8 {
                group.addTask {
                    for j in 0..<500 {
                        c.value = Data([UInt8(i), UInt8(j & 0xFF)])
                        _ = c.value
                        _ = c.properties
                    }
                }
            }
        }
        #expect(c.value?.count == 2)
    }
}
