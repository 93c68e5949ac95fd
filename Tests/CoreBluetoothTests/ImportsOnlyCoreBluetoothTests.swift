// This file imports CoreBluetooth and nothing else from the SDK: Foundation and Dispatch types must still
// be in scope, as real iOS code expects (issue 15).
import CoreBluetooth
import Testing

final class OnlyCoreBluetooth: NSObject, CBCentralManagerDelegate {
    let id = UUID()
    var payload = Data([1, 2, 3])
    let queue = DispatchQueue(label: "only.corebluetooth")
    func centralManagerDidUpdateState(_ central: CBCentralManager) {}
}

@Suite struct ImportsOnlyCoreBluetoothTests {
    @Test func foundationAndDispatchComeWithCoreBluetooth() {
        let o = OnlyCoreBluetooth()
        #expect(o.payload.count == 3 && NSNumber(value: 3).intValue == 3)
        #expect(o.queue.sync { 7 } == 7)
    }
}
