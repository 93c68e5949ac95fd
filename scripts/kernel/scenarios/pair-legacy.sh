# Pairing started by us with no IO (`ble pair --io none`, as a headless gateway would) against BlueZ whose agent
# has a keyboard and a display (bluetoothctl's default, KeyboardDisplay): LE legacy Just Works, then LE Secure
# Connections Just Works. The kernel (net/bluetooth/smp.c) refuses a Pairing Request whose MITM flag cannot be
# honoured with Authentication Requirements, so we ask for MITM only when our IO can give it, as an iPhone does.
start_bluez || fail "BlueZ did not start"
release 1
btctl_start
btctl "select $(address 0)"
# A bond an earlier scenario left in bluetoothd makes BlueZ refuse our Just Works (JustWorksRepairing = never:
# bluetoothd rejects the kernel's confirmation, the kernel sends Passkey Entry Failed). Seen in a whole-group run
# after pair-passkey; start from no bond, as a single run does.
btctl "remove $(address 1)"
sleep 1
btctl_agent KeyboardDisplay || fail "no agent"
btctl_answer_yes
btctl "advertise.name on"
btctl "advertise on"
wait_for "$BTCTL_LOG" "Advertising object registered" 20 || fail "bluetoothctl did not advertise"
peer="$(address 0)/P"
rc=0; BLE_SNOOP="$OCB_CAP/$OCB_SCENARIO.btsnoop" ble pair "$peer" --legacy --io none --yes > "$OCB_OUT/$OCB_SCENARIO.legacy.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.legacy.log"
[ $rc -eq 0 ] || fail "ble pair --legacy exited $rc"
grep -q "bonded with .*(legacy, unauthenticated" "$OCB_OUT/$OCB_SCENARIO.legacy.log" || fail "no legacy bond"
# BlueZ refuses Just Works with a device it has a bond with (JustWorksRepairing = never): forget it first.
btctl "remove $(address 1)"
wait_for "$BTCTL_LOG" "Device has been removed" 10 || fail "BlueZ did not forget us"
release 1
rc=0; ble pair "$peer" --io none --yes --force > "$OCB_OUT/$OCB_SCENARIO.sc.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.sc.log"
[ $rc -eq 0 ] || fail "ble pair (Secure Connections, no IO) exited $rc"
grep -q "bonded with .*(LE Secure Connections, unauthenticated" "$OCB_OUT/$OCB_SCENARIO.sc.log" || fail "no SC bond"
log "ok"
