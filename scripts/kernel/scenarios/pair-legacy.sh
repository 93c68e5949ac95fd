# LE legacy pairing started by us (`ble pair --legacy`, Just Works) with BlueZ, and BlueZ pairing with
# `ble serve` when we allow only legacy pairing.
start_bluez || fail "BlueZ did not start"
release 1
btctl_start
btctl "select $(address 0)"
btctl_agent NoInputNoOutput || fail "no agent"
btctl_answer_yes
btctl "advertise.name on"
btctl "advertise on"
wait_for "$BTCTL_LOG" "Advertising object registered" 20 || fail "bluetoothctl did not advertise"
peer="$(address 0)/P"
rc=0; BLE_SNOOP="$OCB_OUT/$OCB_SCENARIO.btsnoop" ble pair "$peer" --legacy --io none --yes > "$OCB_OUT/$OCB_SCENARIO.pair.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.pair.log"
[ $rc -eq 0 ] || fail "ble pair --legacy exited $rc"
grep -q "bonded with .*(legacy, unauthenticated" "$OCB_OUT/$OCB_SCENARIO.pair.log" || fail "no legacy bond"
log "ok"
