# An adapter that vanishes mid-operation (its /dev/vhci closed, as a dongle pulled out) and comes back at the
# same index, then at a new one (hci2, while a program holds hci1's index). A command that keeps running
# (`ble scan --duration 0`) says the adapter went away, waits, says when it is back (naming hci-socket:2) and
# finds devices again; a command with an end (`ble scan --duration 60`) says the adapter
# went away and exits 1 at once; a command on an adapter that is not there says so and exits 1.
start_bluez || fail "BlueZ did not start"
btctl_start
btctl "select $(address 0)"
btctl "advertise.name on"
btctl "advertise on"
wait_for "$BTCTL_LOG" "Advertising object registered" 20 || fail "bluetoothctl did not advertise"
peer=$(address 0)
scanlog="$OCB_OUT/$OCB_SCENARIO.scan.log"

# bring_back: a new controller (hci1 again), as a dongle plugged in: the waiting scanner may take it while the
# kernel is still setting it up.
bring_back() {
    local idx start=$SECONDS
    idx=$(plug_controller) || fail "no new controller"
    [ "$idx" = 1 ] || fail "the new controller is hci$idx, not hci1"
    until grep -q "$1" "$2"; do
        [ $((SECONDS - start)) -lt 40 ] || fail "not back after 40 s"
        release 1 2>/dev/null
        sleep 0.5
    done
}

release 1
# Started as a plain command, not through the `ble` function (a background function runs in a subshell, whose pid
# is not the scanner's: killing it left the scanner holding hci1).
BLE_TRANSPORT=hci-socket:1 "$OCB_BLE" scan --duration 0 --duplicates > "$scanlog" 2>&1 &
scan=$!
wait_for "$scanlog" "^$peer" 30 || fail "the scan found nothing"
remove_controller 1
log "hci1 removed"
wait_for "$scanlog" "^hci-socket:1: the adapter went away .*waiting for it to come back" 15 || fail "ble scan did not say the adapter went away"
sleep 3
kill -0 $scan 2>/dev/null || fail "ble scan --duration 0 stopped instead of waiting"
lines=$(grep -c "^$peer" "$scanlog")
bring_back "^hci-socket:1: the adapter is back" "$scanlog"
log "hci1 is back"
start=$SECONDS
until [ "$(grep -c "^$peer" "$scanlog")" -gt "$lines" ]; do
    [ $((SECONDS - start)) -lt 30 ] || fail "ble scan did not scan again after the adapter came back"
    sleep 0.3
done
# (A background job of a script has SIGINT ignored, so Ctrl-C cannot be imitated here: it is ended.)
kill $scan
wait_exit $scan 20
grep -v "^$peer" "$scanlog"

# Back at a new index: a program still holds hci1 when it is unplugged (hold_index), so the kernel keeps index 1
# and the adapter plugged in again is hci2; the waiting scan follows it there and says so.
release 1
BLE_TRANSPORT=hci-socket:1 "$OCB_BLE" scan --duration 0 --duplicates > "$OCB_OUT/$OCB_SCENARIO.scan3.log" 2>&1 &
scan=$!
wait_for "$OCB_OUT/$OCB_SCENARIO.scan3.log" "^$peer" 30 || fail "the third scan found nothing"
hold_index 1 || fail "cannot hold hci1"
remove_controller 1
wait_for "$OCB_OUT/$OCB_SCENARIO.scan3.log" "^hci-socket:1: the adapter went away" 15 || fail "ble scan did not say the adapter went away"
lines=$(grep -c "^$peer" "$OCB_OUT/$OCB_SCENARIO.scan3.log")
idx=$(plug_controller) || fail "no new controller"
# hci2 unless an adapter an earlier scenario unplugged is still in the kernel's list (see the README's matrix).
[ "$idx" != 1 ] || fail "the new controller is hci1 although hci1's index was held"
wait_for "$OCB_OUT/$OCB_SCENARIO.scan3.log" "^hci-socket:1: the adapter is back, as hci-socket:$idx" 40 || fail "ble scan did not follow the adapter to hci$idx"
start=$SECONDS
until [ "$(grep -c "^$peer" "$OCB_OUT/$OCB_SCENARIO.scan3.log")" -gt "$lines" ]; do
    [ $((SECONDS - start)) -lt 30 ] || fail "ble scan did not scan again from hci2"
    sleep 0.3
done
kill $scan
wait_exit $scan 20
grep -v "^$peer" "$OCB_OUT/$OCB_SCENARIO.scan3.log"
remove_controller "$idx"
release_holds
add_controller > /dev/null || fail "hci1 did not come back"

release 1
BLE_TRANSPORT=hci-socket:1 "$OCB_BLE" scan --duration 60 > "$OCB_OUT/$OCB_SCENARIO.scan2.log" 2>&1 &
scan=$!
wait_for "$OCB_OUT/$OCB_SCENARIO.scan2.log" "^$peer" 30 || fail "the second scan found nothing"
remove_controller 1
rc=0; wait_exit $scan 20 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.scan2.log"
[ $rc -eq 1 ] || fail "ble scan --duration 60 exited $rc (not 1) when its adapter went away"
grep -q "^Error: hci-socket:1: the adapter went away" "$OCB_OUT/$OCB_SCENARIO.scan2.log" || fail "no message"

rc=0; ble read "$peer/P" 2A00 > "$OCB_OUT/$OCB_SCENARIO.read.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.read.log"
[ $rc -eq 1 ] || fail "ble read on a missing adapter exited $rc"
grep -q "hci1: no such adapter" "$OCB_OUT/$OCB_SCENARIO.read.log" || fail "no 'no such adapter' message"
add_controller > /dev/null
log "ok"
