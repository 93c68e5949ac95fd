# timeout: 180
# `ble pair` and `ble bonds` on BLE_TRANSPORT=bluez:hci0 (issue 28): bluetoothd keeps hci0 and pairs (Device1.Pair)
# through an org.bluez.Agent1 that `ble` registers as the default agent (AgentManager1), bridged to a CBPairingAgent
# on the terminal. The peer is `ble serve` (our own stack) on hci-socket:1; DisplayYesNo on both sides: LE Secure
# Connections numeric comparison, both showing the same number, bonded. Then `ble bonds` lists BlueZ's bond, a
# second `ble pair` finds it kept, and `ble bonds --remove` forgets it (Adapter1.RemoveDevice).
start_bluez || fail "BlueZ did not start"
release 1
ble serve "$OCB_REPO/examples/heart-rate.json" --io yesno --yes > "$OCB_OUT/$OCB_SCENARIO.serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
wait_for "$OCB_OUT/$OCB_SCENARIO.serve.log" "^advertising " 30 || fail "ble serve did not advertise"
ours=$(served_address "$OCB_OUT/$OCB_SCENARIO.serve.log")
[ -n "$ours" ] || fail "no address in ble serve's output"
bz() { BLE_TRANSPORT=bluez:hci0 "$OCB_BLE" "$@"; }
p="$OCB_OUT/$OCB_SCENARIO.pair.log"
rc=0; bz pair "$ours" --io yesno --yes --timeout 60 > "$p" 2>&1 || rc=$?
cat "$p"
[ $rc -eq 0 ] || fail "ble pair on bluez exited $rc"
grep -q "^bonded with $ours" "$p" || fail "no bond reported"
n=$(sed -n 's/^Comparison value \([0-9]*\): accepted/\1/p' "$p" | head -1)
[ -n "$n" ] || fail "our Agent1 was not asked to compare numbers"
wait_for "$OCB_OUT/$OCB_SCENARIO.serve.log" "^paired with .*Secure Connections, bonded" 10 || fail "ble serve did not report an SC bond"
grep -q "Comparison value $n: accepted" "$OCB_OUT/$OCB_SCENARIO.serve.log" || fail "ble serve did not show the same number ($n)"
bz bonds > "$OCB_OUT/$OCB_SCENARIO.bonds.log" 2>&1 || fail "ble bonds on bluez failed"
cat "$OCB_OUT/$OCB_SCENARIO.bonds.log"
grep -q "^  $ours " "$OCB_OUT/$OCB_SCENARIO.bonds.log" || fail "ble bonds does not list the bond"
rc=0; bz pair "$ours" --yes > "$OCB_OUT/$OCB_SCENARIO.again.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.again.log"
[ $rc -eq 0 ] && grep -q "^already bonded with $ours" "$OCB_OUT/$OCB_SCENARIO.again.log" || fail "the second ble pair did not find the bond"
bz bonds --remove "$ours" > "$OCB_OUT/$OCB_SCENARIO.remove.log" 2>&1 || { cat "$OCB_OUT/$OCB_SCENARIO.remove.log"; fail "ble bonds --remove failed"; }
grep -q "^forgot $ours" "$OCB_OUT/$OCB_SCENARIO.remove.log" || fail "no 'forgot' line"
bz bonds > "$OCB_OUT/$OCB_SCENARIO.after.log" 2>&1 || fail "ble bonds on bluez failed after the removal"
cat "$OCB_OUT/$OCB_SCENARIO.after.log"
grep -q "^0 bond(s)" "$OCB_OUT/$OCB_SCENARIO.after.log" || fail "the bond is still listed"
hciconfig hci0 | grep -q "UP RUNNING" || fail "hci0 is no longer up"
kill $server 2>/dev/null || true
cat "$OCB_OUT/$OCB_SCENARIO.serve.log"
log "ok"
