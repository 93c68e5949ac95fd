# timeout: 300
# Issue 28, a measurement (not in the kernel group): can BlueZ 5.66's AdvertisementMonitor1 find and lose a peer
# faster than discovery does? Multipeer and GameKit on bluez lose a peer after 20 s because the kernel scans for
# discovery with the controller's duplicate filter on, so bluetoothd hears a device once per 10.24 s round. An
# advertisement monitor makes the kernel scan with the filter off and bluetoothd track each device itself (found
# after RSSIHighTimeout of adverts, lost after RSSILowTimeout without one). In 5.66 the manager exists only with
# bluetoothd's experimental D-Bus interfaces (main.conf [General] Experimental = true, or -E).
# bluetoothctl's monitor menu registers an or_patterns monitor on the local name of `ble serve` (hci1, our stack),
# low and high RSSI thresholds -127 dBm (rootcanal's RSSI sweeps from -2 to -125 dBm advert after advert), timeouts
# 3 s (lost) and 1 s (found); the times from the advert's start to "found device", and from the advertiser's end
# (its controller reset) to "lost device", are logged, with the adverts bluetoothd was given (mgmt Adv Monitor Device
# Found events, in its debug log).
stop_bluez
start_bluez "$(bluez_conf '[General]' 'Experimental = true')" || fail "BlueZ did not start with Experimental = true"
release 1
serve_log="$OCB_OUT/$OCB_SCENARIO.serve.log"
pid=""
trap '[ -z "$pid" ] || kill $pid 2>/dev/null; stop_bluez' EXIT
btctl_start
btctl "menu monitor"
btctl "get-supported-info"
wait_for "$BTCTL_LOG" "Supported Moni[a-z]* Types: .*or_patterns" 15 \
    || fail "no AdvertisementMonitorManager1 on hci0 (bluetoothctl: $(clean "$BTCTL_LOG" | tail -3 | tr '\n' ' '))"
btctl "set-rssi-threshold -127 -127"
btctl "set-rssi-timeout 3 1"
btctl "set-rssi-sampling-period 0"
# "Served HR" in AD type 0x09 (Complete Local Name) from its first octet: "Served" is 53 65 72 76 65 64.
btctl "add-or-pattern 0 9 536572766564"
wait_for "$BTCTL_LOG" "Advertisement monitor [0-9]* activated" 20 || fail "the monitor was not activated"
start=$(now)
env BLE_TRANSPORT=hci-socket:1 "$OCB_BLE" serve "$OCB_REPO/examples/heart-rate.json" > "$serve_log" 2>&1 &
pid=$!
wait_for "$serve_log" "^advertising \"Served HR\" as" 30 || fail "ble serve did not advertise"
advertising=$(now)
ours=$(sed -n 's/^advertising "Served HR" as \([0-9A-F:]*\).*/\1/p' "$serve_log" | head -1)
wait_for "$BTCTL_LOG" "found device" 60 || fail "the monitor never found $ours"
found=$(now)
log "found $ours $(awk "BEGIN { print $found - $advertising }") s after its advertising began ($(awk "BEGIN { print $found - $start }") s after the start of ble)"
before=$(grep -c "adv_monitor_device_found_callback" "$OCB_CAP/bluetoothd.log")
nap 20
seen=$(( $(grep -c "adv_monitor_device_found_callback" "$OCB_CAP/bluetoothd.log") - before ))
log "bluetoothd was given $seen adverts in 20 s"
# The advertiser stops: its process ends, and the kernel's set-up of hci1 (hciconfig up) resets the controller,
# which would otherwise go on advertising (the kernel does not reset a vhci controller when the HCI user channel
# closes, and rootcanal even keeps a controller whose bridge has ended on the air: a first run saw its adverts go on).
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=""
hciconfig hci1 up || fail "hci1 did not come up"
gone=$(now)
hciconfig hci1 down
wait_for "$BTCTL_LOG" "lost device" 60 || fail "the monitor never lost $ours"
lost=$(now)
log "lost $ours $(awk "BEGIN { print $lost - $gone }") s after its advertiser ended"
clean "$BTCTL_LOG" | grep -a "monitor\|Monitor" >&2
btctl "remove-pattern all"
log "ok"
