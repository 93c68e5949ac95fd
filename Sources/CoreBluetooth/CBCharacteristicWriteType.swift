// The kind of characteristic write (CBPeripheral.h). Apple's raw values, not Android's.

public enum CBCharacteristicWriteType: Int, Sendable {
    /// ATT Write Request: the peripheral answers, and `peripheral(_:didWriteValueFor:error:)` follows.
    case withResponse = 0
    /// ATT Write Command: no answer and no callback.
    case withoutResponse = 1
}
