# timeout: 240
# BlueZ as GATT client of a Core Bluetooth peripheral program (`ble interop peripheral`, CBPeripheralManager) on
# our own stack over the HCI user channel (hci-socket:1): bluetoothctl connects and discovers the service; a long
# read (512 octets, answered in didReceiveRead at each offset BlueZ's Read Blob asks for); a long write (300
# octets: BlueZ's prepared writes, delivered as one didReceiveWrite with a CBATTRequest per part at its
# offset); notifications and indications (`notify on` on each); and a write-without-response flood through
# BlueZ's AcquireWrite socket (1000 numbered writes, counted and checked for gaps by the program).
# bluetoothd runs with ExchangeMTU = 64 (its main.conf, [GATT]): with both sides' default of 517 every value up to
# the 512-octet maximum fits one ATT PDU and the long procedures never run. It is restarted with the guest's
# configuration at the end.
stop_bluez
start_bluez "$(bluez_conf '[GATT]' 'ExchangeMTU = 64')" || fail "BlueZ (ExchangeMTU 64) did not start"
# No bond from an earlier scenario (hci1 is made anew with the same address, our state is new): BlueZ would
# encrypt with a key we do not have.
reset_bluez
trap 'kill $peripheral 2>/dev/null; stop_bluez' EXIT
# The new bluetoothd sets hci1 up through the management interface (left down: AutoEnable=false); the user
# channel cannot be bound while it does.
start=$SECONDS
until bluez_has_adapter 1 && hciconfig hci1 | grep -q DOWN; do
    [ $((SECONDS - start)) -lt 30 ] || fail "bluetoothd did not register hci1"
    sleep 0.2
done
sleep 1
release 1
P="$OCB_OUT/$OCB_SCENARIO.peripheral.log"
(BLE_LOG=1 BLE_SNOOP="$OCB_CAP/$OCB_SCENARIO.btsnoop" BLE_TRANSPORT=hci-socket:1 exec "$OCB_BLE" interop peripheral --name "OCB Interop" --updates 5 --timeout 220) > "$P" 2>&1 &
peripheral=$!
wait_for "$P" 'advertising as "OCB Interop"|state unsupported' 40 || { cat "$P"; fail "the peripheral program did not advertise"; }
grep -q "state unsupported" "$P" && { cat "$P"; fail "the peripheral program could not open hci1"; }
btctl_start
btctl "select $(address 0)"
btctl "scan le"
# "[NEW] Device A OCB Interop", or "[CHG] Device A Name: OCB Interop" for a device bluetoothd already knew.
wait_for "$BTCTL_LOG" "Device [0-9A-F:]+ (Name: )?OCB Interop" 30 || fail "bluetoothctl did not find OCB Interop"
ours=$(clean "$BTCTL_LOG" | sed -n 's/.*Device \([0-9A-F:]*\) \(Name: \)\{0,1\}OCB Interop.*/\1/p' | head -1)
log "the peripheral is $ours"
btctl "scan off"
btctl "connect $ours"
wait_for "$BTCTL_LOG" "Connection successful" 30 || fail "bluetoothctl did not connect"
wait_for "$BTCTL_LOG" "ServicesResolved: yes" 30 || fail "BlueZ did not resolve our services"
btctl "menu gatt"
btctl "list-attributes $ours"
for n in 1 2 3 4 5; do
    wait_for "$BTCTL_LOG" "7d2e000$n-5b6a-4c3e-9a6d-2f4b1c0e8a10" 10 || fail "characteristic 7d2e000$n not listed"
done
u() { echo "7d2e000$1-5b6a-4c3e-9a6d-2f4b1c0e8a10"; }

# Long read: 512 octets, more than one ATT_MTU; BlueZ reads the rest with Read Blob, the program answers each offset.
btctl "select-attribute $(u 1)"
btctl "read"
wait_for "$BTCTL_LOG" "OCB long value, 5|4f 43 42 20 6c 6f 6e 67" 20 || fail "the long value's start was not read"
wait_for "$BTCTL_LOG" "45 4e 44 2e" 30 || fail "the long value's end (END.) was not read"
grep -Eq "read 7D2E0001.* at offset [1-9][0-9]* of 512" "$P" || fail "no read at a non-zero offset (Read Blob) reached didReceiveRead"
log "long read at offsets: $(sed -n 's/.*read 7D2E0001.* at offset \([0-9]*\) of 512/\1/p' "$P" | tr '\n' ' ')"

# Long write: 300 octets with response; more than one ATT_MTU, so BlueZ sends Prepare Write Requests and Execute.
value=""
for i in $(seq 0 299); do value+=$(printf '0x%02x ' $(( 0x41 + i % 26 ))); done
btctl "select-attribute $(u 2)"
btctl "write \"${value% }\" 0 request"
wait_for "$P" "write 7D2E0002.*: 300 octets in" 30 || fail "the long write did not reach didReceiveWrite whole"
grep -Eq "write 7D2E0002.*: 300 octets in ([2-9]|[1-9][0-9]+) request\(s\) at offsets 0,[0-9]" "$P" || fail "the long write did not arrive as prepared parts at their offsets"
grep -q "write 7D2E0002.*ABCDEFGHIJKLMNOPQRSTUVWX…" "$P" || fail "the long write's value is wrong"
wait_for "$BTCTL_LOG" "Attempting to write|written" 10 || true
clean "$BTCTL_LOG" | grep -q "Failed to write" && fail "BlueZ reports a failed write"
# Read back: the same 300 octets (ends with ...NOP: 300 = 11×26 + 14, the last letter N).
btctl "read"
wait_for "$BTCTL_LOG" "4c 4d 4e *$|4c 4d 4e  " 20 || log "(read back of the long write not matched in the dump)"

# Notifications: 5 of them on `notify on`.
btctl "select-attribute $(u 3)"
btctl "notify on"
wait_for "$BTCTL_LOG" "Notify started" 15 || fail "notifications did not start"
# "notification N" in bluetoothctl's hex dump: 6e 6f 74 69 66 69 63 61 74 69 6f 6e 20 3N
wait_for_count "$BTCTL_LOG" "6e 6f 74 69 66 69 63 61 74 69 6f 6e 20 3[1-5]" 5 30 || fail "fewer than 5 notifications reached BlueZ"
btctl "notify off"
wait_for "$BTCTL_LOG" "Notify stopped" 15 || fail "notifications did not stop"

# Indications: 5, each confirmed by BlueZ before the program may send the next (one outstanding at a time).
btctl "select-attribute $(u 4)"
btctl "notify on"
wait_for_count "$BTCTL_LOG" "Notify started" 2 15 || fail "indications did not start"
wait_for_count "$BTCTL_LOG" "69 6e 64 69 63 61 74 69 6f 6e 20 3[1-5]" 5 30 || fail "fewer than 5 indications reached BlueZ"
wait_for "$P" "sent indication 5 of 5" 10 || fail "the program did not send its fifth indication"
btctl "notify off"

# Write-without-response flood through AcquireWrite (a socket that bluetoothd turns into Write Commands).
btctl "select-attribute $(u 5)"
# bluetoothctl's `write` sends one record per line it reads, and under emulation it read about 22 lines a second:
# 2000 writes took 90 s and never filled a buffer on the way. So bluetoothctl acquires the socket (AcquireWrite, a
# SOCK_SEQPACKET pair whose every packet bluetoothd sends as a Write Command) and a copy of its end, taken with
# pidfd_getfd as a debugger would, is written to as fast as it takes packets: numbered records at once, which
# bluetoothd queues behind the kernel's L2CAP socket and the controller's ACL buffers (flow control all the way),
# and the program must count every one, in order. 1000: with 2000 the socket was first full at record 360 and
# full 7 times in all (the writer held back by the link), and the link carried about 29 writes a second (70 s);
# 1000 keeps the writer held back for most of the flood in half the time.
sockets() { ls -l "/proc/$BTCTL_PID/fd" 2>/dev/null | sed -n 's/.* \([0-9]*\) -> socket:.*/\1/p' | sort -n | tr '\n' ' '; }
before=$(sockets)
btctl "acquire-write"
wait_for "$BTCTL_LOG" "AcquireWrite success" 15 || fail "AcquireWrite failed"
FLOOD=${FLOOD:-1000}
start=$SECONDS
python3 - "$BTCTL_PID" "$FLOOD" "$before" "$(sockets)" <<'PY' || fail "could not write the flood into bluetoothctl's AcquireWrite socket"
import ctypes, os, select, socket, sys
pid, count = int(sys.argv[1]), int(sys.argv[2])
new = set(sys.argv[4].split()) - set(sys.argv[3].split())
# The socket AcquireWrite gave bluetoothctl: the new SOCK_SEQPACKET (type 0005) one among its descriptors.
seqpacket = {line.split()[6] for line in open("/proc/net/unix").readlines()[1:] if line.split()[4] == "0005"}
fds = [int(fd) for fd in new if os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1] in seqpacket]
if len(fds) != 1:
    sys.exit(f"flood: {len(fds)} new SOCK_SEQPACKET sockets in bluetoothctl ({sorted(new)})")
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.syscall(438, os.pidfd_open(pid), fds[0], 0)  # pidfd_getfd
if fd < 0:
    sys.exit(f"flood: pidfd_getfd: {os.strerror(ctypes.get_errno())}")
s = socket.socket(fileno=fd)
full, first = 0, None
for i in range(count):
    record = i.to_bytes(2, "big") + b"FLOOD-wwr-01234567"
    while True:
        try:
            s.send(record)  # one packet, one Write Command (bluetoothd's end is non-blocking, and so is ours)
            break
        except BlockingIOError:  # the socket is full: bluetoothd takes no more until the link drains
            full += 1
            first = i if first is None else first
            select.select([], [s], [])
print(f"flood: {count} records written to bluetoothctl's AcquireWrite socket; it was full {full} times, first at record {first}", file=sys.stderr)
PY
wait_for "$P" "write-without-response: $FLOOD writes" 120 || { grep "write-without-response" "$P" | tail -3; fail "the program did not count $FLOOD writes"; }
log "flood of $FLOOD writes counted after $((SECONDS - start)) s"
grep -q "write-without-response: $FLOOD writes, $((FLOOD * 20)) octets, 0 gaps" "$P" || fail "writes were lost or out of order"
clean "$BTCTL_LOG" | grep -q "Failed to write" && fail "bluetoothctl failed a write of the flood"
btctl "release-write"
btctl "back"
btctl "disconnect $ours"
wait_for "$BTCTL_LOG" "Connected: no" 15 || fail "no disconnection"
kill -0 $peripheral 2>/dev/null || fail "the peripheral program ended"
kill $peripheral 2>/dev/null || true
cat "$P" | grep -v "^\[peripheral\] sent " | tail -40
log "ok"
