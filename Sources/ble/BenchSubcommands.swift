// `ble bench` as subcommands, each with only the options that apply to it (anything else is refused by
// the parser): throughput, rtt, airtime, sweep, scale and peer. Each builds the arguments of the classic
// flat form (BenchClassicCommand, still the default for scripts) and runs it, so that one implementation
// measures either way.
import ArgumentParser
import Foundation

struct BenchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench", abstract: "Measure throughput, CPU time and round trips.",
        discussion: "Without a subcommand, the classic flat options (--mode, --airtime, --sweep, --scale, --role) are accepted.",
        subcommands: [
            BenchThroughput.self, BenchRTT.self, BenchAirtimeCommand.self, BenchSweep.self, BenchScaleCommand.self, BenchPeerCommand.self,
            BenchClassicCommand.self,
        ],
        defaultSubcommand: BenchClassicCommand.self)
}

/// Runs the classic bench with these arguments (only the options given are passed, so its defaults hold).
func runClassicBench(_ args: [String]) throws {
    BenchClassicCommand.forwardedArguments = args
    let command = try BenchClassicCommand.parse(args)
    try command.run()
}

/// "--name value" for the options that were given.
func given(_ pairs: [(String, CustomStringConvertible?)]) -> [String] {
    pairs.flatMap { name, value in value.map { [name, "\($0)"] } ?? [] }
}

struct BenchThroughput: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "throughput", abstract: "Data one way between two hosts in this process (virtual radio, no airtime): host cost.")

    enum Mode: String, ExpressibleByArgument, CaseIterable { case notify, write, l2cap }
    @Option(help: "notify (peripheral → central), write (without response, central → peripheral), l2cap (SDUs over a credit-based channel).")
    var mode: Mode = .notify
    @Option(help: "Payload size in octets (1…244; one SDU up to 65535 with l2cap).")
    var size: Int?
    @Option(help: "Number of packets.")
    var count: Int?
    @Option(help: "The virtual controllers' ACL buffer size in octets (27…65535).")
    var aclBuffer: Int?
    @Option(help: "host or corebluetooth (notify and l2cap only).")
    var api: BenchClassicCommand.API = .host
    @Flag(help: "With --api corebluetooth --mode l2cap: both ends' streams on one run loop thread.")
    var oneStreamThread = false

    func validate() throws {
        if api == .corebluetooth && mode == .write { throw ValidationError("--api corebluetooth supports --mode notify and l2cap") }
        if oneStreamThread && !(api == .corebluetooth && mode == .l2cap) { throw ValidationError("--one-stream-thread applies to --api corebluetooth --mode l2cap") }
    }

    func run() throws {
        try runClassicBench(
            ["--mode", mode.rawValue, "--api", api.rawValue] + given([("--size", size), ("--count", count), ("--acl-buffer", aclBuffer)])
                + (oneStreamThread ? ["--one-stream-thread"] : []))
    }
}

struct BenchRTT: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rtt", abstract: "Round trips: writes with response, or reads, one at a time (virtual radio, this process).")

    enum Mode: String, ExpressibleByArgument, CaseIterable { case write, read }
    @Option(help: "write (Write Request and Response) or read (Read Request and Response).")
    var mode: Mode = .write
    @Option(help: "Payload size in octets (1…244).")
    var size: Int?
    @Option(help: "Number of round trips.")
    var count: Int?
    @Option(help: "The virtual controllers' ACL buffer size in octets (27…65535).")
    var aclBuffer: Int?

    func run() throws {
        try runClassicBench(["--mode", mode == .write ? "rtt" : "read"] + given([("--size", size), ("--count", count), ("--acl-buffer", aclBuffer)]))
    }
}

struct BenchAirtimeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "airtime", abstract: "Throughput with airtime charged on a virtual clock, against the theoretical maximum.",
        discussion: "Times reported are simulated time on the airtime model's clock, not wall-clock time.")

    enum Mode: String, ExpressibleByArgument, CaseIterable { case notify, write, l2cap }
    @Option(help: "notify, write (without response) or l2cap.")
    var mode: Mode = .notify
    @Option(help: "1m, 2m, coded-s2 or coded-s8.")
    var phy = "1m"
    @Option(help: "LE data length, 27…251 octets.")
    var dataLength: Int?
    @Option(help: "Connection interval in ms (7.5…4000).")
    var interval: Double?
    @Option(help: "Connection event length in ms (default: the whole interval).")
    var eventLength: Double?
    @Option(help: "Probability that a packet is lost and sent again (0…0.9).")
    var loss: Double?
    @Option(help: "Time (µs) the controller keeps at the end of each event; 3600 matches Nordic's SoftDevice.")
    var controllerReserve: Double?
    @Option(help: "Payload size in octets (default: one full LL packet).")
    var size: Int?
    @Option(help: "Number of packets.")
    var count: Int?

    func run() throws {
        try runClassicBench(
            ["--airtime", "--mode", mode.rawValue, "--phy", phy]
                + given([
                    ("--data-length", dataLength), ("--interval", interval), ("--event-length", eventLength), ("--loss", loss),
                    ("--controller-reserve", controllerReserve), ("--size", size), ("--count", count),
                ]))
    }
}

struct BenchSweep: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sweep", abstract: "The airtime grid (LE 1M/2M × data length 27/251 × 7.5/15/30/50 ms) and an SVG plot (simulated time).")

    @Argument(help: "Where to write the SVG plot.")
    var plot: String
    @Option(help: "Probability that a packet is lost and sent again (0…0.9).")
    var loss: Double?
    @Option(help: "Time (µs) the controller keeps at the end of each event.")
    var controllerReserve: Double?
    @Option(help: "Packets of 244 octets per point.")
    var count: Int?

    func run() throws {
        try runClassicBench(["--sweep", plot] + given([("--loss", loss), ("--controller-reserve", controllerReserve), ("--count", count)]))
    }
}

struct BenchScaleCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scale", abstract: "Many devices on the virtual radio: connections (one central, N peripherals notifying) or advertisers.")

    enum Kind: String, ExpressibleByArgument, CaseIterable { case connections, advertisers }
    @Argument(help: "connections or advertisers.")
    var kind: Kind
    @Option(help: "The sizes to run, each in its own process (default 25,50,100 or 1000,2500,5000,10000).")
    var sizes: String?
    @Option(help: "With connections: notifications per connection.")
    var each: Int?

    func validate() throws {
        if let sizes, sizes.split(separator: ",").contains(where: { Int($0).map { $0 <= 0 } ?? true }) {
            throw ValidationError("--sizes: positive numbers separated by commas")
        }
        if each != nil && kind == .advertisers { throw ValidationError("--each applies to connections") }
    }

    func run() throws {
        try runClassicBench(["--scale", kind.rawValue] + given([("--sizes", sizes), ("--each", each)]))
    }
}

struct BenchPeerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "peer", abstract: "One side of bumble-bench's GATT protocol (or its L2CAP one) over BLE_TRANSPORT.")

    enum Role: String, ExpressibleByArgument, CaseIterable { case central, peripheral }
    enum Scenario: String, ExpressibleByArgument, CaseIterable { case send, receive, ping, pong }
    @Argument(help: "central (connects to --peer) or peripheral.")
    var role: Role
    @Option(help: "send, receive, ping or pong (default: send as central, receive as peripheral).")
    var scenario: Scenario?
    @Option(help: "As central: the peripheral's address; as peripheral: our static random address.")
    var peer: String?
    @Flag(help: "bumble-bench's L2CAP protocol (SPSM 128) instead of GATT.")
    var l2cap = false
    @Option(help: "Payload size in octets (10…244; 12…65535 with --l2cap).")
    var size: Int?
    @Option(help: "Number of packets.")
    var count: Int?
    @Option(help: "As central: the connection interval in ms.")
    var interval: Double?
    @Option(help: "Give up after this many seconds.")
    var timeout: Double?

    func run() throws {
        try runClassicBench(
            ["--role", role.rawValue, "--mode", l2cap ? "l2cap" : "write"]
                + given([
                    ("--scenario", scenario?.rawValue), ("--peer", peer), ("--size", size), ("--count", count),
                    ("--interval", interval), ("--timeout", timeout),
                ]))
    }
}
