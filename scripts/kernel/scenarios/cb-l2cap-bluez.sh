# timeout: 420
# An L2CAP credit-based channel on BLE_TRANSPORT=bluez:hci0 (issue 28): `ble send`, a Core Bluetooth central whose
# openL2CAPChannel is a socket of the kernel's L2CAP layer while bluetoothd keeps hci0, sends 1 MB of random octets
# to `ble receive` (our own stack, publishL2CAPChannel) on hci-socket:1; the receiver checks the SHA-256 and the
# stored file is compared octet for octet; then the other way (publishL2CAPChannel on bluez). The times are logged.
# Both adapters are made anew with 1021-octet LE buffers (fast_controllers), as for l2test: with rootcanal's
# 27-octet buffers the emulated guest moved 1.1-1.5 KB/s and 1 MB did not fit in the time limit.
start_bluez || fail "BlueZ did not start"
fast_controllers || fail "no fast controllers"
release 1
dir="$OCB_OUT/$OCB_SCENARIO.in"
file="$OCB_OUT/$OCB_SCENARIO.bin"
rm -rf "$dir"; mkdir -p "$dir"
head -c 1048576 /dev/urandom > "$file"
r="$OCB_OUT/$OCB_SCENARIO.receive.log"
ble receive --dir "$dir" --name "bluez l2cap" --once > "$r" 2>&1 &
receiver=$!
trap 'kill $receiver 2>/dev/null || true; rm -rf "$dir" "$file"' EXIT
wait_for "$r" "^receiving into .* on PSM 0x" 30 || { cat "$r"; fail "ble receive did not publish"; }
s="$OCB_OUT/$OCB_SCENARIO.send.log"
start=$SECONDS
BLE_TRANSPORT=bluez:hci0 "$OCB_BLE" send "$file" --to "bluez l2cap" --timeout 30 --retries 0 > "$s" 2>&1 || { cat "$s" "$r"; fail "ble send on bluez failed"; }
log "1 MB sent over the kernel's L2CAP socket in $((SECONDS - start)) s"
clean "$s" | tail -3
wait_for "$r" "^stored " 30 || { cat "$r"; fail "the receiver stored nothing"; }
cat "$r"
cmp "$file" "$dir/$(basename "$file")" || fail "the stored file differs"
# The other way: `ble receive` on bluez:hci0 publishes (the kernel picks the PSM, a listening socket accepts), `ble
# send` on hci-socket:1 opens a channel to it.
kill $receiver 2>/dev/null || true
wait $receiver 2>/dev/null || true
rm -rf "$dir"; mkdir -p "$dir"
r2="$OCB_OUT/$OCB_SCENARIO.receive-bluez.log"
BLE_TRANSPORT=bluez:hci0 "$OCB_BLE" receive --dir "$dir" --name "bluez pub" --once > "$r2" 2>&1 &
receiver=$!
wait_for "$r2" "^receiving into .* on PSM 0x" 30 || { cat "$r2"; fail "ble receive on bluez did not publish"; }
s2="$OCB_OUT/$OCB_SCENARIO.send-hci.log"
start=$SECONDS
ble send "$file" --to "bluez pub" --timeout 30 --retries 0 > "$s2" 2>&1 || { cat "$s2" "$r2"; fail "ble send to the bluez receiver failed"; }
log "1 MB received on a channel published through the kernel in $((SECONDS - start)) s"
wait_for "$r2" "^stored " 30 || { cat "$r2"; fail "the bluez receiver stored nothing"; }
cat "$r2"
cmp "$file" "$dir/$(basename "$file")" || fail "the file stored by the bluez receiver differs"
hciconfig hci0 | grep -q "UP RUNNING" || fail "hci0 is no longer up"
log "ok"
