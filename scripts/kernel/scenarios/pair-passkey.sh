# Passkey entry both ways between `ble pair` and BlueZ: BlueZ (KeyboardOnly) types the passkey we display;
# then, after both forget the bond, we (KeyboardOnly) type the one BlueZ (DisplayOnly) shows.
# timeout: 300
start_bluez || fail "BlueZ did not start"
release 1
btctl_start
btctl "select $(address 0)"
btctl_agent KeyboardOnly || fail "no agent"
btctl "advertise.name on"
btctl "advertise on"
wait_for "$BTCTL_LOG" "Advertising object registered" 20 || fail "bluetoothctl did not advertise"
peer="$(address 0)/P"
ble pair "$peer" --io display --yes > "$OCB_OUT/$OCB_SCENARIO.pair1.log" 2>&1 &
pair=$!
wait_for "$OCB_OUT/$OCB_SCENARIO.pair1.log" "^Passkey for" 40 || fail "we showed no passkey"
key=$(sed -n 's/^Passkey for .*: \([0-9]\{6\}\) .*/\1/p' "$OCB_OUT/$OCB_SCENARIO.pair1.log" | head -1)
wait_for "$BTCTL_LOG" "Enter passkey" 20 || fail "BlueZ did not ask for the passkey"
btctl "$key"
rc=0; wait_exit $pair 40 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.pair1.log"
[ $rc -eq 0 ] || fail "ble pair (we display) exited $rc"
grep -q "bonded with .*authenticated" "$OCB_OUT/$OCB_SCENARIO.pair1.log" || fail "no authenticated bond (we display)"

btctl "remove $(address 1)"
release 1
ble bonds --remove "$(address 0)" > /dev/null || fail "ble bonds --remove failed"
btctl_agent DisplayOnly || fail "no DisplayOnly agent"
release 1
rm -f "$OCB_RUN/passkey.in"; mkfifo "$OCB_RUN/passkey.in"
BLE_SNOOP="$OCB_CAP/$OCB_SCENARIO.pair2.btsnoop" ble pair "$peer" --io keyboard --force < "$OCB_RUN/passkey.in" > "$OCB_OUT/$OCB_SCENARIO.pair2.log" 2>&1 &
pair=$!
exec 8> "$OCB_RUN/passkey.in"
wait_for_count "$BTCTL_LOG" "\[agent\] Passkey: [0-9]" 1 40 || fail "BlueZ showed no passkey"
key=$(clean "$BTCTL_LOG" | sed -n 's/.*\[agent\] Passkey: \([0-9]*\).*/\1/p' | tail -1)
wait_for "$OCB_OUT/$OCB_SCENARIO.pair2.log" "Passkey shown by" 20 || fail "we were not asked for the passkey"
echo "$key" >&8
rc=0; wait_exit $pair 40 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.pair2.log"
[ $rc -eq 0 ] || fail "ble pair (we type) exited $rc"
grep -q "bonded with .*authenticated" "$OCB_OUT/$OCB_SCENARIO.pair2.log" || fail "no authenticated bond (we type)"
log "ok"
