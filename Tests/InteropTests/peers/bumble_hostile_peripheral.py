"""Malicious Bumble peripherals for the hostile-peer suite (issue 16), one device per mode in one process
(each its own controller on the radio, named '<prefix><mode>'): each advertises its name and answers our
central's ATT requests itself, with raw bytes, in one of several broken ways (--modes):

  malformed    Read By Group Type answered with an impossible entry length, then with truncated entries
  impossible   a characteristic declaration whose value handle is 0, another outside its service's range
  wrong-opcode every request answered with a Read Response
  silent       nothing is ever answered (our central's transaction times out after 30 s)
  endless-blob a readable value whose every Read Blob comes back full, without end
  flood        a valid database; once subscribed, --count notifications as fast as they go, then a few on
               handles our central never discovered
  huge         2,000 primary services

The valid part of the database: service 180D (handles 1–7), characteristic 2A37 (declaration 2, value 3,
properties read|notify) with its CCCD at 4, and characteristic 2A38 (declaration 5, value 6, read). Prints
one JSON object per line."""
import argparse
import asyncio
import json
import struct
import sys

from bumble.core import AdvertisingData
from bumble.device import Device
from bumble.hci import Address
from bumble.transport import open_transport

ATT_CID = 0x0004
MODES = ['malformed', 'impossible', 'wrong-opcode', 'silent', 'endless-blob', 'flood', 'huge']


def emit(**fields):
    print(json.dumps(fields), flush=True)


def error(request, handle, code):
    return struct.pack('<BBHB', 0x01, request, handle, code)


class Server:
    def __init__(self, device, mode, count):
        self.device = device
        self.mode = mode
        self.count = count
        self.mtu = 23
        self.requests = 0
        self.group_requests = 0   # Read By Group Type requests (service discovery) seen
        self.blobs = 0
        self.flooding = False

    def send(self, handle, pdu):
        self.device.send_l2cap_pdu(handle, ATT_CID, bytes(pdu))

    def on_pdu(self, handle, pdu):
        pdu = bytes(pdu)
        if not pdu:
            return
        op = pdu[0]
        if op & 0x40 or op in (0x1E,):
            return
        self.requests += 1
        if self.mode == 'silent':
            if self.requests == 1:
                emit(event='request', opcode=op)
            return
        if self.mode == 'wrong-opcode':
            self.send(handle, b'\x0b\x00')
            return
        if op == 0x02:
            client = struct.unpack_from('<H', pdu, 1)[0] if len(pdu) >= 3 else 23
            self.mtu = max(23, min(client, 247))
            self.send(handle, struct.pack('<BH', 0x03, 247))
            return
        answer = self.answer(handle, op, pdu)
        if answer is not None:
            self.send(handle, answer)

    def answer(self, connection_handle, op, pdu):
        start, end = struct.unpack_from('<HH', pdu, 1) if len(pdu) >= 5 else (0, 0)
        if op == 0x10:   # Read By Group Type: primary services
            self.group_requests += 1
            if self.mode == 'malformed':
                # The first discovery (the one a central runs as it connects) gets entries of length 5, which
                # decode but cannot hold a service UUID; every later one a truncated entry, which does not decode.
                return b'\x11\x05' + bytes(10) if self.group_requests == 1 else b'\x11\x06\x01\x00\x05'
            if self.mode == 'huge':
                if start > 2000:
                    return error(0x10, start, 0x0A)
                n = (self.mtu - 2) // 6
                entries = b''.join(struct.pack('<HHH', h, h, 0x1800 + h % 0x100) for h in range(start, min(start + n, 2001)))
                return b'\x11\x06' + entries
            if start <= 1:
                return b'\x11\x06' + struct.pack('<HHH', 1, 7, 0x180D)
            return error(0x10, start, 0x0A)
        if op == 0x08:   # Read By Type: characteristic declarations
            if self.mode == 'impossible':
                # Value handle 0, and a declaration outside the service's range.
                return b'\x09\x07' + struct.pack('<HBHH', 2, 0x12, 0, 0x2A37) + struct.pack('<HBHH', 40, 0x02, 41, 0x2A38)
            if start <= 2:
                return b'\x09\x07' + struct.pack('<HBHH', 2, 0x12, 3, 0x2A37) + struct.pack('<HBHH', 5, 0x02, 6, 0x2A38)
            return error(0x08, start, 0x0A)
        if op == 0x04:   # Find Information: the CCCD of 2A37
            if start <= 4 <= end:
                return b'\x05\x01' + struct.pack('<HH', 4, 0x2902)
            return error(0x04, start, 0x0A)
        if op in (0x0A, 0x0C) and len(pdu) >= 3 and struct.unpack_from('<H', pdu, 1)[0] == 0:
            emit(event='read_handle_zero', mode=self.mode)   # never valid (Vol 3 Part F §3.2.2)
        if op == 0x0A:   # Read
            h = struct.unpack_from('<H', pdu, 1)[0] if len(pdu) >= 3 else 0
            if self.mode == 'endless-blob' and h == 6:
                return b'\x0b' + bytes([0xEB]) * (self.mtu - 1)
            if h == 3:
                return b'\x0b\x00\x3c'
            if h == 6:
                return b'\x0b\x01'
            return error(0x0A, h, 0x01)
        if op == 0x0C:   # Read Blob
            h = struct.unpack_from('<H', pdu, 1)[0] if len(pdu) >= 3 else 0
            self.blobs += 1
            if self.mode == 'endless-blob':
                return b'\x0d' + bytes([0xEB]) * (self.mtu - 1)
            return error(0x0C, h, 0x0B)
        if op == 0x12:   # Write: the CCCD
            h = struct.unpack_from('<H', pdu, 1)[0] if len(pdu) >= 3 else 0
            if h == 4:
                if self.mode == 'flood' and not self.flooding and pdu[3:4] == b'\x01':
                    self.flooding = True
                    asyncio.get_running_loop().create_task(self.flood(connection_handle))
                return b'\x13'
            return error(0x12, h, 0x03)
        return error(op, 0, 0x06)

    async def flood(self, connection_handle):
        emit(event='flooding', mode=self.mode, count=self.count)
        for i in range(self.count):
            self.send(connection_handle, struct.pack('<BHH', 0x1B, 3, i & 0xFFFF))
            if i % 64 == 63:
                await asyncio.sleep(0)   # let the ACL queue drain; the controller's credits pace the rest
        for h in (0, 99, 0xFFFF):
            self.send(connection_handle, struct.pack('<BH', 0x1B, h) + b'\x01')
        emit(event='flooded', mode=self.mode, count=self.count)


async def serve(transport, mode, name, address, count):
    device = Device.with_hci(name, Address(address), transport.source, transport.sink)
    server = Server(device, mode, count)
    await device.power_on()
    device.l2cap_channel_manager.register_fixed_channel(ATT_CID, server.on_pdu)

    def on_connection(connection):
        emit(event='connected', mode=mode, address=str(connection.peer_address))
        connection.on('disconnection', lambda reason: emit(event='disconnected', mode=mode, reason=reason,
                                                           requests=server.requests, blobs=server.blobs))

    device.on('connection', on_connection)
    device.advertising_data = bytes(AdvertisingData([
        (AdvertisingData.FLAGS, bytes([0x06])),
        (AdvertisingData.COMPLETE_LOCAL_NAME, name.encode()),
    ]))
    await device.start_advertising(auto_restart=False, own_address_type=0)
    emit(event='advertising', mode=mode, name=name)


async def run(args):
    """One device per mode, each its own controller on the radio, all in this process."""
    transports = []
    for i, mode in enumerate(args.modes.split(',')):
        t = await open_transport(args.transport)
        transports.append(t)
        await serve(t, mode, f'{args.name_prefix}{mode}', f'E0:E1:E2:E3:E5:{i + 1:02X}', args.count)
    emit(event='ready')
    await asyncio.sleep(args.duration)
    for t in transports:
        await t.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--transport', required=True)
    p.add_argument('--modes', required=True, help='comma-separated: ' + ', '.join(MODES))
    p.add_argument('--name-prefix', default='Evil ')
    p.add_argument('--count', type=int, default=5000)
    p.add_argument('--duration', type=float, default=120.0)
    args = p.parse_args()
    if any(m not in MODES for m in args.modes.split(',')):
        p.error(f'modes are {MODES}')
    try:
        asyncio.run(run(args))
    except Exception as e:
        emit(event='error', error=f'{type(e).__name__}: {e}')
        sys.exit(1)


if __name__ == '__main__':
    main()
