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

    @Option(help: "Charge airtime on this PHY (1m, 2m, coded-s2, coded-s8); links then move data at a real radio's pace.")
    var airtime: String?

    @Option(help: "With --airtime: the LE data length (27…251) and the connection interval in ms.")
    var dataLength = 251
    @Option(help: "With --airtime: the connection interval in ms.")
    var interval = 7.5

    func run() throws {
        if let airtime {
            guard let phy = LEPHY(rawValue: airtime) else { throw ValidationError("--airtime must be one of 1m, 2m, coded-s2, coded-s8") }
            guard (27...251).contains(dataLength), interval >= 7.5 else { throw ValidationError("--data-length 27…251, --interval ≥ 7.5") }
            VirtualAir.shared.loop.sync { VirtualAir.shared.airtime = AirtimeModel(phy: phy, dataLength: dataLength, connectionIntervalMilliseconds: interval) }
        }
        let server = try RadioServer(air: VirtualAir.shared, host: host, port: port)
        server.start()
        print("virtual radio listening on \(host):\(server.port) (H4 over TCP, one controller per connection)")
        fflush(nil)
        dispatchMain()
    }
}
