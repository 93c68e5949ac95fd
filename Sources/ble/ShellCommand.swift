// `ble shell DEVICE`: connect once, then type commands, in the spirit of bluetoothctl's GATT menu:
// `list`, `read ATTR`, `write ATTR (--hex H | --text T) [--no-response]`, `subscribe ATTR`, `unsubscribe
// ATTR`, `help`, `quit`. Lines come from standard input (a prompt is shown on a terminal), so a script can
// be piped in; each line is parsed by ArgumentParser like a command line. Notifications are printed as
// they arrive. Small on purpose: no line editing (use rlwrap for history).
import ArgumentParser
import Foundation
import BLEWire
import BLEHost

struct ShellCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shell", abstract: "Connect to a device once, then list, read, write and subscribe interactively.")

    @OptionGroup var connect: ConnectOptions

    func run() throws {
        if let bluez = BlueZTool.options { return try BlueZTool.shell(bluez, self) }
        try connect.withLink { link, _ in
            let db = try RemoteDatabase.discover(link, values: false)
            let interactive = isatty(STDIN_FILENO) == 1 && Terminal.isTerminal
            final class Subscriptions: @unchecked Sendable {
                let lock = NSLock()
                var byHandle: [UInt16: RemoteDatabase.Characteristic] = [:]
                var lost: String?
            }
            let subs = Subscriptions()
            link.host.loop.sync {
                link.onValue = { handle, value, indication in
                    guard let c = subs.lock.withLock({ subs.byHandle[handle] }) else { return }
                    say(SubscribeCommand.line(c, value, indication: indication, json: false))
                }
                link.onDisconnect = { reason in
                    subs.lock.withLock { subs.lost = "\(reason)" }
                    warn("disconnected: \(reason)")
                }
            }
            let session = ShellSession(link: link, db: db) { c, on in subs.lock.withLock { subs.byHandle[c.valueHandle] = on ? c : nil } }
            say("connected; \(db.characteristics.count) characteristics in \(db.services.count) services. Type help for the commands.")
            while true {
                if let lost = subs.lock.withLock({ subs.lost }) { throw ToolError("the link went down: \(lost)") }
                if interactive { print("ble> ", terminator: ""); fflush(nil) }
                guard let line = readLine() else { break }
                let words = ShellSession.split(line)
                guard let first = words.first else { continue }
                if first == "quit" || first == "exit" { break }
                do {
                    try session.execute(words)
                } catch {
                    // ArgumentParser's own messages for bad lines, ours for failures; the shell goes on.
                    warn(error is ToolError || error is GATTFailure ? "error: \(error)" : "error: " + ShellLine.message(for: error))
                }
            }
            for c in subs.lock.withLock({ subs.byHandle.values }) {
                if let cccd = c.cccd { _ = try? link.gatt(.write(handle: cccd.handle, value: [0, 0])) }
            }
        }
    }
}

/// One typed line, parsed like a command line.
struct ShellLine: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shell", abstract: "Commands of ble shell.",
        subcommands: [List.self, Read.self, Write.self, Subscribe.self, Unsubscribe.self])

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The database as a tree (values read again).")
        @Flag(help: "Without reading values.") var noValues = false
    }
    struct Read: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Read a characteristic by UUID or any attribute by handle.")
        @Argument var attribute: AttributeSpec
    }
    struct Write: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Write hex or text.")
        @Argument var attribute: AttributeSpec
        @Option var hex: String?
        @Option var text: String?
        @Flag var noResponse = false
        func validate() throws {
            guard (hex == nil) != (text == nil) else { throw ValidationError("give --hex or --text") }
            if let hex, WriteCommand.parseHex(hex) == nil { throw ValidationError("--hex: \"\(hex)\" is not hex") }
        }
    }
    struct Subscribe: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a characteristic's notifications or indications as they come.")
        @Argument var attribute: AttributeSpec
    }
    struct Unsubscribe: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Stop them.")
        @Argument var attribute: AttributeSpec
    }
}

struct ShellSession {
    let link: DeviceLink
    var db: RemoteDatabase
    let subscribed: (RemoteDatabase.Characteristic, Bool) -> Void

    init(link: DeviceLink, db: RemoteDatabase, subscribed: @escaping (RemoteDatabase.Characteristic, Bool) -> Void) {
        self.link = link; self.db = db; self.subscribed = subscribed
    }

    static let help = """
        list [--no-values]                           the database as a tree
        read ATTR                                    read a characteristic (UUID) or an attribute (handle)
        write ATTR (--hex HEX | --text TEXT) [--no-response]
        subscribe ATTR / unsubscribe ATTR            notifications and indications, printed as they come
        help, quit
        """

    /// Words of a line; double quotes group words ("hello world").
    static func split(_ line: String) -> [String] {
        var words: [String] = [], current = "", quoted = false, any = false
        for ch in line {
            if ch == "\"" { quoted.toggle(); any = true; continue }
            if ch.isWhitespace && !quoted {
                if any { words.append(current) }
                current = ""; any = false
                continue
            }
            current.append(ch); any = true
        }
        if any { words.append(current) }
        return words
    }

    func execute(_ words: [String]) throws {
        if words == ["help"] { return say(Self.help) }
        switch try ShellLine.parseAsRoot(words) {
        case let l as ShellLine.List:
            var d = db
            if !l.noValues { try d.readValues(link) }
            say(d.tree(header: "\(link.connection?.peerAddress.description ?? "device")"))
        case let r as ShellLine.Read:
            let t = try Target(r.attribute, in: db)
            let v = try link.read(t.handle)
            say("\(t.label): " + RemoteDatabase.render(value: v, error: nil, decoded: t.decode(v)))
        case let w as ShellLine.Write:
            let t = try Target(w.attribute, in: db)
            let v = w.hex.flatMap(WriteCommand.parseHex) ?? Array((w.text ?? "").utf8)
            if w.noResponse { try link.writeWithoutResponse(t.handle, v) } else { _ = try link.gatt(.write(handle: t.handle, value: v)) }
            say("wrote \(v.count) octet(s) to \(t.label)")
        case let s as ShellLine.Subscribe:
            let c = try db.characteristic(s.attribute)
            guard c.properties & 0x30 != 0, let cccd = c.cccd else { throw ToolError("\(Target.label(c)) neither notifies nor indicates") }
            subscribed(c, true)
            _ = try link.gatt(.write(handle: cccd.handle, value: [c.properties & 0x10 != 0 ? 1 : 2, 0]))
            say("subscribed to \(Target.label(c))")
        case let u as ShellLine.Unsubscribe:
            let c = try db.characteristic(u.attribute)
            guard let cccd = c.cccd else { throw ToolError("\(Target.label(c)) has no Client Characteristic Configuration descriptor") }
            _ = try link.gatt(.write(handle: cccd.handle, value: [0, 0]))
            subscribed(c, false)
            say("unsubscribed from \(Target.label(c))")
        default:
            throw ToolError("type help for the commands")
        }
    }
}
