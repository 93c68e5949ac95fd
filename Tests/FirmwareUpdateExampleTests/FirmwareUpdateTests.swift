// The firmware-update example (examples/firmware-update) run whole: its device and its updater, each with
// its own virtual device on the shared virtual radio, in this process; once with the image over an L2CAP
// channel and once over Write Commands for a device that publishes no channel.
import Foundation
import Testing
@testable import FirmwareUpdateExample

@Suite(.serialized, .timeLimit(.minutes(2))) struct FirmwareUpdateTests {
    /// Runs one update; returns the outcome, the status indications and what the device installed.
    func update(offersL2CAP: Bool, image: Data, name: String) async throws -> (FirmwareUpdater.Outcome, [UpdateStatus], Data?) {
        let device = FirmwareDevice(name: name, offersL2CAP: offersL2CAP)
        let updater = FirmwareUpdater(image: image, deviceName: name)
        defer { updater.stop(); device.stop() }
        let gate = Once<FirmwareUpdater.Outcome>()
        let outcome = try await withCheckedThrowingContinuation { (k: CheckedContinuation<FirmwareUpdater.Outcome, Error>) in
            gate.set(k)
            updater.queue.sync { updater.onFinish = { gate.resume(.success($0)) } }
            DispatchQueue.global().asyncAfter(deadline: .now() + 60) { gate.resume(.failure(UpdateTimeout())) }
        }
        let statuses = updater.queue.sync { updater.statuses }
        let installed = device.queue.sync { device.installed }
        return (outcome, statuses, installed)
    }

    struct UpdateTimeout: Error {}

    /// Resumes a continuation once, from whichever comes first.
    final class Once<T: Sendable>: @unchecked Sendable {
        private let lock = NSLock()
        private var k: CheckedContinuation<T, Error>?
        func set(_ k: CheckedContinuation<T, Error>) { lock.withLock { self.k = k } }
        func resume(_ r: Result<T, Error>) {
            let k = lock.withLock { () -> CheckedContinuation<T, Error>? in
                defer { self.k = nil }; return self.k
            }
            k?.resume(with: r)
        }
    }

    static let expected: [UpdateStatus] = [
        .response(command: 1, result: 0),
        .progress(percent: 25), .progress(percent: 50), .progress(percent: 75), .progress(percent: 100),
        .verified(result: 0),
        .response(command: 2, result: 0),
    ]

    static func image(_ size: Int, seed: UInt32) -> Data {
        var x = seed
        return Data(
            (0..<size).map { _ in
                x = x &* 1_664_525 &+ 1_013_904_223; return UInt8(truncatingIfNeeded: x >> 24)
            })
    }

    @Test func theImageGoesOverAnL2CAPChannelWhenTheDevicePublishesOne() async throws {
        let image = Self.image(300_000, seed: 1)
        let (outcome, statuses, installed) = try await update(offersL2CAP: true, image: image, name: "FW-L2CAP")
        #expect(outcome == .applied(.l2cap))
        #expect(statuses == Self.expected)
        #expect(installed == image)
    }

    @Test func withoutAChannelTheImageGoesInWriteCommands() async throws {
        let image = Self.image(60_000, seed: 2)
        let (outcome, statuses, installed) = try await update(offersL2CAP: false, image: image, name: "FW-GATT")
        #expect(outcome == .applied(.writeWithoutResponse))
        #expect(statuses == Self.expected)
        #expect(installed == image)
    }
}
