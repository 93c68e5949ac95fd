# timeout: 240
# `ble scan`, `ble read`, `ble write` and `ble subscribe` on BLE_TRANSPORT=bluez:hci0 (issue 28): Core Bluetooth
# centrals through bluetoothd, which keeps hci0, against `ble serve` (our own stack) on hci-socket:1: the scan reports
# the served name and service in JSON; a read (the body sensor location, and a long value BlueZ reads with Read Blob),
# a write with response and a write without response reach the server; three notifications arrive decoded; each
# command ends its link.
start_bluez || fail "BlueZ did not start"
release 1
ble serve "$OCB_REPO/examples/heart-rate.json" --notify-every 1 > "$OCB_OUT/$OCB_SCENARIO.serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
wait_for "$OCB_OUT/$OCB_SCENARIO.serve.log" "^advertising " 30 || fail "ble serve did not advertise"
ours=$(served_address "$OCB_OUT/$OCB_SCENARIO.serve.log")
[ -n "$ours" ] || fail "no address in ble serve's output"
bz() { BLE_TRANSPORT=bluez:hci0 "$OCB_BLE" "$@"; }
s="$OCB_OUT/$OCB_SCENARIO.scan.log"
bz scan --duration 10 --name "Served HR" --json > "$s" 2> "$s.err" || { cat "$s.err"; fail "ble scan on bluez failed"; }
cat "$s" "$s.err"
grep -q "\"address\":\"$ours" "$s" || fail "the scan did not report $ours"
grep -q '"name":"Served HR"' "$s" || fail "no name in the scan"
grep -q '"180D"' "$s" || fail "no Heart Rate service in the scan"
r="$OCB_OUT/$OCB_SCENARIO.read.log"
bz read "$ours" 2A38 --timeout 30 > "$r" 2>&1 || { cat "$r"; fail "ble read on bluez failed"; }
cat "$r"
grep -q "2A38 Body Sensor Location: .*\[01\]" "$r" || fail "not the body sensor location"
bz read "$ours" 6E400002-B5A3-F393-E0A9-E50E24DCCA9E --timeout 30 > "$r" 2>&1 || { cat "$r"; fail "the long read on bluez failed"; }
cat "$r"
grep -q "so that long reads are exercised" "$r" || fail "the long value was not read whole"
w="$OCB_OUT/$OCB_SCENARIO.write.log"
bz write "$ours" 2A39 --hex 01 --timeout 30 > "$w" 2>&1 || { cat "$w"; fail "ble write on bluez failed"; }
bz write "$ours" 2A39 --hex 02 --no-response --timeout 30 >> "$w" 2>&1 || { cat "$w"; fail "ble write --no-response on bluez failed"; }
cat "$w"
grep -q "wrote 1 octet(s) to .*2A39" "$w" || fail "no write reported"
wait_for "$OCB_OUT/$OCB_SCENARIO.serve.log" "^write 0x[0-9a-f]* \(stored\): 01" 10 || fail "the write with response did not reach the server"
wait_for "$OCB_OUT/$OCB_SCENARIO.serve.log" "^write 0x[0-9a-f]* \(stored\): 02" 10 || fail "the write without response did not reach the server"
n="$OCB_OUT/$OCB_SCENARIO.subscribe.log"
bz subscribe "$ours" 2A37 --count 3 --timeout 30 > "$n" 2>&1 || { cat "$n"; fail "ble subscribe on bluez failed"; }
cat "$n"
[ "$(grep -c "notification 0x[0-9a-f]* 2A37 Heart Rate Measurement: [0-9]* bpm" "$n")" -eq 3 ] || fail "not three decoded notifications"
hciconfig hci0 | grep -q "UP RUNNING" || fail "hci0 is no longer up"
kill $server 2>/dev/null || true
cat "$OCB_OUT/$OCB_SCENARIO.serve.log"
log "ok"
