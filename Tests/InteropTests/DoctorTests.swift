// `ble doctor` on a fake sysfs/procfs/dev tree (adapters, rfkill, firmware, bluetoothd, capabilities, serial
// ports), against rootcanal and the diversity controllers (what the controller reports), and against nothing.
import Foundation
import Testing
import TestSupport

/// Runs `ble doctor ARGS` to completion; returns its status and standard output.
func runDoctor(_ args: [String], transport: String?) throws -> (Int32, String) {
    let p = Process()
    p.executableURL = Interop.root.appendingPathComponent(".build/debug/ble")
    p.arguments = ["doctor"] + args
    var env = Interop.environment(["NO_COLOR": "1"])
    env["BLE_TRANSPORT"] = transport
    p.environment = env
    let out = Pipe()
    p.standardOutput = out
    p.standardError = FileHandle.nullDevice
    try p.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return (p.terminationStatus, String(decoding: data, as: UTF8.self))
}

/// A fake machine: two adapters (a Realtek dongle that is soft-blocked and whose firmware failed to load, an
/// Intel one whose firmware is installed), bluetoothd running, no CAP_NET_ADMIN, one serial port.
struct FakeMachine {
    let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("ocb-doctor-\(UUID().uuidString.prefix(8))")
    var sysfs: String { root.appendingPathComponent("sys").path }
    var proc: String { root.appendingPathComponent("proc").path }
    var dev: String { root.appendingPathComponent("dev").path }
    var firmware: String { root.appendingPathComponent("firmware").path }
    var kernelLog: String { root.appendingPathComponent("kmsg").path }

    init() throws {
        func file(_ path: String, _ text: String) throws {
            let u = root.appendingPathComponent(path)
            try FileManager.default.createDirectory(at: u.deletingLastPathComponent(), withIntermediateDirectories: true)
            try text.write(to: u, atomically: true, encoding: .utf8)
        }
        try file("sys/class/bluetooth/hci0/device/modalias", "usb:v0BDAp8771d0200dcE0dsc01dp01icE0isc01ip01in00\n")
        try file("sys/class/bluetooth/hci0/device/uevent", "DEVTYPE=usb_interface\nDRIVER=btusb\n")
        try file("sys/class/bluetooth/hci0/rfkill0/soft", "1\n")
        try file("sys/class/bluetooth/hci0/rfkill0/hard", "0\n")
        try file("sys/class/bluetooth/hci1/device/modalias", "usb:v8087p0026d0002dcE0dsc01dp01icE0isc01ip01in00\n")
        try file("sys/class/bluetooth/hci1/device/uevent", "DRIVER=btusb\n")
        try file("sys/class/bluetooth/hci1/rfkill1/soft", "0\n")
        try file("sys/class/bluetooth/hci1/rfkill1/hard", "0\n")
        try file("proc/412/comm", "bluetoothd\n")
        try file("proc/413/comm", "bash\n")
        try file("proc/self/status", "Name:\tble\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n")
        try file("dev/ttyACM0", "")
        try file("dev/null", "")
        try file("firmware/intel/ibt-0041-0041.sfi", "")
        try file(
            "kmsg",
            """
            Bluetooth: hci0: RTL: examining hci_ver=0a hci_rev=000b lmp_ver=0a lmp_subver=8761
            Bluetooth: hci0: RTL: loading rtl_bt/rtl8761bu_fw.bin
            bluetooth hci0: Direct firmware load for rtl_bt/rtl8761bu_fw.bin failed with error -2
            Bluetooth: hci0: RTL: firmware file rtl_bt/rtl8761bu_fw.bin not found
            Bluetooth: hci1: Found device firmware: intel/ibt-0041-0041.sfi
            """)
    }

    var arguments: [String] { ["--sysfs", sysfs, "--proc", proc, "--dev", dev, "--firmware", firmware, "--kernel-log", kernelLog] }

    func remove() { try? FileManager.default.removeItem(at: root) }
}

@Suite(.serialized, .timeLimit(.minutes(2))) struct DoctorTests {
    @Test func fakeMachineFindingsAndFixes() throws {
        let m = try FakeMachine()
        defer { m.remove() }
        let (status, out) = try runDoctor(m.arguments + ["--no-controller"], transport: nil)
        #expect(status == 0)
        let lines = out.components(separatedBy: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        func after(_ header: String) -> [String] { Array(lines.drop { $0 != header }.dropFirst().prefix { !$0.hasPrefix("hci") && !$0.isEmpty }) }
        let hci0 = after("hci0"), hci1 = after("hci1")
        #expect(hci0.first == "USB 0bda:8771, driver btusb")
        #expect(hci0.contains("rfkill: soft-blocked") && hci0.contains("→ rfkill unblock bluetooth"))
        #expect(hci0.contains { $0.hasPrefix("firmware: missing (kernel log:") && $0.contains("rtl8761bu_fw.bin not found") })
        #expect(hci0.contains("→ install firmware-realtek, then unplug and replug the adapter"))
        #expect(hci0.contains { $0.hasPrefix("up/down: unknown") && $0.contains("bluetoothd holds it") })
        #expect(hci1.first == "USB 8087:0026, driver btusb")
        #expect(hci1.contains("rfkill: not blocked"))
        #expect(hci1.contains("firmware: Intel, \(m.firmware)/intel present"))
        #expect(lines.contains("bluetoothd: running (pid 412)"))
        #expect(lines.contains { $0.hasPrefix("backend that fits: bluez (BLE_TRANSPORT=bluez or bluez:hciN") })
        #expect(lines.contains("HCI user channel (hci-socket:N): not allowed (no CAP_NET_ADMIN)"))
        #expect(lines.contains { $0.hasPrefix("→ run as root, or sudo setcap cap_net_admin+ep ") })
        #expect(lines.contains { $0.hasPrefix("\(m.dev)/ttyACM0 (group ") })
        #expect(!out.contains("Controller"))
    }

    @Test func noAdaptersAndNoDaemon() throws {
        let m = try FakeMachine()
        defer { m.remove() }
        try FileManager.default.removeItem(atPath: m.sysfs + "/class/bluetooth/hci0")
        try FileManager.default.removeItem(atPath: m.sysfs + "/class/bluetooth/hci1")
        try FileManager.default.removeItem(atPath: m.proc + "/412")
        let (_, out) = try runDoctor(m.arguments + ["--no-controller"], transport: nil)
        #expect(out.contains("Adapters (\(m.sysfs)/class/bluetooth)\n  none\n    → plug in a USB dongle"))
        #expect(out.contains("bluetoothd: not running"))
        #expect(out.contains("backend that fits: hci-socket:N (no bluetoothd"))
    }

    /// On rootcanal: what the controller reports, and the features it enables.
    @Test func rootcanalController() throws {
        let m = try FakeMachine()
        defer { m.remove() }
        let rc = try RootCanal()
        defer { rc.stop() }
        let (status, out) = try runDoctor(m.arguments, transport: rc.transport)
        #expect(status == 0, "\(out)")
        let section = out.components(separatedBy: "\n").drop { !$0.hasPrefix("Controller") }.map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(section.first == "Controller (BLE_TRANSPORT=\(rc.transport))")
        #expect(section.contains { $0.hasPrefix("version: Bluetooth ") })
        #expect(section.contains { $0.hasPrefix("manufacturer: ") })
        #expect(section.contains { $0.hasPrefix("address: ") && $0.hasSuffix("— public") })
        #expect(section.contains { $0.hasPrefix("ACL buffers: ") && $0.hasSuffix(" octets") })
        for f in ["LE 2M PHY", "Data Length Extension", "LL privacy", "extended advertising", "L2CAP channels (CoC)", "max connections"] {
            #expect(section.contains { $0.hasPrefix(f) }, "\(f)")
        }
        FileHandle.standardError.write(Data(("ble doctor on rootcanal:\n" + out).utf8))
    }

    /// On the diversity controllers: a 4.0 chip gets every fix, a Zephyr one without a public address shows its
    /// factory address, LE buffer size 0 shows the shared buffers.
    @Test func diversityControllers() async throws {
        // The four controllers start together: each is a Python process, whose start alone takes seconds on a
        // busy machine, and one after the other they outlasted the suite's 2 minutes under stress-ng (sat13).
        async let v40Starting = DiversityController("v40")
        async let zephyrStarting = DiversityController("no-address", ["--zephyr"])
        async let sharedStarting = DiversityController("le-buffer-0")
        async let v5Starting = DiversityController("v5")
        let v40 = try await v40Starting
        defer { v40.stop() }
        let zephyr = try await zephyrStarting
        defer { zephyr.stop() }
        let shared = try await sharedStarting
        defer { shared.stop() }
        let v5 = try await v5Starting
        defer { v5.stop() }
        let (s1, out1) = try runDoctor(["--sysfs", "/nonexistent", "--timeout", "10"], transport: "tcp-client:127.0.0.1:\(v40.port)")
        #expect(s1 == 0)
        #expect(out1.contains("version: Bluetooth 4.0 (HCI 6"))
        let lines1 = out1.components(separatedBy: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        func feature(_ lines: [String], _ name: String) -> (String, String?)? {
            guard let i = lines.firstIndex(where: { $0.hasPrefix(name) }) else { return nil }
            return (lines[i], i + 1 < lines.count && lines[i + 1].hasPrefix("→") ? lines[i + 1] : nil)
        }
        #expect(feature(lines1, "LE 2M PHY")?.0.hasSuffix("no — links stay on LE 1M") == true)
        #expect(feature(lines1, "LE 2M PHY")?.1 == "→ a Bluetooth 5 controller doubles the air rate")
        #expect(feature(lines1, "Data Length Extension")?.1 == "→ a Bluetooth 4.2 or later controller")
        #expect(feature(lines1, "extended advertising")?.1 == "→ a Bluetooth 5 controller with LE Extended Advertising")
        #expect(lines1.contains("CBCentralManager.supports(.extendedScanAndConnect): false"))
        let (_, out2) = try runDoctor(["--sysfs", "/nonexistent", "--timeout", "10"], transport: "tcp-client:127.0.0.1:\(zephyr.port)")
        #expect(out2.contains("manufacturer: The Linux Foundation (Zephyr) (0x05F1)"))
        #expect(out2.contains("address: C6:55:44:33:22:11 — static random (the controller's factory address, Zephyr vendor command)"))
        let (_, out3) = try runDoctor(["--sysfs", "/nonexistent", "--timeout", "10"], transport: "tcp-client:127.0.0.1:\(shared.port)")
        #expect(out3.contains("ACL buffers: 4 × 310 octets (shared with BR/EDR"))
        let (_, out4) = try runDoctor(["--sysfs", "/nonexistent", "--timeout", "10"], transport: "tcp-client:127.0.0.1:\(v5.port)")
        let lines4 = out4.components(separatedBy: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(feature(lines4, "extended advertising")?.0.contains("yes — CBCentralManager.supports(.extendedScanAndConnect) is true") == true)
        #expect(feature(lines4, "extended advertising")?.1 == nil)
        #expect(lines4.contains("CBCentralManager.supports(.extendedScanAndConnect): true"))
    }

    @Test func unreachableControllerFailsWithTheReason() throws {
        let port = try Interop.freePort()
        let (status, out) = try runDoctor(["--sysfs", "/nonexistent", "--timeout", "3"], transport: "tcp-client:127.0.0.1:\(port)")
        #expect(status == 1)
        #expect(out.contains("not reachable:"))
        #expect(out.contains("→ is the controller (rootcanal, ble radio, Bumble) running and listening there?"))
    }
}
