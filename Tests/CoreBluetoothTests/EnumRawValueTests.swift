// Raw values of every Core Bluetooth enum and option set, against the conformance checklist §2.
import CoreBluetooth
import Testing

@Suite struct EnumRawValueTests {
    @Test func managerState() {
        let expected: [(CBManagerState, Int)] = [
            (.unknown, 0), (.resetting, 1), (.unsupported, 2), (.unauthorized, 3), (.poweredOff, 4), (.poweredOn, 5),
        ]
        for (state, raw) in expected {
            #expect(state.rawValue == raw)
            #expect(CBManagerState(rawValue: raw) == state)
        }
        #expect(CBManagerState(rawValue: 6) == nil)
    }

    @Test func managerAuthorization() {
        let expected: [(CBManagerAuthorization, Int)] = [(.notDetermined, 0), (.restricted, 1), (.denied, 2), (.allowedAlways, 3)]
        for (auth, raw) in expected {
            #expect(auth.rawValue == raw)
            #expect(CBManagerAuthorization(rawValue: raw) == auth)
        }
    }

    @available(*, deprecated)
    @Test func deprecatedStatesMatchManagerState() {
        for raw in 0...5 {
            #expect(CBCentralManagerState(rawValue: raw)?.rawValue == CBManagerState(rawValue: raw)?.rawValue)
            #expect(CBPeripheralManagerState(rawValue: raw)?.rawValue == CBManagerState(rawValue: raw)?.rawValue)
        }
        #expect(CBCentralManagerState.poweredOn.rawValue == 5)
        #expect(CBPeripheralManagerState.unauthorized.rawValue == 3)
        let expected: [(CBPeripheralManagerAuthorizationStatus, Int)] = [(.notDetermined, 0), (.restricted, 1), (.denied, 2), (.authorized, 3)]
        for (status, raw) in expected { #expect(status.rawValue == raw) }
    }

    @Test func peripheralState() {
        #expect(CBPeripheralState.disconnected.rawValue == 0)
        #expect(CBPeripheralState.connecting.rawValue == 1)
        #expect(CBPeripheralState.connected.rawValue == 2)
        #expect(CBPeripheralState.disconnecting.rawValue == 3)
    }

    @Test func writeTypeKeepsApplesValuesNotAndroids() {
        #expect(CBCharacteristicWriteType.withResponse.rawValue == 0)
        #expect(CBCharacteristicWriteType.withoutResponse.rawValue == 1)
        #expect(CBCharacteristicWriteType(rawValue: 2) == nil)
    }

    @Test func connectionEventAndLatency() {
        #expect(CBConnectionEvent.peerDisconnected.rawValue == 0)
        #expect(CBConnectionEvent.peerConnected.rawValue == 1)
        #expect(CBPeripheralManagerConnectionLatency.low.rawValue == 0)
        #expect(CBPeripheralManagerConnectionLatency.medium.rawValue == 1)
        #expect(CBPeripheralManagerConnectionLatency.high.rawValue == 2)
    }

    @Test func characteristicPropertiesBits() {
        let expected: [(CBCharacteristicProperties, UInt)] = [
            (.broadcast, 0x01), (.read, 0x02), (.writeWithoutResponse, 0x04), (.write, 0x08), (.notify, 0x10),
            (.indicate, 0x20), (.authenticatedSignedWrites, 0x40), (.extendedProperties, 0x80),
            (.notifyEncryptionRequired, 0x100), (.indicateEncryptionRequired, 0x200),
        ]
        for (flag, raw) in expected { #expect(flag.rawValue == raw) }
        let all = expected.reduce(into: CBCharacteristicProperties()) { $0.insert($1.0) }
        #expect(all.rawValue == 0x3FF)
        let readNotify: CBCharacteristicProperties = [.read, .notify]
        #expect(readNotify.rawValue == 0x12)
        #expect(readNotify.contains(.notify) && !readNotify.contains(.indicate))
    }

    @Test func attributePermissionsBits() {
        #expect(CBAttributePermissions.readable.rawValue == 0x01)
        #expect(CBAttributePermissions.writeable.rawValue == 0x02)
        #expect(CBAttributePermissions.readEncryptionRequired.rawValue == 0x04)
        #expect(CBAttributePermissions.writeEncryptionRequired.rawValue == 0x08)
        #expect(([.readable, .writeable] as CBAttributePermissions).rawValue == 0x03)
    }

    @Test func centralManagerFeature() {
        #expect(CBCentralManagerFeature.extendedScanAndConnect.rawValue == 1)
    }
}
