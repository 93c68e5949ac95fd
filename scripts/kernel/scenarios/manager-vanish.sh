# A CBCentralManager on hci-socket:1 whose adapter vanishes while connected and comes back (Swift Testing,
# Tests/InteropTests/KernelGuestTests.swift, run from the built test bundle inside the guest).
# timeout: 400
start_bluez || fail "BlueZ did not start"
btctl_start
btctl "select $(address 0)"
btctl "system-alias KernelPeer"
btctl "advertise.name on"
btctl "advertise on"
wait_for "$BTCTL_LOG" "Advertising object registered" 20 || fail "bluetoothctl did not advertise"
release 1
bundle=$(ls -d "$OCB_REPO"/.build/debug/*PackageTests.xctest | head -1)
[ -x "$bundle" ] || fail "no test bundle (swift build --build-tests)"
rc=0
OCB_KERNEL_GUEST=1 OCB_PEER_NAME=KernelPeer BLE_TRANSPORT=hci-socket:1 \
    "$bundle" --testing-library swift-testing --filter "KernelGuestTests/managerFollowsTheAdapter" > "$OCB_OUT/$OCB_SCENARIO.test.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.test.log"
[ $rc -eq 0 ] || fail "KernelGuestTests exited $rc"
grep -q "passed" "$OCB_OUT/$OCB_SCENARIO.test.log" || fail "no test ran"
log "ok"
