# An adapter blocked by rfkill: binding the user channel fails with ERFKILL and `ble` says so and gives
# `rfkill unblock bluetooth`; once unblocked, the same command works.
release 1
rfkill block bluetooth || fail "rfkill block failed"
rfkill list bluetooth
rc=0; ble scan --duration 2 > "$OCB_OUT/$OCB_SCENARIO.scan.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.scan.log"
# bluetoothd powers the adapters an unblock brings back when their stored settings say they were on (hci1's did after
# an earlier scenario: a whole run failed below with "in use by the kernel's Bluetooth stack"): it is told to keep
# hci1 off first, and a keeper holds hci1 down until `ble` has bound it.
bluez_power 1 false 2>/dev/null
rfkill unblock bluetooth
[ $rc -eq 1 ] || fail "ble scan exited $rc, not 1"
grep -q "rfkill" "$OCB_OUT/$OCB_SCENARIO.scan.log" || fail "rfkill is not named"
grep -q "rfkill unblock bluetooth" "$OCB_OUT/$OCB_SCENARIO.scan.log" || fail "no way out given"
bluez_power 1 false 2>/dev/null
release 1
keep_down 1
rc=0; ble scan --duration 2 > "$OCB_OUT/$OCB_SCENARIO.scan2.log" 2>&1 || rc=$?
kill "$KEEPER" 2>/dev/null; wait "$KEEPER" 2>/dev/null
cat "$OCB_OUT/$OCB_SCENARIO.scan2.log"
[ $rc -eq 0 ] || fail "ble scan after rfkill unblock exited $rc"
log "ok"
