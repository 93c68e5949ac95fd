import Foundation
import XCTest
@testable import BoundStreams

/// The main run loop, as a program blocked in `RunLoop.main.run()` uses it. XCTest runs its tests on the
/// main thread on Linux (Swift Testing's @MainActor does not), so this one is an XCTestCase.
final class MainRunLoopTests: XCTestCase {
    func testEventsOnTheMainRunLoop() {
        XCTAssertTrue(Thread.isMainThread)
        let (input, output) = BoundStreams.makePair(bufferSize: 64)
        let recorder = Recorder()
        input.delegate = recorder
        input.schedule(in: .main, forMode: .default)
        input.open(); output.open()
        let box = Unchecked(output)
        let sent = Date()
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) {
            _ = [UInt8](repeating: 7, count: 10).withUnsafeBufferPointer { box.value.write($0.baseAddress!, maxLength: 10) }
        }
        // As an app does: run until something happened; run(mode:before:) returns after stream events.
        let deadline = Date().addingTimeInterval(5)
        var turns = 0
        while recorder.events(of: input).count < 2, Date() < deadline {
            _ = RunLoop.main.run(mode: .default, before: .distantFuture)
            turns += 1
        }
        XCTAssertEqual(recorder.events(of: input), [.openCompleted, .hasBytesAvailable])
        XCTAssertTrue(recorder.records.allSatisfy { $0.thread.isMainThread })
        XCTAssertLessThan(Date().timeIntervalSince(sent), 1)
        XCTAssertLessThanOrEqual(turns, 3)
        input.close()
        output.close()
    }
}
