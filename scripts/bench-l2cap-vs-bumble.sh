#!/usr/bin/env bash
# Side by side with Bumble over rootcanal, L2CAP: the same 1 MB (1024 × 1024-octet packets of bumble-bench's
# L2CAP protocol on SPSM 128) central → peripheral, Bumble on both sides, then `ble bench --mode l2cap` as the
# sending central against a Bumble l2cap-server, then a Bumble l2cap-client sending to `ble bench` as the
# peripheral. Prints throughput and host CPU seconds (user + system of the measured side, /usr/bin/time).
# Usage: scripts/bench-l2cap-vs-bumble.sh   (after scripts/setup-venv.sh and swift build -c release --product ble)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
BB="$PY scripts/bumble_bench.py"
BLE=.build/release/ble
RC=$(ls .venv/lib/python3*/site-packages/rootcanal/bin/linux-x86_64/rootcanal)
COUNT=${COUNT:-1024}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
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

start_rootcanal
/usr/bin/time -f "cpu %U %S" -o $out/bb-p.time $BB --mode l2cap-server --scenario receive peripheral $T >$out/bb-p.log 2>&1 &
P=$!; sleep 2.5
/usr/bin/time -f "cpu %U %S" -o $out/bb-c.time $BB --mode l2cap-client --scenario send -s 1024 -c $COUNT central $T >$out/bb-c.log 2>&1 || true
stop $P $RCPID
bb_speed=$(grep -ao 'average=[0-9.]*' $out/bb-c.log | tail -1 | cut -d= -f2)

start_rootcanal
$BB --mode l2cap-server --scenario receive peripheral $T >$out/ob-p.log 2>&1 &
P=$!; sleep 2.5
BLE_TRANSPORT=$T /usr/bin/time -f "cpu %U %S" -o $out/ob-c.time $BLE bench --mode l2cap --role central --scenario send --size 1024 --count $COUNT >$out/ob-c.json 2>$out/ob-c.log
stop $P $RCPID
ob_speed=$($PY -c "import json; print(json.loads(open('$out/ob-c.json').read().splitlines()[-1])['throughput_bytes_per_s'])")

start_rootcanal
BLE_TRANSPORT=$T /usr/bin/time -f "cpu %U %S" -o $out/bo-p.time $BLE bench --mode l2cap --role peripheral --scenario receive >$out/bo-p.json 2>$out/bo-p.log &
P=$!; sleep 2.5
$BB --mode l2cap-client --scenario send -s 1024 -c $COUNT central $T >$out/bo-c.log 2>&1 || true
wait $P || true
stop $RCPID
bo_speed=$(grep -ao 'average=[0-9.]*' $out/bo-c.log | tail -1 | cut -d= -f2)

printf '\n%-46s %12s %22s\n' "1 MB over L2CAP, central → peripheral" "kB/s" "CPU s (measured side)"
printf '%-46s %12.1f %22.2f\n' "Bumble → Bumble (Bumble central sending)" "$(echo "$bb_speed/1000" | bc -l)" "$(cpu $out/bb-c.time)"
printf '%-46s %12.1f %22.2f\n' "ours → Bumble (our central sending)" "$(echo "$ob_speed/1000" | bc -l)" "$(cpu $out/ob-c.time)"
printf '%-46s %12.1f %22.2f\n' "Bumble → ours (our peripheral receiving)" "$(echo "$bo_speed/1000" | bc -l)" "$(cpu $out/bo-p.time)"
