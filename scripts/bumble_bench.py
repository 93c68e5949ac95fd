"""bumble-bench with one fix and one meter.

The fix: Bumble 0.0.236's GATT client and server modes lack `can_receive`, which its send and ping scenarios
call after the last packet (AttributeError, and the process exits before its queued packets leave). Both
modes can receive (the peer's ACKs come back over GATT), so the answer is True.

The meter (what `ble bench` reports for our side, measured the same way): from the RESET packet to the last
packet (receiver) or its ACK (sender), the process's CPU time (getrusage: user and system), its system calls
(a perf counter on raw_syscalls:sys_enter for every thread, when the kernel allows it) and the HCI packets
its host exchanged with the controller (Host.on_packet in, Host.send_hci_packet out). One line at the end:
    @@@ COST {"bytes": ..., "seconds": ..., "cpu_user_seconds": ..., ...}
Run with BUMBLE_LOGLEVEL=WARNING to measure Bumble without its per-packet INFO log lines (its best case).
"""
import ctypes
import json
import os
import platform
import resource
import time

import bumble.apps.bench as bench
import bumble.host

for mode in (bench.GattClient, bench.GattServer):
    if not hasattr(mode, 'can_receive'):
        mode.can_receive = lambda self: True


# --- the meter ---------------------------------------------------------------------------------------------
class SyscallCounter:
    """Counts every system call of this process with a perf counter per thread (inherit: later threads too)."""

    def __init__(self):
        self.fds = []
        number = {'x86_64': 298, 'aarch64': 241}.get(platform.machine())
        ids = ['/sys/kernel/tracing/events/raw_syscalls/sys_enter/id',
               '/sys/kernel/debug/tracing/events/raw_syscalls/sys_enter/id']
        tracepoint = None
        for path in ids:
            try:
                with open(path) as f:
                    tracepoint = int(f.read().strip())
                break
            except (OSError, ValueError):
                continue
        if number is None or tracepoint is None:
            return
        libc = ctypes.CDLL(None, use_errno=True)
        attr = (ctypes.c_uint8 * 64)()
        ctypes.c_uint32.from_buffer(attr, 0).value = 2          # PERF_TYPE_TRACEPOINT
        ctypes.c_uint32.from_buffer(attr, 4).value = 64         # PERF_ATTR_SIZE_VER0
        ctypes.c_uint64.from_buffer(attr, 8).value = tracepoint
        ctypes.c_uint64.from_buffer(attr, 40).value = 1 << 1    # inherit
        for tid in os.listdir('/proc/self/task'):
            fd = libc.syscall(ctypes.c_long(number), ctypes.byref(attr), ctypes.c_long(int(tid)),
                              ctypes.c_long(-1), ctypes.c_long(-1), ctypes.c_ulong(8))
            if fd < 0:
                for f in self.fds:
                    os.close(f)
                self.fds = []
                return
            self.fds.append(fd)

    def read(self):
        if not self.fds:
            return None
        return sum(int.from_bytes(os.read(fd, 8), 'little') for fd in self.fds)


class Meter:
    def __init__(self):
        self.counter = SyscallCounter()
        self.packets_in = 0
        self.packets_out = 0
        self.start = None
        self.reported = False

    def snapshot(self):
        u = resource.getrusage(resource.RUSAGE_SELF)
        return {'time': time.monotonic(), 'user': u.ru_utime, 'system': u.ru_stime,
                'syscalls': self.counter.read(), 'in': self.packets_in, 'out': self.packets_out}

    def mark_start(self):
        self.start = self.snapshot()
        self.reported = False

    def mark_end(self, nbytes):
        if self.start is None or self.reported:
            return
        a, b = self.start, self.snapshot()
        self.reported = True
        cost = {'bytes': nbytes, 'seconds': b['time'] - a['time'],
                'cpu_user_seconds': b['user'] - a['user'], 'cpu_system_seconds': b['system'] - a['system'],
                'hci_packets_in': b['in'] - a['in'], 'hci_packets_out': b['out'] - a['out']}
        cost['cpu_seconds'] = cost['cpu_user_seconds'] + cost['cpu_system_seconds']
        if a['syscalls'] is not None:
            cost['syscalls'] = b['syscalls'] - a['syscalls']
            packets = cost['hci_packets_in'] + cost['hci_packets_out']
            if packets:
                cost['syscalls_per_hci_packet'] = cost['syscalls'] / packets
        if cost['seconds'] > 0:
            cost['throughput_bytes_per_s'] = nbytes / cost['seconds']
        print('@@@ COST ' + json.dumps(cost), flush=True)


METER = Meter()

_on_packet = bumble.host.Host.on_packet
_send_hci_packet = bumble.host.Host.send_hci_packet


def on_packet(self, packet):
    METER.packets_in += 1
    return _on_packet(self, packet)


def send_hci_packet(self, packet):
    METER.packets_out += 1
    return _send_hci_packet(self, packet)


bumble.host.Host.on_packet = on_packet
bumble.host.Host.send_hci_packet = send_hci_packet

# Sender: from sending RESET to the ACK of the last packet.
_sender_init = bench.Sender.__init__
_sender_received = bench.Sender.on_packet_received


def sender_init(self, packet_io, *args, **kwargs):
    _sender_init(self, packet_io, *args, **kwargs)
    send = packet_io.send_packet

    async def send_packet(packet):
        if packet and packet[0] == 0:   # RESET
            METER.mark_start()
        return await send(packet)

    packet_io.send_packet = send_packet


def sender_received(self, data):
    _sender_received(self, data)
    if data and data[0] == 2:   # ACK
        METER.mark_end(self.bytes_sent)


bench.Sender.__init__ = sender_init
bench.Sender.on_packet_received = sender_received

# Receiver: from RESET to the LAST packet.
_receiver_received = bench.Receiver.on_packet_received


def receiver_received(self, data):
    if data and data[0] == 0:
        METER.mark_start()
    _receiver_received(self, data)
    if data and len(data) > 1 and data[0] == 1 and data[1] & 1:
        METER.mark_end(self.total_bytes_received)


bench.Receiver.on_packet_received = receiver_received

if __name__ == '__main__':
    bench.main()
