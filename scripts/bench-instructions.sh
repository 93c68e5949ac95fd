#!/usr/bin/env bash
# Instructions per megabyte of our host's user space, sender and receiver, ours ↔ ours over rootcanal, counted by
# valgrind's callgrind: the same figure whatever else the machine is doing (processor time here varies by up to
# 1.8x between runs of one binary), so a change of a few per cent on the packet path shows in one run.
#   L2CAP: 1024-octet SDUs on a credit-based channel (SPSM 128); GATT: 244-octet Write Commands.
# Each side runs twice, with a small and a large transfer, and the difference is divided by the megabytes between
# them: start-up (argument parsing, the runtime's conformance look-ups, the connection) cancels out. The kernel's
# part (system calls, wake-ups) is not counted: `ble bench` and scripts/bench-vs-bumble.sh give processor time.
# valgrind 3.19 cannot read the DWARF 5 that Swift writes, so a copy of `ble` without debug information is run.
#   scripts/bench-instructions.sh          (after scripts/setup-venv.sh; BLE=PATH, SCENARIOS="l2cap gatt")
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "bench-instructions: valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
PY=.venv/bin/python
BLE=${BLE:-.build/release/ble}
RC=$(ls .venv/lib/python3*/site-packages/rootcanal/bin/linux-x86_64/rootcanal)
[ -x "$BLE" ] || swift build -c release --product ble >/dev/null
out=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$out"; true; }
trap cleanup EXIT
objcopy --strip-debug "$BLE" "$out/ble"
port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# instructions MODE SIDE COUNT: callgrind's total for SIDE (send or receive) of one transfer of COUNT units.
instructions() {
  local mode=$1 side=$2 count=$3 hci rc p
  hci=$(port)
  "$RC" --hci_port="$hci" --test_port="$(port)" --link_port="$(port)" --link_ble_port="$(port)" >/dev/null 2>&1 &
  rc=$!; pids+=("$rc")
  sleep 1.5
  local receive=("$out/ble" bench --role peripheral --scenario receive) send=("$out/ble" bench --role central --scenario send --count "$count")
  if [ "$mode" = l2cap ]; then receive+=(--mode l2cap); send+=(--mode l2cap --size 1024); else receive+=(--size 244); send+=(--size 244); fi
  local cg=(valgrind --tool=callgrind -q --callgrind-out-file="$out/$side.cg")
  if [ "$side" = receive ]; then receive=("${cg[@]}" "${receive[@]}"); else send=("${cg[@]}" "${send[@]}"); fi
  BLE_TRANSPORT=tcp-client:127.0.0.1:$hci "${receive[@]}" >"$out/receive.out" 2>"$out/receive.err" &
  p=$!; pids+=("$p")
  sleep 2.5
  BLE_TRANSPORT=tcp-client:127.0.0.1:$hci timeout 600 "${send[@]}" >"$out/send.out" 2>"$out/send.err" || true
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill "$p" "$rc" 2>/dev/null || true
  wait "$p" "$rc" 2>/dev/null || true
  grep -q '"throughput_bytes_per_s"' "$out/send.out" || { echo "bench-instructions: the $mode transfer of $count did not finish (see $out/send.err)" >&2; cat "$out/send.err" >&2; exit 1; }
  callgrind_annotate "$out/$side.cg" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'
}

printf "%-6s %-8s %14s %16s\n" transfer side "instructions/MB" "instructions/HCI"
for mode in ${SCENARIOS:-l2cap gatt}; do
  # Sizes: 128 KB and 1152 KB (L2CAP, 1024-octet SDUs), 512 and 4608 writes of 244 octets (GATT).
  if [ "$mode" = l2cap ]; then small=128 large=1152 unit=1024; else small=512 large=4608 unit=244; fi
  mb=$(awk -v a="$small" -v b="$large" -v u="$unit" 'BEGIN { print (b - a) * u / 1048576 }')
  for side in send receive; do
    a=$(instructions "$mode" "$side" "$small")
    b=$(instructions "$mode" "$side" "$large")
    # HCI packets per MB, from the large run's own count (both directions).
    packets=$(grep -o '"hci_packets_\(in\|out\)":[0-9]*' "$out/$side.out" | awk -F: '{ n += $2 } END { print n }')
    awk -v a="$a" -v b="$b" -v mb="$mb" -v m="$mode" -v s="$side" -v n="$packets" -v big="$large" -v small="$small" \
      'BEGIN { per = (b - a) / mb; printf "%-6s %-8s %12.1f M %16.0f\n", m, s, per / 1e6, (b - a) / (n * (big - small) / big) }'
  done
done
