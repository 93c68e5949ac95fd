// Linux's own Bluetooth as the peer (issue 27): Debian's kernel booted in QEMU with software emulation, its
// virtual HCI driver (hci_vhci) giving controllers that scripts/kernel/vhci-bridge joins to one rootcanal, and
// BlueZ (bluetoothd, bluetoothctl, btmgmt) on one adapter while `ble` runs on another over the HCI user channel
// (`hci-socket:N`), the path a Raspberry Pi or a USB dongle takes.
//
// The scenarios are shell scripts in scripts/kernel/scenarios, each asserting what it checks and exiting
// non-zero with the reason; scripts/kernel/run boots two guests at once, which take the scenarios from one queue
// (the boot and BlueZ's start take most of a minute under emulation). Each test here is one row of the matrix:
// it reads its scenario's exit status and log, and checks the messages a user sees where that is the point.
//
// The group runs in its own step of scripts/test (OCB_KERNEL_TESTS=1, after the main run) so that the emulated
// machine does not compete with the other suites for the two cores.
import Foundation
import Testing

enum KernelGuest {
    static let enabled = ProcessInfo.processInfo.environment["OCB_KERNEL_TESTS"] == "1"

    /// Every scenario, the longest first (their times in the last whole runs): the guests take them from one queue
    /// (scripts/kernel/run), each the next whenever it is free, so that the short ones at the end even out the guests'
    /// ends. A scenario marked "# last in its guest" in its script is queued after the others whatever its place here.
    /// No row depends on another's running before it: each starts from the same guest (hci0 up and bluetoothd's,
    /// hci1 down, BlueZ's devices and bonds forgotten; bluetoothd started anew when hci0 was made anew).
    static let scenarios = [
        "cb-flows-bluez", "cb-explore-bluez", "privacy", "gk-bluez", "cb-peripheral-hci", "mc-bluez", "bond-deleted",
        "cb-l2cap-bluez", "cb-bluez-bluez", "cb-pair-bluez-bluez", "pair-passkey", "cb-tool-bluez", "rule-vanish", "rule-busy", "l2cap-l2test", "cb-peripheral-bluez",
        "doctor", "gatt-bluez-client", "pair-bluez-initiates", "pair-legacy", "cb-pair-bluez", "fw-device-bluez", "pair-we-initiate",
        "cb-central-bluez", "gatt-bluez-server", "cb-central-hci", "rule-rfkill", "scan-bluez", "bluez-scans", "rule-no-cap",
        "manager-vanish",
    ]

    struct Run {
        let directory: URL
        let seconds: Double
    }

    /// One boot for the whole group; the results stay until the test process ends (OCB_KERNEL_LOGS=DIR keeps them).
    static let group: Result<Run, InteropError> = {
        let keep = ProcessInfo.processInfo.environment["OCB_KERNEL_LOGS"]
        let dir = URL(fileURLWithPath: keep ?? NSTemporaryDirectory() + "ocb-kernel-\(getpid())")
        try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        if keep == nil { atexit { try? FileManager.default.removeItem(atPath: NSTemporaryDirectory() + "ocb-kernel-\(getpid())") } }
        let p = Process()
        p.executableURL = Interop.root.appendingPathComponent("scripts/kernel/run")
        // Three guests at once by default (OCB_KERNEL_GUESTS=N for another count): a guest's emulated CPUs wait on timers
        // and on each other 40 to 55 % of the time, which the other guests then use. On two cores (stop 37) the group
        // took 346 s and 427 s with three (the second beside a helper's test runs, load up to 10), 455 to 541 s with two.
        let guests = ProcessInfo.processInfo.environment["OCB_KERNEL_GUESTS"] ?? "3"
        p.arguments = ["--timeout", "2400", "--guests", guests, "--out", dir.path] + scenarios
        p.standardOutput = FileHandle.standardError
        p.standardError = FileHandle.standardError
        let start = Date()
        do { try p.run() } catch { return .failure(InteropError("cannot run scripts/kernel/run: \(error)")) }
        p.waitUntilExit()
        let seconds = Date().timeIntervalSince(start)
        FileHandle.standardError.write(Data("kernel group: the guest and its \(scenarios.count) scenarios took \(Int(seconds)) s\n".utf8))
        guard p.terminationStatus == 0 else {
            let guest = (try? String(contentsOf: dir.appendingPathComponent("guest.log"), encoding: .utf8)) ?? ""
            // (With several guests each has its console in DIR/guestK.)
            let consoles = ["."] + (1...9).map { "guest\($0)" }
            let console = consoles.compactMap { sub -> String? in
                let url = dir.appendingPathComponent(sub).appendingPathComponent("console.log")
                guard let text = try? String(contentsOf: url, encoding: .utf8) else { return nil }
                return "== \(sub)/console.log ==\n\(text.suffix(2000))"
            }.joined(separator: "\n")
            return .failure(InteropError("scripts/kernel/run failed (\(p.terminationStatus))\n\(guest)\n\(console)"))
        }
        return .success(Run(directory: dir, seconds: seconds))
    }()

    /// A scenario's log and the log of `ble` or a peer it wrote beside it (NAME.SUFFIX).
    static func log(_ name: String, _ suffix: String = "log") throws -> String {
        let run = try group.get()
        return (try? String(contentsOf: run.directory.appendingPathComponent("\(name).\(suffix)"), encoding: .utf8)) ?? ""
    }

    /// A row that does not pass yet (see the README's matrix): run and reported, its failure recorded as a
    /// known issue so that the group's other rows decide the run.
    static func expectPassedKnownOpen(_ name: String, _ why: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        _ = try group.get()
        withKnownIssue(Comment(rawValue: why), isIntermittent: true) { try expectPassed(name, sourceLocation: sourceLocation) }
    }

    /// Fails unless the scenario exited 0; the failure carries its log.
    static func expectPassed(_ name: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let run = try group.get()
        let rc = (try? String(contentsOf: run.directory.appendingPathComponent("\(name).rc"), encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let text = try log(name)
        // A scenario whose guest's kernel hit a BUG ran again in a new guest (scripts/kernel/guest); say so.
        let bug = try? String(contentsOf: run.directory.appendingPathComponent("\(name).kernel-bug"), encoding: .utf8)
        if let bug { FileHandle.standardError.write(Data("kernel group: \(name): \(bug)".utf8)) }
        // Likewise a scenario whose guest ended under it (QEMU or the guest's kernel died; scripts/kernel/run).
        if let lost = try? String(contentsOf: run.directory.appendingPathComponent("\(name).guest-lost"), encoding: .utf8) {
            FileHandle.standardError.write(Data("kernel group: \(name): \(lost)".utf8))
        }
        // On a Linux 6.1 guest (OCB_KERNEL_META=linux-image-amd64, Debian 12's kernel; the harness's is 6.12) a row
        // that hit the kernel's BUG and failed again in a new guest is that kernel's known issue ("list_del
        // corruption" in hci_chan_del as bluetoothd releases an L2CAP socket: it kills bluetoothd; stop 37 saw it
        // twice running in cb-pair-bluez-bluez), recorded so, not as a pass.
        if rc != "0", bug != nil, (try? log("guest", "log"))?.contains("kernel 6.1.") == true {
            withKnownIssue("Linux 6.1's BUG in hci_chan_del killed bluetoothd during \(name), which failed again in a new guest") {
                Issue.record("scenario \(name) exited \(rc ?? "without a status") on a Linux 6.1 guest after its kernel's BUG")
            }
            return
        }
        #expect(rc == "0", "scenario \(name) exited \(rc ?? "without a status")\n\(text)", sourceLocation: sourceLocation)
    }
}

@Suite(
    "Linux kernel and BlueZ on the HCI user channel", .serialized,
    .enabled(if: KernelGuest.enabled, "the kernel group runs in its own step of scripts/test (OCB_KERNEL_TESTS=1)"))
struct KernelInteropTests {
    // MARK: Advertising and scanning

    @Test("ble scan on hci-socket finds BlueZ's advertisement: name and service")
    func scanFindsBlueZ() throws { try KernelGuest.expectPassed("scan-bluez") }

    @Test("bluetoothctl finds ble serve advertising on hci-socket: name and service")
    func blueZFindsOurAdvertisement() throws { try KernelGuest.expectPassed("bluez-scans") }

    // MARK: GATT

    @Test("bluetoothctl as GATT client of ble serve: discovery, short and long reads, a write, notifications")
    func blueZReadsOurServer() throws {
        try KernelGuest.expectPassed("gatt-bluez-client")
        #expect(try KernelGuest.log("gatt-bluez-client", "serve.log").contains("(stored): 6869"))
    }

    @Test("ble gatt and ble read against BlueZ's own GATT server")
    func weReadBlueZServer() throws { try KernelGuest.expectPassed("gatt-bluez-server") }

    @Test("a Core Bluetooth central on BLE_TRANSPORT=bluez, through bluetoothd, runs the seeds' heart-rate flow against our peripheral on hci-socket:1")
    func coreBluetoothCentralOnBlueZ() throws { try KernelGuest.expectPassed("cb-central-bluez") }

    @Test("a Core Bluetooth peripheral on BLE_TRANSPORT=bluez, served and advertised by bluetoothd, read, subscribed to and written by ble on hci-socket:1")
    func coreBluetoothPeripheralOnBlueZ() throws { try KernelGuest.expectPassed("cb-peripheral-bluez") }

    @Test(
        "Core Bluetooth on bluez against a BlueZ peer on a second adapter: the seeds' heart-rate central on bluez:hci0 against ble serve on bluez:hci1, and 64 KB over an L2CAP channel kernel to kernel"
    )
    func coreBluetoothOnBlueZAgainstBlueZ() throws { try KernelGuest.expectPassed("cb-bluez-bluez") }

    @Test(
        "ble pair on BLE_TRANSPORT=bluez: Device1.Pair through our Agent1 (numeric comparison, the same number on both sides) with ble serve on hci-socket:1; ble bonds lists and removes BlueZ's bond"
    )
    func pairingThroughOurAgentOnBlueZ() throws { try KernelGuest.expectPassed("cb-pair-bluez") }

    @Test(
        "pairing between two bluez adapters of one bluetoothd: ble pair on bluez:hci0 (its own Agent1) with ble serve on bluez:hci1 (the default agent), Just Works and numeric comparison, bonded on both, an encrypted read on the stored keys, bonds removed"
    )
    func pairingBetweenTwoBlueZAdapters() throws { try KernelGuest.expectPassed("cb-pair-bluez-bluez") }

    @Test(
        "the firmware-update seed's device on BLE_TRANSPORT=bluez:hci0 takes a 40 KB image in Write Commands from the updater on hci-socket:1 (bluetoothd with a 512-octet MTU: BlueZ 5.66 drops 511-512-octet Write Commands)"
    )
    func firmwareDeviceOnBlueZ() throws { try KernelGuest.expectPassed("fw-device-bluez") }

    @Test("ble scan, read (long values too) and write on BLE_TRANSPORT=bluez, through bluetoothd, against ble serve on hci-socket:1")
    func toolCommandsOnBlueZ() throws { try KernelGuest.expectPassed("cb-tool-bluez") }

    @Test(
        "1 MB each way over L2CAP channels on BLE_TRANSPORT=bluez (the kernel's L2CAP sockets): opened to ble receive on hci-socket:1, and published for ble send on hci-socket:1")
    func l2capChannelOnBlueZ() throws { try KernelGuest.expectPassed("cb-l2cap-bluez") }

    @Test("ble gatt and ble shell on BLE_TRANSPORT=bluez against ble serve on hci-socket:1, and ble serve on bluez read, written and subscribed by our stack")
    func gattShellAndServeOnBlueZ() throws { try KernelGuest.expectPassed("cb-explore-bluez") }

    @Test("the Core Bluetooth flow tests' delegates (heart rate, L2CAP) with one manager on BLE_TRANSPORT=bluez:hci0 and the other on hci-socket:1, each way round")
    func coreBluetoothFlowsOnBlueZ() throws { try KernelGuest.expectPassed("cb-flows-bluez") }

    // MARK: Core Bluetooth programs on the HCI user channel, BlueZ as the peer

    @Test(
        "bluetoothctl as GATT client of a CBPeripheralManager program on hci-socket: discovery, long read and long write through CBATTRequest offsets, notifications, indications, a flood of 1000 writes without response written into BlueZ's AcquireWrite socket as fast as it takes them"
    )
    func blueZUsesOurCoreBluetoothPeripheral() throws {
        try KernelGuest.expectPassed("cb-peripheral-hci")
        let program = try KernelGuest.log("cb-peripheral-hci", "peripheral.log")
        #expect(program.contains("of 512"))
        #expect(program.contains("write 7D2E0002-5B6A-4C3E-9A6D-2F4B1C0E8A10: 300 octets in"))
        #expect(program.contains("sent indication 5 of 5"))
        #expect(program.contains("write-without-response: 1000 writes, 20000 octets, 0 gaps in the sequence"))
    }

    @Test("a CBCentralManager program on hci-socket against BlueZ's server: GAP and GATT services, an application service registered over D-Bus read, written and notifying")
    func ourCoreBluetoothCentralUsesBlueZ() throws {
        try KernelGuest.expectPassed("cb-central-hci")
        let central = try KernelGuest.log("cb-central-hci", "central.log")
        #expect(central.contains("read 2A00 = "))
        #expect(central.contains("notification 1 on 7D2E1001-5B6A-4C3E-9A6D-2F4B1C0E8A10: 4f4b"))
    }

    @Test(
        "a bond deleted on one side: our central's connection fails with Peer removed pairing information (no silent re-pairing); BlueZ's stale key is refused by us; both recover once the bond is forgotten"
    )
    func aDeletedBondEndsAsOnIOS() throws {
        // Exit 3: the guest's kernel killed bluetoothd with its BUG ("list_del corruption" in hci_chan_del, Linux
        // 6.1.192) after everything up to our refusal of BlueZ's stale key had passed; BlueZ's pairing anew could not
        // be tried (the scenario says so). Recorded as that known kernel issue, not as a pass, and only on a 6.1 guest
        // (OCB_KERNEL_META=linux-image-amd64): the harness's kernel is 6.12, where the row must pass whole.
        let guests = try KernelGuest.log("guest", "log")
        if try KernelGuest.log("bond-deleted", "rc").trimmingCharacters(in: .whitespacesAndNewlines) == "3", guests.contains("kernel 6.1.") {
            let text = try KernelGuest.log("bond-deleted")
            #expect(text.contains("KERNEL-BUG: bluetoothd was killed by the guest's kernel"), "exit 3 without the kernel BUG\n\(text)")
            withKnownIssue("Linux 6.1.192's BUG in hci_chan_del killed bluetoothd after our refusal of its stale key: BlueZ pairing anew not tried") {
                Issue.record("bond-deleted (B): BlueZ pairing anew after removing the device was not checked in this run")
            }
        } else {
            try KernelGuest.expectPassed("bond-deleted")
        }
        #expect(try KernelGuest.log("bond-deleted", "A.central.log").contains("failed to connect: Peer removed pairing information (CBErrorDomain code 14)"))
        #expect(try KernelGuest.log("bond-deleted", "A.pair2.log").contains("it removed its pairing information"))
    }

    // MARK: Pairing

    @Test("BlueZ pairs with ble serve (SC Just Works, bonded) and reconnects on the stored keys")
    func blueZPairsWithUs() throws { try KernelGuest.expectPassed("pair-bluez-initiates") }

    @Test("ble pair with BlueZ: SC numeric comparison through bluetoothctl's agent, then the bond reused")
    func wePairWithBlueZ() throws { try KernelGuest.expectPassed("pair-we-initiate") }

    @Test("passkey entry both ways between ble pair and bluetoothctl's agent")
    func passkeyBothWays() throws { try KernelGuest.expectPassed("pair-passkey") }

    @Test("ble pair with no IO (legacy, then SC) against BlueZ with a KeyboardDisplay agent: Just Works, no MITM flag to refuse")
    func legacyPairing() throws { try KernelGuest.expectPassed("pair-legacy") }

    @Test("BlueZ with privacy on: found by name from a resolvable private address, bonded, its next address resolved with its IRK")
    func privacy() throws {
        try KernelGuest.expectPassed("privacy")
        #expect(try KernelGuest.log("privacy", "scan1.json").contains("\"address_type\":\"random private\""))
    }

    // MARK: L2CAP

    @Test("LE credit-based channels with BlueZ's l2test: 1 MB each way")
    func l2capOneMegabyteEachWay() throws {
        try KernelGuest.expectPassed("l2cap-l2test")
        let log = try KernelGuest.log("l2cap-l2test", "test.log")
        #expect(log.contains("us → BlueZ: 1 MB in") && log.contains("BlueZ → us: 1 MB in"))
    }

    // MARK: The kernel's rules for the user channel

    @Test("an adapter bluetoothd holds: ble says who holds it and how to release it (exit 1); released, it works; bluetoothd takes it back after")
    func adapterBusy() throws {
        try KernelGuest.expectPassed("rule-busy")
        #expect(
            try KernelGuest.log("rule-busy").contains(
                "Error: hci-socket:1: could not connect: hci1 is in use by the kernel's Bluetooth stack (bluetoothd). Release it with `sudo systemctl stop bluetooth`"))
    }

    @Test("no CAP_NET_ADMIN: ble names the capability and setcap (exit 1)")
    func noCapability() throws {
        try KernelGuest.expectPassed("rule-no-cap")
        #expect(try KernelGuest.log("rule-no-cap").contains("The HCI user channel needs CAP_NET_ADMIN: run as root or `sudo setcap cap_net_admin+ep <your binary>`."))
    }

    @Test("an rfkill-blocked adapter: ble says so and gives `rfkill unblock bluetooth` (exit 1); unblocked, it works")
    func rfkillBlocked() throws {
        try KernelGuest.expectPassed("rule-rfkill")
        #expect(try KernelGuest.log("rule-rfkill").contains("hci1 is blocked by rfkill (its radio is switched off in software). Unblock it with `rfkill unblock bluetooth`"))
    }

    @Test("an adapter that vanishes: a running scan says so, waits and scans again when it is back (at its index or a new one); a finite one exits 1")
    func adapterVanishes() throws {
        try KernelGuest.expectPassed("rule-vanish")
        let log = try KernelGuest.log("rule-vanish")
        #expect(log.contains("hci-socket:1: the adapter went away (unplugged, powered down or removed by its driver); waiting for it to come back"))
        #expect(log.contains("hci-socket:1: the adapter is back"))
        #expect(log.contains("hci-socket:1: the adapter is back, as hci-socket:"))
        #expect(log.contains("Error: hci-socket:1: the adapter went away (unplugged, powered down or removed by its driver); stopping."))
    }

    // MARK: ble doctor on the kernel's real sysfs (issue 22)

    @Test("ble doctor on the guest's real sysfs: adapters up/held and down/free, rfkill, bluetoothd, CAP_NET_ADMIN, the controller; each fault with its fix")
    func doctorOnARealKernel() throws {
        try KernelGuest.expectPassed("doctor")
        let ready = try KernelGuest.log("doctor", "ready.log")
        #expect(ready.contains("down: free for BLE_TRANSPORT=hci-socket:1"))
        #expect(ready.contains("Controller (BLE_TRANSPORT=hci-socket:1)"))
        #expect(try KernelGuest.log("doctor", "rfkill.log").contains("→ rfkill unblock bluetooth"))
        #expect(try KernelGuest.log("doctor", "nocap.log").contains("not allowed (no CAP_NET_ADMIN)"))
    }

    @Test("a CBCentralManager follows its adapter: .poweredOff and the link fails when it vanishes, .poweredOn when it is back at its index or a new one")
    func managerFollowsAdapter() throws { try KernelGuest.expectPassed("manager-vanish") }

    @Test(
        "Multipeer Connectivity on BLE_TRANSPORT=bluez (LEAdvertisingManager1, Device1's ServiceData, the kernel's L2CAP sockets) with ble mc on hci-socket:1: found, invited, chat both ways and a photo as a resource; the bluez peer browsing, then advertising"
    )
    func multipeerOnBlueZ() throws { try KernelGuest.expectPassed("mc-bluez") }

    @Test("GameKit on BLE_TRANSPORT=bluez with ble gk on hci-socket:1: a peer picker finds the session, connects and sends a photo; the bluez peer picking, then serving")
    func gameKitOnBlueZ() throws { try KernelGuest.expectPassed("gk-bluez") }

    // MARK: The harness itself

    /// CI once saw a guest end before its first line (its console unseen): the run failed although the other guests
    /// had run and passed every scenario. A guest that ends without finishing now costs no scenario.
    @Test(
        "a guest killed as it boots, and one killed in the middle of a scenario, cost nothing: new guests take their places and the scenario runs again, the run succeeds and says why"
    )
    func aLostGuestCostsNoScenario() throws {
        // After the group's run, never beside it (the suite is serialized; the group is run by its first test).
        _ = KernelGuest.group
        let dir = URL(fileURLWithPath: NSTemporaryDirectory() + "ocb-kernel-lost-\(getpid())")
        defer { try? FileManager.default.removeItem(at: dir) }
        let scenarios = ["doctor", "rule-no-cap", "bluez-scans", "rule-no-cap"]
        let p = Process()
        p.executableURL = Interop.root.appendingPathComponent("scripts/kernel/run")
        p.arguments = ["--timeout", "900", "--guests", "2", "--out", dir.path] + scenarios
        // (What the run says goes to a file beside DIR: a pipe would need a reader of its own.)
        let said = URL(fileURLWithPath: dir.path + ".stderr")
        defer { try? FileManager.default.removeItem(at: said) }
        FileManager.default.createFile(atPath: said.path, contents: nil)
        p.standardOutput = FileHandle.standardError
        p.standardError = try FileHandle(forWritingTo: said)
        try p.run()
        func qemu(_ slot: some StringProtocol) -> Int32? {
            let text = try? String(contentsOf: dir.appendingPathComponent("guest\(slot)/qemu.pid"), encoding: .utf8)
            return text.flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        }
        // First the second guest as it boots, before it has written a line (as CI saw one end): its place is taken.
        let deadline = Date().addingTimeInterval(600)
        var killedAtBoot = false
        while !killedAtBoot, p.isRunning, Date() < deadline {
            if let pid = qemu("2") {
                kill(pid, SIGKILL)
                killedAtBoot = true
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        // Then the first scenario a guest takes (scripts/kernel/guest renames its queue entry
        // .taken-SLOT.BOOT.NNN-NAME): that guest's QEMU is killed while the scenario runs.
        var killed: String?
        while killed == nil, p.isRunning, Date() < deadline {
            let queue = dir.appendingPathComponent(".queue")
            if let taken = (try? FileManager.default.contentsOfDirectory(atPath: queue.path))?.first(where: { $0.hasPrefix(".taken-") }) {
                if let pid = qemu(taken.dropFirst(".taken-".count).prefix { $0 != "." }) {
                    kill(pid, SIGKILL)
                    // (.taken-SLOT.BOOT.NNN-NAME)
                    let entry = taken.components(separatedBy: ".").dropFirst(3).first ?? ""
                    killed = String(entry.drop { $0 != "-" }.dropFirst())
                }
            }
            Thread.sleep(forTimeInterval: 0.1)
        }
        p.waitUntilExit()
        let output = (try? String(contentsOf: said, encoding: .utf8)) ?? ""
        FileHandle.standardError.write(Data(output.utf8))
        #expect(killedAtBoot, "the second guest never started")
        let name = try #require(killed, "no guest took a scenario")
        #expect(p.terminationStatus == 0, "scripts/kernel/run exited \(p.terminationStatus)")
        #expect(output.contains("kernel/run: guest 2 (boot 1) ended without finishing"))
        #expect(output.contains("kernel/run: \(name) goes back to the queue for a second attempt in a new guest"))
        #expect(FileManager.default.fileExists(atPath: dir.appendingPathComponent("\(name).guest-lost").path))
        for s in Set(scenarios) {
            let rc = try? String(contentsOf: dir.appendingPathComponent("\(s).rc"), encoding: .utf8)
            #expect(rc?.trimmingCharacters(in: .whitespacesAndNewlines) == "0", "\(s) exited \(rc ?? "without a status")")
        }
    }
}
