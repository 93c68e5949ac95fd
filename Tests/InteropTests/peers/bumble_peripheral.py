"""A Bumble peripheral for the interop tests: advertises a name and a Heart Rate service, plus a custom
service with a long readable value, a writable characteristic and an indicate characteristic. Sends a
heart-rate notification every 100 ms while subscribed. Prints one JSON object per line."""
import argparse
import asyncio
import json
import sys

from bumble.core import AdvertisingData, UUID
from bumble.device import Device
from bumble.gatt import Characteristic, CharacteristicValue, Descriptor, Service
from bumble.hci import Address
from bumble.transport import open_transport

CUSTOM_SERVICE = '6E400001-B5A3-F393-E0A9-E50E24DCCA9E'
LONG_CHAR = '6E400002-B5A3-F393-E0A9-E50E24DCCA9E'
WRITE_CHAR = '6E400003-B5A3-F393-E0A9-E50E24DCCA9E'
INDICATE_CHAR = '6E400004-B5A3-F393-E0A9-E50E24DCCA9E'
LONG_VALUE = bytes(i % 251 for i in range(300))


def emit(**fields):
    print(json.dumps(fields), flush=True)


async def run(args):
    async with await open_transport(args.transport) as (source, sink):
        device = Device.with_hci(args.name, Address(args.address), source, sink)

        def on_write(connection, value):
            emit(event='write', uuid=WRITE_CHAR, value=bytes(value).hex())

        heart_rate = Characteristic('2A37', Characteristic.Properties.NOTIFY, Characteristic.READABLE, b'\x00\x3c')
        location = Characteristic('2A38', Characteristic.Properties.READ, Characteristic.READABLE, b'\x01')
        long_char = Characteristic(LONG_CHAR, Characteristic.Properties.READ, Characteristic.READABLE, LONG_VALUE,
                                   descriptors=[Descriptor('2901', Descriptor.READABLE, b'long value')])
        write_char = Characteristic(WRITE_CHAR, Characteristic.Properties.WRITE | Characteristic.Properties.WRITE_WITHOUT_RESPONSE,
                                    Characteristic.WRITEABLE, CharacteristicValue(write=on_write))
        indicate_char = Characteristic(INDICATE_CHAR, Characteristic.Properties.INDICATE, Characteristic.READABLE, b'\x00')
        device.add_services([
            Service('180D', [heart_rate, location]),
            Service(CUSTOM_SERVICE, [long_char, write_char, indicate_char]),
        ])
        await device.power_on()
        subscribed = asyncio.Event()

        def on_subscription(connection, characteristic, notify_enabled, indicate_enabled):
            emit(event='subscription', uuid=str(characteristic.uuid), notify=notify_enabled, indicate=indicate_enabled)
            if notify_enabled or indicate_enabled:
                subscribed.set()

        device.on('characteristic_subscription', on_subscription)

        def on_connection(connection):
            emit(event='connected', address=str(connection.peer_address))
            if args.disconnect_after:
                async def later():
                    await asyncio.sleep(args.disconnect_after)
                    await connection.disconnect()
                    emit(event='disconnecting')
                asyncio.get_running_loop().create_task(later())
            connection.on('disconnection', lambda reason: emit(event='disconnected', reason=reason))
            connection.on('connection_att_mtu_update', lambda: emit(event='mtu', mtu=connection.att_mtu))

        device.on('connection', on_connection)
        device.advertising_data = bytes(AdvertisingData([
            (AdvertisingData.FLAGS, bytes([0x06])),
            (AdvertisingData.COMPLETE_LOCAL_NAME, args.name.encode()),
            (AdvertisingData.COMPLETE_LIST_OF_16_BIT_SERVICE_CLASS_UUIDS, bytes([0x0D, 0x18])),
        ]))
        device.scan_response_data = bytes(AdvertisingData([
            (AdvertisingData.MANUFACTURER_SPECIFIC_DATA, bytes([0xFF, 0xFF, 0x01, 0x02])),
            (AdvertisingData.TX_POWER_LEVEL, bytes([0xF8])),
        ]))
        await device.start_advertising(auto_restart=True, own_address_type=0)
        emit(event='advertising', name=args.name)
        beat = 60
        end = asyncio.get_running_loop().time() + args.duration
        while asyncio.get_running_loop().time() < end:
            await asyncio.sleep(0.1)
            if subscribed.is_set():
                beat = 60 if beat >= 120 else beat + 1
                await device.notify_subscribers(heart_rate, bytes([0x00, beat]))
                await device.indicate_subscribers(indicate_char, bytes([beat]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--transport', required=True)
    p.add_argument('--name', default='Bumble HR')
    p.add_argument('--address', default='E0:E1:E2:E3:E4:E5')
    # How long the peer lives. The tests stop it (and it dies with them, see guard.py); a short lifetime was a
    # wall-clock window: in full runs the peer quit after 30 s in the middle of a test still using it.
    p.add_argument('--duration', type=float, default=600.0)
    p.add_argument('--disconnect-after', type=float, default=0.0)
    args = p.parse_args()
    try:
        asyncio.run(run(args))
    except Exception as e:
        emit(event='error', error=f'{type(e).__name__}: {e}')
        sys.exit(1)


if __name__ == '__main__':
    main()
