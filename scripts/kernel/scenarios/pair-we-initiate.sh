# `ble pair` on the HCI user channel pairs with BlueZ (advertising, agent DisplayYesNo): LE Secure Connections
# with numeric comparison, both sides showing the same number; bonded; a second `ble pair` encrypts with the
# stored keys without pairing again.
start_bluez || fail "BlueZ did not start"
release 1
btctl_start
btctl "select $(address 0)"
btctl_agent DisplayYesNo || fail "no agent"
btctl_answer_yes
btctl "advertise.name on"
btctl "advertise on"
wait_for "$BTCTL_LOG" "Advertising object registered" 20 || fail "bluetoothctl did not advertise"
peer="$(address 0)/P"
rc=0; ble pair "$peer" --io yesno --yes > "$OCB_OUT/$OCB_SCENARIO.pair.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.pair.log"
[ $rc -eq 0 ] || fail "ble pair exited $rc"
grep -q "bonded with .*LE Secure Connections, authenticated" "$OCB_OUT/$OCB_SCENARIO.pair.log" || fail "no authenticated SC bond"
ours=$(sed -n 's/^Comparison value \([0-9]*\): accepted/\1/p' "$OCB_OUT/$OCB_SCENARIO.pair.log")
[ -n "$ours" ] || fail "no numeric comparison on our side"
clean "$BTCTL_LOG" | grep -q "Confirm passkey $ours" || fail "BlueZ did not show the same number ($ours)"
release 1
rc=0; ble pair "$peer" --yes > "$OCB_OUT/$OCB_SCENARIO.again.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.again.log"
[ $rc -eq 0 ] || fail "the second ble pair exited $rc"
grep -q "^secured: encrypted (authenticated, Secure Connections" "$OCB_OUT/$OCB_SCENARIO.again.log" || fail "the bond was not used"
# bluetoothctl redraws its agent prompt under each line it prints: count the numbers it was asked to confirm.
[ "$(clean "$BTCTL_LOG" | sed -n 's/.*Confirm passkey \([0-9]*\).*/\1/p' | sort -u | wc -l)" -eq 1 ] || fail "BlueZ was asked to pair again"
log "ok"
