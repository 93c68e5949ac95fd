// `ble`: the command-line tool of OpenCoreBluetooth.
import ArgumentParser
import BLEHost
import Foundation

@main
struct BLETool: ParsableCommand {
    static let version = OpenCoreBluetooth.version

    static let configuration = CommandConfiguration(
        commandName: "ble",
        abstract: "OpenCoreBluetooth: a Bluetooth Low Energy host stack in Swift, with a virtual radio.",
        discussion: """
            The controller is chosen by BLE_TRANSPORT:
              virtual (default)     the in-process virtual radio
              tcp-client:HOST:PORT  H4 over TCP: `ble radio`, rootcanal, Bumble
              tcp-server:PORT       H4 over TCP; the controller connects to us
              serial:PATH[,BAUD]    H4 over a UART (default 1000000 baud)
              hci-socket:N          the HCI user channel of adapter hciN
              unix:PATH             H4 over a UNIX socket
            A controller that cannot be opened makes a command fail with the reason.

            Also: BLE_SNOOP=FILE records every HCI packet (btsnoop format);
            BLE_LOG=1 prints the stack's diagnostics (BLE_LOG=trace adds every
            packet); OCB_STATE_DIR holds bonds and identities; NO_COLOR turns
            colours off.
            """,
        version: version,
        subcommands: [
            ScanCommand.self, GattCommand.self, ReadCommand.self, WriteCommand.self, SubscribeCommand.self, ShellCommand.self,
            PairCommand.self, BondsCommand.self, ServeCommand.self, RadioCommand.self, SnoopCommand.self,
            DemoCommand.self, BenchCommand.self, SendCommand.self, ReceiveCommand.self, MCCommand.self, GKCommand.self,
            DoctorCommand.self, InteropCommand.self,
        ])

    /// As ArgumentParser's, except that a ValidationError raised once a subcommand runs shows that
    /// subcommand's usage, not the top-level one (ArgumentParser only knows the subcommand while parsing).
    static func main() {
        // A controller connection (ble radio, rootcanal) that closes under a write must be a reported
        // loss, not a silent death by SIGPIPE: writes then fail with EPIPE, which the transports handle.
        signal(SIGPIPE, SIG_IGN)
        ToolLogging.bootstrap()
        var command: any ParsableCommand
        do { command = try parseAsRoot() } catch { exit(withError: error) }
        do {
            try command.run()
        } catch let e as ValidationError {
            let sub = type(of: command)
            let path = CommandParserPath.names(of: sub)
            warn("Error: \(e.message)\nUsage: \(usageString(for: sub).replacingOccurrences(of: "\n", with: "\n  "))\n  See 'ble \(path) --help' for more information.")
            Foundation.exit(ExitCode.validationFailure.rawValue)
        } catch {
            exit(withError: error)
        }
    }
}

/// The names from the top command down to a subcommand ("bench throughput").
enum CommandParserPath {
    static func names(of target: any ParsableCommand.Type) -> String {
        func search(_ t: any ParsableCommand.Type, _ path: [String]) -> [String]? {
            if t == target { return path }
            for s in t.configuration.subcommands {
                if let found = search(s, path + [s._commandName]) { return found }
            }
            return nil
        }
        return (search(BLETool.self, []) ?? [target._commandName]).joined(separator: " ")
    }
}
