# BlueZ as GATT client of `ble serve` on the HCI user channel: bluetoothctl connects, lists the database,
# reads a short and a long value (Read Blob), writes, and receives notifications.
start_bluez || fail "BlueZ did not start"
release 1
BLE_SNOOP="$OCB_CAP/$OCB_SCENARIO.btsnoop" ble serve "$OCB_REPO/examples/heart-rate.json" --notify-every 1 > "$OCB_OUT/$OCB_SCENARIO.serve.log" 2>&1 &
wait_for "$OCB_OUT/$OCB_SCENARIO.serve.log" "^advertising \"Served HR\" as" 30 || fail "ble serve did not advertise"
ours=$(sed -n 's/^advertising "Served HR" as \([0-9A-F:]*\).*/\1/p' "$OCB_OUT/$OCB_SCENARIO.serve.log" | head -1)
btctl_start
btctl "select $(address 0)"
btctl "scan le"
wait_for "$BTCTL_LOG" "Device $ours" 30 || fail "bluetoothctl did not find Served HR"
btctl "scan off"
btctl "connect $ours"
wait_for "$BTCTL_LOG" "Connection successful" 30 || fail "bluetoothctl did not connect"
wait_for "$BTCTL_LOG" "ServicesResolved: yes" 30 || fail "BlueZ did not resolve our services"
btctl "menu gatt"
btctl "list-attributes $ours"
wait_for "$BTCTL_LOG" "00002a38-0000-1000-8000-00805f9b34fb" 10 || fail "Body Sensor Location not listed"
wait_for "$BTCTL_LOG" "6e400002-b5a3-f393-e0a9-e50e24dcca9e" 10 || fail "the long characteristic is not listed"
btctl "select-attribute 00002a38-0000-1000-8000-00805f9b34fb"
btctl "read"
wait_for "$BTCTL_LOG" "Attribute .*char.* Value:" 15 || fail "no value read from 2A38"
btctl "select-attribute 6e400002-b5a3-f393-e0a9-e50e24dcca9e"
btctl "read"
# The value is 139 octets: more than one ATT_MTU, so BlueZ reads the rest with Read Blob.
wait_for "$BTCTL_LOG" "lt twenty-three" 20 || fail "the long value was not read whole"
wait_for "$BTCTL_LOG" "xercised\\." 5 || fail "the long value's end is missing"
btctl "select-attribute 00002a37-0000-1000-8000-00805f9b34fb"
btctl "notify on"
wait_for "$BTCTL_LOG" "Notify started" 15 || fail "notifications did not start"
# ble serve --notify-every 1 sends 00 48 NN: three of them (the ASCII column of bluetoothctl's dump shows ".H.").
wait_for_count "$BTCTL_LOG" '^ *00 48 [0-9a-f]{2} ' 3 20 || fail "no notifications received"
btctl "notify off"
# A Write Request from bluetoothctl to a value the database stores (ble serve reports it once written).
btctl "select-attribute 00002a39-0000-1000-8000-00805f9b34fb"
btctl "write \"0x68 0x69\" 0 request"
wait_for "$OCB_OUT/$OCB_SCENARIO.serve.log" "^write 0x[0-9a-f]+ \(stored\): 6869$" 15 || fail "ble serve did not receive the write"
btctl "back"
btctl "disconnect $ours"
wait_for "$BTCTL_LOG" "Connected: no" 15 || fail "no disconnection"
log "ok"
