# timeout: 300
# Core Bluetooth on BlueZ against a BlueZ peer on a second adapter (issue 28): one bluetoothd keeps both hci0 and
# hci1, and both ends are Core Bluetooth programs on BLE_TRANSPORT=bluez, so the peer's side of every packet is
# BlueZ's own (bluetoothd's GATT server and advertising, the kernel's ATT bearer and L2CAP): the seeds' heart-rate
# central (`ble demo --role central`) on bluez:hci0 against `ble serve examples/heart-rate.json` on bluez:hci1
# (its service registered with GattManager1 on hci1, advertised with LEAdvertisingManager1): scan with a service
# filter, connect, discover, read, a descriptor, subscribe, three notifications, a write with response, disconnect;
# then an L2CAP credit-based channel kernel to kernel, `ble send` on bluez:hci0 to `ble receive` on bluez:hci1
# (64 KB, compared). The rows against our own stack are cb-central-bluez, cb-peripheral-bluez and cb-l2cap-bluez.
start_bluez || fail "BlueZ did not start"
bluez_up 1 || fail "bluetoothd did not power hci1"
pids=""
dir="$OCB_OUT/$OCB_SCENARIO.in"
file="$OCB_OUT/$OCB_SCENARIO.bin"
rm -rf "$dir"; mkdir -p "$dir"
# The kernel's L2CAP signalling for credit-based channels (BT_DBG through dynamic debug: each command's code and
# identifier, each channel's CIDs), kept beside the scenario's log as $OCB_SCENARIO.l2cap.dmesg.
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
ddc=/sys/kernel/debug/dynamic_debug/control
l2funcs="l2cap_build_cmd l2cap_ecred_conn_req l2cap_ecred_conn_rsp l2cap_ecred_connect l2cap_le_connect_req l2cap_le_connect_rsp l2cap_chan_del l2cap_conn_add l2cap_conn_del"
for f in $l2funcs; do echo "func $f +pf" > "$ddc" 2>/dev/null || log "no dynamic debug for $f"; done
# The kernel's enhanced credit-based mode off for the scenario, as Linux 6.1 has it by default. 6.12 has it on, and
# bluetoothd 5.66 then opens its EATT channels ([GATT] Channels=3) two at a time in one enhanced credit-based
# connection request (0x17). Between two Linux 6.12 ends the two kernels' tables of those channels disagreed: one
# side's EATT channel 0x0041 sent to 0x0040 while the other's 0x0040 pointed back at 0x0040 (the kernel's
# /sys/kernel/debug/bluetooth/l2cap), bluetoothd logged ATT responses arriving on another EATT channel than their
# request ("Received unexpected ATT response", "Failed to handle response PDU", then "Operation timed out" and "Failed
# to initialize gatt-client"), and a later request was refused "Source CID already allocated" (0x000a). bluetoothd
# sets ServicesResolved all the same, with whatever database it had: the heart-rate central found no heart-rate
# service (2 of 2 on 6.12), or `ble send` no file-transfer service. With the mode off bluetoothd opens each EATT
# channel with its own LE credit-based request (0x14), which both kernels agree on: EATT stays, ATT arrives where it
# should. Neither end is our code, and the Core Bluetooth API shows nothing of EATT. README's BlueZ section says how a
# user turns the mode off.
ecred=/sys/module/bluetooth/parameters/enable_ecred
ecred_was=$(cat "$ecred")
echo N > "$ecred" || fail "cannot turn the kernel's enhanced credit-based mode off"
# hci1 goes back to its starting state (down, off in bluetoothd), and the kernel's mode as it was, on every way out.
trap 'kill $pids 2>/dev/null || true; rm -rf "$dir" "$file"; bluez_power 1 false 2>/dev/null; release 1; echo "$ecred_was" > "$ecred"; for f in $l2funcs; do echo "func $f -p" > "$ddc" 2>/dev/null; done; dmesg | grep -a "l2cap\|Bluetooth" > "$OCB_OUT/$OCB_SCENARIO.l2cap.dmesg" 2>/dev/null || true' EXIT
srv="$OCB_OUT/$OCB_SCENARIO.serve.log"
BLE_TRANSPORT=bluez:hci1 BLE_LOG=1 "$OCB_BLE" serve "$OCB_REPO/examples/heart-rate.json" --notify-every 1 > "$srv" 2>&1 &
pids="$pids $!"
wait_for "$srv" '^advertising "Served HR" as ' 30 || { clean "$srv" | tail -20; fail "ble serve on bluez:hci1 did not advertise"; }
c="$OCB_OUT/$OCB_SCENARIO.central.log"
rc=0
start=$SECONDS
BLE_TRANSPORT=bluez:hci0 BLE_LOG=1 "$OCB_BLE" demo --role central --notifications 3 --timeout 90 > "$c" 2>&1 || rc=$?
log "the heart-rate central on bluez:hci0 ran in $((SECONDS - start)) s"
clean "$c" | grep -av "debug\|trace" | tail -30 >&2
[ $rc -eq 0 ] || { clean "$srv" | grep -av trace | tail -30 >&2; fail "the central on bluez exited $rc"; }
expect_heart_rate_central "$c"
log "heart-rate flow: bluez:hci0 central against bluez:hci1 peripheral passed"

head -c 65536 /dev/urandom > "$file"
r="$OCB_OUT/$OCB_SCENARIO.receive.log"
BLE_TRANSPORT=bluez:hci1 BLE_LOG=1 "$OCB_BLE" receive --dir "$dir" --name "bluez peer" --once > "$r" 2>&1 &
pids="$pids $!"
wait_for "$r" "^receiving into .* on PSM 0x" 30 || { clean "$r" | tail -20; fail "ble receive on bluez:hci1 did not publish"; }
s="$OCB_OUT/$OCB_SCENARIO.send.log"
start=$SECONDS
BLE_TRANSPORT=bluez:hci0 BLE_LOG=1 "$OCB_BLE" send "$file" --to "bluez peer" --timeout 30 --retries 1 > "$s" 2>&1 \
    || { clean "$s" | grep -av trace | tail -20; clean "$r" | grep -av trace | tail -20; fail "ble send on bluez:hci0 failed"; }
log "64 KB sent from bluez:hci0 to bluez:hci1 over the kernel's L2CAP sockets in $((SECONDS - start)) s"
wait_for "$r" "^stored " 30 || { clean "$r" | tail -20; fail "the receiver stored nothing"; }
cmp "$file" "$dir/$(basename "$file")" || fail "the stored file differs"
hciconfig hci0 | grep -q "UP RUNNING" || fail "hci0 is no longer up"
log "ok"
