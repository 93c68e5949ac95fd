# timeout: 500
# Not a row of the matrix: what starting programs costs in the guest (issue 27), for `scripts/kernel/run --out DIR
# bench-startup`: `ble --help` and a 1 s `ble scan` with the dynamic .build/debug/ble and the guests' static one
# (scripts/kernel/run links it), and grep and cat as programs and as lib.sh's functions. Each line "TIME N ms: …".
t() { local s e; s=$EPOCHREALTIME; "$@" > /dev/null 2>&1; e=$EPOCHREALTIME; log "TIME $(( (${e/./} - ${s/./}) / 1000 )) ms: $*"; }
D=$OCB_REPO/.build/debug/ble S=$OCB_CACHE/ble
log "OCB_BLE=$OCB_BLE"
t /bin/true
for i in 1 2 3 4 5 6 7 8; do t "$D" --help; t "$S" --help; done
release 1
for i in 1 2 3 4 5; do t env BLE_TRANSPORT=hci-socket:1 "$D" scan --duration 1; t env BLE_TRANSPORT=hci-socket:1 "$S" scan --duration 1; done
f=$OCB_OUT/$OCB_SCENARIO.sample.log
for i in $(seq 1 200); do echo "line $i: write 0x0012 (stored): 6869 notification $i, acknowledged"; done > "$f"
for i in 1 2 3; do t command grep -q "notification 150," "$f"; t grep -q "notification 150," "$f"; done
for i in 1 2 3; do t command cat "$f"; t cat "$f"; done
log "ok"
