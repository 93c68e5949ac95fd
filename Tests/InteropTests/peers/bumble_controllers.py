"""Controllers unlike the ideal ones, for the controller-diversity suite: Bumble's software Controller
subclassed to look like a real chip of some kind, serving our host over TCP (we listen; the host connects
with tcp-client:127.0.0.1:PORT) or over a pseudo-terminal (the host opens serial:PATH), on a Bumble LocalLink
shared with a Bumble peer device (a GATT peripheral advertising the legacy or the extended way, or a
central that connects to our host).

Profiles (--profile):
  v40          Bluetooth 4.0: no Data Length Extension, no LE 2M, no privacy, no extended advertising; the
               4.1+ commands are not in its supported-commands map and get Unknown HCI Command.
  v42          Bluetooth 4.2: Data Length Extension and LL privacy, no 2M, no extended advertising.
  v5           Bluetooth 5.x: 2M, Coded, extended advertising, scanning and connecting (and legacy ones too,
               but a real one refuses to mix them; this one reports any mix as an error event).
  le-buffer-0  LE Read Buffer Size answers 0: LE shares the BR/EDR buffers (310 octets x 4).
  one-buffer   a single 27-octet LE buffer whose Number Of Completed Packets comes 30 ms after the packet
               (buffers are held until the air is free).
  no-address   Read BD_ADDR answers 00:00:00:00:00:00; with --zephyr it answers Zephyr's vendor commands and
               offers a factory static address.
  slow-reset   HCI_Reset is answered after 3 s.
Options: --garbage writes bytes that are no packet before the Reset answer (a port opened mid-stream);
--drop-after-acl N closes the host's connection after N ACL packets from it (the controller vanishes
mid-transfer) and serves a fresh controller to the next connection.

Every profile counts ACL packets in the controller: more in flight than it has buffers is reported as an
"overflow" event (a real controller would drop them). One JSON object per line on stdout."""
import argparse
import asyncio
import json
import os
import sys

from bumble import hci, ll
from bumble.controller import Controller
from bumble.core import AdvertisingData, PhysicalTransport
from bumble.device import AdvertisingEventProperties, AdvertisingParameters, Device, Peer
from bumble.gatt import Characteristic, CharacteristicValue, Service
from bumble.hci import Address
from bumble.link import LocalLink

SERVICE = '6E400001-B5A3-F393-E0A9-E50E24DCCA9E'
LONG_CHAR = '6E400002-B5A3-F393-E0A9-E50E24DCCA9E'
WRITE_CHAR = '6E400003-B5A3-F393-E0A9-E50E24DCCA9E'
NOTIFY_CHAR = '6E400004-B5A3-F393-E0A9-E50E24DCCA9E'
LONG_VALUE = bytes(i % 251 for i in range(300))
ZEPHYR_STATIC = bytes([0x11, 0x22, 0x33, 0x44, 0x55, 0xC6])   # little-endian: C6:55:44:33:22:11, static (top bits 11)

LEGACY_GAP = {hci.HCI_LE_SET_ADVERTISING_PARAMETERS_COMMAND, hci.HCI_LE_SET_ADVERTISING_DATA_COMMAND,
              hci.HCI_LE_SET_SCAN_RESPONSE_DATA_COMMAND, hci.HCI_LE_SET_ADVERTISING_ENABLE_COMMAND,
              hci.HCI_LE_SET_SCAN_PARAMETERS_COMMAND, hci.HCI_LE_SET_SCAN_ENABLE_COMMAND, hci.HCI_LE_CREATE_CONNECTION_COMMAND}
EXTENDED_GAP = {hci.HCI_LE_SET_ADVERTISING_SET_RANDOM_ADDRESS_COMMAND, hci.HCI_LE_SET_EXTENDED_ADVERTISING_PARAMETERS_COMMAND,
                hci.HCI_LE_SET_EXTENDED_ADVERTISING_DATA_COMMAND, hci.HCI_LE_SET_EXTENDED_SCAN_RESPONSE_DATA_COMMAND,
                hci.HCI_LE_SET_EXTENDED_ADVERTISING_ENABLE_COMMAND, hci.HCI_LE_READ_MAXIMUM_ADVERTISING_DATA_LENGTH_COMMAND,
                hci.HCI_LE_READ_NUMBER_OF_SUPPORTED_ADVERTISING_SETS_COMMAND, hci.HCI_LE_REMOVE_ADVERTISING_SET_COMMAND,
                hci.HCI_LE_CLEAR_ADVERTISING_SETS_COMMAND, hci.HCI_LE_SET_EXTENDED_SCAN_PARAMETERS_COMMAND,
                hci.HCI_LE_SET_EXTENDED_SCAN_ENABLE_COMMAND, hci.HCI_LE_EXTENDED_CREATE_CONNECTION_COMMAND}
SINCE_41 = {hci.HCI_LE_REMOTE_CONNECTION_PARAMETER_REQUEST_REPLY_COMMAND, hci.HCI_LE_REMOTE_CONNECTION_PARAMETER_REQUEST_NEGATIVE_REPLY_COMMAND}
SINCE_42 = {hci.HCI_LE_SET_DATA_LENGTH_COMMAND, hci.HCI_LE_READ_SUGGESTED_DEFAULT_DATA_LENGTH_COMMAND,
            hci.HCI_LE_WRITE_SUGGESTED_DEFAULT_DATA_LENGTH_COMMAND, hci.HCI_LE_READ_LOCAL_P_256_PUBLIC_KEY_COMMAND,
            hci.HCI_LE_ADD_DEVICE_TO_RESOLVING_LIST_COMMAND, hci.HCI_LE_REMOVE_DEVICE_FROM_RESOLVING_LIST_COMMAND,
            hci.HCI_LE_CLEAR_RESOLVING_LIST_COMMAND, hci.HCI_LE_READ_RESOLVING_LIST_SIZE_COMMAND,
            hci.HCI_LE_READ_PEER_RESOLVABLE_ADDRESS_COMMAND, hci.HCI_LE_READ_LOCAL_RESOLVABLE_ADDRESS_COMMAND,
            hci.HCI_LE_SET_ADDRESS_RESOLUTION_ENABLE_COMMAND, hci.HCI_LE_SET_RESOLVABLE_PRIVATE_ADDRESS_TIMEOUT_COMMAND,
            hci.HCI_LE_READ_MAXIMUM_DATA_LENGTH_COMMAND}
SINCE_50 = {hci.HCI_LE_READ_PHY_COMMAND, hci.HCI_LE_SET_DEFAULT_PHY_COMMAND, hci.HCI_LE_SET_PHY_COMMAND,
            hci.HCI_LE_RECEIVER_TEST_V2_COMMAND, hci.HCI_LE_TRANSMITTER_TEST_V2_COMMAND, hci.HCI_LE_READ_TRANSMIT_POWER_COMMAND,
            hci.HCI_LE_SET_PRIVACY_MODE_COMMAND, hci.HCI_LE_READ_BUFFER_SIZE_V2_COMMAND}
F = hci.LeFeatureMask


def emit(**fields):
    print(json.dumps(fields), flush=True)


class FaithfulLink(LocalLink):
    """Bumble's LocalLink labels every LE ACL packet with the sender's random address, so that a device using
    its public address never gets an answer; here a packet carries the address the sender's link uses."""

    def send_acl_data(self, sender_controller, destination_address, transport, data):
        if transport != PhysicalTransport.LE:
            return super().send_acl_data(sender_controller, destination_address, transport, data)
        connection = sender_controller.le_connections.get(destination_address)
        source = connection.self_address if connection is not None else sender_controller.random_address
        destination = self.find_le_controller(destination_address)
        if destination is not None:
            asyncio.get_running_loop().call_soon(destination.on_link_acl_data, source, transport, data)


class Sink:
    def __init__(self, write):
        self.write = write

    def on_packet(self, packet):
        self.write(packet)


class ProfileController(Controller):
    """A Bumble controller with a chip's capabilities, buffers that are really finite, and its faults."""

    def __init__(self, args, writer, link):
        super().__init__('ours', link=link, public_address=None if args.profile == 'no-address' else args.address)
        self.args = args
        self.writer = writer
        self.host = Sink(writer)
        self.in_flight = 0
        self.acl_from_host = 0
        self.used = set()          # 'legacy' and/or 'extended' GAP commands seen
        self.supported_commands = set(Controller.supported_commands)
        self.completion_delay = 0.0
        p = args.profile
        if p == 'v40':
            self.hci_version = self.lmp_version = hci.HCI_VERSION_BLUETOOTH_CORE_4_0
            self.le_features = F.LE_ENCRYPTION
            self.supported_commands -= SINCE_41 | SINCE_42 | SINCE_50 | EXTENDED_GAP
        elif p == 'v42':
            self.hci_version = self.lmp_version = hci.HCI_VERSION_BLUETOOTH_CORE_4_2
            self.le_features = (F.LE_ENCRYPTION | F.CONNECTION_PARAMETERS_REQUEST_PROCEDURE | F.EXTENDED_REJECT_INDICATION
                                | F.PERIPHERAL_INITIATED_FEATURE_EXCHANGE | F.LE_PING | F.LE_DATA_PACKET_LENGTH_EXTENSION | F.LL_PRIVACY)
            self.supported_commands -= SINCE_50 | EXTENDED_GAP
            self.supported_max_tx_octets = self.supported_max_rx_octets = 251
        elif p == 'v5':
            self.hci_version = self.lmp_version = hci.HCI_VERSION_BLUETOOTH_CORE_5_2
            self.supported_commands |= EXTENDED_GAP
            self.supported_max_tx_octets = self.supported_max_rx_octets = 251
        else:
            # The other profiles are 4.2 controllers with one fault each.
            self.hci_version = self.lmp_version = hci.HCI_VERSION_BLUETOOTH_CORE_4_2
            self.le_features = F.LE_ENCRYPTION | F.LE_DATA_PACKET_LENGTH_EXTENSION
            self.supported_commands -= SINCE_50 | EXTENDED_GAP
            self.supported_max_tx_octets = self.supported_max_rx_octets = 251
        if p == 'le-buffer-0':
            self.le_acl_data_packet_length = 0
            self.total_num_le_acl_data_packets = 0
            self.acl_data_packet_length = 310
            self.total_num_acl_data_packets = 4
        if p == 'one-buffer':
            self.le_acl_data_packet_length = 27
            self.total_num_le_acl_data_packets = 1
            self.completion_delay = 0.03
        if p == 'no-address' and args.zephyr:
            self.manufacturer_company_identifier = 0x05F1
            self.hci_version = self.lmp_version = hci.HCI_VERSION_BLUETOOTH_CORE_5_0

    def on_packet(self, packet: bytes):
        # Vendor commands (OGF 0x3F) are answered here: Bumble's parser knows none of them.
        if packet[0] == hci.HCI_COMMAND_PACKET and len(packet) >= 4 and (packet[2] >> 2) == 0x3F:
            return self.vendor(int.from_bytes(packet[1:3], 'little'))
        return super().on_packet(packet)

    @property
    def buffers(self):
        return self.total_num_le_acl_data_packets or self.total_num_acl_data_packets

    def to_host(self, packet: bytes):
        # In order with what Controller.send_hci_packet schedules.
        asyncio.get_running_loop().call_soon(self.host.on_packet, packet)

    def complete(self, op, params: bytes):
        self.to_host(bytes([hci.HCI_EVENT_PACKET, 0x0E, 3 + len(params), 1]) + op.to_bytes(2, 'little') + params)

    def on_hci_command_packet(self, command):
        op = command.op_code
        if op == hci.HCI_RESET_COMMAND:
            if self.args.garbage:
                # Bytes that are no packet: the tail of an event and a lone indicator, as a port opened mid-stream sees.
                self.to_host(bytes([0x00, 0x3E, 0x13, 0x02, 0x01, 0x04, 0x0E, 0xFF, 0x07, 0x04]))
            delay = 3.0 if self.args.profile == 'slow-reset' else 0.0
            emit(event='reset', delay=delay)
            asyncio.get_running_loop().call_later(delay, self.complete, op, bytes([0]))
            return
        if op in LEGACY_GAP or op in EXTENDED_GAP:
            kind = 'legacy' if op in LEGACY_GAP else 'extended'
            if kind not in self.used:
                self.used.add(kind)
                emit(event='gap_commands', kind=kind)
            if len(self.used) > 1:
                emit(event='error', error='legacy and extended advertising commands mixed on one controller')
        if op not in self.supported_commands and op != hci.HCI_READ_LOCAL_SUPPORTED_COMMANDS_COMMAND:
            emit(event='unsupported_command', opcode=op)
            return self.complete(op, bytes([hci.HCI_ErrorCode.UNKNOWN_HCI_COMMAND_ERROR]))
        if op == hci.HCI_LE_SET_PHY_COMMAND:
            # Bumble's Controller has no handler for it and, the command being answered by Command Status, sends
            # nothing at all: the host's command credit was gone until its timeout. A real 5.x controller says
            # Command Status, then LE PHY Update Complete (Vol 4 Part E 7.8.49, 7.7.65.12) with what it chose.
            self.to_host(bytes([hci.HCI_EVENT_PACKET, 0x0F, 4, 0, 1]) + op.to_bytes(2, 'little'))
            tx = 2 if command.tx_phys & 0x02 else 1
            rx = 2 if command.rx_phys & 0x02 else 1
            handle = command.connection_handle.to_bytes(2, 'little')
            self.to_host(bytes([hci.HCI_EVENT_PACKET, 0x3E, 6, 0x0C, 0]) + handle + bytes([tx, rx]))
            return
        return super().on_hci_command_packet(command)

    def vendor(self, op):
        emit(event='vendor_command', opcode=op)
        if self.args.profile != 'no-address' or not self.args.zephyr:
            return self.complete(op, bytes([hci.HCI_ErrorCode.UNKNOWN_HCI_COMMAND_ERROR]))
        if op == 0xFC01:    # Read Version Information: Nordic nRF52x, standard controller, 3.5 rev 0 build 0
            return self.complete(op, bytes([0, 0x02, 0x00, 0x02, 0x00, 0x01, 0x03, 0x05, 0x00, 0, 0, 0, 0]))
        if op == 0xFC02:    # Read Supported Commands: version, commands, static addresses
            bits = bytearray(64)
            bits[0] = 0x07
            bits[1] = 0x01
            return self.complete(op, bytes([0]) + bytes(bits))
        if op == 0xFC09:    # Read Static Addresses: one, with an identity root
            return self.complete(op, bytes([0, 1]) + ZEPHYR_STATIC + bytes(range(16)))
        return self.complete(op, bytes([hci.HCI_ErrorCode.UNKNOWN_HCI_COMMAND_ERROR]))

    def on_hci_acl_data_packet(self, packet):
        self.acl_from_host += 1
        self.in_flight += 1
        if self.in_flight > self.buffers:
            emit(event='overflow', in_flight=self.in_flight, buffers=self.buffers)
        if len(packet.data) > (self.le_acl_data_packet_length or self.acl_data_packet_length):
            emit(event='error', error=f'ACL packet of {len(packet.data)} octets exceeds the buffer size')
        connection = self.find_connection_by_handle(packet.connection_handle)
        if connection is not None:
            connection.assembler.feed_packet(packet)
        # The buffer is freed once the packet is "on the air".
        asyncio.get_running_loop().call_later(self.completion_delay, self.free, packet.connection_handle)
        if self.args.drop_after_acl and self.acl_from_host == self.args.drop_after_acl:
            self.args.drop_after_acl = 0   # once: the controller that comes back stays
            emit(event='vanishing', acl=self.acl_from_host)
            asyncio.get_running_loop().call_soon(self.args.vanish)

    def free(self, handle):
        self.in_flight -= 1
        if self.find_connection_by_handle(handle) is not None:
            self.send_hci_packet(hci.HCI_Number_Of_Completed_Packets_Event(connection_handles=[handle], num_completed_packets=[1]))

    def on_advertising_pdu(self, pdu):
        # A controller without extended advertising cannot receive extended PDUs.
        if isinstance(pdu, ll.AdvExtInd) and not (self.le_features & F.LE_EXTENDED_ADVERTISING):
            return
        super().on_advertising_pdu(pdu)


class H4Reader:
    """Frames H4 packets from a byte stream (the host's commands and ACL data)."""

    def __init__(self, on_packet):
        self.padding = 0
        self.buffer = bytearray()
        self.on_packet = on_packet

    def feed(self, data):
        self.buffer += data
        while self.buffer:
            t = self.buffer[0]
            header = {1: 3, 2: 4}.get(t)
            if header is None:
                # As btstack's and Zephyr's H4 parsers do: drop the byte and look for a packet type again.
                # Zeros are the padding a host sends to resynchronise; anything else is an error.
                if t != 0:
                    emit(event='error', error=f'bad H4 indicator {t:#x} from the host')
                else:
                    self.padding += 1
                del self.buffer[:1]
                continue
            if len(self.buffer) < 1 + header:
                return
            length = self.buffer[3] if t == 1 else int.from_bytes(self.buffer[3:5], 'little')
            if len(self.buffer) < 1 + header + length:
                return
            packet = bytes(self.buffer[:1 + header + length])
            del self.buffer[:1 + header + length]
            self.on_packet(packet)


async def serve_external_peer(args, link):
    """A plain Bumble controller on the same link for a Bumble host in another process (bumble_pairing.py,
    bumble_l2cap.py): it connects with tcp-client:127.0.0.1:PORT."""
    state = {'writer': None}
    controller = Controller('external', link=link, public_address='F0:F1:F2:F3:F4:F7')
    controller.le_features = controller.le_features & ~F.LE_EXTENDED_ADVERTISING   # legacy ADV_IND, seen by every profile

    def write(packet):
        w = state['writer']
        if w is not None and not w.is_closing():
            w.write(packet)
    controller.host = Sink(write)

    async def on_client(reader, writer):
        state['writer'] = writer
        framer = H4Reader(controller.on_packet)
        try:
            while data := await reader.read(65536):
                framer.feed(data)
        except (ConnectionError, OSError):
            pass
    server = await asyncio.start_server(on_client, '127.0.0.1', 0)
    emit(event='peer_listening', port=server.sockets[0].getsockname()[1])
    return server


async def make_peer(args, link):
    if args.peer == 'external':
        return await serve_external_peer(args, link)
    controller = Controller('peer', link=link, public_address=args.peer_address)
    # The peer's controller speaks extended advertising when asked to use it, legacy otherwise.
    if args.peer_extended:
        controller.supported_commands = set(Controller.supported_commands) | EXTENDED_GAP
    else:
        # Bumble's Device advertises through advertising sets (extended PDUs on its link) whenever the
        # controller has the feature: without it, legacy ADV_IND that every scanner receives.
        controller.le_features = controller.le_features & ~F.LE_EXTENDED_ADVERTISING
    device = Device.with_hci(args.peer_name, Address(args.peer_address), controller, controller)
    if args.peer == 'peripheral':
        def on_write(connection, value):
            emit(event='write', value=bytes(value).hex())
        notify = Characteristic(NOTIFY_CHAR, Characteristic.Properties.NOTIFY | Characteristic.Properties.READ, Characteristic.READABLE, b'\x00')
        device.add_services([Service(SERVICE, [
            Characteristic(LONG_CHAR, Characteristic.Properties.READ, Characteristic.READABLE, LONG_VALUE),
            Characteristic(WRITE_CHAR, Characteristic.Properties.WRITE | Characteristic.Properties.WRITE_WITHOUT_RESPONSE,
                           Characteristic.WRITEABLE, CharacteristicValue(write=on_write)),
            notify])])
    await device.power_on()
    device.on('connection', lambda c: (emit(event='peer_connected', address=str(c.peer_address)),
                                        c.on('disconnection', lambda r: emit(event='peer_disconnected', reason=r))))
    if args.peer == 'peripheral':
        name = AdvertisingData([(AdvertisingData.COMPLETE_LOCAL_NAME, args.peer_name.encode()),
                                (AdvertisingData.FLAGS, bytes([0x06])),
                                (AdvertisingData.MANUFACTURER_SPECIFIC_DATA, bytes([0xFF, 0xFF, 0x01, 0x02]))])
        if args.peer_extended:
            # Extended PDUs only, with more data than a legacy advertisement holds: 4.x scanners never see it.
            data = bytes(name) + bytes(AdvertisingData([(AdvertisingData.SERVICE_DATA_16_BIT_UUID, bytes([0x0D, 0x18]) + bytes(range(40)))]))
            await device.create_advertising_set(
                advertising_parameters=AdvertisingParameters(
                    advertising_event_properties=AdvertisingEventProperties(is_connectable=True, is_legacy=False),
                    own_address_type=hci.OwnAddressType.PUBLIC, primary_advertising_interval_min=100, primary_advertising_interval_max=100),
                advertising_data=data, auto_restart=True)
        else:
            device.advertising_data = bytes(name)
            await device.start_advertising(auto_restart=True, own_address_type=hci.OwnAddressType.PUBLIC,
                                           advertising_interval_min=100, advertising_interval_max=100)
        emit(event='advertising', name=args.peer_name, extended=args.peer_extended)
    elif args.peer == 'central':
        async def central():
            while True:
                try:
                    found = asyncio.get_running_loop().create_future()

                    def on_adv(a):
                        name = a.data.get(AdvertisingData.COMPLETE_LOCAL_NAME)
                        if not found.done() and name in (args.target_name, args.target_name.encode()):
                            found.set_result(a.address)
                    device.on('advertisement', on_adv)
                    await device.start_scanning()
                    address = await found
                    device.remove_listener('advertisement', on_adv)
                    await device.stop_scanning()
                    connection = await device.connect(address)
                    emit(event='central_connected', address=str(address))
                    peer = Peer(connection)
                    await peer.request_mtu(247)
                    await peer.discover_services()
                    for s in peer.services:
                        await s.discover_characteristics()
                        for c in s.characteristics:
                            if c.properties & Characteristic.Properties.READ:
                                v = await c.read_value()
                                emit(event='read', uuid=c.uuid.to_hex_str(), value=bytes(v).hex())
                    await connection.disconnect()
                    emit(event='central_done')
                    return
                except Exception as e:  # noqa: BLE001 - report and stop
                    emit(event='error', error=f'central: {type(e).__name__}: {e}')
                    return
        asyncio.get_running_loop().create_task(central())
    return device


async def serve_tcp(args, link):
    state = {'writer': None, 'controller': None}

    def vanish():
        w = state['writer']
        c = state['controller']
        state['writer'] = None
        if c is not None:
            # The peer's link ends as a supervision timeout would end it.
            for conn in list(c.le_connections.values()):
                conn.send_ll_control_pdu(ll.TerminateInd(hci.HCI_CONNECTION_TIMEOUT_ERROR))
            link.remove_controller(c)
            state['controller'] = None
        if w is not None:
            w.close()
        emit(event='vanished')
    args.vanish = vanish

    async def on_client(reader, writer):
        old = state['controller']
        if old is not None:
            link.remove_controller(old)
        state['writer'] = writer

        def write(packet):
            # Each controller answers only its own host: a controller replaced by a newer connection (a host
            # restarted while the old one's packets were still being handled) must not answer into the new one.
            if state['writer'] is writer and not writer.is_closing():
                writer.write(packet)
        controller = ProfileController(args, write, link)
        state['controller'] = controller
        emit(event='host_connected')
        framer = H4Reader(controller.on_packet)
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if state['controller'] is not controller:
                    break
                framer.feed(data)
        except (ConnectionError, OSError):
            pass
        emit(event='host_disconnected')

    server = await asyncio.start_server(on_client, '127.0.0.1', 0)
    emit(event='listening', port=server.sockets[0].getsockname()[1])
    return server


async def serve_pty(args, link):
    master, slave = os.openpty()
    import tty
    tty.setraw(slave)
    path = os.ttyname(slave)
    os.set_blocking(master, False)
    controller = ProfileController(args, lambda p: os.write(master, p), link)
    args.vanish = lambda: None
    framer = H4Reader(controller.on_packet)
    loop = asyncio.get_running_loop()

    def readable():
        try:
            data = os.read(master, 65536)
        except (BlockingIOError, OSError):
            return
        if data:
            framer.feed(data)
    loop.add_reader(master, readable)
    emit(event='pty', path=path)
    return (master, slave)


async def run(args):
    link = FaithfulLink()
    keep = await (serve_pty(args, link) if args.pty else serve_tcp(args, link))
    peer = await make_peer(args, link)
    await asyncio.sleep(args.duration)
    del keep, peer


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--profile', required=True, choices=['v40', 'v42', 'v5', 'le-buffer-0', 'one-buffer', 'no-address', 'slow-reset'])
    p.add_argument('--address', default='C0:FF:EE:00:00:01')
    p.add_argument('--zephyr', action='store_true')
    p.add_argument('--garbage', action='store_true')
    p.add_argument('--pty', action='store_true')
    p.add_argument('--drop-after-acl', type=int, default=0)
    p.add_argument('--peer', choices=['peripheral', 'central', 'external', 'none'], default='peripheral')
    p.add_argument('--peer-extended', action='store_true')
    p.add_argument('--peer-name', default='Diversity Peer')
    p.add_argument('--peer-address', default='F0:F1:F2:F3:F4:F5')
    p.add_argument('--target-name', default='OCB Diversity')
    p.add_argument('--duration', type=float, default=600.0)
    args = p.parse_args()
    try:
        asyncio.run(run(args))
    except Exception as e:  # noqa: BLE001 - reported to the test
        emit(event='error', error=f'{type(e).__name__}: {e}')
        sys.exit(1)


if __name__ == '__main__':
    main()
