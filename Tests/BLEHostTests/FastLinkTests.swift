// After a connection completes, the central asks for Data Length Extension and LE 2M when its controller
// supports them, as iOS does (issue 11's left-over): on the virtual radio the link ends at 251 octets on LE 2M,
// in both directions and on both ends; a host told not to keeps LE 1M and 27 octets.
import Testing
import BLEHost
import BLEHCI
import BLEWire
import BLETransport
import BLEVirtualRadio

@Suite struct FastLinkTests {
    @Test func aNewLinkEndsAtDataLength251OnLE2M() throws {
        let t = try LinkedHosts()
        t.air.loop.advance(by: .milliseconds(200))
        let (central, peripheral) = t.air.loop.sync { (t.c.connections[0], t.p.connections[0]) }
        #expect(t.air.loop.sync { (central.maxTxOctets, central.maxRxOctets, central.txPHY, central.rxPHY) } == (251, 251, 2, 2))
        #expect(t.air.loop.sync { (peripheral.maxTxOctets, peripheral.maxRxOctets, peripheral.txPHY, peripheral.rxPHY) } == (251, 251, 2, 2))
    }

    @Test func aHostToldNotToKeepsTheDefaults() throws {
        let t = try LinkedHosts(connect: false)
        t.air.loop.sync { t.central.requestsFastLinks = false }
        let target = BluetoothAddress(bytes: (t.peripheral.transport as! VirtualController).address.bytes)
        t.air.loop.sync { t.central.connect(to: target) }
        t.air.loop.advance(by: .milliseconds(500))
        let link = try #require(t.air.loop.sync { t.c.connections.first })
        #expect(t.air.loop.sync { (link.maxTxOctets, link.txPHY) } == (27, 1))
    }
}
