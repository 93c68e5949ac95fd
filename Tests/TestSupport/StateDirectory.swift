// One state directory for every test of the process that keeps state on disk (restoration files, and the bonds
// and device caches of hosts on real transports, ours and those of the `ble` processes the tests start): the tests
// never write into the user's real state directory. Every test target runs in one process and OCB_STATE_DIR is
// process-wide, so there is one definition, here, set once (tests run in parallel).
import Foundation

/// scripts/test sets OCB_STATE_DIR for each test process before it starts (and removes it): then it is used as it
/// is, with no setenv while other threads may read the environment. Otherwise (a test run by hand) a per-process
/// directory is set on first use and removed when the process exits: a test leaves no file behind.
public let processStateDirectory: String = {
    if let preset = ProcessInfo.processInfo.environment["OCB_STATE_DIR"], !preset.isEmpty {
        try? FileManager.default.createDirectory(atPath: preset, withIntermediateDirectories: true)
        return preset
    }
    let path = NSTemporaryDirectory() + "ocb-state-\(getpid())"
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    setenv("OCB_STATE_DIR", path, 1)
    atexit { try? FileManager.default.removeItem(atPath: NSTemporaryDirectory() + "ocb-state-\(getpid())") }
    return path
}()
