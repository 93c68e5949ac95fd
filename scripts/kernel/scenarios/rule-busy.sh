# The HCI user channel on an adapter that bluetoothd holds (powered): bind fails with EBUSY and `ble` says who
# holds it and how to release it, exit status 1. Released, the same command works. Then what happens after
# `ble` lets the adapter go: with bluetoothd's default (AutoEnable=true) it powers the adapter again at once and
# the next `ble` command finds it busy; with AutoEnable=false (the guest's bluetoothd) it stays down.
start_bluez || fail "BlueZ did not start"
bluez_up 1 || fail "bluetoothd did not power hci1"
rc=0; ble scan --duration 2 > "$OCB_OUT/$OCB_SCENARIO.scan.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.scan.log"
[ $rc -eq 1 ] || fail "ble scan exited $rc, not 1"
grep -q "hci1 is in use by the kernel's Bluetooth stack (bluetoothd)" "$OCB_OUT/$OCB_SCENARIO.scan.log" || fail "not the busy message"
grep -q "systemctl stop bluetooth" "$OCB_OUT/$OCB_SCENARIO.scan.log" || fail "no way out given"
grep -q "AutoEnable=false" "$OCB_OUT/$OCB_SCENARIO.scan.log" || fail "AutoEnable=false is not suggested"
# Released as the message says (power off), the same command works.
release 1
rc=0; ble scan --duration 2 > "$OCB_OUT/$OCB_SCENARIO.scan2.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.scan2.log"
[ $rc -eq 0 ] || fail "ble scan on the released adapter exited $rc"
# AutoEnable=false: bluetoothd registers hci1 again when we let it go, and leaves it down; the next command
# needs no release.
start=$SECONDS
until bluez_has_adapter 1; do
    [ $((SECONDS - start)) -lt 30 ] || fail "bluetoothd did not register hci1 again"
    sleep 0.2
done
rc=0; ble scan --duration 2 > "$OCB_OUT/$OCB_SCENARIO.scan3.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.scan3.log"
[ $rc -eq 0 ] || fail "with AutoEnable=false, the second ble scan exited $rc"
hciconfig hci1 | grep -q "DOWN" || fail "hci1 is up after ble let it go, with AutoEnable=false"
# bluetoothd's default configuration takes the adapter back once we let it go.
stop_bluez
start_bluez /etc/bluetooth/main.conf || fail "BlueZ (default configuration) did not start"
release 1
rc=0; ble scan --duration 2 > "$OCB_OUT/$OCB_SCENARIO.scan4.log" 2>&1 || rc=$?
[ $rc -eq 0 ] || { cat "$OCB_OUT/$OCB_SCENARIO.scan4.log"; fail "ble scan on the released adapter exited $rc (default configuration)"; }
start=$SECONDS
until hciconfig hci1 | grep -q "UP RUNNING"; do
    [ $((SECONDS - start)) -lt 30 ] || fail "bluetoothd (AutoEnable=true) did not take hci1 back"
    sleep 0.3
done
log "bluetoothd (AutoEnable=true) took hci1 back after $((SECONDS - start)) s"
stop_bluez
start_bluez || fail "BlueZ did not start again"
release 1
log "ok"
