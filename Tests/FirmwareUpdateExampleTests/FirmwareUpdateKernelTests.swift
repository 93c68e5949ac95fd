// The seed's firmware update (examples/firmware-update) on the kernel's adapters (issue 28), the example unchanged:
// each side makes its manager with CBCentralManager(delegate:queue:) / CBPeripheralManager(delegate:queue:), which
// read BLE_TRANSPORT, so each is made with the variable naming its side: one on bluez (bluetoothd keeps hci0) and one
// on our own stack over the HCI user channel of hci1. Runs only inside the kernel test guest
// (scripts/kernel/scenarios/cb-flows-bluez.sh sets OCB_KERNEL_GUEST=1; one test per process, so that hci1 is free
// again for the next).
import Foundation
import Testing
@testable import FirmwareUpdateExample
#if canImport(Glibc)
import Glibc
#endif

@Suite(
    .serialized, .timeLimit(.minutes(5)),
    .enabled(if: ProcessInfo.processInfo.environment["OCB_KERNEL_GUEST"] == "1", "runs only inside the kernel test guest (scripts/kernel/run cb-flows-bluez)"))
struct FirmwareUpdateKernelTests {
    /// One update with the device made on `deviceTransport` and the updater on `updaterTransport`.
    func update(device deviceTransport: String, updater updaterTransport: String, offersL2CAP: Bool, image: Data, name: String) async throws
        -> (FirmwareUpdater.Outcome, [UpdateStatus], Data?)
    {
        setenv("BLE_TRANSPORT", deviceTransport, 1)
        let device = FirmwareDevice(name: name, offersL2CAP: offersL2CAP)
        setenv("BLE_TRANSPORT", updaterTransport, 1)
        let updater = FirmwareUpdater(image: image, deviceName: name)
        unsetenv("BLE_TRANSPORT")
        defer { updater.stop(); device.stop() }
        let gate = FirmwareUpdateTests.Once<FirmwareUpdater.Outcome>()
        let outcome = try await withCheckedThrowingContinuation { (k: CheckedContinuation<FirmwareUpdater.Outcome, Error>) in
            gate.set(k)
            updater.queue.sync { updater.onFinish = { gate.resume(.success($0)) } }
            DispatchQueue.global().asyncAfter(deadline: .now() + 240) { gate.resume(.failure(FirmwareUpdateTests.UpdateTimeout())) }
        }
        let statuses = updater.queue.sync { updater.statuses }
        let installed = device.queue.sync { device.installed }
        return (outcome, statuses, installed)
    }

    /// The updater (a Core Bluetooth central) on bluez, the device on our stack: the image over an L2CAP channel
    /// that the central opens through the kernel's L2CAP socket.
    @Test func theUpdaterOnBlueZSendsTheImageOverAnL2CAPChannel() async throws {
        let image = FirmwareUpdateTests.image(200_000, seed: 3)
        let (outcome, statuses, installed) = try await update(
            device: "hci-socket:1", updater: "bluez:hci0", offersL2CAP: true, image: image, name: "FW-K1")
        #expect(outcome == .applied(.l2cap))
        #expect(statuses == FirmwareUpdateTests.expected)
        #expect(installed == image)
    }

    /// The device (a Core Bluetooth peripheral: its service registered with bluetoothd) on bluez, the updater on our
    /// stack: no channel, the image in Write Commands that bluetoothd hands to the app as WriteValue calls.
    /// scripts/kernel/scenarios/fw-device-bluez.sh runs it with bluetoothd's [GATT] ExchangeMTU = 512: BlueZ 5.66
    /// silently drops Write Commands whose values are 511 or 512 octets (it counts the handle in the length it
    /// checks), and on its default 517-octet MTU the updater writes 512-octet values; 77 of 78 were dropped.
    @Test func theDeviceOnBlueZTakesTheImageInWriteCommands() async throws {
        let image = FirmwareUpdateTests.image(40_000, seed: 4)
        let (outcome, statuses, installed) = try await update(
            device: "bluez:hci0", updater: "hci-socket:1", offersL2CAP: false, image: image, name: "FW-K2")
        #expect(outcome == .applied(.writeWithoutResponse))
        #expect(statuses == FirmwareUpdateTests.expected)
        #expect(installed == image)
    }
}
