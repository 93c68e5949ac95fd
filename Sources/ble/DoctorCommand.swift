// `ble doctor`: what works on this machine and what to do about what does not. It lists the adapters the
// kernel knows (/sys/class/bluetooth): bus and vendor, driver, whether each is up, whether bluetoothd is
// running (it holds every adapter that is up: the HCI user channel then fails with EBUSY), rfkill blocks,
// firmware the chip needs and whether the kernel log says it failed to load; then whether this process may
// open the HCI user channel (CAP_NET_ADMIN) and the serial ports (their group); then it opens the
// controller BLE_TRANSPORT names and prints its version, manufacturer, address kind, buffers and the Core
// Bluetooth features it enables, each with the fix for what is missing.
//
// Every root it reads is an option (`--sysfs`, `--proc`, `--dev`, `--firmware`, `--kernel-log`), so tests run
// it on a fake tree. Exit status: 0 when the chosen controller came up (or none was asked for), 1 otherwise.
import ArgumentParser
import Foundation
import BLEWire
import BLEHCI
import BLEHost
import CoreBluetooth
import BLETransport

struct DoctorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor", abstract: "Check adapters, permissions and the controller BLE_TRANSPORT names, and say how to fix what is missing.")

    @Option(help: "The sysfs root (a fake tree in tests).")
    var sysfs = "/sys"
    @Option(help: "The procfs root.")
    var proc = "/proc"
    @Option(help: "The directory of device nodes.")
    var dev = "/dev"
    @Option(help: "The firmware directory.")
    var firmware = "/lib/firmware"
    @Option(help: "A kernel log to read instead of /dev/kmsg.")
    var kernelLog: String?
    @Flag(help: "Only the system checks: do not open the controller.")
    var noController = false
    @Option(help: "Seconds to wait for the controller (a reset may take several).")
    var timeout: Double = 20

    func run() throws {
        let system = DoctorSystem(sysfs: sysfs, proc: proc, dev: dev, firmware: firmware, kernelLog: kernelLog)
        for line in system.report() { say(line) }
        guard !noController else { return }
        say("")
        if try !Doctor.checkController(timeout: timeout) { throw ExitCode(1) }
    }
}

/// A finding and, when something is missing, what to do.
struct DoctorLine {
    var text: String
    var fix: String?
    func render(indent: String) -> [String] {
        let lead = String(text.prefix { $0 == " " })
        return [indent + text] + (fix.map { [indent + lead + "  → " + $0] } ?? [])
    }
}

/// Firmware a controller family needs from the host, and where Debian has it.
struct FirmwareNeed {
    let family: String
    let directory: String
    let package: String

    static func forUSBVendor(_ v: UInt16) -> FirmwareNeed? {
        switch v {
        case 0x0BDA: return FirmwareNeed(family: "Realtek", directory: "rtl_bt", package: "firmware-realtek")
        case 0x8087: return FirmwareNeed(family: "Intel", directory: "intel", package: "firmware-iwlwifi")
        case 0x0A5C, 0x0B05, 0x413C:
            return FirmwareNeed(
                family: "Broadcom", directory: "brcm",
                package: "none in Debian for USB dongles (convert the Windows driver's .hex with hex2hcd: wiki.debian.org/BCMHybridBTFirmware); Raspberry Pi OS: bluez-firmware")
        case 0x0CF3, 0x0489: return FirmwareNeed(family: "Qualcomm Atheros", directory: "qca", package: "firmware-atheros")
        case 0x0E8D: return FirmwareNeed(family: "MediaTek", directory: "mediatek", package: "firmware-misc-nonfree")
        default: return nil
        }
    }

    /// From the manufacturer in Read Local Version Information (Bluetooth company identifiers).
    static func forManufacturer(_ id: UInt16) -> FirmwareNeed? {
        switch id {
        case 0x005D: return forUSBVendor(0x0BDA)
        case 0x0002: return forUSBVendor(0x8087)
        case 0x000F, 0x0131, 0x0009: return forUSBVendor(0x0A5C)
        case 0x001D, 0x000A: return forUSBVendor(0x0CF3)
        case 0x0046: return forUSBVendor(0x0E8D)
        default: return nil
        }
    }
}

/// The system half of the doctor: adapters, daemon, permissions. Reads only files under its roots.
struct DoctorSystem {
    let sysfs: String
    let proc: String
    let dev: String
    let firmware: String
    let kernelLog: String?
    private var fm: FileManager { .default }

    func read(_ path: String) -> String? {
        (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Process ids of running bluetoothd.
    func bluetoothd() -> [Int] {
        ((try? fm.contentsOfDirectory(atPath: proc)) ?? []).compactMap { entry in
            guard let pid = Int(entry), read("\(proc)/\(entry)/comm") == "bluetoothd" else { return nil }
            return pid
        }.sorted()
    }

    /// Kernel log lines: the given file, else /dev/kmsg when readable (root, or kernel.dmesg_restrict = 0).
    func kernelLines() -> [String]? {
        if let kernelLog { return read(kernelLog)?.components(separatedBy: "\n") }
        let fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var lines: [String] = []
        var buf = [UInt8](repeating: 0, count: 8192)
        while lines.count < 20_000 {
            let n = Glibc.read(fd, &buf, buf.count)
            if n < 0 { if errno == EPIPE { continue }; break }
            if n == 0 { break }
            let record = String(decoding: buf[0..<n], as: UTF8.self)
            lines.append(String(record.split(separator: ";", maxSplits: 1).last ?? ""))
        }
        return lines
    }

    /// The USB vendor (and product) of an adapter from its modalias (usb:vXXXXpYYYY…).
    func usbIDs(_ adapter: String) -> (vendor: UInt16, product: UInt16)? {
        guard let m = read("\(adapter)/device/modalias"), m.hasPrefix("usb:v"), m.count >= 14 else { return nil }
        let s = Array(m)
        guard let v = UInt16(String(s[5..<9]), radix: 16), let p = UInt16(String(s[10..<14]), radix: 16) else { return nil }
        return (v, p)
    }

    func driver(_ adapter: String) -> String? {
        if let link = try? fm.destinationOfSymbolicLink(atPath: "\(adapter)/device/driver") { return (link as NSString).lastPathComponent }
        return read("\(adapter)/device/uevent")?.components(separatedBy: "\n").first { $0.hasPrefix("DRIVER=") }.map { String($0.dropFirst(7)) }
    }

    /// HCI_UP from the kernel (HCIGETDEVINFO on an HCI socket); nil when it cannot be asked (not the real
    /// sysfs, or no Bluetooth sockets here).
    func isUp(index: Int) -> Bool? {
        guard sysfs == "/sys" else { return nil }
        let fd = socket(31 /* AF_BLUETOOTH */, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 1 /* BTPROTO_HCI */)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = [UInt8](repeating: 0, count: 92)   // struct hci_dev_info
        info[0] = UInt8(index & 0xFF); info[1] = UInt8(index >> 8)
        // ioctl is variadic, which Swift cannot call; its three-argument form through dlsym is the same call.
        typealias Ioctl = @convention(c) (Int32, UInt, UnsafeMutableRawPointer?) -> Int32
        guard let sym = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "ioctl") else { return nil }
        let ioctl3 = unsafeBitCast(sym, to: Ioctl.self)
        let rc = info.withUnsafeMutableBytes { ioctl3(fd, 0x800448D3 /* HCIGETDEVINFO */, $0.baseAddress) }
        guard rc == 0 else { return nil }
        return info[16] & 1 != 0   // flags bit 0: HCI_UP
    }

    func report() -> [String] {
        var out: [String] = []
        let classDir = "\(sysfs)/class/bluetooth"
        let adapters = ((try? fm.contentsOfDirectory(atPath: classDir)) ?? []).filter { $0.hasPrefix("hci") && !$0.contains(":") }
            .sorted { (Int($0.dropFirst(3)) ?? 0) < (Int($1.dropFirst(3)) ?? 0) }
        let daemons = bluetoothd()
        let log = kernelLines()
        out.append(Terminal.bold("Adapters") + " (\(classDir))")
        if adapters.isEmpty {
            out += DoctorLine(text: "none", fix: "plug in a USB dongle, or use a UART controller (BLE_TRANSPORT=serial:/dev/ttyACM0) or an emulator (rootcanal, `ble radio`)")
                .render(indent: "  ")
        }
        for name in adapters {
            let path = "\(classDir)/\(name)"
            let index = Int(name.dropFirst(3)) ?? 0
            var lines: [DoctorLine] = []
            let ids = usbIDs(path)
            let bus = ids.map { String(format: "USB %04x:%04x", $0.vendor, $0.product) } ?? (read("\(path)/device/modalias").map { "device \($0)" } ?? "bus unknown")
            lines.append(DoctorLine(text: "\(bus)" + (driver(path).map { ", driver \($0)" } ?? "")))
            // rfkill (soft: `rfkill unblock`; hard: a switch or the BIOS).
            for rf in ((try? fm.contentsOfDirectory(atPath: path)) ?? []).filter({ $0.hasPrefix("rfkill") }).sorted() {
                let soft = read("\(path)/\(rf)/soft") == "1", hard = read("\(path)/\(rf)/hard") == "1"
                if hard {
                    lines.append(DoctorLine(text: "rfkill: hard-blocked", fix: "turn on the wireless switch or enable Bluetooth in the firmware setup"))
                } else if soft {
                    lines.append(DoctorLine(text: "rfkill: soft-blocked", fix: "rfkill unblock bluetooth"))
                } else {
                    lines.append(DoctorLine(text: "rfkill: not blocked"))
                }
            }
            let up = isUp(index: index)
            switch (up, daemons.isEmpty) {
            case (true?, false):
                lines.append(
                    DoctorLine(
                        text: "up, held by the kernel stack (bluetoothd is running)",
                        fix:
                            "keep it shared with BLE_TRANSPORT=bluez:\(name), or for the HCI user channel: sudo systemctl stop bluetooth; sudo btmgmt --index \(index) power off (it needs the adapter down)"
                    ))
            case (true?, true):
                lines.append(DoctorLine(text: "up (the kernel stack has it)", fix: "sudo btmgmt --index \(index) power off, or sudo hciconfig \(name) down"))
            case (false?, _):
                lines.append(DoctorLine(text: "down: free for BLE_TRANSPORT=hci-socket:\(index)"))
            case (nil, _):
                lines.append(
                    DoctorLine(
                        text: "up/down: unknown (the kernel could not be asked: no Bluetooth sockets, or not the real /sys)"
                            + (daemons.isEmpty ? "" : "; bluetoothd holds it when it is up")))
            }
            // Firmware: the family's need, the firmware directory, and the kernel's own complaints.
            let complaints = (log ?? []).filter { l in
                (l.contains(name + ":") || l.contains(name + " ")) && (l.contains("firmware") || l.contains("Patch") || l.contains("patch"))
                    && (l.contains("failed") || l.contains("not found") || l.contains("error"))
            }
            if let ids, let need = FirmwareNeed.forUSBVendor(ids.vendor) {
                let present = fm.fileExists(atPath: "\(firmware)/\(need.directory)")
                if !complaints.isEmpty {
                    lines.append(
                        DoctorLine(
                            text: "firmware: missing (kernel log: \(complaints.last!.trimmingCharacters(in: .whitespaces)))",
                            fix: "install \(need.package), then unplug and replug the adapter"))
                } else if !present {
                    lines.append(
                        DoctorLine(
                            text: "firmware: \(need.family) chips load firmware from \(firmware)/\(need.directory), which is missing",
                            fix: "install \(need.package)"))
                } else {
                    lines.append(DoctorLine(text: "firmware: \(need.family), \(firmware)/\(need.directory) present" + (log == nil ? " (kernel log not readable)" : "")))
                }
            } else if !complaints.isEmpty {
                lines.append(
                    DoctorLine(
                        text: "firmware: the kernel failed to load it (\(complaints.last!.trimmingCharacters(in: .whitespaces)))",
                        fix: "install the firmware package named for that file, then replug"))
            }
            out.append("  " + Terminal.bold(name))
            for l in lines { out += l.render(indent: "    ") }
        }
        out.append("")
        out.append(Terminal.bold("Kernel stack"))
        out.append("  bluetoothd: " + (daemons.isEmpty ? "not running" : "running (pid \(daemons.map(String.init).joined(separator: ", ")))"))
        // Which backend fits (issue 28): with bluetoothd running, sharing the adapter with the system keeps the
        // keyboard, mouse and headphones working; without it, the user channel gives our stack the whole controller.
        out.append(
            "  backend that fits: "
                + (daemons.isEmpty
                    ? "hci-socket:N (no bluetoothd: the adapter is free for the HCI user channel and our own host)"
                    : "bluez (BLE_TRANSPORT=bluez or bluez:hciN: Core Bluetooth, L2CAP channels, and ble scan, gatt, read, write, subscribe, shell, serve, pair, bonds, send, receive and demo through bluetoothd, which keeps the adapter for the system's devices). "
                        + "hci-socket:N needs the adapter to itself (ble bench peer, and what bluetoothd decides for us: connection parameters, the MTU exchange, pairing methods)")
        )
        out.append("")
        out.append(Terminal.bold("Permissions"))
        out += permissionLines().flatMap { $0.render(indent: "  ") }
        return out
    }

    func permissionLines() -> [DoctorLine] {
        var lines: [DoctorLine] = []
        // CAP_NET_ADMIN is capability 12 (linux/capability.h).
        let capEff = read("\(proc)/self/status")?.components(separatedBy: "\n").first { $0.hasPrefix("CapEff:") }
            .flatMap { UInt64($0.dropFirst(7).trimmingCharacters(in: .whitespaces), radix: 16) }
        if let capEff, capEff & (1 << 12) != 0 {
            lines.append(DoctorLine(text: "HCI user channel (hci-socket:N): allowed (CAP_NET_ADMIN)"))
        } else {
            let exe = CommandLine.arguments.first.map { URL(fileURLWithPath: $0).standardizedFileURL.path } ?? "ble"
            lines.append(
                DoctorLine(
                    text: "HCI user channel (hci-socket:N): not allowed (no CAP_NET_ADMIN)",
                    fix: "run as root, or sudo setcap cap_net_admin+ep \(exe)"))
        }
        let ports = ((try? fm.contentsOfDirectory(atPath: dev)) ?? []).filter { n in
            ["ttyACM", "ttyUSB", "ttyAMA", "ttyTHS", "serial"].contains { n.hasPrefix($0) }
        }.sorted()
        if ports.isEmpty { lines.append(DoctorLine(text: "serial ports: none (\(dev)/ttyACM*, ttyUSB*, ttyAMA*)")) }
        for p in ports {
            let path = "\(dev)/\(p)"
            var st = stat()
            let group = stat(path, &st) == 0 ? (getgrgid(st.st_gid).map { String(cString: $0.pointee.gr_name) } ?? "gid \(st.st_gid)") : "?"
            if access(path, R_OK | W_OK) == 0 {
                lines.append(DoctorLine(text: "\(path) (group \(group)): readable and writable"))
            } else {
                lines.append(
                    DoctorLine(
                        text: "\(path) (group \(group)): not accessible to this user",
                        fix: "sudo usermod -aG \(group) $USER, then log in again"))
            }
        }
        return lines
    }
}

enum Doctor {
    static func manufacturerName(_ id: UInt16) -> String {
        let names: [UInt16: String] = [
            0x0002: "Intel", 0x0009: "Infineon", 0x000A: "Qualcomm Technologies International (CSR)", 0x000D: "Texas Instruments",
            0x000F: "Broadcom", 0x001D: "Qualcomm", 0x0030: "STMicroelectronics", 0x0046: "MediaTek", 0x0059: "Nordic Semiconductor",
            0x005D: "Realtek", 0x00E0: "Google", 0x0131: "Cypress", 0x02E5: "Espressif", 0x02FF: "Silicon Labs",
            0x05F1: "The Linux Foundation (Zephyr)", 0xFFFF: "none (test or emulated controller)",
        ]
        return (names[id] ?? "company") + String(format: " (0x%04X)", id)
    }

    /// Opens the controller of BLE_TRANSPORT and prints what it reports; false when it did not come up.
    static func checkController(timeout: Double) throws -> Bool {
        let spec = try Controller.spec()
        say(Terminal.bold("Controller") + " (BLE_TRANSPORT=\(spec))")
        if spec == .virtual {
            say("  the in-process virtual radio (BLE_TRANSPORT unset): set BLE_TRANSPORT=hci-socket:N, serial:PATH[,BAUD] or tcp-client:HOST:PORT to check a real controller")
        }
        let host: LEHost
        do {
            host = try Controller.open(name: "doctor", timeout: timeout)
        } catch {
            say("  not reachable: \(error)")
            switch spec {
            case .hciSocket: say("  → see Adapters and Permissions above")
            case .serial: say("  → check the port, its baud rate (the controller's firmware sets it) and flow control (BLE_SERIAL_FLOW=rtscts|none)")
            default: say("  → is the controller (rootcanal, ble radio, Bumble) running and listening there?")
            }
            return false
        }
        defer { Controller.close(host) }
        guard let info = host.controllerInfo else { say("  no start-up information"); return false }
        for l in controllerLines(info, host: host) { for s in l.render(indent: "  ") { say(s) } }
        // What an app asks, answered by the Core Bluetooth API itself for this controller.
        say("  CBCentralManager.supports(.extendedScanAndConnect): \(CBCentralManager.supports(.extendedScanAndConnect))")
        return true
    }

    static func controllerLines(_ info: ControllerInfo, host: LEHost) -> [DoctorLine] {
        var lines: [DoctorLine] = []
        if let v = info.version {
            lines.append(
                DoctorLine(
                    text: "version: Bluetooth \(ControllerInfo.coreVersionName(v.hciVersion)) (HCI \(v.hciVersion) revision 0x"
                        + String(v.hciSubversion, radix: 16) + ", LMP \(v.lmpVersion) subversion 0x" + String(v.lmpSubversion, radix: 16) + ")",
                    fix: v.hciVersion < 6 ? "this controller predates Bluetooth 4.0 and has no LE: use a 4.0 or later one" : nil))
            lines.append(DoctorLine(text: "manufacturer: \(manufacturerName(v.companyIdentifier))"))
            if let need = FirmwareNeed.forManufacturer(v.companyIdentifier) {
                lines.append(
                    DoctorLine(
                        text: "firmware: \(need.family) controllers run firmware the host loads (the kernel's driver does it when it brings the adapter up)",
                        fix: "with serial: or a fresh dongle, bring it up once with the kernel (needs \(need.package)) or load the firmware first"))
            }
        }
        if let z = info.zephyrVersion {
            lines.append(
                DoctorLine(
                    text:
                        "Zephyr controller: hardware platform \(z.hardwarePlatform) variant \(z.hardwareVariant), firmware \(z.firmwareVersion).\(z.firmwareRevision) build \(z.firmwareBuild)"
                ))
        }
        lines.append(DoctorLine(text: "address: \(host.localAddress.string) — \(info.addressKind)"))
        lines.append(
            DoctorLine(
                text: "ACL buffers: \(info.aclBufferCount) × \(info.aclBufferSize) octets"
                    + (info.sharedACLBuffers ? " (shared with BR/EDR: LE Read Buffer Size reported none)" : "")))
        func feature(_ name: String, _ on: Bool, _ detail: String, fix: String) -> DoctorLine {
            DoctorLine(text: "  " + name.padding(toLength: 22, withPad: " ", startingAt: 0) + (on ? "yes" : "no") + (detail.isEmpty ? "" : " — \(detail)"), fix: on ? nil : fix)
        }
        lines.append(DoctorLine(text: "Core Bluetooth features this controller enables:"))
        lines.append(
            feature(
                "LE 2M PHY", info.supportsLE2M, info.supportsLE2M ? "links move to LE 2M after connecting" : "links stay on LE 1M",
                fix: "a Bluetooth 5 controller doubles the air rate"))
        lines.append(
            feature(
                "Data Length Extension", info.supportsDataLengthExtension,
                info.supportsDataLengthExtension ? "\(info.maxTxOctets ?? 251)-octet link-layer packets" : "27-octet link-layer packets (about a third of the throughput)",
                fix: "a Bluetooth 4.2 or later controller"))
        lines.append(
            feature(
                "LL privacy", info.leFeatures.contains(.llPrivacy),
                info.leFeatures.contains(.llPrivacy) ? "" : "the host does privacy itself (rotating private addresses and resolving peers' work)",
                fix: "nothing to do; a 4.2 or later controller would resolve peers' addresses itself"))
        let ext = info.supportsExtendedAdvertising
        lines.append(
            feature(
                "extended advertising", ext,
                ext
                    ? "CBCentralManager.supports(.extendedScanAndConnect) is true; \(info.advertisingSets.map { "\($0) sets, " } ?? "")\(info.maxAdvertisingDataLength.map { "up to \($0) bytes of data" } ?? "")"
                    : "legacy advertising (31 bytes); peripherals that advertise only with extended PDUs are not seen",
                fix: "a Bluetooth 5 controller with LE Extended Advertising"))
        lines.append(feature("L2CAP channels (CoC)", true, "credit-based channels run in the host on any LE controller", fix: ""))
        lines.append(
            DoctorLine(
                text: "  " + "max connections".padding(toLength: 22, withPad: " ", startingAt: 0)
                    + "not reported over HCI; the host sets no limit, and the \(info.aclBufferCount) ACL buffer(s) are shared by every link"))
        return lines
    }
}
