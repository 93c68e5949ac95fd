"""A Bumble device for the pairing interop tests, as peripheral (advertises, serves a characteristic that
needs encryption and one that needs authentication) or as central (connects to --connect, pairs, reads our
encrypted characteristic, disconnects, reconnects and encrypts with the stored keys). Prints one JSON object
per line. Passkeys: displayed ones are printed ({"event": "display", ...}); typed ones are read from
--passkey-file (the test writes the number it saw on our side)."""
import argparse
import asyncio
import json
import os

from bumble.core import UUID, AdvertisingData
from bumble.device import Device
from bumble.gatt import Characteristic, Service
from bumble.hci import Address
from bumble.keys import JsonKeyStore
from bumble.pairing import PairingConfig, PairingDelegate
from bumble.transport import open_transport

SECURE_SERVICE = '0000FFE0-0000-1000-8000-00805F9B34FB'
ENCRYPTED_CHAR = '0000FFE1-0000-1000-8000-00805F9B34FB'
AUTHENTICATED_CHAR = '0000FFE2-0000-1000-8000-00805F9B34FB'
IO = {
    'none': PairingDelegate.NO_OUTPUT_NO_INPUT,
    'display': PairingDelegate.DISPLAY_OUTPUT_ONLY,
    'keyboard': PairingDelegate.KEYBOARD_INPUT_ONLY,
    'yesno': PairingDelegate.DISPLAY_OUTPUT_AND_YES_NO_INPUT,
    'keyboard+display': PairingDelegate.DISPLAY_OUTPUT_AND_KEYBOARD_INPUT,
}


def emit(**fields):
    print(json.dumps(fields), flush=True)


class Delegate(PairingDelegate):
    def __init__(self, args):
        super().__init__(io_capability=IO[args.io])
        self.args = args

    async def accept(self):
        emit(event='accept')
        return True

    async def compare_numbers(self, number, digits):
        emit(event='compare', number=number)
        return not self.args.reject

    async def get_number(self):
        emit(event='enter')
        for _ in range(300):
            if os.path.exists(self.args.passkey_file):
                text = open(self.args.passkey_file).read().strip()
                if text:
                    return int(text)
            await asyncio.sleep(0.1)
        return None

    async def display_number(self, number, digits):
        emit(event='display', number=number)


async def run(args):
    async with await open_transport(args.transport) as (source, sink):
        device = Device.with_hci(args.name, Address(args.address), source, sink)
        device.keystore = JsonKeyStore(namespace=None, filename=args.keystore)
        device.pairing_config_factory = lambda connection: PairingConfig(
            sc=args.sc, mitm=args.mitm, bonding=True, delegate=Delegate(args))
        device.add_services([Service(SECURE_SERVICE, [
            Characteristic(ENCRYPTED_CHAR, Characteristic.Properties.READ, Characteristic.READ_REQUIRES_ENCRYPTION, b'\x5e'),
            Characteristic(AUTHENTICATED_CHAR, Characteristic.Properties.READ, Characteristic.READ_REQUIRES_AUTHENTICATION, b'\xa7'),
        ])])
        await device.power_on()

        def watch(connection):
            emit(event='connected', address=str(connection.peer_address))
            def on_pairing(keys):
                try:
                    ltk = getattr(keys, 'ltk', None) or getattr(keys, 'ltk_peripheral', None)
                    irk = getattr(keys, 'irk', None)
                    emit(event='paired', sc=getattr(connection, 'sc', None), authenticated=connection.authenticated,
                         ltk=(ltk.value.hex() if ltk else None), irk=(irk.value.hex() if irk else None),
                         identity=str(connection.peer_address))
                except Exception as e:
                    emit(event='paired', note=f'{type(e).__name__}: {e}')
            connection.on('pairing', on_pairing)
            connection.on('pairing_failure', lambda reason: emit(event='pairing_failed', reason=int(reason)))
            connection.on('connection_encryption_change',
                          lambda: emit(event='encryption', encrypted=connection.is_encrypted, authenticated=connection.authenticated))
            connection.on('disconnection', lambda reason: emit(event='disconnected', reason=reason))

        if args.connect is None:
            device.on('connection', watch)
            device.advertising_data = bytes(AdvertisingData([
                (AdvertisingData.FLAGS, bytes([0x06])),
                (AdvertisingData.COMPLETE_LOCAL_NAME, args.name.encode()),
            ]))
            await device.start_advertising(auto_restart=True, own_address_type=0)
            emit(event='advertising', address=str(device.public_address))
            await asyncio.sleep(args.duration)
            return

        from bumble.device import Peer
        target = Address(args.connect)
        for attempt in range(2):
            connection = await device.connect(target, timeout=15)
            watch(connection)
            if attempt == 0:
                await connection.pair()
            else:
                # Reconnection: encrypt with the stored keys, no pairing.
                await connection.encrypt()
            peer = Peer(connection)
            await peer.discover_services()
            characteristics = await peer.discover_characteristics()
            values = {}
            wanted = [UUID(u) for u in (args.read or [])]
            for c in characteristics:
                if c.uuid in wanted:
                    values[str(c.uuid)] = (await c.read_value()).hex()
            emit(event='read', values=values, attempt=attempt)
            await connection.disconnect()
            await asyncio.sleep(0.5)
        emit(event='done')


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--transport', required=True)
    p.add_argument('--name', default='Bumble Pair')
    p.add_argument('--address', default='F0:F1:F2:F3:F4:F5')
    p.add_argument('--io', default='none', choices=sorted(IO))
    p.add_argument('--sc', type=lambda s: s == 'true', default=True)
    p.add_argument('--mitm', type=lambda s: s == 'true', default=True)
    p.add_argument('--reject', action='store_true')
    p.add_argument('--passkey-file', default='/nonexistent')
    p.add_argument('--keystore', required=True)
    p.add_argument('--connect')
    p.add_argument('--read', action='append')
    # How long an advertising peer lives: the tests stop it (and it dies with them, see guard.py); 60 s was a
    # wall-clock window that a loaded full run outlasted in the middle of a reconnection.
    p.add_argument('--duration', type=float, default=600)
    args = p.parse_args()
    try:
        asyncio.run(run(args))
    except Exception as e:  # report, so that the test fails with the reason
        emit(event='error', error=f'{type(e).__name__}: {e}')


if __name__ == '__main__':
    main()
