// What a bench run cost the process, measured between two snapshots taken on the host's loop: processor time
// (getrusage: user and system, every thread), system calls and HCI packets.
//
// System calls are counted by the kernel, not estimated: a perf counter on the tracepoint
// raw_syscalls:sys_enter, opened for every thread of the process (with `inherit`, so threads started later
// are counted too), sees every system call any thread makes — reads and writes, but also the futex waits
// and wake-ups of thread hand-offs, setsockopt, clock reads that leave the vDSO, the bench's own output.
// That needs perf events with tracepoint access (root, or perf_event_paranoid ≤ -1 / CAP_PERFMON); where it
// is refused, the bench says so and reports only what the transport counts itself: its read and write
// calls (and TCP_QUICKACK re-arms), which leave out thread hand-offs and are therefore a lower bound.
// HCI packets are counted by the transport in both directions (controller → host and host → controller).
#if canImport(Glibc)
import Glibc
#endif
import Foundation
import BLETransport

struct BenchMeter {
    struct Snapshot {
        var user = 0.0, system = 0.0
        var contextSwitches = 0
        var syscalls: UInt64?
        var transport: TransportStatistics?
    }

    struct Cost {
        var user = 0.0, system = 0.0
        var contextSwitches = 0
        /// Every system call of the process (perf), nil when perf was refused.
        var syscalls: UInt64?
        var transport: TransportStatistics?
        var cpu: Double { user + system }

        /// System calls per HCI packet (both directions): the kernel's count when there is one, else the
        /// transport's own read/write calls.
        var syscallsPerPacket: Double? {
            guard let t = transport, t.packets > 0 else { return nil }
            return Double(syscalls.map(Int.init) ?? t.systemCalls) / Double(t.packets)
        }

        var summary: String {
            var s = String(format: "CPU %.3f s (user %.3f, system %.3f)", cpu, user, system)
            if let t = transport, t.packets > 0 {
                s += String(format: "; %d HCI packets (%d in, %d out)", t.packets, t.packetsIn, t.packetsOut)
                if let n = syscalls {
                    s += String(
                        format: ", %.2f system calls per packet (%llu in all; transport: %d reads, %d writes, %d other)",
                        Double(n) / Double(t.packets), n, t.reads, t.writes, t.other)
                } else {
                    s += String(
                        format: ", %.2f transport I/O calls per packet (%d reads, %d writes, %d other; perf counters unavailable)",
                        Double(t.systemCalls) / Double(t.packets), t.reads, t.writes, t.other)
                }
            } else if let n = syscalls {
                s += ", \(n) system calls"
            }
            return s
        }

        var jsonFields: String {
            var j = "\"cpu_user_seconds\":\(user),\"cpu_system_seconds\":\(system),\"context_switches\":\(contextSwitches)"
            if let n = syscalls {
                j += ",\"syscalls\":\(n),\"syscall_counter\":\"perf raw_syscalls:sys_enter\""
            } else {
                j += ",\"syscall_counter\":\"transport read/write calls only\""
            }
            if let t = transport {
                j +=
                    ",\"hci_packets_in\":\(t.packetsIn),\"hci_packets_out\":\(t.packetsOut),\"transport_reads\":\(t.reads),\"transport_writes\":\(t.writes),\"transport_other_syscalls\":\(t.other)"
                if let p = syscallsPerPacket { j += ",\"syscalls_per_hci_packet\":\(p)" }
            }
            return j
        }
    }

    let counter = SyscallCounter.open()
    let transport: (() -> TransportStatistics?)?

    init(transport: (() -> TransportStatistics?)? = nil) { self.transport = transport }

    func snapshot() -> Snapshot {
        var u = rusage()
        getrusage(RUSAGE_SELF.rawValue, &u)
        return Snapshot(
            user: Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) / 1e6,
            system: Double(u.ru_stime.tv_sec) + Double(u.ru_stime.tv_usec) / 1e6,
            contextSwitches: u.ru_nvcsw + u.ru_nivcsw, syscalls: counter?.read(), transport: transport?())
    }

    static func cost(from a: Snapshot, to b: Snapshot) -> Cost {
        var c = Cost(user: b.user - a.user, system: b.system - a.system, contextSwitches: b.contextSwitches - a.contextSwitches)
        if let x = a.syscalls, let y = b.syscalls { c.syscalls = y &- x }
        if let x = a.transport, let y = b.transport { c.transport = y - x }
        return c
    }
}

/// Counts every system call of this process with perf events (see the file's header); nil when refused.
final class SyscallCounter {
    private var fds: [Int32] = []

    static func open() -> SyscallCounter? {
        guard ProcessInfo.processInfo.environment["OCB_BENCH_SYSCALLS"] != "0" else { return nil }
        #if arch(x86_64)
        let perfEventOpen = 298
        #elseif arch(arm64)
        let perfEventOpen = 241
        #else
        return nil
        #endif
        let idFiles = ["/sys/kernel/tracing/events/raw_syscalls/sys_enter/id", "/sys/kernel/debug/tracing/events/raw_syscalls/sys_enter/id"]
        guard
            let id = idFiles.lazy.compactMap({ try? String(contentsOfFile: $0, encoding: .utf8) })
                .compactMap({ UInt64($0.trimmingCharacters(in: .whitespacesAndNewlines)) }).first
        else { return nil }
        // syscall(2) is variadic, which Swift does not call; on x86-64 and arm64 Linux integer arguments of a
        // variadic call travel as those of a fixed one, so it is called through a fixed-argument signature.
        typealias SyscallFn = @convention(c) (Int, UnsafeRawPointer?, Int, Int, Int, Int) -> Int
        guard let sym = dlsym(nil, "syscall") else { return nil }
        let syscall = unsafeBitCast(sym, to: SyscallFn.self)
        // struct perf_event_attr, first version (64 octets): type, size, config, …, flags at 40.
        var attr = [UInt8](repeating: 0, count: 64)
        attr.withUnsafeMutableBytes { a in
            a.storeBytes(of: UInt32(2), toByteOffset: 0, as: UInt32.self)   // PERF_TYPE_TRACEPOINT
            a.storeBytes(of: UInt32(64), toByteOffset: 4, as: UInt32.self)   // PERF_ATTR_SIZE_VER0
            a.storeBytes(of: id, toByteOffset: 8, as: UInt64.self)   // the tracepoint
            a.storeBytes(of: UInt64(1 << 1), toByteOffset: 40, as: UInt64.self)   // inherit; enabled at once
        }
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task") else { return nil }
        let counter = SyscallCounter()
        for tid in tasks.compactMap(Int.init) {
            let fd = attr.withUnsafeBytes { syscall(perfEventOpen, $0.baseAddress, tid, -1, -1, 8 /* PERF_FLAG_FD_CLOEXEC */) }
            // A thread that ended meanwhile is gone with its count; anything else means perf is refused.
            if fd < 0 {
                if errno == ESRCH { continue }
                return nil
            }
            counter.fds.append(Int32(fd))
        }
        return counter.fds.isEmpty ? nil : counter
    }

    /// System calls so far, every thread of the process (threads started after `open` included).
    func read() -> UInt64 {
        var total: UInt64 = 0
        for fd in fds {
            var v: UInt64 = 0
            if Glibc.read(fd, &v, 8) == 8 { total &+= v }
        }
        return total
    }

    deinit { for fd in fds { Glibc.close(fd) } }
}
