#!/usr/bin/env bash
# Side by side with Bumble over rootcanal: the same 1 MB transfer (4096 × 244-octet packets, central →
# peripheral with Write Commands, bumble-bench's GATT protocol) and 100 ping-pong round trips, with Bumble
# on both sides, then with `ble bench` as the central against a Bumble peripheral, then with Bumble as the
# central against `ble bench` as the peripheral. Prints throughput, host CPU seconds (user + system of the
# measured side's process, from /usr/bin/time) and RTT.
# Usage: scripts/bench-vs-bumble.sh   (after scripts/setup-venv.sh and swift build -c release --product ble)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
BB="$PY scripts/bumble_bench.py"
BLE=.build/release/ble
RC=$(ls .venv/lib/python3*/site-packages/rootcanal/bin/linux-x86_64/rootcanal)
[ -x "$BLE" ] || swift build -c release --product ble >/dev/null
COUNT=${COUNT:-4096}
PINGS=${PINGS:-100}
out=$(mktemp -d)
port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
start_rootcanal() {
  HCI=$(port)
  "$RC" --hci_port=$HCI --test_port=$(port) --link_port=$(port) --link_ble_port=$(port) >/dev/null 2>&1 &
  RCPID=$!
  sleep 1.5
  T=tcp-client:127.0.0.1:$HCI
}
stop() { kill "$@" 2>/dev/null || true; wait "$@" 2>/dev/null || true; }
cpu() { awk '/^cpu/ {print $2 + $3}' "$1"; }

# 1. Bumble → Bumble
start_rootcanal
/usr/bin/time -f "cpu %U %S" -o $out/bb-p.time $BB --mode gatt-server --scenario receive peripheral $T >$out/bb-p.log 2>&1 &
P=$!; sleep 2.5
/usr/bin/time -f "cpu %U %S" -o $out/bb-c.time $BB --mode gatt-client --scenario send --att-mtu 247 -s 244 -c $COUNT central $T >$out/bb-c.log 2>&1 || true
stop $P $RCPID
bb_speed=$(grep -ao 'average=[0-9.]*' $out/bb-c.log | tail -1 | cut -d= -f2)

# 2. ours (central, sender) → Bumble peripheral
start_rootcanal
$BB --mode gatt-server --scenario receive peripheral $T >$out/ob-p.log 2>&1 &
P=$!; sleep 2.5
BLE_TRANSPORT=$T /usr/bin/time -f "cpu %U %S" -o $out/ob-c.time $BLE bench --role central --scenario send --size 244 --count $COUNT >$out/ob-c.json 2>$out/ob-c.log
stop $P $RCPID
ob_speed=$($PY -c "import json,sys; print(json.loads(open('$out/ob-c.json').read().splitlines()[-1])['throughput_bytes_per_s'])")

# 3. Bumble central (sender) → ours (peripheral, receiver)
start_rootcanal
BLE_TRANSPORT=$T /usr/bin/time -f "cpu %U %S" -o $out/bo-p.time $BLE bench --role peripheral --scenario receive --size 244 >$out/bo-p.json 2>$out/bo-p.log &
P=$!; sleep 2.5
$BB --mode gatt-client --scenario send --att-mtu 247 -s 244 -c $COUNT central $T >$out/bo-c.log 2>&1 || true
wait $P || true
stop $RCPID
bo_speed=$(grep -ao 'average=[0-9.]*' $out/bo-c.log | tail -1 | cut -d= -f2)

# 4. Ping-pong: Bumble ping → Bumble pong, ours ping → Bumble pong
start_rootcanal
$BB --mode gatt-server --scenario pong peripheral $T >$out/pp-p.log 2>&1 &
P=$!; sleep 2.5
$BB --mode gatt-client --scenario ping --att-mtu 247 -s 20 -c $PINGS central $T >$out/pp-c.log 2>&1 || true
stop $P $RCPID
bb_rtt=$(grep -ao 'RTT=[0-9.]*' $out/pp-c.log | cut -d= -f2 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
start_rootcanal
$BB --mode gatt-server --scenario pong peripheral $T >$out/op-p.log 2>&1 &
P=$!; sleep 2.5
BLE_TRANSPORT=$T $BLE bench --role central --scenario ping --size 20 --count $PINGS >$out/op-c.json 2>$out/op-c.log || true
stop $P $RCPID
ob_rtt=$($PY -c "import json; print(json.loads(open('$out/op-c.json').read().splitlines()[-1])['rtt_ms']['p50'])" 2>/dev/null || echo "?")

start_rootcanal
BLE_TRANSPORT=$T $BLE bench --role peripheral --scenario pong --size 20 --count $PINGS >$out/oo-p.json 2>$out/oo-p.log &
P=$!; sleep 1.5
BLE_TRANSPORT=$T $BLE bench --role central --scenario ping --size 20 --count $PINGS >$out/oo-c.json 2>$out/oo-c.log || true
stop $P $RCPID
oo_rtt=$($PY -c "import json; print(json.loads(open('$out/oo-c.json').read().splitlines()[-1])['rtt_ms']['p50'])" 2>/dev/null || echo "?")

printf '\n%-44s %14s %22s\n' "1 MB central → peripheral over rootcanal" "kB/s" "CPU s (measured side)"
printf '%-44s %14.1f %22.2f\n' "Bumble → Bumble (Bumble central)" "$(echo "$bb_speed/1000" | bc -l)" "$(cpu $out/bb-c.time)"
printf '%-44s %14.1f %22.2f\n' "ours → Bumble (our central)" "$(echo "$ob_speed/1000" | bc -l)" "$(cpu $out/ob-c.time)"
printf '%-44s %14.1f %22.2f\n' "Bumble → ours (our peripheral, receiving)" "$(echo "$bo_speed/1000" | bc -l)" "$(cpu $out/bo-p.time)"
printf '%-44s %22.2f\n' "  (Bumble peripheral receiving, case 1)" "$(cpu $out/bb-p.time)"
printf '\n%-44s %14s\n' "GATT ping-pong RTT p50 (ms)" ""
printf '%-44s %14s\n' "Bumble ping → Bumble pong" "$bb_rtt"
printf '%-44s %14s\n' "ours ping → Bumble pong" "$ob_rtt"
printf '%-44s %14s\n' "ours ping → ours pong (7.5 ms interval)" "$oo_rtt"
echo "logs in $out"
