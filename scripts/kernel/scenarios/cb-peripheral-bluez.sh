# Core Bluetooth on BlueZ (issue 28), peripheral role: the seeds' heart-rate peripheral (`ble demo --role peripheral`)
# on BLE_TRANSPORT=bluez:hci0, its service registered with bluetoothd (GattManager1) and advertised through it
# (LEAdvertisingManager1), while bluetoothd keeps hci0; our own stack on hci-socket:1 is the central: `ble gatt`
# sees the service, `ble read` reads the cached Body Sensor Location, `ble subscribe` receives notifications sent
# with updateValue, and `ble write` reaches the app's didReceiveWrite.
start_bluez || fail "BlueZ did not start"
BLE_TRANSPORT=bluez:hci0 "$OCB_BLE" demo --role peripheral --timeout 200 > "$OCB_OUT/$OCB_SCENARIO.peripheral.log" 2>&1 &
peripheral=$!
trap 'kill $peripheral 2>/dev/null || true' EXIT
wait_for "$OCB_OUT/$OCB_SCENARIO.peripheral.log" 'advertising as "OCB Heart Rate"' 30 || { cat "$OCB_OUT/$OCB_SCENARIO.peripheral.log"; fail "the peripheral on bluez did not advertise"; }
grep -q "published service Heart Rate" "$OCB_OUT/$OCB_SCENARIO.peripheral.log" || fail "the service was not published"
peer="$(address 0)/P"
check() {   # check NAME ARGS…: one `ble` command on hci1 (released first: bluetoothd takes it back after each)
    local name=$1; shift
    local rc attempt
    # bluetoothd powers a released adapter again a moment after `ble` lets it go: release it until it stays down.
    for attempt in 1 2 3; do
        release 1; sleep 0.7; release 1
        rc=0; ble "$@" > "$OCB_OUT/$OCB_SCENARIO.$name.txt" 2>&1 || rc=$?
        grep -q "in use by the kernel" "$OCB_OUT/$OCB_SCENARIO.$name.txt" || break
        log "hci1 taken back by bluetoothd before ble $1 (attempt $attempt)"
    done
    cat "$OCB_OUT/$OCB_SCENARIO.$name.txt"
    [ $rc -eq 0 ] || fail "ble $1 exited $rc"
}
check gatt gatt "$peer"
grep -q "180D" "$OCB_OUT/$OCB_SCENARIO.gatt.txt" || fail "the Heart Rate service is not in BlueZ's database"
check read read "$peer" 2A38
grep -qi "01" "$OCB_OUT/$OCB_SCENARIO.read.txt" || fail "Body Sensor Location is not 0x01"
check subscribe subscribe "$peer" 2A37 --count 3
[ "$(grep -c "2A37\|Heart Rate Measurement" "$OCB_OUT/$OCB_SCENARIO.subscribe.txt")" -ge 3 ] || fail "fewer than 3 notifications"
check write write "$peer" 2A39 --hex 01
wait_for "$OCB_OUT/$OCB_SCENARIO.peripheral.log" "control point: reset energy expended" 15 || fail "the write did not reach didReceiveWrite"
kill $peripheral 2>/dev/null || true
cat "$OCB_OUT/$OCB_SCENARIO.peripheral.log"
hciconfig hci0 | grep -q "UP RUNNING" || fail "hci0 is no longer up"
log "ok"
