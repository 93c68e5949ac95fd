"""A hostile Bumble central for the hostile-peer suite (issue 16), and the well-behaved bystander beside it.

`attack` mode connects to the named peripheral, finds the handles of the hostile service (FFF0) with
Bumble's own GATT client, then takes over the ATT, SMP and LE signalling channels and talks raw bytes:
each attack is followed by a health check (a Read of FFF1 on the same link, or on a fresh one when the
link went down) and reported as one JSON line with the rule violations it saw in our answers.
`crowd` mode floods the peripheral from ten centrals at once (ten controllers from one process).
`bystander` mode connects and reads FFF1 every 50 ms, reporting the count and the slowest read.
Every attack is bounded in count and in time. Prints one JSON object per line."""
import argparse
import asyncio
import json
import random
import struct
import sys
import time

from bumble.core import AdvertisingData, UUID
from bumble.device import Device, Peer
from bumble.hci import Address, HCI_AclDataPacket
from bumble.transport import open_transport

ATT_CID, LE_SIGNALING_CID, SMP_CID = 0x0004, 0x0005, 0x0006
ATT_TRANSACTION_TIMEOUT = 30.0
HEALTH_VALUE = bytes([0x02])

# ATT opcodes a client sends as requests (Vol 3 Part F §3.4.8), and what the server sends.
REQUESTS = {0x02, 0x04, 0x06, 0x08, 0x0A, 0x0C, 0x0E, 0x10, 0x12, 0x16, 0x18, 0x20}
SERVER_TO_CLIENT = {0x01, 0x03, 0x05, 0x07, 0x09, 0x0B, 0x0D, 0x0F, 0x11, 0x13, 0x17, 0x19, 0x1B, 0x1D, 0x21, 0x23}
KNOWN_COMMANDS = {0x52, 0xD2, 0x1E}


def emit(**fields):
    print(json.dumps(fields), flush=True)


class Raw:
    """The raw side of one connection: PDUs received on ATT, SMP and LE signalling, in arrival order."""

    def __init__(self, device, connection):
        self.device = device
        self.connection = connection
        self.queues = {ATT_CID: asyncio.Queue(), SMP_CID: asyncio.Queue(), LE_SIGNALING_CID: asyncio.Queue()}
        self.other = []   # PDUs on other CIDs (credit-based channels)
        self.identifier = 0x20
        self.unsolicited_signals = []
        self.slowest = 0.0   # seconds, the slowest answer to `att`

    def on_pdu(self, cid, pdu):
        pdu = bytes(pdu)
        if cid == LE_SIGNALING_CID and len(pdu) >= 4 and pdu[0] == 0x12:
            # Our peripheral asks for other connection parameters: refuse, as Bumble's own manager is bypassed.
            self.send(LE_SIGNALING_CID, struct.pack('<BBHH', 0x13, pdu[1], 2, 0x0001))
            return
        q = self.queues.get(cid)
        if q is not None:
            q.put_nowait(bytes(pdu))
        else:
            self.other.append((cid, bytes(pdu)))

    def send(self, cid, pdu):
        self.device.send_l2cap_pdu(self.connection.handle, cid, bytes(pdu))

    def drain(self, cid):
        out = []
        while not self.queues[cid].empty():
            out.append(self.queues[cid].get_nowait())
        return out

    async def next(self, cid, timeout):
        try:
            return await asyncio.wait_for(self.queues[cid].get(), timeout)
        except asyncio.TimeoutError:
            return None

    async def until(self, cid, wanted, seconds=ATT_TRANSACTION_TIMEOUT):
        """Every PDU that arrives on `cid` up to and including the first one equal to `wanted` (at most
        `seconds`): an outcome waited for, not a window that a busy machine may miss."""
        out = []
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            p = await self.next(cid, left)
            if p is None:
                break
            out.append(p)
            if p == wanted:
                break
        return out

    async def collect(self, cid, seconds, want=None):
        """Every PDU that arrives on `cid` within `seconds` (or until `want` have)."""
        out = []
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0 and (want is None or len(out) < want):
            p = await self.next(cid, left)
            if p is None:
                break
            out.append(p)
        return out

    async def att(self, pdu, timeout=None):
        """Sends a request and returns its response, or None when none came within the ATT transaction
        timeout (30 s, Core Vol 3 Part F 3.3.3): a response that is merely slow (both processes waiting for
        a core on a busy machine) is not a lost one. The slowest answer is kept as a figure."""
        self.send(ATT_CID, pdu)
        sent = time.monotonic()
        rsp = await self.next(ATT_CID, ATT_TRANSACTION_TIMEOUT if timeout is None else timeout)
        if rsp is not None:
            self.slowest = max(self.slowest, time.monotonic() - sent)
        return rsp

    def acl(self, pb_flag, data):
        """One ACL packet as given: any L2CAP framing, right or wrong (flow control still honoured)."""
        packet = HCI_AclDataPacket(connection_handle=self.connection.handle, pb_flag=pb_flag, bc_flag=0,
                                   data_total_length=len(data), data=bytes(data))
        self.device.host.connections[self.connection.handle].acl_packet_queue.enqueue(packet, self.connection.handle)

    def signal(self, code, data, identifier=None):
        if identifier is None:
            self.identifier = self.identifier % 250 + 1
            identifier = self.identifier
        self.send(LE_SIGNALING_CID, struct.pack('<BBH', code, identifier, len(data)) + bytes(data))
        return identifier

    async def signal_reply(self, identifier, timeout=ATT_TRANSACTION_TIMEOUT):
        """The answer to signalling command `identifier`, waited for as long as ATT waits for a response (every
        command here must be answered: a slow answer on a busy machine is not a missing one)."""
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            p = await self.next(LE_SIGNALING_CID, left)
            if p is None:
                return None
            if len(p) >= 4 and p[1] == identifier:
                return p
            self.unsolicited_signals.append(p)
        return None


class Attacker:
    def __init__(self, device, address, handles, psm):
        self.device = device
        self.address = address
        self.handles = handles
        self.psm = psm
        self.raw = None
        self.rng = random.Random(16)
        self.disconnected = False

    async def connect(self):
        connection = await self.device.connect(self.address, timeout=10)
        self.disconnected = False
        connection.on('disconnection', lambda reason: setattr(self, 'disconnected', True))
        self.raw = Raw(self.device, connection)
        manager = self.device.l2cap_channel_manager
        raw = self.raw
        manager.on_pdu = lambda conn, cid, pdu: raw.on_pdu(cid, pdu) if conn.handle == raw.connection.handle else None
        return connection

    async def health(self):
        """A Read of FFF1 answered with its value on the attacked link, else on a fresh one."""
        same = not self.disconnected
        if same:
            self.raw.drain(ATT_CID)
            rsp = await self.raw.att(struct.pack('<BH', 0x0A, self.handles['FFF1']))
            if rsp == b'\x0b' + HEALTH_VALUE:
                return {'ok': True, 'same_link': True}
            await self.disconnect()
        await self.connect()
        rsp = await self.raw.att(struct.pack('<BH', 0x0A, self.handles['FFF1']))
        return {'ok': rsp == b'\x0b' + HEALTH_VALUE, 'same_link': False, 'was_connected': same}

    async def disconnect(self):
        if not self.disconnected:
            try:
                await asyncio.wait_for(self.raw.connection.disconnect(), 5)
            except Exception:
                pass
            self.disconnected = True

    async def fence(self):
        """PDUs that arrive before the answer to a Read sent now (ATT answers in order)."""
        self.raw.send(ATT_CID, struct.pack('<BH', 0x0A, self.handles['FFF1']))
        before = []
        while True:
            p = await self.raw.next(ATT_CID, ATT_TRANSACTION_TIMEOUT)
            if p is None:
                return before, False
            if p == b'\x0b' + HEALTH_VALUE:
                return before, True
            before.append(p)

    # -- ATT ---------------------------------------------------------------------------------------------

    async def opcodes(self):
        """Every opcode 0x00–0xFF with an empty, a one-octet, a handle-led and a random payload."""
        violations, probes, answered = [], 0, 0
        handles = list(self.handles.values())
        for op in range(256):
            payloads = [b'', bytes([self.rng.randrange(256)]),
                        struct.pack('<H', self.rng.choice(handles)) + bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(0, 8))),
                        bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(2, 20)))]
            if op == 0x02:   # an Exchange MTU that shrinks nothing: keep 23 octets for the rest of the sweep
                payloads = [b'', b'\x01', struct.pack('<H', 23), struct.pack('<H', 23) + b'\xff']
            if op == 0x18:   # Execute Write: cancel whatever random Prepare Writes queued
                payloads = [b'', b'\x00', b'\x07', b'\x00\x00']
            for payload in payloads:
                probes += 1
                pdu = bytes([op]) + payload
                if op in REQUESTS or (op not in SERVER_TO_CLIENT and op not in KNOWN_COMMANDS and not op & 0x40):
                    rsp = await self.raw.att(pdu)
                    if rsp is None:
                        violations.append(f'{pdu.hex()}: no response')
                        continue
                    answered += 1
                    if op in REQUESTS:
                        if not (rsp[0] == op + 1 or (rsp[0] == 0x01 and len(rsp) == 5 and rsp[1] == op)):
                            violations.append(f'{pdu.hex()}: answered {rsp.hex()}')
                    elif not (len(rsp) == 5 and rsp[0] == 0x01 and rsp[1] == op and rsp[4] == 0x06):
                        violations.append(f'{pdu.hex()}: unknown request answered {rsp.hex()} (not Request Not Supported)')
                else:
                    self.raw.send(ATT_CID, pdu)
                    before, fenced = await self.fence()
                    if not fenced:
                        violations.append(f'{pdu.hex()}: the next Read went unanswered')
                        return {'violations': violations, 'probes': probes}
                    # A command, a response or notification sent to a server: nothing comes back, except
                    # a Handle Value Confirmation for an indication our client role accepted.
                    allowed = [b'\x1e'] if op == 0x1D else []
                    extra = [p.hex() for p in before if p not in allowed]
                    if extra:
                        violations.append(f'{pdu.hex()}: answered {extra}')
        return {'violations': violations, 'probes': probes, 'answered': answered}

    async def mtu(self):
        """Rx MTU 0 and 65535, reads and writes against the ATT_MTU in force."""
        violations = []
        rsp = await self.raw.att(struct.pack('<BH', 0x02, 0))
        if rsp is None or rsp[0] not in (0x03, 0x01):
            violations.append(f'MTU 0: {rsp.hex() if rsp else None}')
        long_handle = self.handles['FFF2']
        rsp = await self.raw.att(struct.pack('<BH', 0x0A, long_handle))
        if rsp is None or rsp[0] != 0x0B or len(rsp) > 23:
            violations.append(f'read at MTU 23: {len(rsp) if rsp else None} octets')
        rsp = await self.raw.att(struct.pack('<BH', 0x12, self.handles['FFF3']) + bytes(60))
        if rsp != bytes([0x01, 0x12, 0, 0, 0x04]):
            violations.append(f'60-octet Write Request at MTU 23: {rsp.hex() if rsp else None} (want Invalid PDU)')
        rsp = await self.raw.att(struct.pack('<BH', 0x02, 65535))
        server_mtu = struct.unpack_from('<H', rsp, 1)[0] if rsp and rsp[0] == 0x03 and len(rsp) == 3 else None
        mtu = min(server_mtu, 65535) if server_mtu else 23
        rsp = await self.raw.att(struct.pack('<BH', 0x0A, long_handle))
        if rsp is None or rsp[0] != 0x0B or len(rsp) > mtu:
            violations.append(f'read at MTU {mtu}: {len(rsp) if rsp else None} octets')
        rsp = await self.raw.att(struct.pack('<BH', 0x12, self.handles['FFF3']) + bytes(mtu))
        if rsp is None or rsp[0] != 0x01 or rsp[4] != 0x04:
            violations.append(f'Write Request of MTU+3 octets: {rsp.hex() if rsp else None} (want Invalid PDU)')
        # A Read Blob past the end of the value: Invalid Offset.
        rsp = await self.raw.att(struct.pack('<BHH', 0x0C, self.handles['FFF1'], 5))
        if rsp is None or rsp[0] != 0x01 or rsp[4] != 0x07:
            violations.append(f'Read Blob past the end: {rsp.hex() if rsp else None} (want Invalid Offset)')
        return {'violations': violations, 'server_mtu': server_mtu}

    async def ranges(self):
        """Handle ranges the specification forbids (Vol 3 Part F §3.4.3–3.4.4): start 0, start above end,
        answered with Invalid Handle; the last handle alone, Attribute Not Found; a non-grouping type, Unsupported
        Group Type; handle 0 and a handle past the database, Invalid Handle."""
        violations = []
        uuid16 = struct.pack('<H', 0x2803)
        cases = []
        for op, tail in [(0x04, b''), (0x08, uuid16), (0x10, struct.pack('<H', 0x2800)), (0x06, struct.pack('<H', 0x2800) + b'\xf0\xff')]:
            cases += [(struct.pack('<BHH', op, 0, 10) + tail, 0x01), (struct.pack('<BHH', op, 10, 9) + tail, 0x01),
                      (struct.pack('<BHH', op, 0xFFFF, 0xFFFF) + tail, 0x0A)]
        cases += [(struct.pack('<BHH', 0x10, 1, 0xFFFF) + uuid16, 0x10),
                  (struct.pack('<BH', 0x0A, 0), 0x01), (struct.pack('<BH', 0x0A, 0xFFF0), 0x01),
                  (struct.pack('<BHH', 0x0C, 0, 0), 0x01), (struct.pack('<BH', 0x12, 0) + b'\x01', 0x01),
                  (struct.pack('<BHH', 0x16, 0xFFF0, 0) + b'\x01', 0x01)]
        for pdu, code in cases:
            rsp = await self.raw.att(pdu)
            if rsp is None or len(rsp) != 5 or rsp[0] != 0x01 or rsp[1] != pdu[0] or rsp[4] != code:
                violations.append(f'{pdu.hex()}: {rsp.hex() if rsp else None} (want error 0x{code:02x})')
        return {'violations': violations, 'requests': len(cases)}

    async def pipelined(self):
        """300 Read Requests sent without waiting, then 50 of the value the app answers."""
        self.raw.drain(ATT_CID)
        for _ in range(300):
            self.raw.send(ATT_CID, struct.pack('<BH', 0x0A, self.handles['FFF1']))
        # Static values are answered by the stack, every one: wait for all 300 (up to ATT's 30 s).
        got = await self.raw.collect(ATT_CID, ATT_TRANSACTION_TIMEOUT, want=300)
        for _ in range(50):
            self.raw.send(ATT_CID, struct.pack('<BH', 0x0A, self.handles['FFF2']))
        # A dynamic read waits for the app, and requests that arrive meanwhile are dropped (§3.3.2), so
        # how many are answered depends on timing. Take every answer until none has come for 3 s: one
        # still on its way would otherwise be taken for the health check's (sat7, at load 15-20).
        got2 = await self.raw.collect(ATT_CID, 1.5, want=50)
        while (late := await self.raw.next(ATT_CID, 3.0)) is not None:
            got2.append(late)
        violations = [f'answered {p.hex()}' for p in got if p != b'\x0b' + HEALTH_VALUE]
        violations += [f'answered {p[:8].hex()}' for p in got2 if p[0] not in (0x0B, 0x01)]
        if not got or not got2:
            violations.append('nothing answered')
        return {'violations': violations, 'answered': len(got), 'answered_dynamic': len(got2)}

    async def prepare(self):
        """400 Prepare Writes of 18 octets, then Execute Write cancel; then 400 more and execute. The queue
        holds 64, so each round finds it full 336 times. (Rounds of 1,500 took over 60 s at load 20: every
        write is a round trip through this Python process.)"""
        violations, accepted, full = [], 0, 0
        handle = self.handles['FFF3']
        for flags in (0x00, 0x01):
            for i in range(400):
                value = bytes([i & 0xFF]) * 18
                pdu = struct.pack('<BHH', 0x16, handle, i * 18) + value
                rsp = await self.raw.att(pdu)
                if rsp is None:
                    violations.append(f'prepare {i}: no response')
                    return {'violations': violations, 'accepted': accepted}
                if rsp[0] == 0x17:
                    if rsp[1:] != pdu[1:]:
                        violations.append(f'prepare {i}: echo {rsp.hex()} differs')
                    accepted += 1
                elif rsp[0] == 0x01 and rsp[1] == 0x16 and rsp[4] == 0x09:
                    full += 1
                else:
                    violations.append(f'prepare {i}: {rsp.hex()}')
            rsp = await self.raw.att(bytes([0x18, flags]))
            if rsp is None or not (rsp == b'\x19' or (rsp[0] == 0x01 and rsp[1] == 0x18)):
                violations.append(f'execute {flags}: {rsp.hex() if rsp else None}')
        return {'violations': violations, 'accepted': accepted, 'queue_full': full}

    # -- L2CAP -------------------------------------------------------------------------------------------

    async def fragmentation(self):
        """Continuations without a start, a start that never completes followed by a complete Read (issue 16,
        defect 1), L2CAP lengths 0 and 65535, frames for unassigned CIDs, a frame split into 1-octet pieces."""
        violations = []
        read = struct.pack('<HHBH', 3, ATT_CID, 0x0A, self.handles['FFF1'])
        self.raw.drain(ATT_CID)
        self.raw.acl(1, b'\x0a\x01\x02')                        # continuation with no frame started
        self.raw.acl(0, struct.pack('<HH', 32, ATT_CID) + b'\x0a')   # announces 32, carries 1
        self.raw.acl(0, read)                                   # a complete Read right after
        rsp = await self.raw.next(ATT_CID, ATT_TRANSACTION_TIMEOUT)
        if rsp != b'\x0b' + HEALTH_VALUE:
            violations.append(f'Read after an incomplete frame: {rsp.hex() if rsp else None}')
        self.raw.acl(0, struct.pack('<HH', 0, ATT_CID))          # an empty ATT PDU
        self.raw.acl(0, struct.pack('<HH', 65535, ATT_CID) + bytes(20))   # announces more than any MTU
        self.raw.acl(1, bytes(200))
        self.raw.acl(0, struct.pack('<HH', 4, 0x0040) + b'\x02\x00\x01\x02')   # a CID nobody opened
        self.raw.acl(0, struct.pack('<HH', 4, 0x0003) + b'\x01\x02\x03\x04')   # a reserved fixed CID
        self.raw.acl(0, struct.pack('<HH', 2, 0x0007) + b'\xff\xff')
        self.raw.acl(0, b'\x05')                                 # a start shorter than the basic header
        pieces = read
        self.raw.acl(0, pieces[:1])
        for b in pieces[1:]:
            self.raw.acl(1, bytes([b]))
        got = await self.raw.until(ATT_CID, b'\x0b' + HEALTH_VALUE)
        if b'\x0b' + HEALTH_VALUE not in got:
            violations.append(f'Read sent one octet per fragment: {[p.hex() for p in got]}')
        return {'violations': violations}

    async def signalling(self):
        """LE signalling: unknown codes, truncated and oversized commands, commands only the other role may
        send, disconnection of CIDs that do not exist, 200 commands in a burst."""
        violations = []
        raw = self.raw
        raw.drain(LE_SIGNALING_CID)

        async def expect_reject(what, code, data, reasons=(0x0000,)):
            i = raw.signal(code, data)
            rsp = await raw.signal_reply(i)
            if rsp is None or rsp[0] != 0x01 or struct.unpack_from('<H', rsp, 4)[0] not in reasons:
                violations.append(f'{what}: {rsp.hex() if rsp else None}')

        await expect_reject('unknown code 0x7f', 0x7F, b'\x01\x02')
        await expect_reject('Echo Request (BR/EDR only)', 0x08, b'')
        await expect_reject('Connection Parameter Update Request from the central', 0x12, struct.pack('<HHHH', 6, 12, 0, 200))
        await expect_reject('Disconnection Request for an unknown CID', 0x06, struct.pack('<HH', 0x0070, 0x0041), reasons=(0x0002,))
        # A command whose length field promises more than the frame carries, and an empty frame.
        raw.send(LE_SIGNALING_CID, struct.pack('<BBH', 0x14, 0x77, 40) + bytes(4))
        raw.send(LE_SIGNALING_CID, b'')
        raw.send(LE_SIGNALING_CID, b'\x14')
        # Identifier 0 is invalid (Vol 3 Part A §4): not answered as if it were a request.
        raw.signal(0x14, struct.pack('<HHHHH', 0x1001, 0x0040, 23, 23, 1), identifier=0)
        # Responses nobody asked for.
        raw.signal(0x15, struct.pack('<HHHHH', 0x0040, 23, 23, 1, 0))
        raw.signal(0x07, struct.pack('<HH', 0x0040, 0x0041))
        await raw.collect(LE_SIGNALING_CID, 0.5)
        # 200 unknown commands in one burst: each rejected.
        ids = [raw.signal(0x7E, b'') for _ in range(200)]
        got = await raw.collect(LE_SIGNALING_CID, 30, want=200)   # all 200 however slow (185 in 3 s at load 20)
        rejected = {p[1] for p in got if p[0] == 0x01}
        if len(rejected) < len(set(ids)):
            violations.append(f'burst: {len(rejected)} of {len(set(ids))} identifiers rejected')
        return {'violations': violations}

    async def open_channel(self, scid, mtu=100, mps=50, credits=3, psm=None):
        i = self.raw.signal(0x14, struct.pack('<HHHHH', psm or self.psm, scid, mtu, mps, credits))
        rsp = await self.raw.signal_reply(i)
        if rsp is None or rsp[0] != 0x15 or len(rsp) < 14:
            return None, None
        dcid, rmtu, rmps, rcredits, result = struct.unpack_from('<HHHHH', rsp, 4)
        return result, (dcid, rmtu, rmps, rcredits)

    async def expect_channel_closed(self, what, scid, dcid, violations):
        """We must disconnect the channel: a Disconnection Request for (their CID, our CID). An outcome, waited
        for up to ATT's transaction timeout: under stress-ng (sat11) the request for K-frames sent without credit
        came later than the 3 s this once allowed."""
        end = time.monotonic() + ATT_TRANSACTION_TIMEOUT
        while (left := end - time.monotonic()) > 0:
            p = await self.raw.next(LE_SIGNALING_CID, left)
            if p is None:
                break
            if p[0] == 0x06 and len(p) >= 8 and struct.unpack_from('<HH', p, 4) == (scid, dcid):
                self.raw.send(LE_SIGNALING_CID, struct.pack('<BBHHH', 0x07, p[1], 4, dcid, scid))
                return
        violations.append(f'{what}: channel not disconnected')

    async def credits(self):
        """Credit-based channel abuse: a credit count past 65535, a K-frame longer than MPS, K-frames that
        overrun their SDU, K-frames sent without a credit, bad parameters and CIDs, 60 channels at once."""
        violations = []
        raw = self.raw
        raw.drain(LE_SIGNALING_CID)
        scid = 0x0040

        async def opened(what):
            nonlocal scid
            scid += 1
            result, info = await self.open_channel(scid)
            if result != 0:
                violations.append(f'{what}: open refused ({result})')
                return None
            return info

        if (info := await opened('credit overflow')):
            dcid = info[0]
            # The CID of a credit indication is the sender's own (Vol 3 Part A §4.24).
            raw.signal(0x16, struct.pack('<HH', scid, 0xFFFF))
            raw.signal(0x16, struct.pack('<HH', scid, 0xFFFF))
            await self.expect_channel_closed('credit overflow', scid, dcid, violations)
        if (info := await opened('K-frame > MPS')):
            dcid, _, rmps, _ = info
            raw.send(dcid, struct.pack('<H', rmps + 10) + bytes(rmps + 8))
            await self.expect_channel_closed('K-frame longer than MPS', scid, dcid, violations)
        if (info := await opened('SDU overrun')):
            dcid, _, rmps, _ = info
            raw.send(dcid, struct.pack('<H', 10) + bytes(20))
            await self.expect_channel_closed('first K-frame longer than its SDU', scid, dcid, violations)
        if (info := await opened('SDU overrun across K-frames')):
            dcid, _, rmps, _ = info
            raw.send(dcid, struct.pack('<H', 30) + bytes(10))
            raw.send(dcid, bytes(25))
            await self.expect_channel_closed('K-frames longer than their SDU', scid, dcid, violations)
        if (info := await opened('SDU longer than MTU')):
            dcid, rmtu, _, _ = info
            raw.send(dcid, struct.pack('<H', rmtu + 1) + bytes(4))
            await self.expect_channel_closed('SDU length above MTU', scid, dcid, violations)
        if (info := await opened('no credit')):
            dcid, rmtu, _, rcredits = info
            # One SDU that never completes, so nothing reaches the app and no credit can come back: its first
            # K-frame and then one-octet K-frames, one more than the credits we were given.
            if rcredits + 1 >= rmtu:
                violations.append(f'no credit: {rcredits} credits for an MTU of {rmtu}, cannot overrun them in one SDU')
            else:
                raw.send(dcid, struct.pack('<H', rmtu) + b'\x00')
                for _ in range(rcredits):
                    raw.send(dcid, b'\x00')
                await self.expect_channel_closed('K-frames without credit', scid, dcid, violations)
        # Parameters and CIDs the specification forbids (Vol 3 Part A §4.22).
        for what, args, want in [('MTU 22', dict(mtu=22), (0x000B,)), ('MPS 22', dict(mps=22), (0x000B,)),
                                 ('SCID 0x0001', dict(scid=0x0001), (0x0009,)), ('unknown SPSM', dict(psm=0x00F1), (0x0002,))]:
            kw = dict(args)
            s = kw.pop('scid', None)
            if s is None:
                scid += 1
                s = scid
            result, _ = await self.open_channel(s, **kw)
            if result not in want:
                violations.append(f'{what}: result {result}')
        scid += 1
        result, info = await self.open_channel(scid)
        result2, _ = await self.open_channel(scid)
        if result != 0 or result2 != 0x000A:
            violations.append(f'source CID reused: {result}, {result2}')
        # 60 channels at once, then all closed by us.
        opened_all = []
        for _ in range(60):
            scid += 1
            if scid > 0x007F:
                break
            result, info = await self.open_channel(scid)
            if result == 0:
                opened_all.append((scid, info[0]))
            elif result != 0x0004:
                violations.append(f'channel {scid}: result {result}')
        for s, d in opened_all:
            i = raw.signal(0x06, struct.pack('<HH', d, s))
            rsp = await raw.signal_reply(i)
            if rsp is None or rsp[0] != 0x07:
                violations.append(f'disconnect {s}: {rsp.hex() if rsp else None}')
        return {'violations': violations, 'channels_opened': len(opened_all)}

    # -- SMP ---------------------------------------------------------------------------------------------

    async def smp(self):
        """Malformed and out-of-sequence SMP: each answered with Pairing Failed (or ignored where the
        specification says so), never with progress."""
        violations = []
        raw = self.raw
        pairing_request = bytes([0x01, 0x03, 0x00, 0x09, 16, 0x00, 0x00])   # NoInputNoOutput, SC+bonding

        async def answer(pdu, silence_ok=False):
            raw.drain(SMP_CID)
            raw.send(SMP_CID, pdu)
            if silence_ok:
                # Silence is judged by a fence, not a window (an answer 1 s late at load 15 was taken for the
                # next case's): a Read sent after `pdu` on the same link is answered after whatever the
                # host answers to `pdu`, so what SMP holds once the Read's answer is here is the whole answer.
                raw.drain(ATT_CID)
                await raw.att(struct.pack('<BH', 0x0A, self.handles['FFF1']))
                return raw.drain(SMP_CID)
            first = await raw.next(SMP_CID, 30.0)   # waited for, up to SMP's 30 s
            return [first] + await raw.collect(SMP_CID, 0.1) if first is not None else []

        def failed(got, reasons=None):
            return len(got) == 1 and len(got[0]) == 2 and got[0][0] == 0x05 and (reasons is None or got[0][1] in reasons)

        for what, pdu, reasons, silence_ok in [
            ('reserved code 0xff', b'\xff\x01\x02', (0x07,), True),
            ('empty PDU', b'', None, True),
            ('Pairing Confirm out of sequence', b'\x03' + bytes(16), None, True),
            ('Pairing Random out of sequence', b'\x04' + bytes(16), None, True),
            ('Pairing Public Key out of sequence', b'\x0c' + bytes(64), None, True),
            ('Pairing Request truncated', pairing_request[:4], (0x0A,), False),
            ('Pairing Request with key size 6', pairing_request[:4] + b'\x06' + pairing_request[5:], (0x06, 0x0A), False),
            ('Pairing Request with key size 200', pairing_request[:4] + b'\xc8' + pairing_request[5:], (0x0A, 0x06), False),
        ]:
            got = await answer(pdu, silence_ok)
            if not (failed(got, reasons) or (silence_ok and not got)):
                violations.append(f'{what}: {[p.hex() for p in got]}')
        # A valid request, then the steps out of order: a Random before any Confirm, then an invalid public key.
        got = await answer(pairing_request)
        if not got or got[0][0] != 0x02:
            violations.append(f'Pairing Request: {[p.hex() for p in got]}')
        got = await answer(b'\x04' + bytes(16))
        if not failed(got):
            violations.append(f'Random before Confirm: {[p.hex() for p in got]}')
        await asyncio.sleep(0.2)
        got = await answer(pairing_request)
        if not got or got[0][0] != 0x02:
            violations.append(f'Pairing Request again: {[p.hex() for p in got]}')
        got = await answer(b'\x0c' + bytes(64))      # (0, 0) is not on P-256
        if not failed(got, (0x0B, 0x0A, 0x08)):
            violations.append(f'invalid public key: {[p.hex() for p in got]}')
        # 40 Pairing Requests in a row: answered or refused, and the link stays usable.
        for _ in range(40):
            raw.send(SMP_CID, pairing_request)
        got = await raw.collect(SMP_CID, 1.5)
        if any(p[0] not in (0x02, 0x05, 0x0C) for p in got):
            violations.append(f'pairing request flood: {[p[:2].hex() for p in got]}')
        return {'violations': violations}

    # -- links -------------------------------------------------------------------------------------------

    async def churn(self):
        """40 connections: dropped at once, after a request, after half a request."""
        violations = []
        await self.disconnect()
        for i in range(40):
            try:
                await self.connect()
            except Exception as e:
                violations.append(f'connect {i}: {type(e).__name__}')
                continue
            if i % 3 == 1:
                self.raw.send(ATT_CID, struct.pack('<BH', 0x0A, self.handles['FFF2']))
            elif i % 3 == 2:
                self.raw.acl(0, struct.pack('<HH', 8, ATT_CID) + b'\x12')
            await self.disconnect()
        await self.connect()
        return {'violations': violations}


ATTACKS = ['opcodes', 'mtu', 'ranges', 'pipelined', 'prepare', 'fragmentation', 'signalling', 'credits', 'smp', 'churn']


async def find(device, name, timeout):
    found = asyncio.get_running_loop().create_future()

    def on_advertisement(adv):
        n = adv.data.get(AdvertisingData.COMPLETE_LOCAL_NAME)
        if isinstance(n, bytes):
            n = n.decode('utf-8', 'replace')
        if n == name and adv.is_connectable and not found.done():
            found.set_result(adv.address)

    device.on('advertisement', on_advertisement)
    await device.start_scanning(active=False)
    address = await asyncio.wait_for(found, timeout)
    await device.stop_scanning()
    return address


async def discover(device, address):
    connection = await device.connect(address, timeout=10)
    peer = Peer(connection)
    await peer.discover_services([UUID('FFF0')])
    handles = {}
    for s in peer.services:
        await s.discover_characteristics()
        for c in s.characteristics:
            handles[bytes(c.uuid.uuid_bytes)[::-1].hex().upper()] = c.handle
    return connection, peer, handles


async def attack(args):
    async with await open_transport(args.transport) as (source, sink):
        device = Device.with_hci('bumble-hostile', Address(args.address), source, sink)
        await device.power_on()
        address = await find(device, args.name, 20)
        connection, _, handles = await discover(device, address)
        emit(event='ready', handles=handles)
        await connection.disconnect()
        attacker = Attacker(device, address, handles, args.psm)
        await attacker.connect()
        for name in args.attacks.split(','):
            emit(event='attack_start', name=name)
            attacker.raw.slowest = 0.0
            started = time.monotonic()
            try:
                result = await asyncio.wait_for(getattr(attacker, name)(), args.attack_timeout)
            except asyncio.TimeoutError:
                result = {'violations': [f'attack did not finish in {args.attack_timeout} s']}
            ended = time.monotonic()
            health = await attacker.health()
            # started/ended: CLOCK_MONOTONIC, the clock of the bystander's reports too.
            emit(event='attack_end', name=name, seconds=round(ended - started, 2), started=started, ended=ended, health=health,
                 slowest_answer_ms=round(attacker.raw.slowest * 1000), **result)
        await attacker.disconnect()
        emit(event='done')


async def crowd(args):
    """--count centrals in this one process, each its own controller on the radio, flood the peripheral at
    once for --seconds: rounds of 20 Write Commands and one Read, the Read answered before the next round."""
    transports, devices = [], []
    for i in range(args.count):
        t = await open_transport(args.transport)
        transports.append(t)
        d = Device.with_hci(f'crowd-{i}', Address(f'F0:F1:F2:F3:F6:{i + 1:02X}'), t.source, t.sink)
        await d.power_on()
        devices.append(d)
    address = await find(devices[0], args.name, 20)
    connection, _, handles = await discover(devices[0], address)
    await connection.disconnect()
    links = []
    for d in devices:
        c = await d.connect(address, timeout=10)
        q = asyncio.Queue()
        d.l2cap_channel_manager.register_fixed_channel(ATT_CID, lambda handle, pdu, q=q: q.put_nowait(bytes(pdu)))
        links.append((d, c, q))
    emit(event='crowd_connected', count=len(links))
    read = struct.pack('<BH', 0x0A, handles['FFF1'])

    async def flood(d, c, q):
        writes = reads = 0
        waited = 0.0
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            for _ in range(20):
                d.send_l2cap_pdu(c.handle, ATT_CID, struct.pack('<BH', 0x52, handles['FFF3']) + bytes(20))
            writes += 20
            sent = time.monotonic()
            d.send_l2cap_pdu(c.handle, ATT_CID, read)
            rsp = await asyncio.wait_for(q.get(), 10)
            waited += time.monotonic() - sent
            if rsp != b'\x0b' + HEALTH_VALUE:
                raise RuntimeError(f'read answered {rsp.hex()}')
            reads += 1
        return writes, reads, waited

    started = time.monotonic()
    results = await asyncio.gather(*(flood(*link) for link in links))
    # started/ended: CLOCK_MONOTONIC, the clock of the bystander's reports; read_ms: the crowd's mean read
    # latency (each read waits behind its own 20 Write Commands and the other centrals' traffic).
    total_reads = sum(r for _, r, _ in results)
    emit(event='crowd_done', writes=sum(w for w, _, _ in results), reads=[r for _, r, _ in results],
         read_ms=round(sum(t for _, _, t in results) / max(total_reads, 1) * 1000, 2), started=started, ended=time.monotonic())
    for d, c, _ in links:
        await c.disconnect()
    for t in transports:
        await t.close()
    emit(event='done')


async def bystander(args):
    async with await open_transport(args.transport) as (source, sink):
        device = Device.with_hci('bumble-bystander', Address(args.address), source, sink)
        await device.power_on()
        address = await find(device, args.name, 20)
        connection, peer, handles = await discover(device, address)
        characteristic = next(c for s in peer.services for c in s.characteristics if c.handle == handles['FFF1'])
        lost = asyncio.get_running_loop().create_future()
        connection.on('disconnection', lambda reason: lost.done() or lost.set_result(reason))
        emit(event='reading')
        reads, errors, slowest, waited, last = 0, 0, 0.0, 0.0, time.monotonic()
        while not lost.done():
            t = time.monotonic()
            try:
                value = await asyncio.wait_for(peer.read_value(characteristic), 5)
                if bytes(value) == HEALTH_VALUE:
                    reads += 1
                    waited += time.monotonic() - t
                else:
                    errors += 1
            except Exception:
                errors += 1
            slowest = max(slowest, time.monotonic() - t)
            if time.monotonic() - last >= 0.5:
                # waited_ms: the total latency of the successful reads so far (their mean over a window is
                # the difference of two reports' waited_ms over that of their reads).
                emit(event='bystander', reads=reads, errors=errors, slowest_ms=round(slowest * 1000, 1),
                     waited_ms=round(waited * 1000, 1), t=time.monotonic())
                last = time.monotonic()
            await asyncio.sleep(0.05)
        emit(event='error', error=f'bystander link lost ({lost.result()})')


def main():
    p = argparse.ArgumentParser()
    p.add_argument('mode', choices=['attack', 'bystander', 'crowd'])
    p.add_argument('--transport', required=True)
    p.add_argument('--name', required=True)
    p.add_argument('--address', default='F0:F1:F2:F3:F4:A0')
    p.add_argument('--psm', type=lambda s: int(s, 0), default=0)
    p.add_argument('--attacks', default=','.join(ATTACKS))
    p.add_argument('--attack-timeout', type=float, default=60)
    p.add_argument('--count', type=int, default=10)
    p.add_argument('--seconds', type=float, default=8)
    args = p.parse_args()
    try:
        asyncio.run({'attack': attack, 'bystander': bystander, 'crowd': crowd}[args.mode](args))
    except Exception as e:
        emit(event='error', error=f'{type(e).__name__}: {e}')
        sys.exit(1)


if __name__ == '__main__':
    main()
