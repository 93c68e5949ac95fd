# timeout: 900
# Ours to ours on the HCI user channel, a measurement (issue 23), not in the kernel group: bumble-bench's L2CAP
# protocol between two of our hosts, hci-socket:0 sending to hci-socket:1, 1 MB of 1024-octet packets and 100 pings,
# with bluetoothd stopped. Both adapters are made anew with 1021-octet LE buffers (fast_controllers). Each side prints
# its processor time, HCI packets, and system calls per packet (the kernel's count, and the transport's own reads,
# writes and polls), for a comparison of two builds of `ble` in the same guest. bench-bluez runs the same pair after
# its BlueZ rows.
fast_controllers || fail "no fast controllers"
stop_bluez
release 0
release 1
pids=""
trap 'kill $pids 2>/dev/null || true' EXIT
failed=""
run_bench ours-sends hci-socket:1 receive hci-socket:0 send F1:F1:F1:F1:F1:F1/R
run_bench ours-pings hci-socket:1 pong hci-socket:0 ping F1:F1:F1:F1:F1:F1/R
[ -z "$failed" ] || fail "failed:$failed"
log "ok"
