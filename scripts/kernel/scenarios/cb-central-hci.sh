# timeout: 180
# A Core Bluetooth central program (`ble interop central`, CBCentralManager) on our own stack over the HCI user
# channel (hci-socket:1) against BlueZ as GATT server: BlueZ's own services (GAP with its device name, GATT) and an
# application service registered over D-Bus by bluetoothctl (`register-service`, `register-characteristic`
# read,write,notify, `register-application`). The program finds BlueZ by name, connects, discovers every service
# and characteristic, reads each readable one, subscribes to the application's characteristic, writes to it with
# response, and receives the notification BlueZ sends of the value it now holds.
start_bluez || fail "BlueZ did not start"
release 1
btctl_start
btctl "select $(address 0)"
btctl "system-alias KernelPeer"
svc=7d2e1000-5b6a-4c3e-9a6d-2f4b1c0e8a10
chr=7d2e1001-5b6a-4c3e-9a6d-2f4b1c0e8a10
btctl "gatt.register-service $svc"
wait_for "$BTCTL_LOG" "Primary \(yes/no\)" 10 || fail "no prompt from register-service"
btctl "yes"
btctl "gatt.register-characteristic $chr read,write,notify"
wait_for "$BTCTL_LOG" "Enter value" 10 || fail "no prompt from register-characteristic"
btctl "0x4b 0x50 0x2d 0x61 0x70 0x70"
btctl "gatt.register-application"
wait_for "$BTCTL_LOG" "Application registered" 20 || fail "bluetoothd did not take the application"
btctl "advertise.name on"
btctl "advertise on"
wait_for "$BTCTL_LOG" "Advertising object registered" 20 || fail "bluetoothctl did not advertise"
C="$OCB_OUT/$OCB_SCENARIO.central.log"
rc=0
BLE_SNOOP="$OCB_CAP/$OCB_SCENARIO.btsnoop" ble interop central --name KernelPeer --service $svc --write-hex 4f4b --notifications 1 --timeout 120 > "$C" 2>&1 || rc=$?
cat "$C"
[ $rc -eq 0 ] || fail "the central program exited $rc"
grep -q "^\[central\] state poweredOn" "$C" || fail "the manager never read .poweredOn"
grep -q "connected (maximum write" "$C" || fail "no didConnect"
grep -Eq "services: .*1800" "$C" || fail "BlueZ's GAP service not discovered"
grep -Eq "services: .*1801" "$C" || fail "BlueZ's GATT service not discovered"
grep -qi "services: .*${svc}" "$C" || fail "the application service not discovered"
grep -q 'read 2A00 = .*"KernelPeer"' "$C" || fail "BlueZ's device name not read"
grep -qi "characteristic ${chr} \[read, write, notify\]" "$C" || fail "the application characteristic's properties are wrong"
grep -qi "read ${chr} = 4b502d617070" "$C" || fail "the application characteristic's value not read"
grep -qi "notifications for ${chr}: on" "$C" || fail "no subscription"
# bluetoothd hands the subscription to the application as AcquireNotify (a socket), StartNotify otherwise.
wait_for "$BTCTL_LOG" "Notify sock acquired|notifications enabled" 5 || fail "bluetoothctl did not see the subscription"
grep -qi "write to ${chr} acknowledged" "$C" || fail "the write was not acknowledged"
clean "$BTCTL_LOG" | grep -q "WriteValue: " || fail "bluetoothctl did not receive the write"
grep -qi "notification 1 on ${chr}: 4f4b" "$C" || fail "no notification of the written value"
grep -q "disconnected (by us)" "$C" || fail "no didDisconnect after the cancel"
log "ok"
