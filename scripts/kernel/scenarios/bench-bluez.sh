# timeout: 1500
# `ble bench peer --l2cap` on BLE_TRANSPORT=bluez:hci0 (issue 28), a measurement, not in the kernel group: one side of
# bumble-bench's L2CAP protocol over the kernel's L2CAP sockets (bluetoothd keeps hci0), the other our own stack on
# hci-socket:1. 1 MB each way (send/receive, 1024-octet packets) and 100 pings, each figure printed by both sides.
# The bluez central runs at the kernel's interval (30-50 ms) and again at 7.5 ms (debugfs), our central's.
# Then, for comparison on the same air and guest, ours to ours: bluetoothd stops and both ends are our own host on
# the HCI user channel (hci-socket:0 and hci-socket:1), 1 MB and 100 pings.
# Both adapters are made anew with 1021-octet LE buffers (fast_controllers), as for the other L2CAP rows.
start_bluez || fail "BlueZ did not start"
fast_controllers || fail "no fast controllers"
release 1
hci0=$(address 0)
pids=""
trap 'kill $pids 2>/dev/null || true' EXIT

failed=""

# bluez central sends to our peripheral (which takes bumble-bench's F1:F1:F1:F1:F1:F1), and pings it.
run_bench bluez-sends hci-socket:1 receive bluez:hci0 send F1:F1:F1:F1:F1:F1/R
run_bench bluez-pings hci-socket:1 pong bluez:hci0 ping F1:F1:F1:F1:F1:F1/R
# The kernel's central asks for a 30-50 ms interval, ours for 7.5 ms: the same send again with the kernel's interval
# set to 7.5 ms (debugfs, as `ble bench peer` tells a bluez user), for a comparison at equal intervals.
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
if echo 6 > /sys/kernel/debug/bluetooth/hci0/conn_min_interval && echo 6 > /sys/kernel/debug/bluetooth/hci0/conn_max_interval; then
    run_bench bluez-sends-7.5ms hci-socket:1 receive bluez:hci0 send F1:F1:F1:F1:F1:F1/R
    run_bench bluez-pings-7.5ms hci-socket:1 pong bluez:hci0 ping F1:F1:F1:F1:F1:F1/R
    echo 40 > /sys/kernel/debug/bluetooth/hci0/conn_max_interval; echo 24 > /sys/kernel/debug/bluetooth/hci0/conn_min_interval
else
    log "FAILED: cannot set hci0's connection interval through debugfs"; failed="$failed interval"
fi
# Our central sends to the bluez peripheral (advertising through bluetoothd from hci0's own address).
run_bench bluez-receives bluez:hci0 receive hci-socket:1 send "$hci0/P"
run_bench bluez-pongs bluez:hci0 pong hci-socket:1 ping "$hci0/P"
hciconfig hci0 | grep -q "UP RUNNING" || fail "hci0 is no longer up"
# Ours to ours, bluetoothd stopped (the next scenario's reset_bluez starts it again).
stop_bluez
release 0
run_bench ours-sends hci-socket:1 receive hci-socket:0 send F1:F1:F1:F1:F1:F1/R
run_bench ours-pings hci-socket:1 pong hci-socket:0 ping F1:F1:F1:F1:F1:F1/R
[ -z "$failed" ] || fail "failed:$failed"
log "ok"
