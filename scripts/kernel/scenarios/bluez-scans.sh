# BlueZ (bluetoothctl on hci0) finds `ble serve` advertising on the HCI user channel (hci1): name and service.
start_bluez || fail "BlueZ did not start"
release 1
ble serve "$OCB_REPO/examples/heart-rate.json" > "$OCB_OUT/$OCB_SCENARIO.serve.log" 2>&1 &
wait_for "$OCB_OUT/$OCB_SCENARIO.serve.log" "^advertising \"Served HR\" as" 30 || fail "ble serve did not advertise"
ours=$(sed -n 's/^advertising "Served HR" as \([0-9A-F:]*\).*/\1/p' "$OCB_OUT/$OCB_SCENARIO.serve.log" | head -1)
log "ble serve advertises as $ours"
btctl_start
btctl "select $(address 0)"
btctl "scan le"
wait_for "$BTCTL_LOG" "Device $ours Served HR" 30 || fail "bluetoothctl did not find Served HR"
btctl "info $ours"
wait_for "$BTCTL_LOG" "UUID: Heart Rate" 10 || fail "bluetoothctl did not list the Heart Rate service"
btctl "scan off"
log "ok"
