"""A Bumble peer for L2CAP credit-based channel interop. Prints one JSON object per line.

--role server: advertises connectable and serves an LE credit-based SPSM; every SDU received is echoed back
               on the same channel; reports each channel and, when it closes, the bytes it carried and
               their SHA-256.
--role client: connects to --peer, opens --count channels to --psm (the LE procedure, or the enhanced one
               with --enhanced), sends --bytes on each and waits for the echo; reports bytes and SHA-256.
"""
import argparse
import asyncio
import hashlib
import json
import sys

from bumble import l2cap
from bumble.core import AdvertisingData
from bumble.device import Device
from bumble.hci import Address
from bumble.transport import open_transport


def emit(**fields):
    print(json.dumps(fields), flush=True)


def pattern(n, seed):
    return bytes((i * 31 + seed) & 0xFF for i in range(n))


async def serve(device, args):
    def on_channel(channel):
        received = hashlib.sha256()
        total = [0]
        emit(event='channel', psm=channel.psm, peer_mtu=channel.peer_mtu, peer_mps=channel.peer_mps,
             mtu=channel.mtu, mps=channel.mps)

        def on_sdu(sdu):
            received.update(sdu)
            total[0] += len(sdu)
            channel.write(sdu)

        def on_close():
            emit(event='closed', bytes=total[0], sha256=received.hexdigest())

        channel.sink = on_sdu
        channel.on('close', on_close)

    device.create_l2cap_server(
        spec=l2cap.LeCreditBasedChannelSpec(psm=args.psm, mtu=args.mtu, mps=args.mps, max_credits=args.credits),
        handler=on_channel)
    device.on('connection', lambda c: emit(event='connected', address=str(c.peer_address)))
    device.advertising_data = bytes(AdvertisingData([
        (AdvertisingData.FLAGS, bytes([0x06])),
        (AdvertisingData.COMPLETE_LOCAL_NAME, args.name.encode()),
    ]))
    await device.start_advertising(auto_restart=True, own_address_type=0)
    emit(event='advertising', name=args.name, psm=args.psm)
    await asyncio.sleep(args.duration)


async def client(device, args):
    connection = await device.connect(Address(args.peer), timeout=20)
    emit(event='connected', address=str(connection.peer_address))
    spec = l2cap.LeCreditBasedChannelSpec(psm=args.psm, mtu=args.mtu, mps=args.mps, max_credits=args.credits)
    try:
        if args.enhanced:
            channels = await device.l2cap_channel_manager.create_enhanced_credit_based_channels(connection, spec, args.count)
        else:
            channels = [await connection.create_l2cap_channel(spec=spec) for _ in range(args.count)]
    except Exception as e:
        emit(event='refused', error=f'{type(e).__name__}: {e}')
        return
    emit(event='opened', count=len(channels), peer_mtu=channels[0].peer_mtu, peer_mps=channels[0].peer_mps)

    async def exchange(index, channel):
        data = pattern(args.bytes, index)
        echoed = bytearray()
        done = asyncio.Event()

        def on_sdu(sdu):
            echoed.extend(sdu)
            if len(echoed) >= len(data):
                done.set()

        channel.sink = on_sdu
        for i in range(0, len(data), channel.peer_mtu):
            channel.write(data[i:i + channel.peer_mtu])
            await channel.drain()
        await asyncio.wait_for(done.wait(), timeout=args.timeout)
        emit(event='echoed', channel=index, bytes=len(echoed), intact=bytes(echoed) == data,
             sha256=hashlib.sha256(bytes(echoed)).hexdigest())

    await asyncio.gather(*(exchange(i, c) for i, c in enumerate(channels)))
    for c in channels:
        await c.disconnect()
    emit(event='done')
    await connection.disconnect()


async def run(args):
    async with await open_transport(args.transport) as (source, sink):
        device = Device.with_hci(args.name, Address(args.address), source, sink)
        await device.power_on()
        if args.role == 'server':
            await serve(device, args)
        else:
            await client(device, args)


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--transport', required=True)
    p.add_argument('--role', choices=['server', 'client'], required=True)
    p.add_argument('--name', default='Bumble L2CAP')
    p.add_argument('--address', default='E0:E1:E2:E3:E4:E6')
    p.add_argument('--peer', default='')
    p.add_argument('--psm', type=lambda s: int(s, 0), default=0x0080)
    p.add_argument('--mtu', type=int, default=2048)
    p.add_argument('--mps', type=int, default=247)
    p.add_argument('--credits', type=int, default=64)
    p.add_argument('--bytes', type=int, default=100_000)
    p.add_argument('--count', type=int, default=1)
    p.add_argument('--enhanced', action='store_true')
    p.add_argument('--duration', type=float, default=600.0)
    p.add_argument('--timeout', type=float, default=150.0)
    args = p.parse_args()
    try:
        asyncio.run(run(args))
    except Exception as e:
        emit(event='error', error=f'{type(e).__name__}: {e}')
        sys.exit(1)


if __name__ == '__main__':
    main()
