// The vocabulary of GATTServer: client and request identifiers, actions, configuration.

import BLEATT

/// Identifies one connected client (the host uses its connection handle or any unique number).
public struct GATTClientID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "client#\(rawValue)" }
}

/// Identifies a read or write the application must answer.
public struct GATTRequestID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "gatt-request#\(rawValue)" }
}

/// One write of a dynamic attribute: `value` goes at `offset` (non-zero only for queued writes).
public struct GATTWrite: Sendable, Equatable {
    public var handle: UInt16
    public var offset: UInt16
    public var value: [UInt8]
    public init(handle: UInt16, offset: UInt16, value: [UInt8]) {
        self.handle = handle
        self.offset = offset
        self.value = value
    }
}

/// What a GATTServer asks the host and the application to do.
public enum GATTServerAction: Sendable, Equatable {
    /// Send this PDU on the client's bearer.
    case send(ATTPDU, to: GATTClientID)
    /// The application must answer with `completeRead(id:result:)`: the value from `offset` on.
    case readRequest(id: GATTRequestID, client: GATTClientID, handle: UInt16, offset: UInt16)
    /// The application must apply all writes or none, then call `completeWrite(id:error:)`
    /// (also for commands, whose answer is dropped).
    case writeRequests(id: GATTRequestID, client: GATTClientID, writes: [GATTWrite], needsResponse: Bool)
    /// A client's Client Characteristic Configuration changed.
    case subscriptionChanged(client: GATTClientID, characteristicValueHandle: UInt16, notify: Bool, indicate: Bool)
    /// A stored value was changed by a client's write.
    case valueWritten(client: GATTClientID, handle: UInt16, value: [UInt8])
    case indicationConfirmed(client: GATTClientID, handle: UInt16)
    /// An indication was dropped: the client disconnected or the confirmation timed out.
    case indicationAbandoned(client: GATTClientID, handle: UInt16)
    /// Run the 30-second confirmation timer of this client; call `confirmationTimeout` if it fires.
    case startConfirmationTimer(client: GATTClientID)
    case stopConfirmationTimer(client: GATTClientID)
    /// The client's ATT_MTU changed (the host tells the client role of the same bearer).
    case mtuChanged(client: GATTClientID, mtu: UInt16)
    /// A bonded client left: store these CCCD values (by descriptor handle) for its next connection.
    case saveClientConfiguration(client: GATTClientID, values: [UInt16: UInt16])
    /// The client broke the protocol (the host may disconnect it).
    case protocolError(client: GATTClientID, ATTProtocolError)
}

/// Limits and preferences of a GATTServer.
public struct GATTServerConfiguration: Sendable, Equatable {
    /// Server Rx MTU answered to Exchange MTU.
    public var preferredMTU: UInt16
    /// The most Prepare Write requests queued per client.
    public var maximumPreparedWrites: Int
    /// The most value octets queued per client.
    public var maximumPreparedBytes: Int
    /// The shortest encryption key accepted for attributes that need encryption.
    public var minimumKeySize: UInt8

    public init(
        preferredMTU: UInt16 = ATTMTU.maximum, maximumPreparedWrites: Int = 32,
        maximumPreparedBytes: Int = 2048, minimumKeySize: UInt8 = 7
    ) {
        self.preferredMTU = preferredMTU
        self.maximumPreparedWrites = maximumPreparedWrites
        self.maximumPreparedBytes = maximumPreparedBytes
        self.minimumKeySize = minimumKeySize
    }
}
