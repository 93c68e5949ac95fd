// Reassembles reliable messages from their `data` chunks (one message at a time per link: chunks of one
// message are never interleaved with another message's, so order is the link's order). Bounded: a message
// larger than `maximumMessage` is a protocol error, not an allocation.
public struct MessageAssembler: Sendable {
    public let maximumMessage: Int
    private var current: (id: UInt32, bytes: [UInt8])?

    public init(maximumMessage: Int = 256 << 20) {
        self.maximumMessage = maximumMessage
    }

    /// Takes one chunk; returns the whole message when `final`.
    public mutating func take(id: UInt32, final: Bool, chunk: [UInt8]) throws(PeerProtocolError) -> [UInt8]? {
        if let c = current, c.id != id { throw .unexpected("message \(id) started before \(c.id) ended") }
        var bytes = current?.bytes ?? []
        guard bytes.count + chunk.count <= maximumMessage else {
            current = nil
            throw .malformed("message larger than \(maximumMessage) octets")
        }
        if bytes.isEmpty && final { current = nil; return chunk }
        bytes.append(contentsOf: chunk)
        if final { current = nil; return bytes }
        current = (id, bytes)
        return nil
    }

    /// Splits a message into `data` messages of at most `chunk` octets.
    public static func split(_ message: [UInt8], id: UInt32, chunk: Int = 64 * 1024) -> [PeerMessage] {
        guard message.count > chunk else { return [.data(id: id, final: true, unreliable: false, chunk: message)] }
        var out: [PeerMessage] = []
        var i = 0
        while i < message.count {
            let end = min(message.count, i + chunk)
            out.append(.data(id: id, final: end == message.count, unreliable: false, chunk: Array(message[i..<end])))
            i = end
        }
        return out
    }
}
