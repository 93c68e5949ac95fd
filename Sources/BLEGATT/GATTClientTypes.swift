// The vocabulary of GATTClient: procedures, outcomes, failures, actions, and what discovery finds.
import BLEWire
import BLEATT

/// A service found by primary service discovery (Vol 3 Part G §4.4).
public struct GATTRemoteService: Sendable, Equatable {
    public var uuid: BluetoothUUID
    public var handle: UInt16
    public var endHandle: UInt16
    public init(uuid: BluetoothUUID, handle: UInt16, endHandle: UInt16) {
        self.uuid = uuid; self.handle = handle; self.endHandle = endHandle
    }
}

/// An include declaration found by relationship discovery (Vol 3 Part G §4.5).
public struct GATTRemoteInclude: Sendable, Equatable {
    public var declarationHandle: UInt16
    public var startHandle: UInt16
    public var endHandle: UInt16
    public var uuid: BluetoothUUID
    public init(declarationHandle: UInt16, startHandle: UInt16, endHandle: UInt16, uuid: BluetoothUUID) {
        self.declarationHandle = declarationHandle; self.startHandle = startHandle; self.endHandle = endHandle; self.uuid = uuid
    }
}

/// A characteristic declaration (Vol 3 Part G §3.3.1, §4.6).
public struct GATTRemoteCharacteristic: Sendable, Equatable {
    public var uuid: BluetoothUUID
    public var declarationHandle: UInt16
    public var valueHandle: UInt16
    /// Characteristic Properties bits (§3.3.1.1).
    public var properties: UInt8
    public init(uuid: BluetoothUUID, declarationHandle: UInt16, valueHandle: UInt16, properties: UInt8) {
        self.uuid = uuid; self.declarationHandle = declarationHandle; self.valueHandle = valueHandle; self.properties = properties
    }
}

/// A characteristic descriptor (§4.7).
public struct GATTRemoteDescriptor: Sendable, Equatable {
    public var uuid: BluetoothUUID
    public var handle: UInt16
    public init(uuid: BluetoothUUID, handle: UInt16) { self.uuid = uuid; self.handle = handle }
}

/// One attribute handle and value (Read Using Characteristic UUID, reliable writes).
public struct GATTHandleValue: Sendable, Equatable {
    public var handle: UInt16
    public var value: [UInt8]
    public init(handle: UInt16, value: [UInt8]) { self.handle = handle; self.value = value }
}

extension GATTClient {
    public typealias ProcedureID = UInt64

    /// The client procedures of Vol 3 Part G §4.
    public enum Procedure: Sendable, Equatable {
        case exchangeMTU(clientRxMTU: UInt16)
        case discoverAllPrimaryServices
        case discoverPrimaryServices(uuid: BluetoothUUID)
        case findIncludedServices(start: UInt16, end: UInt16)
        /// All characteristics in the range, or only those of `uuid`.
        case discoverCharacteristics(start: UInt16, end: UInt16, uuid: BluetoothUUID?)
        case discoverDescriptors(start: UInt16, end: UInt16)
        case read(handle: UInt16)
        /// Read, then Read Blob until a short part (§4.8.3).
        case readLong(handle: UInt16)
        case readMultiple(handles: [UInt16])
        case readMultipleVariable(handles: [UInt16])
        case readUsingCharacteristicUUID(start: UInt16, end: UInt16, uuid: BluetoothUUID)
        /// Write Request when it fits in ATT_MTU − 3, else a long write (§4.9.3, §4.9.4).
        case write(handle: UInt16, value: [UInt8])
        case writeLong(handle: UInt16, offset: UInt16, value: [UInt8])
        /// Prepared writes of several attributes, executed together (§4.9.5).
        case reliableWrite([GATTHandleValue])
    }

    public enum Outcome: Sendable, Equatable {
        case mtu(UInt16)
        case services([GATTRemoteService])
        case includedServices([GATTRemoteInclude])
        case characteristics([GATTRemoteCharacteristic])
        case descriptors([GATTRemoteDescriptor])
        case value([UInt8])
        case values([[UInt8]])
        case handleValues([GATTHandleValue])
        case written
    }

    public enum Failure: Error, Sendable, Equatable {
        /// The server answered with an Error Response.
        case att(ATTErrorCode, handle: UInt16)
        /// No response within 30 s (Vol 3 Part F §3.3.3).
        case timeout
        case disconnected
        /// The server's answer broke the procedure's rules.
        case invalidResponse(String)
        /// A transaction timed out earlier; this bearer takes no more requests.
        case bearerClosed
        /// The caller asked for something ATT cannot carry (e.g. a write command beyond ATT_MTU − 3).
        case invalidRequest(String)
    }

    public enum Action: Sendable, Equatable {
        /// Send a request: the host starts the 30 s transaction timer.
        case send(ATTPDU)
        /// Send a PDU that has no response (Write Command, Handle Value Confirmation).
        case sendCommand(ATTPDU)
        case complete(ProcedureID, Result<Outcome, Failure>)
        case notification(handle: UInt16, value: [UInt8])
        /// The confirmation is sent by the client itself (a `.sendCommand` follows).
        case indication(handle: UInt16, value: [UInt8])
        /// The server sent something no procedure expects; the host may disconnect.
        case protocolViolation(String)
    }
}
