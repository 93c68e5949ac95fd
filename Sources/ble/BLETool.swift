// `ble`: the command-line tool of OpenCoreBluetooth.
import ArgumentParser

@main
struct BLETool: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ble",
        abstract: "OpenCoreBluetooth: a Bluetooth Low Energy host stack in Swift, with a virtual radio.",
        discussion: "The controller is chosen by BLE_TRANSPORT: virtual (default), tcp-client:HOST:PORT, unix:PATH.",
        subcommands: [DemoCommand.self, RadioCommand.self, ScanCommand.self, SnoopCommand.self, ServeCommand.self, BenchCommand.self, PairCommand.self, BondsCommand.self, SendCommand.self, ReceiveCommand.self, MCCommand.self, GKCommand.self])
}
