# 1 MB each way over LE credit-based channels between our host (hci-socket:1) and BlueZ's l2test on hci0
# (Swift Testing, Tests/InteropTests/KernelGuestTests.swift, run from the built test bundle inside the guest).
# Both adapters are made anew with 1021-octet LE buffers (fast_controllers): with rootcanal's 27-octet buffers a
# megabyte is 50,000 K-frames, and the emulated guest forwards about 20 packets a second.
# timeout: 300
start_bluez || fail "BlueZ did not start"
fast_controllers || fail "no fast controllers"
btctl_start
btctl "select $(address 0)"
btctl "advertise.name on"
btctl "advertise on"
wait_for "$BTCTL_LOG" "Advertising object registered" 20 || fail "bluetoothctl did not advertise"
release 1
guest_test "KernelGuestL2CAPTests/oneMegabyteEachWay" OCB_PEER_ADDRESS="$(address 0)" || fail "KernelGuestL2CAPTests failed"
log "ok"
