"""A Bumble central for the interop tests: scan, connect, exchange MTU, discover and read the whole GATT
database, optionally subscribe and write, then disconnect. Prints one JSON object per line."""
import argparse
import asyncio
import json
import sys

from bumble.core import AdvertisingData, UUID
from bumble.device import Device, Peer
from bumble.gatt import Characteristic
from bumble.hci import Address
from bumble.transport import open_transport


def emit(**fields):
    print(json.dumps(fields), flush=True)


def uuid_text(u):
    b = bytes(u.uuid_bytes)[::-1]
    if len(b) == 2:
        return b.hex().upper()
    h = b.hex().upper()
    return f'{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}' if len(b) == 16 else h


def ad_uuids(data):
    out = []
    for t in (AdvertisingData.COMPLETE_LIST_OF_16_BIT_SERVICE_CLASS_UUIDS,
              AdvertisingData.INCOMPLETE_LIST_OF_16_BIT_SERVICE_CLASS_UUIDS,
              AdvertisingData.COMPLETE_LIST_OF_128_BIT_SERVICE_CLASS_UUIDS,
              AdvertisingData.INCOMPLETE_LIST_OF_128_BIT_SERVICE_CLASS_UUIDS):
        for u in data.get(t) or []:
            out.append(uuid_text(u))
    return out


async def run(args):
    async with await open_transport(args.transport) as (source, sink):
        device = Device.with_hci('bumble-central', Address(args.address), source, sink)
        await device.power_on()
        emit(event='ready')
        loop = asyncio.get_running_loop()
        found = loop.create_future()

        def on_advertisement(adv):
            name = adv.data.get(AdvertisingData.COMPLETE_LOCAL_NAME) or adv.data.get(AdvertisingData.SHORTENED_LOCAL_NAME)
            if isinstance(name, bytes):
                name = name.decode('utf-8', 'replace')
            services = ad_uuids(adv.data)
            emit(event='advertisement', address=str(adv.address), rssi=adv.rssi, name=name,
                 connectable=adv.is_connectable, scan_response=adv.is_scan_response,
                 services=services, data=adv.data_bytes.hex())
            wanted = (args.name and name == args.name) or (args.service and args.service.upper() in services)
            if wanted and adv.is_connectable and not found.done():
                found.set_result(adv.address)

        device.on('advertisement', on_advertisement)
        await device.start_scanning(active=True)
        address = await asyncio.wait_for(found, args.timeout)
        await device.stop_scanning()
        connection = await device.connect(address, timeout=args.timeout)
        emit(event='connected', address=str(address))
        peer = Peer(connection)
        mtu = await peer.request_mtu(args.mtu)
        emit(event='mtu', mtu=mtu)
        await peer.discover_services()
        for service in peer.services:
            emit(event='service', uuid=uuid_text(service.uuid), handle=service.handle, end=service.end_group_handle)
            await service.discover_characteristics()
            for ch in service.characteristics:
                value = None
                read_error = None
                if ch.properties & Characteristic.Properties.READ:
                    try:
                        value = (await peer.read_value(ch)).hex()
                    except Exception as e:  # e.g. insufficient authentication: report it and go on
                        read_error = getattr(e, 'error_code', None)
                        read_error = int(read_error) if read_error is not None else type(e).__name__
                emit(event='characteristic', service=uuid_text(service.uuid), uuid=uuid_text(ch.uuid), handle=ch.handle,
                     properties=int(ch.properties), value=value, read_error=read_error)
                await ch.discover_descriptors()
                for d in ch.descriptors:
                    dv = (await peer.read_value(d)).hex()
                    emit(event='descriptor', characteristic=uuid_text(ch.uuid), uuid=uuid_text(d.type), handle=d.handle, value=dv)
        # The other discovery procedures: by service UUID (Find By Type Value), included services, and
        # Read Using Characteristic UUID.
        for uuid in args.find_service or []:
            found = await peer.gatt_client.discover_service(UUID(uuid))
            emit(event='found_service', uuid=uuid.upper(), handles=[[s.handle, s.end_group_handle] for s in found])
            for s in found:
                included = await peer.gatt_client.discover_included_services(s)
                emit(event='included', service=uuid.upper(), uuids=[uuid_text(i.uuid) for i in included])
        for uuid in args.read_by_uuid or []:
            values = await peer.gatt_client.read_characteristics_by_uuid(UUID(uuid), None)
            emit(event='read_by_uuid', uuid=uuid.upper(), values=[bytes(v).hex() for v in values])
        for spec in args.write or []:
            target, _, hexvalue = spec.partition('=')
            ch = next(c for s in peer.services for c in s.characteristics if uuid_text(c.uuid) == target.upper())
            await peer.write_value(ch, bytes.fromhex(hexvalue), with_response=True)
            emit(event='written', uuid=target.upper(), length=len(hexvalue) // 2)
        for spec in args.write_no_response or []:
            target, _, hexvalue = spec.partition('=')
            ch = next(c for s in peer.services for c in s.characteristics if uuid_text(c.uuid) == target.upper())
            await peer.write_value(ch, bytes.fromhex(hexvalue), with_response=False)
            emit(event='written_no_response', uuid=target.upper(), length=len(hexvalue) // 2)
        for target, kind in [(args.subscribe, 'notification'), (args.indicate, 'indication')]:
            if not target:
                continue
            ch = next(c for s in peer.services for c in s.characteristics if uuid_text(c.uuid) == target.upper())
            got = asyncio.Queue()
            await peer.subscribe(ch, lambda value, q=got: q.put_nowait(bytes(value)), prefer_notify=(kind == 'notification'))
            emit(event='subscribed', uuid=target.upper(), kind=kind)
            for _ in range(args.count):
                v = await asyncio.wait_for(got.get(), args.timeout)
                emit(event=kind, uuid=target.upper(), value=v.hex())
        if args.wait_for_disconnect:
            done = asyncio.get_running_loop().create_future()
            connection.on('disconnection', lambda reason: done.done() or done.set_result(reason))
            reason = await asyncio.wait_for(done, args.timeout)
            emit(event='disconnected', by='peer', reason=reason)
            return
        await connection.disconnect()
        emit(event='disconnected', by='us')


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--transport', required=True)
    p.add_argument('--address', default='F0:F1:F2:F3:F4:F5')
    p.add_argument('--name')
    p.add_argument('--service')
    p.add_argument('--mtu', type=int, default=247)
    p.add_argument('--write', action='append')
    p.add_argument('--subscribe')
    p.add_argument('--indicate')
    p.add_argument('--find-service', action='append')
    p.add_argument('--read-by-uuid', action='append')
    p.add_argument('--write-no-response', action='append')
    p.add_argument('--wait-for-disconnect', action='store_true')
    p.add_argument('--count', type=int, default=3)
    p.add_argument('--timeout', type=float, default=10.0)
    args = p.parse_args()
    try:
        asyncio.run(asyncio.wait_for(run(args), args.timeout * 6))
    except Exception as e:  # report, then fail
        emit(event='error', error=f'{type(e).__name__}: {e}')
        sys.exit(1)


if __name__ == '__main__':
    main()
