// An L2CAP credit-based channel that a central opened to a simulated peripheral's PSM, as the peripheral's
// handler sees it: receive what the central writes, send back, close. Loop-confined, like the handlers.
import Foundation
import BLEHost
import BLETransport

public final class SimulatedL2CAPChannel: @unchecked Sendable {
    private let channel: HostL2CAPChannel
    private let loop: EventLoop

    init(channel: HostL2CAPChannel, loop: EventLoop) {
        self.channel = channel
        self.loop = loop
        channel.context = self
    }

    public var psm: UInt16 { channel.psm }
    public var isOpen: Bool { channel.isOpen }

    /// Called with each SDU the central sends (on the air's loop). What is received is consumed at once,
    /// so the central gets its credits back.
    public var onReceive: ((Data) -> Void)? {
        didSet {
            let handler = onReceive
            channel.onReceive = { [weak channel] bytes in
                channel?.consumed(bytes.count)
                handler?(Data(bytes))
            }
        }
    }

    /// Called once when the channel closes.
    public var onClose: (() -> Void)? {
        didSet { let h = onClose; channel.onClose = { _ in h?() } }
    }

    /// Sends an SDU; false when the send queue is full.
    @discardableResult
    public func send(_ data: Data) -> Bool { channel.send([UInt8](data)) }

    /// Sends back everything received (an echo server).
    public func echo() { onReceive = { [weak self] d in self?.send(d) } }

    public func close() { channel.close() }
}
