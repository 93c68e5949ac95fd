// The D-Bus client against the reference bus (dbus-daemon from Debian's dbus-daemon package), a private
// instance per test on a socket in a temporary directory: a decoder and validator we did not write. The bus
// drops any client whose message it finds malformed, so every exchange here also checks our octets.
import Dispatch
import Foundation
import Synchronization
import TestSupport
import Testing
@testable import DBus

private func bus(_ name: String) -> DBusMessage {
    .methodCall(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: name)
}

@Suite(
    .enabled(if: PrivateBus.available, "needs dbus-daemon (Debian package dbus-daemon; scripts/test installs it)"),
    .timeLimit(.minutes(2)))
struct DBusBusTests {
    @Test func helloGivesAUniqueNameTheBusLists() async throws {
        let b = try await PrivateBus()
        let c = try DBusConnection(address: b.address)
        defer { c.close() }
        #expect(c.uniqueName.hasPrefix(":"))
        #expect(c.unixFDsEnabled)
        let names = try await c.call(bus("ListNames"))
        #expect(names.body.first?.arrayItems?.contains(.string(c.uniqueName)) == true)
        let id = try await c.call(bus("GetId"))
        #expect(id.body.first?.string?.count == 32)
    }

    @Test func callsBetweenTwoClientsCarryEveryTypeExactly() async throws {
        let b = try await PrivateBus()
        let server = try DBusConnection(address: b.address)
        let client = try DBusConnection(address: b.address)
        defer { server.close(); client.close() }
        server.export(path: "/test/echo") { call in
            call.member == "Echo"
                ? call.reply(call.body)
                : call.errorReply(name: "org.example.Error.NoSuchMethod", message: "no \(call.member ?? "")")
        }
        let values = DBusValueCodecTests.samples.filter { $0.type != .unixFD }
        let reply = try await client.call(
            .methodCall(
                destination: server.uniqueName, path: "/test/echo",
                interface: "org.example.Echo", member: "Echo", body: values))
        #expect(reply.body == values)
        #expect(reply.sender == server.uniqueName)
        await #expect(throws: DBusError.remote(name: "org.example.Error.NoSuchMethod", message: "no Other")) {
            try await client.call(.methodCall(destination: server.uniqueName, path: "/test/echo", interface: nil, member: "Other"))
        }
        do {
            _ = try await client.call(.methodCall(destination: server.uniqueName, path: "/nobody", interface: nil, member: "X"))
            Issue.record("a call to a path nobody exported was answered")
        } catch {
            let name: String? = if case .remote(let n, _) = error { n } else { nil }
            #expect(name == "org.freedesktop.DBus.Error.UnknownObject")
        }
        // Peer.Ping is answered for any path.
        _ = try await client.call(.methodCall(destination: server.uniqueName, path: "/", interface: "org.freedesktop.DBus.Peer", member: "Ping"))
    }

    @Test func signalsArriveAfterAddMatch() async throws {
        let b = try await PrivateBus()
        let emitter = try DBusConnection(address: b.address)
        let listener = try DBusConnection(address: b.address)
        defer { emitter.close(); listener.close() }
        let (stream, continuation) = AsyncStream.makeStream(of: DBusMessage.self)
        listener.onSignal { m in if m.interface == "org.example.Sensor" { continuation.yield(m) } }
        try await listener.addMatch("type='signal',interface='org.example.Sensor'")
        for i in 0..<3 {
            try emitter.send(.signal(path: "/sensor", interface: "org.example.Sensor", member: "Value", body: [.bytes([UInt8(i)])]))
        }
        var seen: [[UInt8]] = []
        for await m in stream {
            seen.append(m.body.first?.byteArray ?? [])
            if seen.count == 3 { break }
        }
        #expect(seen == [[0], [1], [2]])
    }

    @Test func descriptorsPassBothWays() async throws {
        let b = try await PrivateBus()
        let server = try DBusConnection(address: b.address)
        let client = try DBusConnection(address: b.address)
        defer { server.close(); client.close() }
        // As BlueZ's AcquireWrite does: the answer carries a descriptor; here the read end of a pipe the server
        // has written to.
        server.export(path: "/pipe") { call in
            var ends: [Int32] = [0, 0]
            pipe(&ends)
            _ = "through the pipe".withCString { write(ends[1], $0, 16) }
            close(ends[1])
            var reply = call.reply([.unixFD(0), .uint16(517)])
            reply.unixFDs = [ends[0]]
            defer { close(ends[0]) }   // the message in flight holds its own reference
            _ = try? server.send(reply)
            return nil
        }
        let reply = try await client.call(.methodCall(destination: server.uniqueName, path: "/pipe", interface: nil, member: "Acquire"))
        #expect(reply.unixFDs.count == 1)
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = read(reply.unixFDs[0], &buffer, 64)
        #expect(n == 16 && String(decoding: buffer[..<16], as: UTF8.self) == "through the pipe")
        for d in reply.unixFDs { close(d) }
    }

    @Test func aCallNobodyAnswersTimesOutAndOthersGoOn() async throws {
        let b = try await PrivateBus()
        let server = try DBusConnection(address: b.address)
        let client = try DBusConnection(address: b.address)
        defer { server.close(); client.close() }
        server.export(path: "/slow") { call in call.member == "Never" ? nil : call.reply([.string("quick")]) }
        await #expect(throws: DBusError.timedOut) {
            try await client.call(.methodCall(destination: server.uniqueName, path: "/slow", interface: nil, member: "Never"), timeout: 0.3)
        }
        let quick = try await client.call(.methodCall(destination: server.uniqueName, path: "/slow", interface: nil, member: "Now"))
        #expect(quick.body == [.string("quick")])
    }

    @Test func theBusGoingAwayFailsWaitingCallsAndSaysSo() async throws {
        let b = try await PrivateBus()
        let server = try DBusConnection(address: b.address)
        let client = try DBusConnection(address: b.address)
        defer { server.close(); client.close() }
        server.export(path: "/hold") { _ in nil }
        let gone = Mutex<DBusError?>(nil)
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
        client.onDisconnect { e in
            gone.withLock { $0 = e }; continuation.yield()
        }
        let waiting = Task { try await client.call(.methodCall(destination: server.uniqueName, path: "/hold", interface: nil, member: "Wait"), timeout: 60) }
        try await pause(nanoseconds: 200_000_000)
        b.stop()
        await #expect(throws: DBusError.self) { try await waiting.value }
        for await _ in stream { break }
        guard case .disconnected = gone.withLock({ $0 }) else { Issue.record("no disconnect reported"); return }
        #expect(throws: DBusError.self) { try client.send(.signal(path: "/", interface: "a.b", member: "C")) }
    }

    @Test func connectingToNothingFailsWithTheReason() {
        #expect(throws: DBusError.self) { try DBusConnection(address: "unix:path=/nonexistent/ocb-bus") }
        #expect(throws: DBusError.self) { try DBusConnection(address: "tcp:host=localhost,port=1") }
    }
}
