# BlueZ pairs with `ble serve` (bluetoothctl `pair`, NoInputNoOutput on both sides): LE Secure Connections,
# Just Works, bonded on both sides; then BlueZ reconnects and encrypts with the stored keys, no second pairing.
start_bluez || fail "BlueZ did not start"
release 1
ble serve "$OCB_REPO/examples/heart-rate.json" > "$OCB_OUT/$OCB_SCENARIO.serve.log" 2>&1 &
wait_for "$OCB_OUT/$OCB_SCENARIO.serve.log" "^advertising " 30 || fail "ble serve did not advertise"
ours=$(served_address "$OCB_OUT/$OCB_SCENARIO.serve.log")
btctl_start
btctl "select $(address 0)"
btctl_agent NoInputNoOutput || fail "no agent"
btctl_answer_yes
btctl "scan le"
wait_for "$BTCTL_LOG" "Device $ours" 30 || fail "bluetoothctl did not find us"
btctl "scan off"
btctl "pair $ours"
wait_for "$BTCTL_LOG" "Pairing successful" 60 || fail "BlueZ did not pair"
wait_for "$OCB_OUT/$OCB_SCENARIO.serve.log" "^paired with .*Secure Connections, bonded" 10 || fail "ble serve did not report an SC bond"
btctl "info $ours"
wait_for "$BTCTL_LOG" "Bonded: yes" 10 || fail "BlueZ did not keep a bond"
btctl "disconnect $ours"
wait_for "$BTCTL_LOG" "Connected: no" 20 || fail "no disconnection"
sleep 1
btctl "connect $ours"
wait_for_count "$BTCTL_LOG" "Connection successful" 1 40 || fail "BlueZ did not reconnect"
# The kernel encrypts a bonded LE link on connection with the stored LTK.
wait_for_count "$OCB_OUT/$OCB_SCENARIO.serve.log" "^link to .*: encrypted" 2 30 || fail "the reconnection was not encrypted"
[ "$(grep -c '^paired with' "$OCB_OUT/$OCB_SCENARIO.serve.log")" -eq 1 ] || fail "BlueZ paired again instead of using the bond"
cat "$OCB_OUT/$OCB_SCENARIO.serve.log"
log "ok"
