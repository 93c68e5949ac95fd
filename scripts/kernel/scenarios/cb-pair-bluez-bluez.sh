# timeout: 480
# Pairing between two BlueZ adapters of one bluetoothd (issue 28), both ends on BLE_TRANSPORT=bluez: `ble serve` on
# bluez:hci1 (its Agent1 registered as bluetoothd's default agent, which answers the pairings others start with hci1)
# and `ble pair` on bluez:hci0 (its Agent1 registered, not made the default: bluetoothd asks the agent of the process
# that called Device1.Pair). Two rounds: Just Works (NoInputNoOutput both sides) and LE Secure Connections numeric
# comparison (DisplayYesNo both sides: each agent shows the same number). Each round: bonded on both adapters (`ble
# bonds` on each lists the other), then reconnection on the stored keys: `ble serve` started again (a new process,
# the keys are bluetoothd's) and `ble read` on bluez:hci0 reads the file's encrypted 6E400005 with no agent asked
# and no new key made (bluetoothd's "new LTK"); then both bonds are removed (`ble bonds --remove` on each).
start_bluez || fail "BlueZ did not start"
bluez_up 1 || fail "bluetoothd did not power hci1"
# The kernel's enhanced credit-based mode off, as in cb-bluez-bluez (two Linux 6.12 ends mismatch the channels of an
# enhanced credit-based connection, and bluetoothd's EATT then goes astray); EATT goes over LE credit-based channels.
ecred=/sys/module/bluetooth/parameters/enable_ecred
ecred_was=$(cat "$ecred")
echo N > "$ecred" || fail "cannot turn the kernel's enhanced credit-based mode off"
server=""
trap 'kill $server 2>/dev/null || true; bluez_power 1 false 2>/dev/null; release 1; echo "$ecred_was" > "$ecred"' EXIT
hci0=$(address 0)
hci1=$(address 1)
[ -n "$hci0" ] && [ -n "$hci1" ] || fail "no addresses for hci0 and hci1"
bz0() { BLE_TRANSPORT=bluez:hci0 "$OCB_BLE" "$@"; }
bz1() { BLE_TRANSPORT=bluez:hci1 "$OCB_BLE" "$@"; }
# serve NAME IO: `ble serve` on bluez:hci1 with that agent, in the background (pid in $server), advertising.
serve() {
    kill $server 2>/dev/null; wait $server 2>/dev/null
    BLE_TRANSPORT=bluez:hci1 BLE_LOG=1 "$OCB_BLE" serve "$OCB_REPO/examples/heart-rate.json" --io "$2" --yes > "$OCB_OUT/$OCB_SCENARIO.$1.log" 2>&1 &
    server=$!
    wait_for "$OCB_OUT/$OCB_SCENARIO.$1.log" '^advertising "Served HR" as ' 30 || { clean "$OCB_OUT/$OCB_SCENARIO.$1.log" | tail -20; fail "$1: ble serve on bluez:hci1 did not advertise"; }
}
# round NAME IO: pairs, checks the bonds, reconnects on the keys, forgets the bonds.
round() {
    local name=$1 io=$2 p start n
    serve "$name.serve" "$io"
    p="$OCB_OUT/$OCB_SCENARIO.$name.pair.log"
    start=$SECONDS
    bz0 pair "$hci1" --io "$io" --yes --timeout 90 > "$p" 2>&1 || { cat "$p"; clean "$OCB_OUT/$OCB_SCENARIO.$name.serve.log" | grep -av trace | tail -20; fail "$name: ble pair on bluez:hci0 failed"; }
    log "$name: ble pair on bluez:hci0 with bluez:hci1 took $((SECONDS - start)) s"
    cat "$p"
    grep -q "^bonded with $hci1" "$p" || fail "$name: no bond reported"
    if [ "$io" = yesno ]; then
        n=$(sed -n 's/^Comparison value \([0-9]*\): accepted/\1/p' "$p" | head -1)
        [ -n "$n" ] || fail "$name: ble pair's agent was not asked to compare numbers"
        wait_for "$OCB_OUT/$OCB_SCENARIO.$name.serve.log" "Comparison value $n: accepted" 20 \
            || fail "$name: ble serve's agent (the default agent, for hci1) did not show the same number ($n)"
    else
        ! grep -q "Comparison value" "$p" "$OCB_OUT/$OCB_SCENARIO.$name.serve.log" || fail "$name: a number was compared in Just Works"
    fi
    bz0 bonds > "$OCB_OUT/$OCB_SCENARIO.$name.bonds0.log" 2>&1 || fail "$name: ble bonds on bluez:hci0 failed"
    bz1 bonds > "$OCB_OUT/$OCB_SCENARIO.$name.bonds1.log" 2>&1 || fail "$name: ble bonds on bluez:hci1 failed"
    cat "$OCB_OUT/$OCB_SCENARIO.$name.bonds0.log" "$OCB_OUT/$OCB_SCENARIO.$name.bonds1.log"
    grep -q "^  $hci1 " "$OCB_OUT/$OCB_SCENARIO.$name.bonds0.log" || fail "$name: hci0 keeps no bond with hci1"
    grep -q "^  $hci0 " "$OCB_OUT/$OCB_SCENARIO.$name.bonds1.log" || fail "$name: hci1 keeps no bond with hci0"
    # Reconnection on the stored keys: a new `ble serve` process, the encrypted value read with no agent asked.
    serve "$name.again" "$io"
    local r="$OCB_OUT/$OCB_SCENARIO.$name.read.log" ltks
    ltks=$(grep -c "new LTK" "$OCB_CAP/bluetoothd.log")
    # (`ble read` registers the default agent, whose IO capability becomes both adapters'. With the same one as the
    # pairing's the bond is enough; with KeyboardDisplay after a Just Works bond, hci1's kernel asked for MITM in its
    # Security Request, hci0's found its unauthenticated key too weak and paired anew, numeric comparison.)
    bz0 read "$hci1" 6E400005-B5A3-F393-E0A9-E50E24DCCA9E --io "$io" --timeout 60 > "$r" 2>&1 || { cat "$r"; fail "$name: the encrypted read on the bond failed"; }
    cat "$r"
    grep -q "secret" "$r" || fail "$name: the encrypted value was not read on the bond"
    ! grep -q "Comparison value\|Passkey\|Just Works" "$r" "$OCB_OUT/$OCB_SCENARIO.$name.again.log" || fail "$name: an agent was asked again on the bond"
    [ "$(grep -c "new LTK" "$OCB_CAP/bluetoothd.log")" = "$ltks" ] || fail "$name: the kernel made new keys: it paired again instead of encrypting with the bond's"
    kill $server 2>/dev/null; wait $server 2>/dev/null; server=""
    bz0 bonds --remove "$hci1" > /dev/null 2>&1 || fail "$name: hci0's bond could not be removed"
    bz1 bonds --remove "$hci0" > /dev/null 2>&1 || fail "$name: hci1's bond could not be removed"
    log "$name: passed"
}
round justworks none
round comparison yesno
hciconfig hci0 | grep -q "UP RUNNING" || fail "hci0 is no longer up"
log "ok"
