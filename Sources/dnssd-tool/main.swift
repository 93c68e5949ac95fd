// dnssd-tool: register or browse DNS-SD services from the command line, printing events as lines.
//
//   dnssd-tool register --type _chat._tcp --name NAME --port N [--txt k=v]… [--interface IF]… [--seconds S]
//   dnssd-tool browse   --type _chat._tcp [--interface IF]… [--seconds S]
//   (both: --family 4 or --family 6 to use one address family only)
//
// Each line starts with milliseconds since start (monotonic): `123 registered NAME`, `123 renamed A -> B`,
// `123 found NAME host=H port=P addrs=a,b txt=k=v;k2=v2`, `123 updated …`, `123 lost NAME`, `123 failed …`.
// SIGTERM or SIGINT stops cleanly (goodbyes), then the tool prints `123 stopped` and exits 0.
import DNSSDNIO
import Dispatch
import Foundation

// Block SIGTERM/SIGINT in every thread (before any thread starts) and take them with sigtimedwait below.
var stopSignals = sigset_t()
sigemptyset(&stopSignals)
sigaddset(&stopSignals, SIGTERM)
sigaddset(&stopSignals, SIGINT)
pthread_sigmask(SIG_BLOCK, &stopSignals, nil)

let start = DispatchTime.now()
func say(_ line: String) {
    let ms = (DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1_000_000
    FileHandle.standardOutput.write(Data("\(ms) \(line)\n".utf8))
}

var args = Array(CommandLine.arguments.dropFirst())
guard let command = args.first, command == "register" || command == "browse" else {
    FileHandle.standardError.write(Data("usage: dnssd-tool register|browse --type _x._tcp [--name N --port P --txt k=v] [--interface IF] [--seconds S]\n".utf8))
    exit(2)
}
args.removeFirst()
var type = "_chat._tcp", name = "dnssd-tool", port: UInt16 = 9, txt: [String: String] = [:], interfaces: [String] = [], seconds: Double = 0
var family = 0
while !args.isEmpty {
    let flag = args.removeFirst()
    guard let value = args.first else { say("failed missing value for \(flag)"); exit(2) }
    args.removeFirst()
    switch flag {
    case "--type": type = value
    case "--name": name = value
    case "--port": port = UInt16(value) ?? 9
    case "--txt":
        let parts = value.split(separator: "=", maxSplits: 1).map(String.init)
        txt[parts[0]] = parts.count > 1 ? parts[1] : ""
    case "--interface": interfaces.append(value)
    case "--seconds": seconds = Double(value) ?? 0
    case "--family": family = Int(value) ?? 0
    default: say("failed unknown flag \(flag)"); exit(2)
    }
}

let service = MDNSService(interfaces: interfaces.isEmpty ? nil : interfaces, ipv4: family != 6, ipv6: family != 4, log: { say("log \($0)") })
var stopper: () -> Void = {}
if command == "register" {
    let reg = service.register(serviceType: type, instanceName: name, port: port, txt: txt) { event in
        switch event {
        case .registered(let n): say("registered \(n)")
        case .renamed(let from, let to): say("renamed \(from) -> \(to)")
        case .failed(let e): say("failed \(e)")
        }
    }
    stopper = { reg.cancel() }
} else {
    let browse = service.browse(serviceType: type) { event in
        func describe(_ s: DiscoveredService) -> String {
            let t = s.txt.keys.sorted().map { "\($0)=\(s.txt[$0]!)" }.joined(separator: ";")
            return "\(s.instanceName)\thost=\(s.hostName) port=\(s.port) addrs=\(s.addresses.joined(separator: ",")) txt=\(t)"
        }
        switch event {
        case .found(let s): say("found \(describe(s))")
        case .updated(let s): say("updated \(describe(s))")
        case .lost(let n): say("lost \(n)")
        case .failed(let e): say("failed \(e)")
        }
    }
    stopper = { browse.cancel() }
}

// Wait for a stop signal, or for --seconds.
var limit = timespec(tv_sec: seconds > 0 ? Int(seconds) : Int.max / 4, tv_nsec: seconds > 0 ? Int((seconds - seconds.rounded(.down)) * 1e9) : 0)
while true {
    let r = sigtimedwait(&stopSignals, nil, &limit)
    if r == SIGTERM || r == SIGINT { break }
    if r < 0 && errno == EAGAIN { break }   // --seconds elapsed
}
stopper()
service.shutdown()
say("stopped")
exit(0)
