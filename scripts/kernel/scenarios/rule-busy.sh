# The HCI user channel on an adapter that bluetoothd holds (powered): bind fails with EBUSY and `ble` says who
# holds it and how to release it, exit status 1.
start_bluez || fail "BlueZ did not start"
bluez_power 1 true
sleep 1
rc=0; ble scan --duration 2 > "$OCB_OUT/$OCB_SCENARIO.scan.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.scan.log"
[ $rc -eq 1 ] || fail "ble scan exited $rc, not 1"
grep -q "hci1 is in use by the kernel's Bluetooth stack (bluetoothd)" "$OCB_OUT/$OCB_SCENARIO.scan.log" || fail "not the busy message"
grep -q "systemctl stop bluetooth" "$OCB_OUT/$OCB_SCENARIO.scan.log" || fail "no way out given"
# Released as the message says (here through bluetoothd: power off), the same command works.
release 1
rc=0; ble scan --duration 2 > "$OCB_OUT/$OCB_SCENARIO.scan2.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.scan2.log"
[ $rc -eq 0 ] || fail "ble scan on the released adapter exited $rc"
# bluetoothd takes the adapter back once we let it go (it powers every adapter that appears): documented.
start=$SECONDS
until hciconfig hci1 | grep -q "UP RUNNING"; do
    [ $((SECONDS - start)) -lt 20 ] || fail "bluetoothd did not take hci1 back"
    sleep 0.3
done
log "ok"
