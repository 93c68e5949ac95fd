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

    @Option(
        help:
            "Which side runs in this process: both (the default), central or peripheral (one per machine or controller, e.g. the central on BLE_TRANSPORT=bluez and the peripheral on hci-socket:1)."
    )
    var role: Role = .both

    @Option(help: "Seconds before the demo gives up (1…600).")
    var timeout = 30

    enum Role: String, ExpressibleByArgument { case both, central, peripheral }

    func validate() throws {
        guard (1...1000).contains(notifications) else { throw ValidationError("--notifications must be 1…1000") }
        guard (1...600).contains(timeout) else { throw ValidationError("--timeout must be 1…600") }
    }

    func run() throws {
        // The example itself uses nothing but Core Bluetooth; the controller is checked first, so that one
        // that cannot be opened fails with its reason instead of a state of .unsupported.
        if Controller.needsCheck { Controller.close(try Controller.open(name: "demo-check")) }
        let demo = HeartRateDemo(notificationsWanted: notifications, role: role, timeout: timeout)
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
    let peripheral: HeartRatePeripheral?
    let central: HeartRateMonitor?
    let timeout: Int

    init(notificationsWanted: Int, role: DemoCommand.Role = .both, timeout: Int = 30) {
        peripheral = role == .central ? nil : HeartRatePeripheral()
        central = role == .peripheral ? nil : HeartRateMonitor(notificationsWanted: notificationsWanted) { code in Foundation.exit(code) }
        self.timeout = timeout
    }

    func start() {
        peripheral?.start()
        central?.start()
        // A safety net: the demo never hangs.
        DispatchQueue.main.asyncAfter(deadline: .now() + .seconds(timeout)) {
            step("demo", "timed out")
            Foundation.exit(1)
        }
    }
}
