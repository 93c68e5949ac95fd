// A private D-Bus message bus for tests: the reference dbus-daemon (Debian's dbus-daemon package) on a socket in a
// temporary directory, one per test, killed and its directory removed when the object goes. DBusTests talks to it
// directly; BlueZTests runs a fake bluetoothd on it.
import Foundation
import DBus

public final class PrivateBus {
    public let directory: URL
    let process: Process
    public let address: String

    /// Async, and waiting with `pause`: a test's task must not hold a Dispatch worker for the seconds a loaded
    /// machine takes to start dbus-daemon, as the bus's handlers need workers too.
    public init() async throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("ocb-dbus-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let socket = directory.appendingPathComponent("bus").path
        address = "unix:path=\(socket)"
        let config = """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>\(address)</listen>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>
            """
        let configPath = directory.appendingPathComponent("bus.conf")
        try config.write(to: configPath, atomically: true, encoding: .utf8)
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        process.arguments = ["--config-file=\(configPath.path)", "--nofork", "--nopidfile", "--nosyslog"]
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        // Ready once the bus answers: its socket file appears at bind(), before listen(), so a client that
        // connects in between is refused (seen in full runs). Connect, authenticate and say Hello until it works,
        // for 20 s at most.
        let deadline = Date().addingTimeInterval(20)
        while true {
            if FileManager.default.fileExists(atPath: socket), let probe = try? DBusConnection(address: address, timeout: 2) {
                probe.close()
                break
            }
            guard Date() < deadline, process.isRunning else {
                stop()
                try? FileManager.default.removeItem(at: directory)
                throw DBusError.badAddress("dbus-daemon did not answer on \(address) within 20 s")
            }
            try await pause(nanoseconds: 10_000_000)
        }
    }

    /// SIGKILL (dbus-daemon does not exit on SIGTERM), then polls: Process.waitUntilExit can wait for good inside
    /// the test runner.
    public func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        for _ in 0..<500 where process.isRunning { usleep(10_000) }
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(at: directory)
    }

    public static var available: Bool { FileManager.default.isExecutableFile(atPath: "/usr/bin/dbus-daemon") }
}
