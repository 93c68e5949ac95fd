# timeout: 360
# `ble gatt`, `ble shell` and `ble serve` on BLE_TRANSPORT=bluez:hci0 (issue 28), while bluetoothd keeps hci0.
# (1) Against `ble serve` (our own stack) on hci-socket:1: `ble gatt` on bluez dumps the database bluetoothd found
# (secondary Battery service included by Heart Rate, the long value read whole, the CCCD bluetoothd keeps), and a
# scripted `ble shell` reads, writes, subscribes and unsubscribes. (2) `ble serve` on bluez serves the same file
# through RegisterApplication and an advertisement; our stack on hci-socket:1 is the client: `ble gatt` sees the
# services bluetoothd built from our applications, a write is read back, and notifications come every second. The
# file's 6E400005 needs encryption: each side pairs through its agent (--yes) to read it.
start_bluez || fail "BlueZ did not start"
bz() { BLE_TRANSPORT=bluez:hci0 BLE_LOG=1 "$OCB_BLE" "$@"; }
# (1) bluez as the client. (bluetoothd may power hci1 again a moment after it was released: a keeper takes it down
# until `ble serve` has it: keep_down.)
keep_down 1
keeper=$KEEPER
# (The binary itself, not lib.sh's `ble` function: killing the function's subshell left `ble serve` holding hci1, and
# part (2) found it in use.)
BLE_TRANSPORT=hci-socket:1 "$OCB_BLE" serve "$OCB_REPO/examples/heart-rate.json" --notify-every 1 > "$OCB_OUT/$OCB_SCENARIO.serve.log" 2>&1 &
server=$!
trap 'kill $server $keeper 2>/dev/null || true' EXIT
wait_for "$OCB_OUT/$OCB_SCENARIO.serve.log" "^advertising " 60 || fail "ble serve did not advertise"
kill $keeper 2>/dev/null; wait $keeper 2>/dev/null
ours=$(served_address "$OCB_OUT/$OCB_SCENARIO.serve.log")
[ -n "$ours" ] || fail "no address in ble serve's output"
g="$OCB_OUT/$OCB_SCENARIO.gatt.log"
start=$SECONDS
bz gatt "$ours" --yes --timeout 30 > "$g" 2> "$g.err" || { cat "$g" "$g.err"; fail "ble gatt on bluez failed"; }
log "ble gatt on bluez: $((SECONDS - start)) s"
cat "$g" "$g.err"
grep -q "service 180D Heart Rate" "$g" || fail "no Heart Rate service"
grep -q "secondary service 180F Battery" "$g" || fail "the included Battery service is not shown"
grep -q "includes 180F Battery" "$g" || fail "no include"
grep -q "characteristic 2A38 Body Sensor Location, value 0x[0-9a-f]* \[read\]" "$g" || fail "no Body Sensor Location"
grep -q "= Chest  \[01\]" "$g" || fail "the Body Sensor Location value was not read"
grep -q "descriptor 2901 Characteristic User Description = \"Heart Rate Measurement\"" "$g" || fail "no user description"
grep -q "descriptor 2902 Client Characteristic Configuration" "$g" || fail "no CCCD"
grep -q "so that long reads are exercised" "$g" || fail "the long value was not read whole"
grep -q "bluetoothd keeps the GAP service" "$g.err" || fail "no note on the GAP service"
# 6E400005 needs encryption: bluetoothd pairs (Just Works, through our Agent1 answering with --yes) and reads it.
grep -q "secret" "$g" || fail "the encrypted value was not read after pairing"
bz gatt "$ours" --json --no-values --yes --timeout 30 > "$g.json" 2> "$g.json.err" || { cat "$g.json" "$g.json.err"; fail "ble gatt --json on bluez failed"; }
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert [s["uuid"] for s in d["services"] if s["uuid"] in ("180D","180F")] == ["180F","180D"], d' "$g.json" \
    || fail "the JSON dump lacks the services"
sh="$OCB_OUT/$OCB_SCENARIO.shell.log"
rm -f "$OCB_RUN/shell.in"; mkfifo "$OCB_RUN/shell.in"
bz shell "$ours" --yes --timeout 30 < "$OCB_RUN/shell.in" > "$sh" 2>&1 &
shell=$!
exec 8> "$OCB_RUN/shell.in"
trap 'kill $server $shell 2>/dev/null || true' EXIT
wait_for "$sh" "^connected; " 60 || { cat "$sh"; fail "ble shell on bluez did not connect"; }
printf 'read 2A38\nwrite 2A39 --hex 05\nsubscribe 2A37\n' >&8
wait_for_count "$sh" "notification 0x[0-9a-f]* 2A37 Heart Rate Measurement" 2 30 || { cat "$sh"; fail "no notifications in the shell"; }
printf 'unsubscribe 2A37\nlist --no-values\nquit\n' >&8
wait_exit $shell 30 || { cat "$sh"; fail "ble shell did not end"; }
exec 8>&-
cat "$sh"
grep -q "2A38 Body Sensor Location: Chest  \[01\]" "$sh" || fail "the shell's read"
grep -q "wrote 1 octet(s) to 0x[0-9a-f]* 2A39" "$sh" || fail "the shell's write"
wait_for "$OCB_OUT/$OCB_SCENARIO.serve.log" "^write 0x[0-9a-f]* \(stored\): 05" 10 || fail "the shell's write did not reach the server"
grep -q "unsubscribed from 0x[0-9a-f]* 2A37" "$sh" || fail "the shell's unsubscribe"
grep -q "service 180D Heart Rate" "$sh" || fail "the shell's list"
kill $server 2>/dev/null || true
wait $server 2>/dev/null || true
cat "$OCB_OUT/$OCB_SCENARIO.serve.log"
# (2) bluez as the server, our stack as the client. Both sides forget the bond part (1) made first: the roles change,
# and bluetoothd refuses to pair again over a bond it keeps (JustWorksRepairing = never).
bz bonds --remove "${ours%/*}" || log "bluetoothd kept no bond with ${ours%/*}"
release 1
ble bonds --remove "$(address 0)" || log "our stack kept no bond with hci0"
s="$OCB_OUT/$OCB_SCENARIO.serve-bluez.log"
BLE_TRANSPORT=bluez:hci0 "$OCB_BLE" serve "$OCB_REPO/examples/heart-rate.json" --notify-every 1 > "$s" 2>&1 &
server=$!
wait_for "$s" '^advertising "Served HR" as ' 30 || { cat "$s"; fail "ble serve on bluez did not advertise"; }
peer="$(address 0)/P"
grep -q "as $peer on bluez:hci0" "$s" || fail "ble serve on bluez does not name hci0's address"
check() {   # check NAME ARGS…: one `ble` command on hci1 (released first: bluetoothd may take it back after each)
    local name=$1; shift
    local rc attempt
        for attempt in 1 2 3 4 5; do
        release 1; sleep 0.7; release 1
        rc=0; ble "$@" > "$OCB_OUT/$OCB_SCENARIO.$name.txt" 2>&1 || rc=$?
        grep -q "in use by the kernel" "$OCB_OUT/$OCB_SCENARIO.$name.txt" || break
        log "hci1 taken back by bluetoothd before ble $1 (attempt $attempt)"
    done
    cat "$OCB_OUT/$OCB_SCENARIO.$name.txt"
    [ $rc -eq 0 ] || fail "ble $1 exited $rc"
}
check gatt2 gatt "$peer" --yes --timeout 30
for want in "service 180D Heart Rate" "service 180F Battery" "characteristic 2A38 Body Sensor Location" "= Chest  \[01\]" \
    "descriptor 2901 Characteristic User Description = \"Heart Rate Measurement\"" "so that long reads are exercised" "service 1800 Generic Access" "secret"; do
    grep -q "$want" "$OCB_OUT/$OCB_SCENARIO.gatt2.txt" || fail "our client does not see /$want/ in bluez's database"
done
check write2 write "$peer" 6E400002-B5A3-F393-E0A9-E50E24DCCA9E --text "written through bluetoothd" --yes --timeout 30
wait_for "$s" "^write 6E400002-B5A3-F393-E0A9-E50E24DCCA9E offset 0: " 10 || fail "the write did not reach ble serve on bluez"
check read2 read "$peer" 6E400002-B5A3-F393-E0A9-E50E24DCCA9E --yes --timeout 30
grep -q "written through bluetoothd" "$OCB_OUT/$OCB_SCENARIO.read2.txt" || fail "the written value was not read back"
check subscribe2 subscribe "$peer" 2A37 --count 3 --yes --timeout 30
[ "$(grep -c "notification 0x[0-9a-f]* 2A37 Heart Rate Measurement" "$OCB_OUT/$OCB_SCENARIO.subscribe2.txt")" -ge 3 ] || fail "fewer than 3 notifications from ble serve on bluez"
wait_for "$s" "^subscription 2A37: on" 10 || fail "ble serve on bluez saw no subscription"
kill $server 2>/dev/null || true
cat "$s"
hciconfig hci0 | grep -q "UP RUNNING" || fail "hci0 is no longer up"
log "ok"
