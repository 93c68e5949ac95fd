# Our scanner on the HCI user channel (hci1) finds BlueZ advertising on hci0 through bluetoothctl: its name
# and the service it lists.
start_bluez || fail "BlueZ did not start"
release 1
btctl_start
btctl "select $(address 0)"
btctl "advertise.name BlueZ-Peer"
btctl "advertise.uuids 180F"
btctl "advertise on"
wait_for "$BTCTL_LOG" "Advertising object registered" 20 || fail "bluetoothctl did not advertise"
ble scan --duration 6 --json > "$OCB_OUT/$OCB_SCENARIO.scan.json" || fail "ble scan exited $?"
cat "$OCB_OUT/$OCB_SCENARIO.scan.json"
grep -q '"BlueZ-Peer"' "$OCB_OUT/$OCB_SCENARIO.scan.json" || fail "BlueZ's advertisement not found"
grep -qi '180F' "$OCB_OUT/$OCB_SCENARIO.scan.json" || fail "BlueZ's service UUID not in the advertisement"
log "ok"
