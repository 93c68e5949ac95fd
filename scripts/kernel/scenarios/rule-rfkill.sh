# An adapter blocked by rfkill: binding the user channel fails with ERFKILL and `ble` says so and gives
# `rfkill unblock bluetooth`; once unblocked, the same command works.
release 1
rfkill block bluetooth || fail "rfkill block failed"
rfkill list bluetooth
rc=0; ble scan --duration 2 > "$OCB_OUT/$OCB_SCENARIO.scan.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.scan.log"
rfkill unblock bluetooth
[ $rc -eq 1 ] || fail "ble scan exited $rc, not 1"
grep -q "rfkill" "$OCB_OUT/$OCB_SCENARIO.scan.log" || fail "rfkill is not named"
grep -q "rfkill unblock bluetooth" "$OCB_OUT/$OCB_SCENARIO.scan.log" || fail "no way out given"
# bluetoothd powers every adapter an unblock brings back, whatever AutoEnable says (btd_adapter_restore_powered),
# and under emulation it may do so seconds later: two whole runs failed below with "in use by the kernel's Bluetooth
# stack" (the power-on under way). It is waited for (15 s at most), hci1 is powered off through bluetoothd, and a
# keeper holds it down until `ble` has bound it.
start=$SECONDS
until hciconfig hci1 | grep -q "UP RUNNING"; do [ $((SECONDS - start)) -lt 15 ] || break; nap 0.3; done
log "hci1 after the unblock: $(hciconfig hci1 | grep -Eo 'UP RUNNING|DOWN') after $((SECONDS - start)) s"
bluez_power 1 false 2>/dev/null
release 1
keep_down 1
rc=0; ble scan --duration 2 > "$OCB_OUT/$OCB_SCENARIO.scan2.log" 2>&1 || rc=$?
kill "$KEEPER" 2>/dev/null; wait "$KEEPER" 2>/dev/null
cat "$OCB_OUT/$OCB_SCENARIO.scan2.log"
[ $rc -eq 0 ] || fail "ble scan after rfkill unblock exited $rc"
log "ok"
