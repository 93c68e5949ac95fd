# Without CAP_NET_ADMIN (an ordinary user) binding the HCI user channel fails with EPERM: `ble` names the
# capability and how to grant it, exit status 1.
release 1
rc=0; setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all \
    env BLE_TRANSPORT=hci-socket:1 OCB_STATE_DIR=/tmp "$OCB_BLE" scan --duration 2 > "$OCB_OUT/$OCB_SCENARIO.scan.log" 2>&1 || rc=$?
cat "$OCB_OUT/$OCB_SCENARIO.scan.log"
[ $rc -eq 1 ] || fail "ble scan exited $rc, not 1"
grep -q "CAP_NET_ADMIN" "$OCB_OUT/$OCB_SCENARIO.scan.log" || fail "the capability is not named"
grep -q "setcap cap_net_admin+ep" "$OCB_OUT/$OCB_SCENARIO.scan.log" || fail "no way to grant it"
log "ok"
