# `ble gatt` on the HCI user channel against BlueZ's own GATT server (bluetoothctl advertising on hci0):
# the GAP service with BlueZ's device name, and `ble read` of the Device Name characteristic.
start_bluez || fail "BlueZ did not start"
release 1
btctl_start
btctl "select $(address 0)"
btctl "system-alias KernelPeer"
btctl "advertise.name on"
btctl "advertise on"
wait_for "$BTCTL_LOG" "Advertising object registered" 20 || fail "bluetoothctl did not advertise"
peer="$(address 0)/P"
BLE_SNOOP="$OCB_CAP/$OCB_SCENARIO.btsnoop" BLE_LOG=1 rc=0; ble gatt "$peer" > "$OCB_OUT/$OCB_SCENARIO.gatt.txt" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$OCB_OUT/$OCB_SCENARIO.gatt.txt"; fail "ble gatt exited $rc"; }
cat "$OCB_OUT/$OCB_SCENARIO.gatt.txt"
grep -q "1800" "$OCB_OUT/$OCB_SCENARIO.gatt.txt" || fail "no GAP service"
grep -q "1801" "$OCB_OUT/$OCB_SCENARIO.gatt.txt" || fail "no GATT service"
grep -q "KernelPeer" "$OCB_OUT/$OCB_SCENARIO.gatt.txt" || fail "BlueZ's device name not read"
rc=0; ble read "$peer" 2A00 > "$OCB_OUT/$OCB_SCENARIO.read.txt" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$OCB_OUT/$OCB_SCENARIO.read.txt"; fail "ble read exited $rc"; }
cat "$OCB_OUT/$OCB_SCENARIO.read.txt"
grep -q "KernelPeer" "$OCB_OUT/$OCB_SCENARIO.read.txt" || fail "ble read did not return the device name"
log "ok"
