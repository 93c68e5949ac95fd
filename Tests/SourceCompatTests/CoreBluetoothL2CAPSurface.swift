// Core Bluetooth's L2CAP channels and error matching as an iOS app writes them, only from Apple's Swift
// declarations (../shared/conformance/api-audit-mc-gk.md §3; each line names its row). The rest of Core
// Bluetooth is checked by Tests/CoreBluetoothTests/SignatureTests.swift.
import CoreBluetooth

final class AppChannelCentral: NSObject, CBPeripheralDelegate {
    var channel: CBL2CAPChannel?
    func open(_ peripheral: CBPeripheral, psm: CBL2CAPPSM) {   // 7
        peripheral.delegate = self
        peripheral.openL2CAPChannel(psm)   // 8
    }
    func peripheral(_ peripheral: CBPeripheral, didOpen channel: CBL2CAPChannel?, error: Error?) {   // 9
        guard let channel = channel, error == nil else { return }
        self.channel = channel
        let _: CBPeer = channel.peer   // 2
        channel.inputStream.open()   // 3
        channel.outputStream.open()   // 4
        let _: CBL2CAPPSM = channel.psm   // 5
    }
}

final class AppChannelPeripheral: NSObject, CBPeripheralManagerDelegate {
    var channels: [CBL2CAPChannel] = []
    func peripheralManagerDidUpdateState(_ peripheral: CBPeripheralManager) {
        if peripheral.state == .poweredOn { peripheral.publishL2CAPChannel(withEncryption: false) }   // 10
    }
    func peripheralManager(_ peripheral: CBPeripheralManager, didPublishL2CAPChannel PSM: CBL2CAPPSM, error: Error?) {   // 12
        let _: String = CBUUIDL2CAPPSMCharacteristicString   // 15
    }
    func peripheralManager(_ peripheral: CBPeripheralManager, didUnpublishL2CAPChannel PSM: CBL2CAPPSM, error: Error?) {}   // 13
    func peripheralManager(_ peripheral: CBPeripheralManager, didOpen channel: CBL2CAPChannel?, error: Error?) {   // 14
        if let channel = channel { channels.append(channel) }
    }
    func stop(_ peripheral: CBPeripheralManager, psm: CBL2CAPPSM) { peripheral.unpublishL2CAPChannel(psm) }   // 11
}

/// Row 6: a test double, as iOS apps' tests make them (`init()` inherited from NSObject).
final class FakeChannel: CBL2CAPChannel, @unchecked Sendable {   // restated: this package's channel is Sendable
    override var psm: CBL2CAPPSM { 0x0080 }
}

enum CoreBluetoothSurface {
    static func blankChannel() -> CBL2CAPChannel { CBL2CAPChannel() }   // 1, 6

    /// `catch CBError.x` / `catch CBATTError.x`, as Foundation's bridged errors allow on Apple platforms.
    static func matches(_ error: Error) -> String {
        do { throw error } catch CBError.peripheralDisconnected {
            return "peripheralDisconnected"
        } catch CBError.connectionTimeout {
            return "connectionTimeout"
        } catch CBATTError.insufficientEncryption {
            return "insufficientEncryption"
        } catch let e as CBError {
            return "CBError \(e.code.rawValue)"
        } catch {
            return "other"
        }
    }
}
