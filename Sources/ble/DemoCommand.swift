// `ble demo`: the seeds' heart-rate example, a peripheral and a central as two devices on the virtual
// radio in one process, written with nothing but the Core Bluetooth API.
import ArgumentParser
import Foundation
import CoreBluetooth

struct DemoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo", abstract: "Run the heart-rate example: a peripheral and a central talking over the virtual radio.")

    @Option(help: "How many heart-rate notifications the central waits for (1…1000; the demo gives up after 30 s).")
    var notifications = 5

    func validate() throws {
        guard (1...1000).contains(notifications) else { throw ValidationError("--notifications must be 1…1000") }
    }

    func run() throws {
        // The example itself uses nothing but Core Bluetooth; the controller is checked first, so that one
        // that cannot be opened fails with its reason instead of a state of .unsupported.
        if Controller.needsCheck { Controller.close(try Controller.open(name: "demo-check")) }
        let demo = HeartRateDemo(notificationsWanted: notifications)
        demo.start()
        dispatchMain()
    }
}

/// Prints one step of the demo, prefixed by who did it.
func step(_ who: String, _ text: String) {
    print("[\(who)] \(text)")
    fflush(nil)
}

final class HeartRateDemo: @unchecked Sendable {
    let peripheral: HeartRatePeripheral
    let central: HeartRateMonitor

    init(notificationsWanted: Int) {
        peripheral = HeartRatePeripheral()
        central = HeartRateMonitor(notificationsWanted: notificationsWanted) { code in Foundation.exit(code) }
    }

    func start() {
        peripheral.start()
        central.start()
        // A safety net: the demo never hangs.
        DispatchQueue.main.asyncAfter(deadline: .now() + 30) {
            step("demo", "timed out")
            Foundation.exit(1)
        }
    }
}
