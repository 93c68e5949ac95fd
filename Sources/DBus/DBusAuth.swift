// The client side of D-Bus authentication (D-Bus Specification, "Authentication Protocol"): a NUL octet,
// then lines ending in CR LF. We offer EXTERNAL (the kernel vouches for our uid over the UNIX socket), ask
// for descriptor passing when wanted, and BEGIN; after BEGIN the stream carries messages.
// A pure machine: it is given the server's lines and returns what to send.

public struct DBusAuthClient: Sendable {
    public enum State: Equatable, Sendable {
        case awaitingOK
        case awaitingUnixFDAnswer
        case authenticated
        case failed(String)
    }

    public enum Step: Equatable, Sendable {
        /// Send these octets and read the next line.
        case send([UInt8])
        /// Send these octets (BEGIN); the stream now carries messages.
        case begin([UInt8], unixFDs: Bool, guid: String)
    }

    public private(set) var state: State = .awaitingOK
    let uid: UInt32
    let wantUnixFDs: Bool
    var guid = ""
    /// A line is at most this long; a longer one fails authentication (the server is not speaking D-Bus).
    public static let maxLineLength = 16_384

    public init(uid: UInt32, negotiateUnixFDs: Bool) {
        self.uid = uid
        self.wantUnixFDs = negotiateUnixFDs
    }

    /// The first octets: the credentials NUL and our AUTH line.
    public var opening: [UInt8] {
        let hex = Array(String(uid).utf8).map { byte -> String in
            let h = String(byte, radix: 16)
            return h.count == 1 ? "0" + h : h
        }.joined()
        return [0] + Array("AUTH EXTERNAL \(hex)\r\n".utf8)
    }

    /// The server sent `line` (without CR LF).
    public mutating func receive(line: String) throws(DBusError) -> Step {
        let words = line.split(separator: " ", omittingEmptySubsequences: true)
        let command = words.first.map(String.init) ?? ""
        switch state {
        case .awaitingOK:
            switch command {
            case "OK":
                guid = words.count > 1 ? String(words[1]) : ""
                if wantUnixFDs {
                    state = .awaitingUnixFDAnswer
                    return .send(Array("NEGOTIATE_UNIX_FD\r\n".utf8))
                }
                state = .authenticated
                return .begin(Array("BEGIN\r\n".utf8), unixFDs: false, guid: guid)
            case "REJECTED":
                let offered = words.dropFirst().joined(separator: " ")
                try fail("the bus refused EXTERNAL for uid \(uid) (it offers: \(offered.isEmpty ? "nothing" : offered))")
            case "DATA", "ERROR":
                // EXTERNAL with an identity needs no data; a server asking for more is not one we can satisfy.
                try fail("unexpected \(command) while authenticating")
            default:
                try fail("unexpected line \"\(line.prefix(80))\"")
            }
        case .awaitingUnixFDAnswer:
            switch command {
            case "AGREE_UNIX_FD":
                state = .authenticated
                return .begin(Array("BEGIN\r\n".utf8), unixFDs: true, guid: guid)
            case "ERROR":
                state = .authenticated
                return .begin(Array("BEGIN\r\n".utf8), unixFDs: false, guid: guid)
            default:
                try fail("unexpected line \"\(line.prefix(80))\" after NEGOTIATE_UNIX_FD")
            }
        case .authenticated, .failed:
            try fail("line after authentication ended")
        }
    }

    private mutating func fail(_ why: String) throws(DBusError) -> Never {
        state = .failed(why)
        throw .authenticationFailed(why)
    }
}
