# 1 MB each way over LE credit-based channels between our host (hci-socket:1) and BlueZ's l2test on hci0
# (Swift Testing, Tests/InteropTests/KernelGuestTests.swift, run from the built test bundle inside the guest).
# timeout: 400
start_bluez || fail "BlueZ did not start"
btctl_start
btctl "select $(address 0)"
btctl "advertise.name on"
btctl "advertise on"
wait_for "$BTCTL_LOG" "Advertising object registered" 20 || fail "bluetoothctl did not advertise"
release 1
bundle=$(ls -d "$OCB_REPO"/.build/debug/*PackageTests.xctest | head -1)
[ -x "$bundle" ] || fail "no test bundle (swift build --build-tests)"
rc=0
OCB_KERNEL_GUEST=1 OCB_PEER_ADDRESS="$(address 0)" \
    "$bundle" --testing-library swift-testing --filter "KernelGuestL2CAPTests/oneMegabyteEachWay" > "$OCB_OUT/$OCB_SCENARIO.test.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.test.log"
[ $rc -eq 0 ] || fail "KernelGuestL2CAPTests exited $rc"
grep -q "passed" "$OCB_OUT/$OCB_SCENARIO.test.log" || fail "no test ran"
log "ok"
