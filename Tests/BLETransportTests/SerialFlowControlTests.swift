// RTS/CTS by default where a UART needs it: on-board UARTs and USB-serial bridges (Zephyr's hci_uart and the
// Raspberry Pi's controller run with hardware flow control), not USB CDC ACM ports or pseudo-terminals;
// BLE_SERIAL_FLOW overrides; links such as /dev/serial0 are judged by the device they name.
import Foundation
import Testing
import BLETransportLinux

@Suite struct SerialFlowControlTests {
    @Test func defaultsByKindOfPort() {
        let none: [String: String] = [:]
        for p in ["/dev/ttyAMA0", "/dev/ttyS1", "/dev/ttyTHS1", "/dev/ttymxc0", "/dev/ttyUSB0"] {
            #expect(SerialPort.defaultFlowControl(path: p, environment: none), "\(p)")
        }
        for p in ["/dev/ttyACM0", "/dev/pts/3", "/tmp/ocb-pty"] {
            #expect(!SerialPort.defaultFlowControl(path: p, environment: none), "\(p)")
        }
        #expect(!SerialPort.defaultFlowControl(path: "/dev/ttyAMA0", environment: ["BLE_SERIAL_FLOW": "none"]))
        #expect(SerialPort.defaultFlowControl(path: "/dev/ttyACM0", environment: ["BLE_SERIAL_FLOW": "rtscts"]))
    }

    @Test func aLinkIsJudgedByItsDevice() throws {
        let dir = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("ocb-serial-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let serial0 = dir.appendingPathComponent("serial0").path
        try FileManager.default.createSymbolicLink(atPath: serial0, withDestinationPath: "ttyAMA0")
        #expect(SerialPort.defaultFlowControl(path: serial0, environment: [:]))
        let byID = dir.appendingPathComponent("usb-SEGGER_J-Link-if00").path
        try FileManager.default.createSymbolicLink(atPath: byID, withDestinationPath: "/dev/ttyACM0")
        #expect(!SerialPort.defaultFlowControl(path: byID, environment: [:]))
    }
}
