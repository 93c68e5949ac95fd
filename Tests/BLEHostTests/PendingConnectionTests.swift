// Many pending connections at once (issue 15): with several pending, the controller waits for all of them
// through its filter accept list, so whichever device appears first connects; a cancel takes one address
// out and the rest keep waiting; none times out. A controller whose accept list fails gives the addresses
// turns instead. All on a virtual clock.
import Testing
import BLEHost
import BLEHCI
import BLEWire
import BLETransport
import BLEVirtualRadio

final class PendingHosts: @unchecked Sendable {
    let air = VirtualAir(loop: EventLoop(label: "pending.test", clock: .virtual))
    let central: LEHost
    let c = CentralRecorder()
    var peripherals: [LEHost] = []

    init(peripherals n: Int) throws {
        central = try HostFactory.makeHost(on: air, name: "central", position: VirtualPosition(x: 0, y: 0))
        for i in 0..<n {
            peripherals.append(try HostFactory.makeHost(on: air, name: "p\(i)", position: VirtualPosition(x: Double(i + 2), y: 0)))
        }
        air.loop.sync {
            central.centralDelegate = c
            central.powerOn()
            for p in peripherals { p.powerOn() }
        }
        air.loop.advance(by: .milliseconds(10))
    }

    func address(_ i: Int) -> BluetoothAddress {
        BluetoothAddress(bytes: (peripherals[i].transport as! VirtualController).address.bytes)
    }

    func advertise(_ i: Int) {
        air.loop.sync { peripherals[i].startAdvertising(AdvertisingConfiguration(data: [2, 1, 6], interval: 0x20)) }
    }

    var connected: [String] { air.loop.sync { c.connections.map(\.peerAddress.string) } }
}

@Suite struct PendingConnectionTests {
    @Test func severalPendingWaitTogetherOnTheAcceptList() throws {
        let t = try PendingHosts(peripherals: 3)
        // Turns would take 1000 s each: only the accept list can connect the third one first.
        t.air.loop.sync { t.central.connectRotationInterval = .seconds(1000) }
        t.air.loop.sync { for i in 0..<3 { t.central.connect(to: t.address(i)) } }
        t.air.loop.advance(by: .seconds(5))
        #expect(t.connected.isEmpty && t.c.failures.isEmpty)
        #expect(t.air.loop.sync { t.central.pendingConnections.count } == 3)
        t.advertise(2)
        t.air.loop.advance(by: .milliseconds(300))
        #expect(t.connected == [t.address(2).string])
        #expect(t.air.loop.sync { t.central.filterAcceptListUsable })
        // Cancelling one of the two left: it fails with Unknown Connection Identifier, the other still waits.
        t.air.loop.sync { t.central.cancelConnect(to: t.address(0)) }
        t.air.loop.advance(by: .milliseconds(100))
        #expect(t.c.failures.map(\.0.string) == [t.address(0).string])
        #expect(t.c.failures.first?.1 == .unknownConnectionIdentifier)
        t.advertise(0)
        t.advertise(1)
        t.air.loop.advance(by: .milliseconds(500))
        #expect(t.connected == [t.address(2).string, t.address(1).string])
        #expect(t.air.loop.sync { t.central.pendingConnections.isEmpty })
    }

    @Test func aConnectAddedWhileInitiatingJoinsTheList() throws {
        let t = try PendingHosts(peripherals: 2)
        t.air.loop.sync { t.central.connectRotationInterval = .seconds(1000) }
        t.air.loop.sync { t.central.connect(to: t.address(0)) }   // direct
        t.air.loop.advance(by: .seconds(2))
        t.air.loop.sync { t.central.connect(to: t.address(1)) }   // the initiation is rebuilt with both
        t.air.loop.advance(by: .milliseconds(100))
        t.advertise(1)
        t.air.loop.advance(by: .milliseconds(300))
        #expect(t.connected == [t.address(1).string])
        t.advertise(0)
        t.air.loop.advance(by: .milliseconds(300))
        #expect(t.connected == [t.address(1).string, t.address(0).string])
        #expect(t.c.failures.isEmpty)
    }

    /// A controller without a usable accept list (its adds fail at once): the addresses take turns on the
    /// controller instead (none is lost, none times out).
    @Test func withoutAUsableAcceptListTheyTakeTurns() throws {
        let t = try PendingHosts(peripherals: 1)
        let controller = t.central.transport as! VirtualController
        t.air.loop.sync {
            controller.filterAcceptListCapacity = 0
            controller.reportsFilterAcceptListSize = false
            t.central.connectRotationInterval = .milliseconds(50)
            for i in 0..<19 { t.central.connect(to: BluetoothAddress(bytes: [UInt8(i), 0x10, 0x20, 0x30, 0x40, 0x50])) }
            t.central.connect(to: t.address(0))
        }
        t.air.loop.advance(by: .milliseconds(100))
        #expect(t.air.loop.sync { t.central.filterAcceptListUsable } == false)
        t.advertise(0)
        t.air.loop.advance(by: .seconds(3))
        #expect(t.connected == [t.address(0).string])
        #expect(t.c.failures.isEmpty)
        #expect(t.air.loop.sync { t.central.pendingConnections.count } == 19)
    }

    /// Issue 21: the list holds what the controller says (LE Read Filter Accept List Size), not 8: with 12
    /// pending on a controller that holds 16, the twelfth connects as soon as it shows up, without turns.
    @Test func theAcceptListHoldsWhatTheControllerSays() throws {
        let t = try PendingHosts(peripherals: 1)
        t.air.loop.sync {
            t.central.connectRotationInterval = .seconds(1000)
            for i in 0..<11 { t.central.connect(to: BluetoothAddress(bytes: [UInt8(i), 0x11, 0x20, 0x30, 0x40, 0x50])) }
            t.central.connect(to: t.address(0))
        }
        t.air.loop.advance(by: .seconds(2))
        #expect(t.air.loop.sync { t.central.filterAcceptListSize } == VirtualControllerLimits.filterAcceptListCapacity)
        t.advertise(0)
        t.air.loop.advance(by: .milliseconds(300))
        #expect(t.connected == [t.address(0).string])
        #expect(t.c.failures.isEmpty)
        #expect(t.air.loop.sync { t.central.pendingConnections.count } == 11)
        #expect(t.air.loop.sync { t.central.filterAcceptListUsable })
    }

    /// More pending than the list holds (4 here): the groups take turns, so the last one asked still
    /// connects; none fails, none times out, the list stays in use.
    @Test func moreThanTheListHoldsTakeTurnsByGroups() throws {
        let t = try PendingHosts(peripherals: 1)
        let controller = t.central.transport as! VirtualController
        t.air.loop.sync {
            controller.filterAcceptListCapacity = 4
            t.central.connectRotationInterval = .milliseconds(100)
            for i in 0..<9 { t.central.connect(to: BluetoothAddress(bytes: [UInt8(i), 0x12, 0x20, 0x30, 0x40, 0x50])) }
            t.central.connect(to: t.address(0))
        }
        t.advertise(0)
        t.air.loop.advance(by: .seconds(3))
        #expect(t.connected == [t.address(0).string])
        #expect(t.c.failures.isEmpty)
        #expect(t.air.loop.sync { t.central.filterAcceptListSize } == 4)
        #expect(t.air.loop.sync { t.central.filterAcceptListUsable })
        #expect(t.air.loop.sync { t.central.pendingConnections.count } == 9)
        // A cancel still reaches an address waiting for its group's turn.
        let waiting = t.air.loop.sync { t.central.pendingConnections.last! }
        t.air.loop.sync { t.central.cancelConnect(to: waiting) }
        t.air.loop.advance(by: .milliseconds(500))
        #expect(t.c.failures.map(\.0.string) == [waiting.string])
        #expect(t.air.loop.sync { t.central.pendingConnections.count } == 8)
    }

    /// A controller that does not report its list size is assumed to hold 8; when its list is full sooner
    /// (Memory Capacity Exceeded after 5), the host holds 5 from then on and the rest wait their turn.
    @Test func aListFullSoonerThanAssumedIsUsedAtItsSize() throws {
        let t = try PendingHosts(peripherals: 1)
        let controller = t.central.transport as! VirtualController
        t.air.loop.sync {
            controller.filterAcceptListCapacity = 5
            controller.reportsFilterAcceptListSize = false
            t.central.connectRotationInterval = .milliseconds(100)
            for i in 0..<6 { t.central.connect(to: BluetoothAddress(bytes: [UInt8(i), 0x13, 0x20, 0x30, 0x40, 0x50])) }
            t.central.connect(to: t.address(0))
        }
        t.air.loop.advance(by: .milliseconds(50))
        #expect(t.air.loop.sync { t.central.filterAcceptListSize } == 5)
        t.advertise(0)
        t.air.loop.advance(by: .seconds(2))
        #expect(t.connected == [t.address(0).string])
        #expect(t.c.failures.isEmpty)
        #expect(t.air.loop.sync { t.central.filterAcceptListUsable })
    }
}
