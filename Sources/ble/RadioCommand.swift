// `ble radio --port N`: serves the virtual radio over TCP; each connection is one controller (H4).
import ArgumentParser
import Foundation
import BLEVirtualRadio
import BLETransport

struct RadioCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "radio", abstract: "Serve the virtual radio over TCP: every connection is a new controller on one simulated air.")

    @Option(help: "TCP port to listen on (0 picks a free one).")
    var port: UInt16 = 6402

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"

    func run() throws {
        let server = try RadioServer(air: VirtualAir.shared, host: host, port: port)
        server.start()
        print("virtual radio listening on \(host):\(server.port) (H4 over TCP, one controller per connection)")
        fflush(nil)
        dispatchMain()
    }
}
