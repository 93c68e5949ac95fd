# A CBCentralManager on hci-socket:1 whose adapter vanishes while connected and comes back, while a program holds
# the old index, as hci2 (Swift Testing, Tests/InteropTests/KernelGuestTests.swift, run from
# the built test bundle inside the guest; restore_controllers removes hci2 afterwards).
# timeout: 400
# last in its guest: Linux 6.1 has kept the re-plugged adapter (hci2) in its list for good after this row in every
# whole run, and a new guest then had to boot for the rows after it (scripts/kernel/run runs it after the others).
start_bluez || fail "BlueZ did not start"
btctl_start
btctl "select $(address 0)"
btctl "system-alias KernelPeer"
btctl "advertise.name on"
btctl "advertise on"
wait_for "$BTCTL_LOG" "Advertising object registered" 20 || fail "bluetoothctl did not advertise"
release 1
guest_test "KernelGuestTests/managerFollowsTheAdapter" OCB_PEER_NAME=KernelPeer BLE_TRANSPORT=hci-socket:1 || fail "KernelGuestTests failed"
log "ok"
