# timeout: 300
# (Linux 6.1.192, OCB_KERNEL_META=linux-image-amd64, hit a BUG in bluetoothd's context as BlueZ's connection on the
# stale key ended, in nearly every whole run: the scenario then exits 3, below, and its guest makes way for a new one.
# The harness's 6.12 kernel has not.)
# A bond deleted on one side, as with an iPhone. (A) Our stack is the central: `ble pair` bonds with BlueZ, BlueZ
# removes the device (bluetoothctl `remove`), and a Core Bluetooth central (`ble interop central`) on hci-socket:1
# connects again: it encrypts with its stored key as iOS does on connecting to a bonded device, BlueZ's kernel has
# no key (LTK Negative Reply), and the connection fails with CBError.peerRemovedPairingInformation ("Peer removed
# pairing information"); it does not pair again by itself; `ble pair` says the same and how to recover; once the
# bond is forgotten (`ble bonds --remove`, iOS's "Forget This Device") the central connects. (B) BlueZ is the
# central: it pairs with `ble serve`, we forget the bond (`ble bonds --remove`), BlueZ reconnects with its stale key
# and we refuse it (LTK Negative Reply, the link never encrypted); once BlueZ removes the device too, it pairs anew.
start_bluez || fail "BlueZ did not start"
release 1
btctl_start
btctl "select $(address 0)"
btctl "system-alias KernelPeer"
btctl_agent NoInputNoOutput || fail "no agent"
btctl_answer_yes
btctl "advertise.name on"
btctl "advertise on"
wait_for "$BTCTL_LOG" "Advertising object registered" 20 || fail "bluetoothctl did not advertise"
peer="$(address 0)/P"
A="$OCB_OUT/$OCB_SCENARIO.A"
release 1
rc=0; ble pair "$peer" --io none --yes > "$A.pair.log" 2>&1 || rc=$?
cat "$A.pair.log"
[ $rc -eq 0 ] || fail "ble pair exited $rc"
grep -q "^bonded with" "$A.pair.log" || fail "no bond"
# BlueZ forgets us.
dev=$(ls "/var/lib/bluetooth/$(address 0)/" | grep -E '^([0-9A-F]{2}:){5}[0-9A-F]{2}$' | head -1)
[ -n "$dev" ] || fail "BlueZ stored no bond"
log "BlueZ's bond is with $dev; removing it"
btctl "remove $dev"
wait_for "$BTCTL_LOG" "Device has been removed|DEL.*Device $dev" 20 || fail "bluetoothctl did not remove $dev"
[ ! -d "/var/lib/bluetooth/$(address 0)/$dev" ] || fail "BlueZ kept the bond on disk"
release 1
rc=0; BLE_LOG=1 BLE_SNOOP="$OCB_CAP/$OCB_SCENARIO.A.btsnoop" ble interop central --name KernelPeer --timeout 60 > "$A.central.log" 2>&1 || rc=$?
cat "$A.central.log"
[ $rc -eq 2 ] || fail "the central program exited $rc, not 2 (didFailToConnect)"
grep -q "failed to connect: Peer removed pairing information (CBErrorDomain code 14)" "$A.central.log" || fail "not CBError.peerRemovedPairingInformation"
grep -q "^\[central\] connected" "$A.central.log" && fail "didConnect before the failure"
[ "$(clean "$BTCTL_LOG" | grep -c "Confirm passkey\|Request confirmation")" -eq 0 ] || fail "BlueZ was asked to pair"
release 1
rc=0; ble pair "$peer" --io none --yes > "$A.pair2.log" 2>&1 || rc=$?
cat "$A.pair2.log"
[ $rc -ne 0 ] || fail "ble pair succeeded on a stale bond"
grep -q "the peer has no key for our bond (it removed its pairing information); forget the bond to pair again" "$A.pair2.log" || fail "ble pair did not say why"
grep -q "to pair again: \`ble bonds --remove $(address 0)/P\`, or \`ble pair --force\`" "$A.pair2.log" || fail "ble pair did not say how to recover"
release 1
ble bonds --remove "$(address 0)" > "$A.remove.log" 2>&1 || { cat "$A.remove.log"; fail "ble bonds --remove failed"; }
cat "$A.remove.log"
release 1
rc=0; ble interop central --name KernelPeer --timeout 60 > "$A.central2.log" 2>&1 || rc=$?
cat "$A.central2.log"
[ $rc -eq 0 ] || fail "after forgetting the bond the central program exited $rc"
grep -q "^\[central\] connected" "$A.central2.log" || fail "no didConnect after forgetting the bond"

# (B) BlueZ keeps a bond that we deleted.
btctl "advertise off"
release 1
B="$OCB_OUT/$OCB_SCENARIO.B"
# (exec: $! is then `ble` itself, which `kill` ends; a background call of the `ble` shell function is a subshell
# whose end leaves `ble` running and holding hci1.)
(BLE_LOG=1 BLE_TRANSPORT=hci-socket:1 exec "$OCB_BLE" serve "$OCB_REPO/examples/heart-rate.json") > "$B.serve.log" 2>&1 &
serve=$!
trap 'kill $serve 2>/dev/null || true' EXIT
wait_for "$B.serve.log" "^advertising " 30 || fail "ble serve did not advertise"
ours=$(served_address "$B.serve.log")
btctl "scan le"
wait_for "$BTCTL_LOG" "Device $ours" 30 || fail "bluetoothctl did not find us"
btctl "scan off"
btctl "pair $ours"
wait_for "$BTCTL_LOG" "Pairing successful" 60 || fail "BlueZ did not pair"
wait_for "$B.serve.log" "^paired with .*bonded" 10 || fail "ble serve did not bond"
btctl "disconnect $ours"
wait_for "$BTCTL_LOG" "Connected: no" 20 || fail "no disconnection"
kill $serve; wait $serve 2>/dev/null
[ "$(pgrep -f "$OCB_BLE serve" | wc -l)" -eq 0 ] || fail "ble serve still runs"
# The kernel sets hci1 up again once the user channel closes (busy for a moment): retried until it is free.
rc=0
for attempt in 1 2 3 4 5 6 7 8 9 10; do
    release 1 2>/dev/null; sleep 1
    rc=0; ble bonds --remove "$(address 0)" > "$B.remove.log" 2>&1 || rc=$?
    grep -q "in use by the kernel" "$B.remove.log" || break
done
cat "$B.remove.log"
[ $rc -eq 0 ] || fail "ble bonds --remove failed"
for attempt in 1 2 3 4 5 6 7 8 9 10; do
    release 1 2>/dev/null; sleep 1
    (BLE_LOG=1 BLE_TRANSPORT=hci-socket:1 exec "$OCB_BLE" serve "$OCB_REPO/examples/heart-rate.json") > "$B.serve2.log" 2>&1 &
    serve=$!
    wait_for "$B.serve2.log" "^advertising |in use by the kernel" 30 || fail "ble serve did not advertise again"
    grep -q "in use by the kernel" "$B.serve2.log" || break
    wait $serve 2>/dev/null
done
grep -q "^advertising " "$B.serve2.log" || fail "ble serve did not advertise again"
connected=$(clean "$BTCTL_LOG" | grep -c "Connection successful")
btctl "connect $ours"
wait_for "$B.serve2.log" "no long-term key for the peer; refusing encryption" 40 || fail "we did not refuse BlueZ's stale key"
grep -q "^link to .*: encrypted" "$B.serve2.log" && fail "the link was encrypted without a bond"
sleep 3
log "BlueZ's side of the refused key:"
clean "$BTCTL_LOG" | grep -v '^\s*$' | tail -n 8 >&2
# bluetoothd 5.66 has been seen to end right after the failed ATT connection that follows (its log's last line:
# "att_connect_cb() connect to …: Connection refused (111)"); it is started again then, and says so.
if ! kill -0 "$(cat "$OCB_RUN/bluetoothd.pid" 2>/dev/null)" 2>/dev/null; then
    # The guest's kernel (Linux 6.1.192) has killed it: "list_del corruption" in hci_chan_del as bluetoothd released
    # its socket on the link that had just failed, in 7 of 8 attempts over two sessions (the README's kernel
    # section). Nothing Bluetooth works in this guest after that, so BlueZ's pairing anew cannot be tried: exit 3
    # says so (the test records it as the kernel's known issue; everything above has passed).
    { read -r tainted < /proc/sys/kernel/tainted; } 2>/dev/null
    if [ $(( ${tainted:-0} & 128 )) -ne 0 ]; then
        log "KERNEL-BUG: bluetoothd was killed by the guest's kernel (BUG, tainted $tainted; see dmesg.log) as its connection on the stale key ended; BlueZ pairing anew cannot be tried in this guest"
        exit 3
    fi
    log "bluetoothd ended after the refused key (BlueZ's side; see bluetoothd.log); starting it again"
    start_bluez || fail "BlueZ did not start again"
    wait_for_count "$BTCTL_LOG" "Agent registered" 2 30 || true   # bluetoothctl registers its agent again itself
    btctl "agent NoInputNoOutput"
    sleep 1
    btctl "default-agent"
    wait_for_count "$BTCTL_LOG" "Default agent request successful" 2 30 || fail "no default agent after bluetoothd's restart"
fi
btctl "disconnect $ours"
sleep 1
btctl "remove $ours"
wait_for_count "$BTCTL_LOG" "Device has been removed" 2 20 || fail "bluetoothctl did not remove us"
btctl "scan le"
wait_for_count "$BTCTL_LOG" "NEW.*Device $ours" 2 30 || fail "bluetoothctl did not find us again"
btctl "scan off"
btctl "pair $ours"
wait_for_count "$BTCTL_LOG" "Pairing successful" 2 60 || fail "BlueZ did not pair anew"
wait_for "$B.serve2.log" "^paired with .*bonded" 10 || fail "ble serve did not bond anew"
kill $serve 2>/dev/null || true
# A bluetoothd started here ends with the scenario (its session), before the guest's reset between scenarios
# can make it forget this bond: forget it now, or the next bluetoothd would load it.
reset_bluez
log "ok"
