// Discovery procedures of the GATT server: Find Information, Find By Type Value, Read By Type,
// Read By Group Type (Vol 3 Part F §3.4.3, §3.4.4.1, §3.4.4.9; Vol 3 Part G §4.4–§4.7).

import BLEATT
import BLEWire

extension GATTServer {
    /// The Invalid Handle error owed to a bad handle range (Vol 3 Part F §3.4.3.1): a zero starting
    /// handle or a starting handle above the ending handle.
    func rangeError(_ opcode: ATTOpcode, _ start: UInt16, _ end: UInt16, _ client: GATTClientID) -> [GATTServerAction]? {
        guard start == 0 || start > end else { return nil }
        return [errorResponse(opcode, start, .invalidHandle, client)]
    }

    /// ATT_FIND_INFORMATION_REQ (§3.4.3.1): handles and types, all of one UUID size.
    mutating func findInformation(_ r: ATTFindInformationRequest, _ client: GATTClientID) -> [GATTServerAction] {
        let op = ATTOpcode.findInformationRequest
        if let e = rangeError(op, r.startingHandle, r.endingHandle, client) { return e }
        let mtu = clients[client]!.mtu
        var format: ATTFindInformationResponse.Format?
        var info: [ATTHandleUUID] = []
        for a in database.attributes(in: r.startingHandle...r.endingHandle) {
            let f: ATTFindInformationResponse.Format = a.type.uuid16 != nil ? .uuid16 : .uuid128
            if format == nil { format = f }
            guard f == format, 2 + (info.count + 1) * f.entrySize <= mtu else { break }
            info.append(ATTHandleUUID(handle: a.handle, uuid: a.type))
        }
        guard let format else { return [errorResponse(op, r.startingHandle, .attributeNotFound, client)] }
        return [.send(.findInformationResponse(ATTFindInformationResponse(format: format, information: info)), to: client)]
    }

    /// ATT_FIND_BY_TYPE_VALUE_REQ (§3.4.3.3), used for primary service discovery by UUID (Vol 3
    /// Part G §4.4.2). Service UUIDs compare as UUIDs, so a 16-bit service is found by its 128-bit form.
    mutating func findByTypeValue(_ r: ATTFindByTypeValueRequest, _ client: GATTClientID) -> [GATTServerAction] {
        let op = ATTOpcode.findByTypeValueRequest
        if let e = rangeError(op, r.startingHandle, r.endingHandle, client) { return e }
        let type = BluetoothUUID(r.attributeType)
        let isServiceType = type == .primaryService || type == .secondaryService
        let wanted = isServiceType ? try? BluetoothUUID(littleEndianBytes: r.attributeValue) : nil
        let mtu = clients[client]!.mtu
        var list: [ATTHandlesInformation] = []
        for a in database.attributes(in: r.startingHandle...r.endingHandle) where a.type == type {
            guard readError(a, client) == nil, let value = knownValue(a, client) else { continue }
            let matches: Bool
            if let wanted, let stored = try? BluetoothUUID(littleEndianBytes: value) { matches = wanted == stored } else { matches = value == r.attributeValue }
            guard matches else { continue }
            guard 1 + (list.count + 1) * 4 <= mtu else { break }
            let end = isServiceType ? (database.service(declaredAt: a.handle)?.range.upperBound ?? a.handle) : a.handle
            list.append(ATTHandlesInformation(foundAttributeHandle: a.handle, groupEndHandle: end))
        }
        guard !list.isEmpty else { return [errorResponse(op, r.startingHandle, .attributeNotFound, client)] }
        return [.send(.findByTypeValueResponse(ATTFindByTypeValueResponse(handlesInformationList: list)), to: client)]
    }

    /// ATT_READ_BY_TYPE_REQ (§3.4.4.1): characteristic and include discovery, and reading by UUID.
    /// Entries share one length; the first attribute that would fail, or is dynamic, ends the list
    /// (an error or a dynamic read if it is the first).
    mutating func readByType(_ r: ATTReadByTypeRequest, _ client: GATTClientID) -> [GATTServerAction] {
        let op = ATTOpcode.readByTypeRequest
        if let e = rangeError(op, r.startingHandle, r.endingHandle, client) { return e }
        let mtu = clients[client]!.mtu
        let maxValue = min(mtu - 4, 253)
        var list: [ATTHandleValue] = []
        for a in database.attributes(in: r.startingHandle...r.endingHandle) where a.type == r.attributeType {
            if let error = readError(a, client) {
                if list.isEmpty { return [errorResponse(op, a.handle, error, client)] }
                break
            }
            guard let value = knownValue(a, client) else {
                if list.isEmpty {
                    let id = park(.read(op, .readByType(handle: a.handle)), client)
                    return [.readRequest(id: id, client: client, handle: a.handle, offset: 0)]
                }
                break
            }
            let v = Array(value.prefix(maxValue))
            if let first = list.first, first.value.count != v.count { break }
            guard 2 + (list.count + 1) * (2 + v.count) <= mtu else { break }
            list.append(ATTHandleValue(handle: a.handle, value: v))
        }
        guard !list.isEmpty else { return [errorResponse(op, r.startingHandle, .attributeNotFound, client)] }
        return [.send(.readByTypeResponse(ATTReadByTypeResponse(attributeDataList: list)), to: client)]
    }

    /// ATT_READ_BY_GROUP_TYPE_REQ (§3.4.4.9): service discovery. Only the service types group.
    mutating func readByGroupType(_ r: ATTReadByGroupTypeRequest, _ client: GATTClientID) -> [GATTServerAction] {
        let op = ATTOpcode.readByGroupTypeRequest
        if let e = rangeError(op, r.startingHandle, r.endingHandle, client) { return e }
        let type = r.attributeGroupType
        guard type == .primaryService || type == .secondaryService else {
            return [errorResponse(op, r.startingHandle, .unsupportedGroupType, client)]
        }
        let mtu = clients[client]!.mtu
        let maxValue = min(mtu - 6, 251)
        let range = r.startingHandle...r.endingHandle
        var list: [ATTGroupData] = []
        for s in database.services where range.contains(s.range.lowerBound) && s.isPrimary == (type == .primaryService) {
            let v = Array(s.uuid.littleEndianBytes.prefix(maxValue))
            if let first = list.first, first.value.count != v.count { break }
            guard 2 + (list.count + 1) * (4 + v.count) <= mtu else { break }
            list.append(ATTGroupData(handle: s.range.lowerBound, endGroupHandle: s.range.upperBound, value: v))
        }
        guard !list.isEmpty else { return [errorResponse(op, r.startingHandle, .attributeNotFound, client)] }
        return [.send(.readByGroupTypeResponse(ATTReadByGroupTypeResponse(attributeDataList: list)), to: client)]
    }
}
