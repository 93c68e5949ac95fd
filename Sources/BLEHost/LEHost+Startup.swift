// Controller start-up as data (STYLE habit 11): each step names the command it sends, the condition that
// enables it (an earlier answer, a supported-commands bit, a feature), how long it may take, whether start-up
// fails without it, and what the host keeps from its answer. One driver runs the list; it owns timeouts, a
// failed required step and a controller lost midway. As in btstack's hci.c init sub-states and Zephyr's
// hci_core.c init functions, the whole sequence reads in one place:
//
//   Reset (waits up to `resetTimeout`, 10 s: some controllers take seconds)
//   → version → supported commands → LMP features → BD_ADDR → event mask → LE features → LE event mask
//   → LE buffers (0: the BR/EDR buffers are shared, Read Buffer Size) → Host Buffer Size and Set Controller To
//   Host Flow Control (where listed) → maximum data length (DLE)
//   → advertising sets and data length (extended advertising) → Zephyr vendor version, commands and static
//   addresses (no public address, HCI 5.0+ or manufacturer 0x05F1) → our identity address → LE Set Random Address.
import Foundation
import BLEWire
import BLEHCI
import BLEVirtualRadio
import BLETransport

struct StartupStep: Sendable {
    enum Need { case required, optional }
    let name: String
    var need: Need = .optional
    /// Whether this controller gets the step, given what earlier steps learnt.
    var when: @Sendable (LEHost) -> Bool = { _ in true }
    /// The command; nil for a step that only decides something from earlier answers.
    let command: @Sendable (LEHost) -> HCICommand?
    /// How long the command may go unanswered (nil: `commandTimeout`).
    var timeout: @Sendable (LEHost) -> LoopTime? = { _ in nil }
    /// Keeps what the Command Complete return parameters say; throws when they report a failure.
    var answer: @Sendable (LEHost, [UInt8]) throws -> Void = { _, p in try StartupStep.expectSuccess(p) }

    struct Failed: Error, CustomStringConvertible { let description: String }

    static func expectSuccess(_ p: [UInt8]) throws {
        let st = HCIStatus(rawValue: p.first ?? 0xFF)
        guard st == .success else { throw Failed(description: "\(st)") }
    }
}

extension LEHost {
    /// LE subevents always unmasked: connection complete, advertising report, connection update, remote
    /// features, LTK request, remote connection parameter request, data length change, enhanced connection
    /// complete, PHY update complete (Vol 4 Part E §7.8.1: bit n is subevent n + 1).
    static let baseLEEventMask: UInt64 = 0x0000_0000_0000_0A7F | (1 << 9) | (1 << 11)
    /// With extended advertising: Extended Advertising Report (0x0D) and Advertising Set Terminated (0x12).
    static let extendedLEEventMask: UInt64 = (1 << 12) | (1 << 17)

    static let startupSteps: [StartupStep] = [
        StartupStep(name: "Reset", need: .required, command: { _ in .reset }, timeout: { $0.resetTimeout }),
        StartupStep(
            name: "Read Local Version Information", command: { _ in .readLocalVersionInformation },
            answer: { h, p in
                let v = try ReadLocalVersionReturn(decoding: p)
                guard v.status == .success else { throw StartupStep.Failed(description: "\(v.status)") }
                h.startupInfo.version = v
                h.controllerVersion = v
            }),
        StartupStep(
            name: "Read Local Supported Commands", command: { _ in .readLocalSupportedCommands },
            answer: { h, p in
                let r = try SupportedCommandsReturn(decoding: p)
                guard r.status == .success else { throw StartupStep.Failed(description: "\(r.status)") }
                h.startupInfo.supportedCommands = r.bits
            }),
        StartupStep(
            name: "Read Local Supported Features", when: { $0.startupInfo.supports(.readLocalSupportedFeatures) },
            command: { _ in .readLocalSupportedFeatures },
            answer: { h, p in
                let f = try ReadLocalSupportedFeaturesReturn(decoding: p)
                if f.status == .success { h.startupInfo.lmpFeatures = f.features }
            }),
        StartupStep(
            name: "Read BD_ADDR", command: { _ in .readBDADDR },
            answer: { h, p in
                let v = try ReadBDADDRReturn(decoding: p)
                guard v.status == .success else { throw StartupStep.Failed(description: "\(v.status)") }
                h.startupInfo.publicAddress = BluetoothAddress(bytes: v.address.bytes, type: .public)
                h.localAddress = h.startupInfo.publicAddress
            }),
        StartupStep(name: "Set Event Mask", command: { _ in .setEventMask(0x2000_9FFF_FFFF_FFFF) }),   // defaults + LE Meta (bit 61)
        StartupStep(
            name: "LE Read Local Supported Features", when: { $0.startupInfo.supports(.leReadLocalSupportedFeatures) },
            command: { _ in .leReadLocalSupportedFeatures },
            answer: { h, p in
                let f = try LEReadLocalSupportedFeaturesReturn(decoding: p)
                guard f.status == .success else { throw StartupStep.Failed(description: "\(f.status)") }
                h.startupInfo.leFeatures = LEFeatures(rawValue: f.features)
                h.leFeatures = f.features
            }),
        StartupStep(
            name: "LE Set Event Mask",
            command: { h in
                .leSetEventMask(baseLEEventMask | (h.startupInfo.supportsExtendedAdvertising && !h.prefersLegacyAdvertising ? extendedLEEventMask : 0))
            }),
        // Vol 4 Part E §7.8.2: a length or count of 0 means LE shares the BR/EDR ACL buffers (Read Buffer Size).
        StartupStep(
            name: "LE Read Buffer Size", need: .required, command: { _ in .leReadBufferSize },
            answer: { h, p in
                let b = try LEReadBufferSizeReturn(decoding: p)
                guard b.status == .success else { throw StartupStep.Failed(description: "\(b.status)") }
                if b.aclDataPacketLength > 0 && b.totalNumACLDataPackets > 0 {
                    h.startupInfo.aclBufferSize = Int(b.aclDataPacketLength)
                    h.startupInfo.aclBufferCount = Int(b.totalNumACLDataPackets)
                } else {
                    h.startupInfo.sharedACLBuffers = true
                }
            }),
        StartupStep(
            name: "Read Buffer Size", when: { $0.startupInfo.sharedACLBuffers }, command: { _ in .readBufferSize },
            answer: { h, p in
                let b = try ReadBufferSizeReturn(decoding: p)
                guard b.status == .success, b.aclDataPacketLength > 0, b.totalNumACLDataPackets > 0 else {
                    h.log("controller reports no ACL buffers at all; sending one 27-octet packet at a time")
                    return
                }
                h.startupInfo.aclBufferSize = Int(b.aclDataPacketLength)
                h.startupInfo.aclBufferCount = Int(b.totalNumACLDataPackets)
            }),
        // Controller-to-host flow control (LEHost+FlowControl.swift), in the order Zephyr's and btstack's hosts
        // use: the host's buffers, then flow control on for ACL data only (0x01: we carry no synchronous data).
        // Either refused: the controller sends freely, as without the commands.
        StartupStep(
            name: "Host Buffer Size", when: { $0.shouldEnableControllerToHostFlowControl },
            command: { h in .hostBufferSize(h.announcedHostBuffers) },
            answer: { h, p in
                try StartupStep.expectSuccess(p)
                h.startupInfo.hostBuffers = h.announcedHostBuffers
            }),
        StartupStep(
            name: "Set Controller To Host Flow Control", when: { $0.startupInfo.hostBuffers != nil },
            command: { _ in .setControllerToHostFlowControl(0x01) },
            answer: { h, p in
                try StartupStep.expectSuccess(p)
                h.startupInfo.controllerToHostFlowControl = true
            }),
        StartupStep(
            name: "LE Read Maximum Data Length",
            when: { $0.startupInfo.supportsDataLengthExtension && $0.startupInfo.supports(.leReadMaximumDataLength) },
            command: { _ in .leReadMaximumDataLength },
            answer: { h, p in
                let m = try LEReadMaximumDataLengthReturn(decoding: p)
                if m.status == .success { h.startupInfo.maxTxOctets = m.supportedMaxTxOctets }
            }),
        StartupStep(
            name: "LE Read Maximum Advertising Data Length",
            when: { $0.startupInfo.supportsExtendedAdvertising && $0.startupInfo.supports(.leReadMaximumAdvertisingDataLength) },
            command: { _ in .leReadMaximumAdvertisingDataLength },
            answer: { h, p in
                let m = try LEReadMaximumAdvertisingDataLengthReturn(decoding: p)
                if m.status == .success { h.startupInfo.maxAdvertisingDataLength = m.maxLength }
            }),
        StartupStep(
            name: "LE Read Number of Supported Advertising Sets",
            when: { $0.startupInfo.supportsExtendedAdvertising && $0.startupInfo.supports(.leReadNumberOfSupportedAdvertisingSets) },
            command: { _ in .leReadNumberOfSupportedAdvertisingSets },
            answer: { h, p in
                let m = try LEReadNumberOfSupportedAdvertisingSetsReturn(decoding: p)
                if m.status == .success { h.startupInfo.advertisingSets = m.count }
            }),
        StartupStep(
            name: "LE Clear Advertising Sets",
            when: { $0.startupInfo.supportsExtendedAdvertising && !$0.prefersLegacyAdvertising && $0.startupInfo.supports(.leClearAdvertisingSets) },
            command: { _ in .leClearAdvertisingSets }),
        // Zephyr's host asks for the vendor commands when the controller has no public address and speaks
        // HCI 5.0 or later (hci_core.c, CONFIG_BT_HCI_VS_EXT_DETECT); a 13-octet answer is Zephyr's.
        StartupStep(
            name: "Zephyr Read Version Information",
            when: { h in
                guard h.startupInfo.publicAddress.bytes == BluetoothAddress.zero.bytes, let v = h.startupInfo.version else { return false }
                return v.hciVersion >= 9 || v.companyIdentifier == 0x05F1
            }, command: { _ in .unknown(opcode: .zephyrReadVersionInformation, parameters: []) }, timeout: { _ in .seconds(1) },
            answer: { h, p in
                let v = try ZephyrReadVersionReturn(decoding: p)
                guard v.status == .success else { throw StartupStep.Failed(description: "\(v.status)") }
                h.startupInfo.zephyrVersion = v
            }),
        StartupStep(
            name: "Zephyr Read Supported Commands", when: { $0.startupInfo.zephyrVersion != nil },
            command: { _ in .unknown(opcode: .zephyrReadSupportedCommands, parameters: []) }, timeout: { _ in .seconds(1) },
            answer: { h, p in
                let r = try SupportedCommandsReturn(decoding: p)
                guard r.status == .success else { throw StartupStep.Failed(description: "\(r.status)") }
                h.zephyrCommands = r.bits
            }),
        // BT_VS_CMD_BIT_READ_STATIC_ADDRS: octet 1, bit 0 of Zephyr's vendor supported-commands map.
        StartupStep(
            name: "Zephyr Read Static Addresses", when: { ($0.zephyrCommands?.count ?? 0) > 1 && $0.zephyrCommands![1] & 1 != 0 },
            command: { _ in .unknown(opcode: .zephyrReadStaticAddresses, parameters: []) }, timeout: { _ in .seconds(1) },
            answer: { h, p in
                let r = try ZephyrReadStaticAddressesReturn(decoding: p)
                guard r.status == .success else { throw StartupStep.Failed(description: "\(r.status)") }
                h.zephyrStaticAddress = r.addresses.first { $0.randomKind == .staticAddress }
            }),
        StartupStep(
            name: "choose the identity address", when: { $0.startupInfo.publicAddress.bytes == BluetoothAddress.zero.bytes },
            command: { _ in nil }, answer: { h, _ in h.chooseStaticIdentity() }),
        StartupStep(
            name: "LE Set Random Address (identity)", when: { $0.controllerStaticAddress != nil },
            command: { h in .leSetRandomAddress(h.controllerStaticAddress!) },
            answer: { h, p in
                try StartupStep.expectSuccess(p)
                h.currentPrivateAddress = h.controllerStaticAddress
            }),
    ]

    func runInitialisation() {
        startupInfo = ControllerInfo()
        zephyrCommands = nil
        zephyrStaticAddress = nil
        controllerStaticAddress = nil
        runStartup(from: 0)
    }

    private func runStartup(from index: Int) {
        var i = index
        while i < Self.startupSteps.count && !Self.startupSteps[i].when(self) { i += 1 }
        guard i < Self.startupSteps.count else { return startupFinished() }
        let step = Self.startupSteps[i]
        guard let cmd = step.command(self) else {
            try? step.answer(self, [])
            return runStartup(from: i + 1)
        }
        command(cmd, timeout: step.timeout(self)) { [self] r in
            var failure: String?
            switch r {
            case .failure(.transportClosed):
                return   // the controller went away: controllerLost has reported it
            case let .failure(e):
                failure = "\(e)"
            case let .success(.status(s)):
                // A Command Status for a command that completes with Command Complete: refused (Unknown Command…).
                failure = "\(s)"
            case let .success(.complete(p)):
                do { try step.answer(self, p) } catch { failure = "\(error)" }
            }
            if let failure {
                if step.need == .required { return initFailed(why: "\(step.name): \(failure)") }
                log("start-up: \(step.name) not available (\(failure))")
            }
            runStartup(from: i + 1)
        }
    }

    private func startupFinished() {
        aclBufferSize = startupInfo.aclBufferSize
        aclBufferCount = startupInfo.aclBufferCount
        aclCredits = aclBufferCount
        controllerToHostFlowControl = startupInfo.controllerToHostFlowControl
        hostCompletions.removeAll()
        hostCompletionsFlushScheduled = false
        usesExtendedAdvertising = startupInfo.supportsExtendedAdvertising && !prefersLegacyAdvertising
        controllerInfoSnapshot.withLock { $0 = startupInfo }
        loggers.hci.debug(
            "controller ready",
            metadata: [
                "hci-version": "\(startupInfo.version.map { ControllerInfo.coreVersionName($0.hciVersion) } ?? "?")",
                "address": "\(localAddress)", "address-kind": "\(startupInfo.addressKind)",
                "acl-buffers": "\(aclBufferCount) × \(aclBufferSize)\(startupInfo.sharedACLBuffers ? " (shared with BR/EDR)" : "")",
                "advertising": "\(usesExtendedAdvertising ? "extended" : "legacy")",
                "controller-to-host-flow-control":
                    "\(controllerToHostFlowControl ? "on, \(announcedHostBuffers.totalNumACLDataPackets) × \(announcedHostBuffers.aclDataPacketLength)" : "off")",
            ])
        hadController = true
        LEHost.started.withLock { list in
            list.removeAll { $0.host == nil || $0.host === self }
            list.append(WeakHostRef(host: self))
        }
        openBondStoreIfNeeded()
        setPowerState(.on)
        if privacyInterval != nil { rotatePrivateAddress() } else if let s = staticIdentityAddress, s != controllerStaticAddress { setStaticRandomAddress(s) }
    }

    /// A controller without a public address: Zephyr's factory static address, else one the host makes once
    /// and keeps per controller (by transport name) beside the bonds, so that bonds survive restarts.
    func chooseStaticIdentity() {
        let address: BluetoothAddress
        if let z = zephyrStaticAddress {
            address = z
            startupInfo.addressKind = .zephyrStatic
        } else {
            let file = bondStoreDirectory.map { $0.appendingPathComponent("static-address-\(Self.fileKey(transport.name)).txt") }
            if let file, let text = try? String(contentsOf: file, encoding: .utf8),
                let a = BluetoothAddress(string: text.trimmingCharacters(in: .whitespacesAndNewlines), type: .random),
                a.randomKind == .staticAddress
            {
                address = a
            } else {
                var bytes = (0..<6).map { _ in UInt8.random(in: 0...255) }
                bytes[5] |= 0xC0   // static random: the two most significant bits 0b11 (Vol 6 Part B §1.3.2.1)
                if bytes[0...4].allSatisfy({ $0 == 0xFF }) && bytes[5] == 0xFF { bytes[0] = 0xFE }
                address = BluetoothAddress(bytes: bytes, type: .random)
                if let file {
                    try? FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
                    try? (address.string + "\n").write(to: file, atomically: true, encoding: .utf8)
                }
            }
            startupInfo.addressKind = .generatedStatic(file: file?.path)
        }
        controllerStaticAddress = address
        localAddress = address
        if staticIdentityAddress == nil { staticIdentityAddress = address }
        log("controller has no public address; identity \(address) (\(startupInfo.addressKind))")
    }

    static func fileKey(_ s: String) -> String {
        String(s.map { $0.isLetter || $0.isNumber ? $0 : "_" })
    }

    struct WeakHostRef: @unchecked Sendable { weak var host: LEHost? }
    static let started = Locked<[WeakHostRef]>([])

    /// The controllers of this process's hosts that are up now, in the order they started (what
    /// `CBCentralManager.supports(_:)` asks when no shared host is up). When real controllers run beside in-process
    /// virtual ones (a test process), the real ones answer.
    public static var runningControllers: [ControllerInfo] {
        started.withLock { list in
            let hosts = list.compactMap(\.host).filter { $0.controllerInfo != nil }
            let real = hosts.filter { !($0.transport is VirtualController) }
            return (real.isEmpty ? hosts : real).compactMap(\.controllerInfo)
        }
    }

    /// What the controller reported at its last start-up (nil before one); readable from any thread.
    public var controllerInfo: ControllerInfo? { controllerInfoSnapshot.withLock { $0 } }
}
