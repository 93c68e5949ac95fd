// Desired connection latency for a central (CBPeripheralManager.h). A hint only: "Connection latency
// changes are not guaranteed."

public enum CBPeripheralManagerConnectionLatency: Int, Sendable {
    case low = 0
    case medium = 1
    case high = 2
}
