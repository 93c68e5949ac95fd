# `ble doctor` on the guest's real /sys, /proc and kernel log (issue 22): the adapters with their state (hci0 up and
# held by bluetoothd, hci1 down and free), rfkill, bluetoothd, the user channel's permission, and the controller
# behind BLE_TRANSPORT=hci-socket:1 opened and described; then the same findings when hci1 is rfkill-blocked,
# held by bluetoothd, or the process has no CAP_NET_ADMIN, each with its fix.
start_bluez || fail "BlueZ did not start"
release 1
out="$OCB_OUT/$OCB_SCENARIO"
expect() { grep -qF -- "$2" "$1" || fail "$(basename "$1"): no line with: $2"; }
rc=0; ble doctor > "$out.ready.log" 2>&1 || rc=$?
cat "$out.ready.log"
[ $rc -eq 0 ] || fail "ble doctor exited $rc with a free adapter"
expect "$out.ready.log" "Adapters (/sys/class/bluetooth)"
expect "$out.ready.log" "up, held by the kernel stack (bluetoothd is running)"
expect "$out.ready.log" "down: free for BLE_TRANSPORT=hci-socket:1"
expect "$out.ready.log" "rfkill: not blocked"
expect "$out.ready.log" "bluetoothd: running (pid $(cat "$OCB_RUN/bluetoothd.pid"))"
expect "$out.ready.log" "HCI user channel (hci-socket:N): allowed (CAP_NET_ADMIN)"
expect "$out.ready.log" "Controller (BLE_TRANSPORT=hci-socket:1)"
expect "$out.ready.log" "manufacturer: Google (0x00E0)"
expect "$out.ready.log" "address: $(address 1) — public"
expect "$out.ready.log" "Core Bluetooth features this controller enables:"
# hci0's section says it is up, hci1's that it is down: the order of the lines ties each to its adapter.
sed -n '/^  hci0/,/^  hci1/p' "$out.ready.log" | grep -q "up, held by the kernel stack" || fail "hci0 is not reported up and held"
sed -n '/^  hci1/,/^$/p' "$out.ready.log" | grep -q "down: free" || fail "hci1 is not reported down and free"

rfkill block bluetooth || fail "rfkill block failed"
rc=0; ble doctor > "$out.rfkill.log" 2>&1 || rc=$?
rfkill unblock bluetooth
cat "$out.rfkill.log"
[ $rc -eq 1 ] || fail "ble doctor exited $rc (not 1) with hci1 blocked"
expect "$out.rfkill.log" "rfkill: soft-blocked"
expect "$out.rfkill.log" "→ rfkill unblock bluetooth"
expect "$out.rfkill.log" "hci1 is blocked by rfkill"

bluez_up 1 || fail "bluetoothd did not power hci1"
rc=0; ble doctor > "$out.busy.log" 2>&1 || rc=$?
release 1
cat "$out.busy.log"
[ $rc -eq 1 ] || fail "ble doctor exited $rc (not 1) with hci1 held by bluetoothd"
sed -n '/^  hci1/,/^$/p' "$out.busy.log" | grep -q "up, held by the kernel stack (bluetoothd is running)" || fail "hci1 is not reported held"
expect "$out.busy.log" "sudo systemctl stop bluetooth; sudo btmgmt --index 1 power off"
expect "$out.busy.log" "hci1 is in use by the kernel's Bluetooth stack (bluetoothd)"

rc=0; setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all \
    env BLE_TRANSPORT=hci-socket:1 OCB_STATE_DIR=/tmp "$OCB_BLE" doctor > "$out.nocap.log" 2>&1 || rc=$?
cat "$out.nocap.log"
[ $rc -eq 1 ] || fail "ble doctor exited $rc (not 1) without CAP_NET_ADMIN"
expect "$out.nocap.log" "HCI user channel (hci-socket:N): not allowed (no CAP_NET_ADMIN)"
expect "$out.nocap.log" "→ run as root, or sudo setcap cap_net_admin+ep"
log "ok"
