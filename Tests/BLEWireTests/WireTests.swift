import Testing
@testable import BLEWire

@Suite struct ByteReaderTests {
    @Test func readsLittleEndian() throws {
        var r = ByteReader([0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09])
        #expect(try r.readUInt8() == 0x01)
        #expect(try r.readUInt16() == 0x0302)
        #expect(try r.readUInt24() == 0x060504)
        #expect(r.remaining == 3)
        #expect(throws: WireError.truncated(needed: 4, available: 3)) { try r.readUInt32() }
        #expect(r.readRemaining() == [0x07, 0x08, 0x09])
        #expect(r.isAtEnd)
    }

    @Test func writerRoundTrip() throws {
        var w = ByteWriter()
        w.write(UInt8(0xAA)); w.write(UInt16(0xBBCC)); w.write(UInt32(0x11223344)); w.write(UInt64(0x0102030405060708))
        var r = ByteReader(w.bytes)
        #expect(try r.readUInt8() == 0xAA)
        #expect(try r.readUInt16() == 0xBBCC)
        #expect(try r.readUInt32() == 0x11223344)
        #expect(try r.readUInt64() == 0x0102030405060708)
        try r.expectEnd()
    }

    @Test func hex() {
        #expect([UInt8](hexString: "0a:FF 10") == [0x0A, 0xFF, 0x10])
        #expect([UInt8](hexString: "abc") == nil)
        #expect([UInt8](hexString: "zz") == nil)
        #expect([UInt8]([0x0A, 0xFF]).hexString == "0aff")
    }
}

@Suite struct UUIDTests {
    @Test func shortFormsExpandOnBaseUUID() throws {
        let hr = BluetoothUUID(0x180D)
        #expect(hr.uuidString == "180D")
        #expect(hr.uuid128String == "0000180D-0000-1000-8000-00805F9B34FB")
        #expect(hr == BluetoothUUID(string: "0000180D-0000-1000-8000-00805f9b34fb")!)
        #expect(hr == BluetoothUUID(uint32: 0x0000180D))
        #expect(BluetoothUUID(string: "0000180D-0000-1000-8000-00805f9b34fb")!.shortened.wireSize == 2)
        #expect(hr.littleEndianBytes == [0x0D, 0x18])
        #expect(try BluetoothUUID(littleEndianBytes: [0x0D, 0x18]) == hr)
    }

    @Test func long() throws {
        let u = BluetoothUUID(string: "6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!
        #expect(u.wireSize == 16)
        #expect(u.uuid16 == nil)
        #expect(try BluetoothUUID(littleEndianBytes: u.littleEndianBytes) == u)
        #expect(u.littleEndianBytes.first == 0x9E)
        #expect(BluetoothUUID(string: "6E400001B5A3F393E0A9E50E24DCCA9E") == u)
        #expect(BluetoothUUID(string: "6E4-00001B5A3F393E0A9E50E24DCCA9E") == nil)
        #expect(BluetoothUUID(string: "xyz") == nil)
        #expect(throws: WireError.self) { try BluetoothUUID(littleEndianBytes: [1, 2, 3]) }
    }
}

@Suite struct AddressTests {
    @Test func parsesAndPrints() {
        let a = BluetoothAddress(string: "C0:11:22:33:44:55", type: .random)!
        #expect(a.bytes == [0x55, 0x44, 0x33, 0x22, 0x11, 0xC0])
        #expect(a.string == "C0:11:22:33:44:55")
        #expect(a.randomKind == .staticAddress)
        #expect(BluetoothAddress(string: "C0:11:22:33:44") == nil)
        #expect(BluetoothAddress(string: "00:11:22:33:44:55/R")?.type == .random)
    }
}
