# timeout: 420
# The seed's firmware update with the *device* on bluez (issue 28): FirmwareUpdateKernelTests'
# theDeviceOnBlueZTakesTheImageInWriteCommands, the example unchanged: its CBPeripheralManager on bluez:hci0 (the
# update service registered with bluetoothd, advertised with LEAdvertisingManager1), the updater a Core Bluetooth
# central on our own stack over the HCI user channel of hci1, sending a 40 KB image in Write Commands that bluetoothd
# hands to the app as WriteValue {type: command} calls.
# bluetoothd runs with [GATT] ExchangeMTU = 512 here. BlueZ 5.66 (Debian 12) checks a Write's length with the
# 2-octet handle counted (gatt-server.c write_cb: check_length(length, 0); fixed upstream later as length - 2), so
# it refuses values of 511 and 512 octets: a Write Request with Invalid Attribute Value Length, a Write Command
# silently. On bluetoothd's default 517-octet MTU the updater, as an iPhone would, writes 512-octet values
# (maximumWriteValueLength is the MTU less 3, at most 512): in this scenario without the setting, bluetoothd logged
# all 78 Write Commands, called WriteValue for one (the last, 64 octets: dbus-monitor), and the update waited for
# good (the test's 240 s). With a 512-octet MTU the values are 509 octets at most.
start_bluez || fail "BlueZ did not start"
stop_bluez
start_bluez "$(bluez_conf '[GATT]' 'ExchangeMTU = 512')" || fail "BlueZ (ExchangeMTU 512) did not start"
fast_controllers || fail "no fast controllers"
reset_bluez || log "reset_bluez failed"
keep_down 1
keeper=$KEEPER
trap 'kill $keeper 2>/dev/null || true; stop_bluez' EXIT
t=FirmwareUpdateKernelTests/theDeviceOnBlueZTakesTheImageInWriteCommands
cmds=$(grep -c 'Write Cmd - handle' "$OCB_CAP/bluetoothd.log" 2>/dev/null)
start=$SECONDS
guest_test "$t" BLE_SNOOP="$OCB_OUT/$OCB_SCENARIO.updater.snoop" || fail "$t failed after $((SECONDS - start)) s"
log "$t passed in $((SECONDS - start)) s"
log "Write Commands bluetoothd took: $(($(grep -c 'Write Cmd - handle' "$OCB_CAP/bluetoothd.log" 2>/dev/null) - cmds))"
hciconfig hci0 | grep -q "UP RUNNING" || fail "hci0 is no longer up"
log "ok"
