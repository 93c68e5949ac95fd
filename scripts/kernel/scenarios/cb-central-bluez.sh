# Core Bluetooth on BlueZ (issue 28): the seeds' heart-rate central (`ble demo --role central`) on
# BLE_TRANSPORT=bluez:hci0, through bluetoothd, which keeps hci0 the whole time, against `ble serve` (our own stack)
# serving examples/heart-rate.json on the HCI user channel of hci1. The central scans with a service filter,
# connects, discovers services, characteristics and descriptors, reads a characteristic and a descriptor,
# subscribes, receives notifications, writes with response and disconnects, all through org.bluez's D-Bus API.
start_bluez || fail "BlueZ did not start"
release 1
# (`ble serve`, not `ble demo --role peripheral`: the demo checks the controller by opening and closing it first,
# and bluetoothd takes a released adapter back at once.)
ble serve "$OCB_REPO/examples/heart-rate.json" --notify-every 1 > "$OCB_OUT/$OCB_SCENARIO.peripheral.log" 2>&1 &
peripheral=$!
trap 'kill $peripheral 2>/dev/null || true' EXIT
wait_for "$OCB_OUT/$OCB_SCENARIO.peripheral.log" '^advertising "Served HR" as' 30 || { cat "$OCB_OUT/$OCB_SCENARIO.peripheral.log"; fail "ble serve did not advertise"; }
hciconfig hci0 | grep -q "UP RUNNING" || fail "bluetoothd does not hold hci0"
rc=0
BLE_TRANSPORT=bluez:hci0 BLE_LOG=1 "$OCB_BLE" demo --role central --notifications 3 --timeout 90 > "$OCB_OUT/$OCB_SCENARIO.central.log" 2>&1 || rc=$?
kill $peripheral 2>/dev/null || true
cat "$OCB_OUT/$OCB_SCENARIO.central.log"
cat "$OCB_OUT/$OCB_SCENARIO.peripheral.log"
[ $rc -eq 0 ] || fail "the central on bluez exited $rc"
c="$OCB_OUT/$OCB_SCENARIO.central.log"
expect_heart_rate_central "$c"
# bluetoothd kept the adapter: still up and its own.
hciconfig hci0 | grep -q "UP RUNNING" || fail "hci0 is no longer up"
log "ok"
