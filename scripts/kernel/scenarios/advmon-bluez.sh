# timeout: 400
# Issue 28 (not in the kernel group: it restarts bluetoothd twice): Multipeer's browsing on BLE_TRANSPORT=bluez:hci0
# finds and loses a peer through BlueZ's AdvertisementMonitor1 when bluetoothd offers AdvertisementMonitorManager1,
# and through discovery alone when it does not. In BlueZ 5.66 the manager exists only with bluetoothd's experimental
# D-Bus interfaces (main.conf [General] Experimental = true, or -E), which stock Debian 12 and Raspberry Pi OS leave
# off. Discovery alone: the kernel scans with the controller's duplicate filter on, bluetoothd hears a device once
# per 10.24 s round, and BlueZPeerNode loses a peer 20 s after its last report. With a monitor (or_patterns: the
# Service Data structure of the browsed UUID) the kernel scans without that filter, and bluetoothd calls DeviceFound
# after RSSIHighTimeout (1 s) of adverts and DeviceLost after RSSILowTimeout (BlueZPeerNode's monitorLostAfter, 5 s)
# without one.
# Each half: `ble mc advertise` on our own stack (hci-socket:1, adverts every 100 ms) and `ble mc browse` on
# bluez:hci0 asked to invite a peer that never comes (--peer), so it only lists what it finds ("nearby: …" on every
# change). Measured: from the advertiser's start to the browser listing it (which includes Multipeer's exchange over
# an L2CAP channel for the peer's name), and from the advertiser's end (its process killed) to the browser's
# "nearby: nobody". The advertiser ends by its process ending and a controller reset (hciconfig hci1 up:
# rootcanal keeps an ended controller's adverts on the air). Checked: with the manager, the monitor is active and the
# peer is lost before the 20 s sweep could have lost it (so DeviceLost did it); without it, no monitor is asked for
# and the peer is still lost.
pids=""
dir="$OCB_OUT/$OCB_SCENARIO.in"
trap 'kill $pids 2>/dev/null || true; rm -rf "$dir"; stop_bluez' EXIT

# half NAME: one advertiser and one browser; sets FOUND and LOST (seconds) and leaves the browser's log in $b.
half() {
    local name=$1 service a adv brw started gone nobody
    service="adv$RANDOM"
    a="$OCB_OUT/$OCB_SCENARIO.$name.advertiser.log"
    b="$OCB_OUT/$OCB_SCENARIO.$name.browser.log"
    rm -rf "$dir"; mkdir -p "$dir/a" "$dir/b"
    release 1
    env BLE_TRANSPORT=bluez:hci0 BLE_LOG=1 "$OCB_BLE" mc browse --name "Brw $name" --service "$service" --peer "nobody at all" \
        --transport bluetooth --dir "$dir/b" --duration 150 > "$b" 2>&1 &
    brw=$!
    pids="$pids $brw"
    wait_for "$b" "^browsing for" 30 || { clean "$b" | tail -20 >&2; fail "$name: the browser did not start"; }
    env BLE_TRANSPORT=hci-socket:1 BLE_LOG=1 "$OCB_BLE" mc advertise --name "Adv $name" --service "$service" \
        --transport bluetooth --dir "$dir/a" --duration 150 > "$a" 2>&1 &
    adv=$!
    pids="$pids $adv"
    wait_for "$a" "^advertising" 30 || { clean "$a" | tail -20 >&2; fail "$name: the advertiser did not start"; }
    started=$(now)
    wait_for "$b" "^nearby: Adv $name" 60 || { clean "$b" | grep -av trace | tail -30 >&2; fail "$name: the browser never listed the advertiser"; }
    FOUND=$(awk "BEGIN { printf \"%.2f\", $(now) - $started }")
    log "$name: found $FOUND s after the advertiser started"
    # Listed for a while (the browser may have said "nearby: nobody" before it found anyone), then the advertiser ends.
    nobody=$(grep -ac "^nearby: nobody" "$b")
    nap 8
    [ "$(grep -ac "^nearby: nobody" "$b")" = "$nobody" ] || fail "$name: the browser lost the advertiser while it was advertising"
    # From the kill: our host stops advertising as its process ends (the reset only makes sure of it).
    gone=$(now)
    kill "$adv" 2>/dev/null; wait "$adv" 2>/dev/null
    hciconfig hci1 up || fail "hci1 did not come up"
    hciconfig hci1 down
    wait_for_count "$b" "^nearby: nobody" $((nobody + 1)) 90 || { clean "$b" | grep -av trace | tail -30 >&2; fail "$name: the browser never lost the advertiser"; }
    LOST=$(awk "BEGIN { printf \"%.2f\", $(now) - $gone }")
    log "$name: lost $LOST s after the advertiser ended"
    kill "$brw" 2>/dev/null; wait "$brw" 2>/dev/null
}

# With bluetoothd's experimental interfaces: the monitor path.
stop_bluez
start_bluez "$(bluez_conf '[General]' 'Experimental = true')" || fail "BlueZ did not start with Experimental = true"
half monitor
grep -aq "advertisement monitor active on hci0" "$b" || { clean "$b" | grep -a "BlueZ" | tail -10 >&2; fail "monitor: no advertisement monitor was active"; }
awk "BEGIN { exit !($LOST < 20) }" || fail "monitor: lost after $LOST s, no sooner than discovery alone would (20 s)"
grep -aq "Calling DeviceLost() on Adv Monitor" "$OCB_OUT/$OCB_SCENARIO.bluetoothd.log" 2>/dev/null \
    || grep -aq "Calling DeviceLost() on Adv Monitor" "$OCB_CAP/bluetoothd.log" 2>/dev/null || log "monitor: bluetoothd's log shows no DeviceLost call"
log "monitor: found in $FOUND s, lost in $LOST s"

# Stock bluetoothd: discovery alone.
stop_bluez
start_bluez || fail "BlueZ did not start"
half discovery
grep -aq "registering an advertisement monitor" "$b" && fail "discovery: a monitor was asked for without the manager"
log "discovery alone: found in $FOUND s, lost in $LOST s"
log "ok"
